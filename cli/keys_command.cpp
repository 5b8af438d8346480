// `traintwin keys`: the scenario key reference (core/scenario_reference.hpp), generated from the
// schema; `--readme FILE` writes it into FILE between its markers instead of printing it.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "core/input_file.hpp"
#include "core/posix_file.hpp"
#include "core/scenario_reference.hpp"

namespace traintwin::cli {

void register_keys_command(CLI::App& app) {
  auto readme = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "keys", "Print every scenario key (type, default, allowed values, Megatron-LM flag) as "
              "markdown tables");
  cmd->add_option("--readme", *readme,
                  "Write the tables into this file between its key-reference markers "
                  "(scenarios/README.md) instead of printing them");
  cmd->callback([readme] {
    if (readme->empty()) {
      fmt::print("{}", scenario_key_reference());
      return;
    }
    const std::string text = read_input_file(*readme, "README", kMaxConfigFileBytes);
    const std::string updated = with_key_reference(text);
    if (updated == text) {
      fmt::print("{}: key reference up to date\n", *readme);
      return;
    }
    AtomicFile out(*readme);
    out.write(updated);
    out.commit();
    fmt::print("{}: key reference updated\n", *readme);
  });
}

}  // namespace traintwin::cli
