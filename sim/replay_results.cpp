// The replay engine's end of an iteration (sim/replay_engine.hpp): the check that every op ran
// (a deadlock names its first waiting ops), and the results — iteration time, the critical and
// per-stage breakdowns (sim/attribution.hpp), compute seconds per cost source, link loads per
// tier with the busiest links' utilization series, and the traced ranks' timeline. Next in the
// flow: sim/summary.hpp.
#include <simgrid/s4u/Link.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/error.hpp"
#include "sim/attribution.hpp"
#include "sim/replay_engine.hpp"
#include "traces/op_event.hpp"

namespace traintwin::replay_engine {

void Engine::check_complete() {
  std::ostringstream msg;
  int shown = 0;
  for (int64_t r = 0; r < world_ && shown < 10; ++r) {
    if (!replayed(r)) continue;
    const RankState& st = ranks_[static_cast<size_t>(r)];
    for (uint32_t o = 0; o < st.remaining.size(); ++o) {
      if (st.remaining[o] == UINT16_MAX) continue;
      if (st.remaining[o] != 0) continue;  // blocked behind another unfinished op
      msg << "\n  rank " << r << " op " << o << " (" << prog_.label(op_of(r, o)) << ") waits";
      const Op& op = op_of(r, o);
      if (op.kind == OpKind::kSend) msg << " for the recv on rank " << op.peer << " (tag " << op.tag << ")";
      if (op.kind == OpKind::kRecv) msg << " for the send from rank " << op.peer << " (tag " << op.tag << ")";
      if (op.kind == OpKind::kCollective) msg << " for the other members of its " << to_string(op.group) << " group";
      if (++shown == 10) break;
    }
  }
  if (shown > 0) {
    int64_t left = 0;
    for (const auto& st : ranks_) {
      for (uint16_t x : st.remaining) left += x != UINT16_MAX;
    }
    throw Error("simulate: the iteration cannot complete, " + std::to_string(left) +
                " ops never ran; first waiting ops:" + msg.str());
  }
}

SimulationResult Engine::results() {
  SimulationResult res;
  int64_t last_rank = 0;
  for (int64_t r = 0; r < world_; ++r) {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    if (!replayed(r)) continue;
    for (double t : st.t) {
      if (t > res.iteration_time_s) {
        res.iteration_time_s = t;
        last_rank = r;
      }
    }
  }
  std::map<std::pair<int64_t, GroupKind>, LatePeer> late;
  res.critical = breakdown(last_rank, res.iteration_time_s, &late);
  for (const auto& [key, p] : late) res.late_peers.push_back(p);
  std::sort(res.late_peers.begin(), res.late_peers.end(), [](const LatePeer& a, const LatePeer& b) {
    return a.wait_s != b.wait_s ? a.wait_s > b.wait_s : a.rank < b.rank;
  });
  if (res.late_peers.size() > kMaxLatePeers) res.late_peers.resize(kMaxLatePeers);
  for (int64_t pp = 0; pp < prog_.layout.size(GroupKind::kPp); ++pp) {
    res.per_stage.push_back(breakdown(prog_.layout.rank(RankCoord{0, 0, 0, pp}), res.iteration_time_s));
  }
  // Compute seconds per cost source over all ranks (a replayed rank stands for tp_stride_),
  // with the what-if GPU speed and straggler factors.
  for (int64_t r = 0; r < world_; ++r) {
    if (!replayed(r)) continue;
    timed_.add_compute_by_source(r, templates_[ranks_[static_cast<size_t>(r)].tmpl].rp->rank,
                                 static_cast<double>(tp_stride_), res.compute_s_by_source);
  }
  link_results(res);
  res.ops = ops_;
  res.flows = flows_;
  if (net_) {
    res.group_flows = net_->stats().group_flows;
    res.solver_flows = net_->stats().solver_flows;
    res.max_solver_flows = net_->stats().max_in_solver;
  }
  res.replayed_ranks = world_ / tp_stride_;
  res.reductions = reductions_;
  res.events = ops_ + flows_ + timers_;
  for (const PlanEntry& e : plans_) {
    if (e.calls > 0) {
      res.collective_algorithms[to_string(e.plan.algorithm)] += e.calls;
      res.collective_protocols[std::string(to_string(e.plan.algorithm)) + "/" +
                               to_string(e.plan.protocol)] += e.calls;
    }
  }
  if (opts_.record_timeline) res.timeline = timeline();
  return res;
}

void Engine::link_results(SimulationResult& res) const {
  const double T = res.iteration_time_s;
  std::vector<LinkLoad> all;
  std::unordered_map<const simgrid::s4u::Link*, double> link_bytes;
  if (net_) {
    for (size_t i = 0; i < link_bytes_.size(); ++i) link_bytes[net_->links()[i]] = link_bytes_[i];
  }
  for (const PlatformLink& l : platform_.links()) {
    LinkLoad ll;
    ll.name = l.name;
    ll.tier = l.tier;
    ll.bandwidth_Bps = l.bandwidth_Bps;
    auto it = link_bytes.find(l.link);
    ll.bytes = it == link_bytes.end() ? 0.0 : it->second;
    ll.utilization = T > 0 ? ll.bytes / (l.bandwidth_Bps * T) : 0;
    all.push_back(ll);
  }
  res.link_tiers = tier_traffic(all);
  res.hot_links = hot_links(all, res.link_tiers);
  std::vector<size_t> order;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].bytes > 0 && all[i].tier != "loopback") order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return all[a].bytes != all[b].bytes ? all[a].bytes > all[b].bytes : all[a].name < all[b].name;
  });
  for (size_t k = 0; k < order.size() && k < 10; ++k) res.busiest_links.push_back(all[order[k]]);
  // Series of the 5 busiest by utilization, from the flows that crossed them.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return all[a].utilization > all[b].utilization;
  });
  if (order.size() > 5) order.resize(5);
  if (order.empty() || !(T > 0)) return;
  constexpr int kBins = 100;
  // Series index and bandwidth by FlowNetwork link id (-1: no series).
  std::unordered_map<const simgrid::s4u::Link*, uint32_t> net_id;
  for (size_t id = 0; id < net_->links().size(); ++id) {
    net_id[net_->links()[id]] = static_cast<uint32_t>(id);
  }
  std::vector<int32_t> series_of(net_->links().size(), -1);
  std::vector<double> series_bw;
  for (size_t i : order) {
    LinkSeries ls;
    ls.name = all[i].name;
    ls.tier = all[i].tier;
    ls.bin_s = T / kBins;
    ls.utilization.assign(kBins, 0.0);
    auto id = net_id.find(platform_.links()[i].link);  // found: the link carried bytes
    if (id != net_id.end()) series_of[id->second] = static_cast<int32_t>(res.link_series.size());
    series_bw.push_back(all[i].bandwidth_Bps);
    res.link_series.push_back(std::move(ls));
  }
  auto add = [&](const FlowRecord& f, uint32_t l) {
    const int32_t s = series_of[l];
    if (s < 0) return;
    add_to_series(res.link_series[static_cast<size_t>(s)], series_bw[static_cast<size_t>(s)],
                  steps_of(f), f.end_s);
  };
  for (const FlowRecord& f : flow_records_) {
    for (uint32_t l : f.route->link_ids) add(f, l);
    if (f.mirrored) {
      for (uint32_t l : *f.mirrored) add(f, l);
    }
  }
}

