// The Program's matching rules (core/program.hpp), in one place for every engine and test that
// runs a Program: which collective calls of the members of a group form one collective, which
// send pairs with which recv, and who the peer of a send/recv is when a rank runs the Program
// lowered for another rank of its stage.
//
//  - Collectives: the k-th collective a rank issues on its group of kind G meets the k-th
//    collective on G of every other member of that group (NCCL's rule: one communicator per
//    group, calls matched in issue order). Key: (G, index of the group among the groups of kind
//    G, k).
//  - Send/recv: a send of rank s to rank d with tag t pairs with the recv of d from s with tag t.
//    Key: (s, d, t).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/program.hpp"

namespace traintwin {

/// One collective call site of a group: every member's call with the same key is one collective.
struct CollectiveKey {
  GroupKind group = GroupKind::kTp;
  int64_t group_index = 0;  ///< RankLayout::group_index(group, rank)
  int64_t seq = 0;          ///< the call's index among its rank's collectives on `group`
  bool operator==(const CollectiveKey&) const = default;
};
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey& k) const noexcept;
};

/// Per op of `rp`: for a collective, its index among the collectives of `rp` on the same group
/// kind (0, 1, ...); -1 for every other op. Ranks of one stage share it (same ops, same order).
std::vector<int64_t> collective_sequence(const RankProgram& rp);

/// The key of collective `op` issued by `rank` as its `seq`-th on op.group.
CollectiveKey collective_key(const RankLayout& layout, int64_t rank, const Op& op, int64_t seq);

/// collective_key() for an engine that arrives at millions of collectives: each rank's group
/// index per group kind (RankLayout::group_index, ten integer divisions) is computed once, on
/// first use. Same keys as collective_key().
class CollectiveKeys {
 public:
  explicit CollectiveKeys(const RankLayout& layout)
      : layout_(&layout),
        index_(static_cast<size_t>(layout.world_size()) * kNumGroupKinds, -1) {}
  CollectiveKey key(int64_t rank, const Op& op, int64_t seq) {
    int64_t& index = index_.at(static_cast<size_t>(rank) * kNumGroupKinds + static_cast<size_t>(op.group));
    if (index < 0) index = collective_key(*layout_, rank, op, seq).group_index;
    return {op.group, index, seq};
  }

 private:
  const RankLayout* layout_;
  std::vector<int64_t> index_;
};

/// One send/recv transfer.
struct TransferKey {
  int64_t src = 0, dst = 0, tag = 0;
  bool operator==(const TransferKey&) const = default;
};
struct TransferKeyHash {
  size_t operator()(const TransferKey& k) const noexcept;
};

/// The key of send/recv `op` run by `rank` with peer `peer`. InvalidArgument for another kind.
TransferKey transfer_key(int64_t rank, const Op& op, int64_t peer);

/// The peer of send/recv `op` of the Program lowered for `program_coord` when rank `self` runs
/// it: `self` shifted by the peer's offset from program_coord in every dimension, modulo the
/// dimension's size (a PP neighbour stays the PP neighbour; a ring neighbour stays the ring
/// neighbour). Equals op.peer when self is the rank the Program was lowered for.
int64_t mapped_peer(const RankLayout& layout, const RankCoord& program_coord,
                    const RankCoord& self, const Op& op);

/// Pairs sends with recvs as they are posted. T: whatever the engine keeps of a posted op.
template <typename T>
class TransferMatcher {
 public:
  /// Posts one side of `key`. Returns the other side's value when it was posted before (and
  /// forgets it), else keeps `value` and returns nullopt. Throws Error when the same side of
  /// `key` is posted twice (naming `what`).
  std::optional<T> post(const TransferKey& key, bool send, T value, const std::string& what = "") {
    return post(key, send, std::move(value), [&what] { return what; });
  }
  /// post() for an engine that posts millions of sides: `what()` (returning the std::string
  /// naming the op) is called only when the error is thrown.
  template <typename What>
    requires std::is_invocable_r_v<std::string, const What&>
  std::optional<T> post(const TransferKey& key, bool send, T value, const What& what) {
    auto& mine = send ? sends_ : recvs_;
    auto& theirs = send ? recvs_ : sends_;
    auto it = theirs.find(key);
    if (it != theirs.end()) {
      T other = std::move(it->second);
      theirs.erase(it);
      return other;
    }
    if (!mine.emplace(key, std::move(value)).second) {
      throw Error("the " + std::string(send ? "send" : "recv") + " from rank " +
                  std::to_string(key.src) + " to rank " + std::to_string(key.dst) + " with tag " +
                  std::to_string(key.tag) + " is posted twice" + named(what()));
    }
    return std::nullopt;
  }
  /// Sides posted and not matched yet.
  size_t pending() const { return sends_.size() + recvs_.size(); }

 private:
  static std::string named(const std::string& what) { return what.empty() ? "" : " (" + what + ")"; }

  std::unordered_map<TransferKey, T, TransferKeyHash> sends_, recvs_;
};

/// Gathers the members' calls of each collective. T: whatever the engine keeps of a call.
template <typename T>
class CollectiveRendezvous {
 public:
  /// Adds one member's call of `key`; when `members` calls have arrived, returns them all (in
  /// arrival order, this one last) and forgets the key; else nullopt.
  std::optional<std::vector<T>> arrive(const CollectiveKey& key, T value, int64_t members) {
    std::vector<T>& calls = open_[key];
    if (calls.empty()) calls.reserve(static_cast<size_t>(std::max<int64_t>(members, 1)));
    calls.push_back(std::move(value));
    if (static_cast<int64_t>(calls.size()) < members) return std::nullopt;
    std::vector<T> done = std::move(calls);
    open_.erase(key);
    return done;
  }
  /// Collectives some member has reached and others not yet.
  size_t pending() const { return open_.size(); }

 private:
  std::unordered_map<CollectiveKey, std::vector<T>, CollectiveKeyHash> open_;
};

}  // namespace traintwin
