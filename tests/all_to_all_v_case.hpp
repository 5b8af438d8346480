// The variable-count all-to-all test case shared by the MPI and the NCCL communicator tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace traintwin::testing {

/// What rank `rank` sends and expects back in an all_to_all_v over `members` (the group, in
/// member order; `rank` is one of them): the member at position p sends the member at q
/// (p + 2 q) % 3 values 1000 rank + 10 q + i (i = 0, 1, ...), zero-length pieces included, so q
/// receives from each p exactly those, in member order.
struct AllToAllVCase {
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> in, expected;
};

inline AllToAllVCase all_to_all_v_case(const std::vector<int64_t>& members, int64_t rank) {
  const auto n = static_cast<int64_t>(members.size());
  const int64_t p = std::find(members.begin(), members.end(), rank) - members.begin();
  auto count = [](int64_t from, int64_t to) { return (from + 2 * to) % 3; };
  AllToAllVCase c;
  for (int64_t q = 0; q < n; ++q) {
    c.send_counts.push_back(count(p, q));
    c.recv_counts.push_back(count(q, p));
    for (int64_t i = 0; i < count(p, q); ++i) {
      c.in.push_back(static_cast<float>(1000 * rank + 10 * q + i));
    }
    for (int64_t i = 0; i < count(q, p); ++i) {
      c.expected.push_back(static_cast<float>(1000 * members[static_cast<size_t>(q)] + 10 * p + i));
    }
  }
  return c;
}

}  // namespace traintwin::testing