std::vector<std::pair<const simgrid::s4u::Link*, double>> Engine::link_bytes() const {
  std::vector<std::pair<const simgrid::s4u::Link*, double>> out;
  if (net_ == nullptr) return out;
  for (size_t i = 0; i < link_bytes_.size(); ++i) {
    if (link_bytes_[i] > 0) out.emplace_back(net_->links()[i], link_bytes_[i]);
  }
  return out;
}

void Engine::add_link_series(
    const std::unordered_map<const simgrid::s4u::Link*, size_t>& series_of,
    const std::vector<double>& bandwidth_Bps, std::vector<LinkSeries>& series) const {
  if (net_ == nullptr || series_of.empty()) return;
  std::vector<int64_t> by_id(net_->links().size(), -1);
  for (size_t id = 0; id < by_id.size(); ++id) {
    auto it = series_of.find(net_->links()[id]);
    if (it != series_of.end()) by_id[id] = static_cast<int64_t>(it->second);
  }
  auto add = [&](const FlowRecord& f, uint32_t l) {
    if (l >= by_id.size() || by_id[l] < 0) return;
    const auto s = static_cast<size_t>(by_id[l]);
    add_to_series(series[s], bandwidth_Bps[s], steps_of(f), f.end_s);
  };
  for (const FlowRecord& f : flow_records_) {
    for (uint32_t l : f.route->link_ids) add(f, l);
    if (f.mirrored) {
      for (uint32_t l : *f.mirrored) add(f, l);
    }
  }
}

