#include "sim/matching.hpp"

#include <array>
#include <functional>

namespace traintwin {

size_t CollectiveKeyHash::operator()(const CollectiveKey& k) const noexcept {
  return std::hash<int64_t>()(
      (k.group_index * static_cast<int64_t>(kNumGroupKinds) + static_cast<int64_t>(k.group)) * 1000003 +
      k.seq);
}

size_t TransferKeyHash::operator()(const TransferKey& k) const noexcept {
  return std::hash<int64_t>()((k.src * 1000003 + k.dst) * 1000003 + k.tag);
}

std::vector<int64_t> collective_sequence(const RankProgram& rp) {
  std::vector<int64_t> seq(rp.ops.size(), -1);
  std::array<int64_t, kNumGroupKinds> next{};
  for (const Op& op : rp.ops) {
    if (op.kind == OpKind::kCollective) seq[op.id] = next[static_cast<size_t>(op.group)]++;
  }
  return seq;
}

CollectiveKey collective_key(const RankLayout& layout, int64_t rank, const Op& op, int64_t seq) {
  return {op.group, layout.group_index(op.group, rank), seq};
}

TransferKey transfer_key(int64_t rank, const Op& op, int64_t peer) {
  if (op.kind == OpKind::kSend) return {rank, peer, op.tag};
  if (op.kind == OpKind::kRecv) return {peer, rank, op.tag};
  throw InvalidArgument("transfer_key: op " + std::to_string(op.id) + " is not a send or recv");
}

int64_t mapped_peer(const RankLayout& layout, const RankCoord& program_coord,
                    const RankCoord& self, const Op& op) {
  const RankCoord peer = layout.coord(op.peer);
  auto shift = [](int64_t mine, int64_t from, int64_t to, int64_t size) {
    return ((mine + to - from) % size + size) % size;
  };
  RankCoord c;
  c.tp = shift(self.tp, program_coord.tp, peer.tp, layout.size(GroupKind::kTp));
  c.cp = shift(self.cp, program_coord.cp, peer.cp, layout.size(GroupKind::kCp));
  c.dp = shift(self.dp, program_coord.dp, peer.dp, layout.size(GroupKind::kDp));
  c.pp = shift(self.pp, program_coord.pp, peer.pp, layout.size(GroupKind::kPp));
  return layout.rank(c);
}

}  // namespace traintwin
