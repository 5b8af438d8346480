// Reading the losses out of `traintwin train`'s Megatron-style log, for the training tests.
#pragma once

#include <regex>
#include <string>
#include <vector>

namespace traintwin::testing {

struct Losses {
  std::vector<double> train;       // per logged iteration (log_interval 1: every iteration)
  std::vector<double> validation;  // per evaluation
};

inline Losses parse_losses(const std::string& out) {
  Losses l;
  const std::regex train(R"(iteration +\d+/ +\d+ \|.*\| lm loss: ([-+0-9.Ee]+) \|)");
  const std::regex valid(R"(validation loss at iteration \d+ \| lm loss value: ([-+0-9.Ee]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), train); it != std::sregex_iterator(); ++it) {
    l.train.push_back(std::stod((*it)[1]));
  }
  for (auto it = std::sregex_iterator(out.begin(), out.end(), valid); it != std::sregex_iterator(); ++it) {
    l.validation.push_back(std::stod((*it)[1]));
  }
  return l;
}

}  // namespace traintwin::testing