double Engine::ready_time(int64_t rank, uint32_t id) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  double t = t0_;
  for (uint32_t d : op_of(rank, id).deps) t = std::max(t, st.t[d]);
  return t;
}

std::pair<int64_t, uint32_t> Engine::matching_p2p(int64_t rank, uint32_t id) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  const Op& op = op_of(rank, id);
  const int64_t peer = peer_of(rank, templates_[st.tmpl], op);
  const OpKind want = op.kind == OpKind::kSend ? OpKind::kRecv : OpKind::kSend;
  const Template& peer_tp = templates_[ranks_[static_cast<size_t>(peer)].tmpl];
  auto it = peer_tp.p2p_by_tag.find(p2p_tag_key(want, op.tag));
  return {peer, it == peer_tp.p2p_by_tag.end() ? kNone : it->second};
}

CollectiveArrival Engine::arrival(int64_t rank, uint32_t id) const {
  const Template& tp = templates_[ranks_[static_cast<size_t>(rank)].tmpl];
  const Op& op = tp.rp->ops[id];
  CollectiveArrival a{ready_time(rank, id), ready_time(rank, id), rank};
  auto [members, fresh] = arrival_groups_.try_emplace(
      static_cast<uint64_t>(rank) * kNumGroupKinds + static_cast<uint64_t>(op.group));
  if (fresh) members->second = prog_.layout.group(op.group, rank);
  for (int64_t m : members->second) {
    if (m == rank || !replayed(m)) continue;
    const Template& mt = templates_[ranks_[static_cast<size_t>(m)].tmpl];
    uint32_t mid = id;
    if (mt.rp != tp.rp) {
      // A group across stages (the embedding's): the member's collective of the same group and
      // sequence number, as the rendezvous matched them (sim/matching.hpp).
      mid = kNone;
      for (const Op& o : mt.rp->ops) {
        if (o.kind == OpKind::kCollective && o.group == op.group && mt.seq[o.id] == tp.seq[id]) {
          mid = o.id;
          break;
        }
      }
      if (mid == kNone) continue;
    }
    const double r = ready_time(m, mid);
    if (r > a.start_s) {
      a.start_s = r;
      a.last_rank = m;
    }
  }
  return a;
}

TimeBreakdown Engine::breakdown(int64_t rank, double iteration_s,
                                std::map<std::pair<int64_t, GroupKind>, LatePeer>* late) const {
  TimeBreakdown b;
  b.rank = rank;
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  const Template& tp = templates_[st.tmpl];
  double prev_end = t0_;
  // The dependency of op `id` that ended last (kNone without dependencies).
  auto latest_dep = [&](uint32_t id) {
    uint32_t waited = kNone;
    double latest = -1;
    for (uint32_t d : tp.rp->ops[id].deps) {
      if (st.t[d] > latest) {
        latest = st.t[d];
        waited = d;
      }
    }
    return waited;
  };
  // The idle interval [lo, hi] of the compute stream, ended by op `waited`.
  auto attribute = [&](double lo, double hi, uint32_t waited) {
    const double gap = hi - lo;
    if (gap <= 0) return;
    if (waited == kNone) {
      attribute_gap(b, gap, WaitedFor{});
      return;
    }
    const Op& w = tp.rp->ops[waited];
    double comm = 0;
    double sync = 0;
    if (w.kind == OpKind::kSend || w.kind == OpKind::kRecv) {
      auto [peer, other] = matching_p2p(rank, waited);
      const double start = std::max(ready_time(rank, waited),
                                    other == kNone ? 0.0 : ready_time(peer, other));
      comm = st.t[waited] - start;
    }
    if (w.kind == OpKind::kCollective && w.role == Role::kPipeline) {
      // Pipeline scatter/gather: the transfer is the batch's last send/recv (the gather waits
      // for the whole batch) and the TP all-gather; the wait before the peer stage posted its
      // side stays bubble.
      comm = st.t[waited] - arrival(rank, waited).start_s;
      const uint32_t recv = latest_dep(waited);
      if (recv != kNone && (tp.rp->ops[recv].kind == OpKind::kRecv ||
                            tp.rp->ops[recv].kind == OpKind::kSend)) {
        auto [peer, other] = matching_p2p(rank, recv);
        const double start = std::max(ready_time(rank, recv),
                                      other == kNone ? 0.0 : ready_time(peer, other));
        comm += st.t[recv] - start;
      }
    }
    // Back through the collectives the gap waited for (each waited for the one before): the
    // part of the gap before each one's last member arrived is sync wait on that member.
    double until = hi;
    for (uint32_t c = waited; c != kNone && until > lo && tp.rp->ops[c].kind == OpKind::kCollective;
         c = latest_dep(c)) {
      const CollectiveArrival a = arrival(rank, c);
      const double wait = late_member_wait_s(lo, until, a.own_s, a.start_s);
      if (wait > 0) {
        sync += wait;
        if (late != nullptr) {
          LatePeer& p = (*late)[{a.last_rank, tp.rp->ops[c].group}];
          p.rank = a.last_rank;
          p.group = tp.rp->ops[c].group;
          p.wait_s += wait;
          p.waits += 1;
          if (wait > p.largest_wait_s) {
            p.largest_wait_s = wait;
            p.op = prog_.label(tp.rp->ops[c]);
          }
        }
      }
      until = std::min(until, a.own_s);
    }
    attribute_gap(b, gap, waited_for(w, comm, sync));
  };
  for (const Op& op : tp.rp->ops) {
    if (op.kind != OpKind::kCompute) continue;
    const double dur = duration(rank, tp, op.id);
    const double start = st.t[op.id] - dur;
    attribute(prev_end, start, latest_dep(op.id));
    b.compute_s += dur;
    if (op.phase == Phase::kOptimizer) b.optimizer_s += dur;
    prev_end = st.t[op.id];
  }
  // The tail: after the last compute op, until the iteration ends.
  uint32_t last = kNone;
  double last_end = prev_end;
  for (const Op& op : tp.rp->ops) {
    if (st.t[op.id] > last_end) {
      last_end = st.t[op.id];
      last = op.id;
    }
  }
  attribute(prev_end, last_end, last);
  attribute_gap(b, iteration_s - std::max(last_end, prev_end), WaitedFor{});
  return b;
}

Timeline Engine::timeline() const {
  Timeline tl;
  tl.name = prog_.scenario.name;
  for (int64_t r : traced_) {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    const Template& tp = templates_[st.tmpl];
    for (const Op& op : tp.rp->ops) {
      int64_t peer = -1;
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) peer = peer_of(r, tp, op);
      TimelineEvent e = op_event(prog_, op, r, peer, world_, st.start[op.id], st.t[op.id]);
      if (op.kind == OpKind::kCollective) {
        auto it = plan_ids_.find(plan_key(op, node_kinds_of(prog_.layout.group(op.group, r))));
        if (it != plan_ids_.end()) {
          e.args["algorithm"] = to_string(plans_[it->second].plan.algorithm);
          e.args["protocol"] = to_string(plans_[it->second].plan.protocol);
        }
      }
      if (opts_.timeline_sink) {
        opts_.timeline_sink(std::move(e));
      } else {
        tl.events.push_back(std::move(e));
      }
    }
  }
  return tl;
}

}  // namespace traintwin::replay_engine
