#include "sim/flow_network.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "core/error.hpp"

namespace traintwin {

namespace sg4 = simgrid::s4u;

FlowNetwork::FlowNetwork(OnDone on_done, bool lone_flows_in_closed_form, int64_t max_group_flows)
    : on_done_(std::move(on_done)),
      closed_form_(lone_flows_in_closed_form),
      max_group_flows_(max_group_flows) {
  if (max_group_flows < 1) {
    throw InvalidArgument("FlowNetwork: max_group_flows must be >= 1, got " +
                          std::to_string(max_group_flows));
  }
  sg4::Activity::on_completion_cb([this](const sg4::Activity& a) { solver_done(a); });
  if (closed_form_) {
    sg4::Engine::get_instance()->get_netzone_root()->get_network_model()->set_lat_factor_cb(
        [this](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>&,
               const std::unordered_set<sg4::NetZone*>&) { return latency_factor_; });
  }
}

const FlowRoute& FlowNetwork::route(sg4::Host* from, sg4::Host* to) {
  const auto key = std::make_pair(from, to);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  FlowRoute r;
  from->route_to(to, r.links, &r.latency_s);
  r.bandwidth_Bps = r.links.empty() ? 0.0 : r.links.front()->get_bandwidth();
  for (sg4::Link* l : r.links) {
    r.bandwidth_Bps = std::min(r.bandwidth_Bps, l->get_bandwidth());
    auto [any, fresh] = all_link_id_.try_emplace(l, static_cast<uint32_t>(all_links_.size()));
    if (fresh) all_links_.push_back(l);
    r.link_ids.push_back(any->second);
    if (l->get_sharing_policy() == sg4::Link::SharingPolicy::FATPIPE) continue;
    auto [id, inserted] = link_id_.try_emplace(l, static_cast<uint32_t>(links_.size()));
    if (inserted) {
      links_.emplace_back();
      links_.back().bandwidth_Bps = l->get_bandwidth();
    }
    r.shared_links.push_back(id->second);
  }
  return routes_.emplace(key, std::move(r)).first->second;
}

uint32_t FlowNetwork::new_flow() {
  if (!free_.empty()) {
    const uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  flows_.emplace_back();
  return static_cast<uint32_t>(flows_.size() - 1);
}

void FlowNetwork::start(sg4::Host* from, sg4::Host* to, double bytes, uint64_t tag) {
  if (!(bytes >= 0)) throw InvalidArgument("FlowNetwork::start: bytes must be >= 0");
  const FlowRoute& r = route(from, to);
  const double now = sg4::Engine::get_clock();
  const uint32_t id = new_flow();
  {
    Flow& f = flows_[id];
    std::vector<RateStep> steps;  // keep its storage
    steps.swap(f.steps);
    steps.clear();
    f = Flow{};
    f.steps.swap(steps);
    f.route = &r;
    f.from = from;
    f.to = to;
    f.start_s = now;
    f.bytes = std::max(1.0, std::round(bytes));
    f.tag = tag;
  }
  ++stats_.flows;
  bool alone = closed_form_ && r.bandwidth_Bps > 0;
  for (uint32_t l : r.shared_links) {
    if (!alone) break;
    alone =
        links_[l].lone == UINT32_MAX && links_[l].in_solver == 0 && links_[l].group == UINT32_MAX;
  }
  if (alone) {
    for (uint32_t l : r.shared_links) links_[l].lone = id;
    const double end = now + r.latency_s + flows_[id].bytes / r.bandwidth_Bps;
    flows_[id].timer = simgrid::kernel::timer::Timer::set(end, [this, id] { lone_done(id); });
    return;
  }
  if (closed_form_ && try_group(id, now)) return;
  // Lone flows and groups met on the way join the solver first, with what they have left now.
  for (uint32_t l : r.shared_links) {
    if (links_[l].lone != UINT32_MAX) hand_over(links_[l].lone, now);
    if (links_[l].group != UINT32_MAX) hand_over_group(links_[l].group, now);
  }
  to_solver(id, r.latency_s, flows_[id].bytes);
}

void FlowNetwork::hand_over(uint32_t id, double now) {
  Flow& f = flows_[id];
  f.timer->remove();
  f.timer = nullptr;
  for (uint32_t l : f.route->shared_links) links_[l].lone = UINT32_MAX;
  const double sent_s = now - f.start_s - f.route->latency_s;  // time spent sending
  const double latency_left = sent_s < 0 ? -sent_s : 0.0;
  const double bytes_left = f.bytes - std::max(0.0, sent_s) * f.route->bandwidth_Bps;
  if (sent_s > 0) step(f, f.start_s + f.route->latency_s, f.route->bandwidth_Bps);
  ++stats_.handovers;
  to_solver(id, latency_left, bytes_left);
}

void FlowNetwork::to_solver(uint32_t id, double remaining_latency_s, double remaining_bytes) {
  Flow& f = flows_[id];
  for (uint32_t l : f.route->shared_links) ++links_[l].in_solver;
  ++stats_.solver_flows;
  stats_.max_in_solver = std::max(stats_.max_in_solver, ++in_solver_);
  const double lat = f.route->latency_s;
  latency_factor_ = 1.0;
  if (lat > 0 && remaining_latency_s < lat) {
    latency_factor_ = std::max(remaining_latency_s, kMinHandoverLatency_s) / lat;
  }
  const double payload = std::max(1.0, std::round(remaining_bytes));
  const double now = sg4::Engine::get_clock();
  if (on_rates_) {
    // The rates of the flows in SimGrid change now: close their step first.
    sample_solver(now);
    // Sending from its latency's end (a handed-over flow's last rate holds the at least
    // kMinHandoverLatency_s until then).
    f.sampled_s = now + (lat > 0 ? lat * latency_factor_ : 0.0);
    f.remaining_bytes = payload;
    f.solver_slot = static_cast<uint32_t>(in_solver_list_.size());
    in_solver_list_.push_back(id);
  }
  f.comm = sg4::Comm::sendto_init(f.from, f.to);
  f.comm->set_payload_size(static_cast<uint64_t>(payload));
  f.comm->set_data(reinterpret_cast<void*>(static_cast<uintptr_t>(id)));
  f.comm->start();
  if (on_rates_ && lat > 0) {
    // Its latency paid, it starts to take bandwidth from the others: they change rates then.
    simgrid::kernel::timer::Timer::set(now + lat * latency_factor_,
                                       [this] { sample_solver(sg4::Engine::get_clock()); });
  }
  latency_factor_ = 1.0;
}

// ---- rates over time ---------------------------------------------------------------------------

void FlowNetwork::record_rates(OnRates sink) {
  if (stats_.flows > 0) {
    throw InvalidArgument("FlowNetwork::record_rates: call it before the first start()");
  }
  on_rates_ = std::move(sink);
}

void FlowNetwork::step(Flow& f, double t_s, double rate_Bps) {
  if (!on_rates_) return;
  // Rates read from SimGrid's remaining bytes differ from the one before in the last digits
  // when nothing changed: one step.
  auto same = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(a, b); };
  std::vector<RateStep>& s = f.steps;
  if (!s.empty() && s.back().t_s >= t_s) {
    s.back().rate_Bps = rate_Bps;  // the same instant: the later rate holds
    if (s.size() >= 2 && same(s[s.size() - 2].rate_Bps, rate_Bps)) s.pop_back();
    return;
  }
  if (s.empty() ? rate_Bps == 0 : same(s.back().rate_Bps, rate_Bps)) return;
  s.push_back({t_s, rate_Bps});
}

void FlowNetwork::sample_solver(double now, uint32_t done) {
  for (uint32_t id : in_solver_list_) {
    Flow& f = flows_[id];
    if (!(now > f.sampled_s)) continue;
    const double left = id == done || f.comm->get_state() == sg4::Activity::State::FINISHED
                            ? 0.0
                            : f.comm->get_remaining();
    step(f, f.sampled_s, std::max(0.0, f.remaining_bytes - left) / (now - f.sampled_s));
    f.sampled_s = now;
    f.remaining_bytes = left;
  }
}

void FlowNetwork::emit_rates(uint32_t id) {
  if (on_rates_) on_rates_(flows_[id].tag, flows_[id].steps);
}

void FlowNetwork::lone_done(uint32_t id) {
  Flow& f = flows_[id];
  f.timer = nullptr;  // SimGrid deletes a timer once it ran
  for (uint32_t l : f.route->shared_links) links_[l].lone = UINT32_MAX;
  ++stats_.lone_flows;
  step(f, f.start_s + f.route->latency_s, f.route->bandwidth_Bps);
  emit_rates(id);
  const uint64_t tag = f.tag;
  free_.push_back(id);
  on_done_(tag, sg4::Engine::get_clock());
}

// ---- closed-form groups ------------------------------------------------------------------------

bool FlowNetwork::try_group(uint32_t id, double now) {
  const FlowRoute& r = *flows_[id].route;
  if (max_group_flows_ < 2 || !(r.latency_s > 0) || !(r.bandwidth_Bps > 0)) return false;
  met_lone_.clear();
  met_groups_.clear();
  int64_t size = 1;
  for (uint32_t l : r.shared_links) {
    const LinkState& ls = links_[l];
    if (ls.in_solver > 0) return false;
    if (ls.lone != UINT32_MAX &&
        std::find(met_lone_.begin(), met_lone_.end(), ls.lone) == met_lone_.end()) {
      // A route without latency has penalty 1 in CM02, not its latency: leave it to SimGrid.
      if (!(flows_[ls.lone].route->latency_s > 0)) return false;
      met_lone_.push_back(ls.lone);
      ++size;
    }
    if (ls.group != UINT32_MAX &&
        std::find(met_groups_.begin(), met_groups_.end(), ls.group) == met_groups_.end()) {
      met_groups_.push_back(ls.group);
      size += static_cast<int64_t>(groups_[ls.group].flows.size());
    }
  }
  if (size > max_group_flows_) return false;
  // Bring every group met up to now, then merge them into the first (or a new one).
  for (uint32_t g : met_groups_) {
    advance(g, now);
    cancel_timer(g);
  }
  uint32_t g;
  if (!met_groups_.empty()) {
    g = met_groups_.front();
  } else if (!free_groups_.empty()) {
    g = free_groups_.back();
    free_groups_.pop_back();
  } else {
    g = static_cast<uint32_t>(groups_.size());
    groups_.emplace_back();
  }
  groups_[g].last_s = now;
  for (size_t k = 1; k < met_groups_.size(); ++k) {
    Group& other = groups_[met_groups_[k]];
    for (uint32_t f : other.flows) {
      for (uint32_t l : flows_[f].route->shared_links) links_[l].group_flows = 0;
    }
    for (uint32_t f : other.flows) add_to_group(g, f);
    other.flows.clear();
    free_groups_.push_back(met_groups_[k]);
  }
  // Lone flows: what they have sent since their latency was paid, at their route's bandwidth.
  for (uint32_t f : met_lone_) {
    Flow& lf = flows_[f];
    lf.timer->remove();
    lf.timer = nullptr;
    for (uint32_t l : lf.route->shared_links) links_[l].lone = UINT32_MAX;
    lf.latency_end_s = lf.start_s + lf.route->latency_s;
    if (now > lf.latency_end_s) step(lf, lf.latency_end_s, lf.route->bandwidth_Bps);
    lf.remaining_bytes = lf.bytes - std::max(0.0, now - lf.latency_end_s) * lf.route->bandwidth_Bps;
    add_to_group(g, f);
  }
  Flow& nf = flows_[id];
  nf.latency_end_s = now + r.latency_s;
  nf.remaining_bytes = nf.bytes;
  add_to_group(g, id);
  solve(g, now);
  return true;
}

void FlowNetwork::add_to_group(uint32_t g, uint32_t id) {
  Flow& f = flows_[id];
  f.group = g;
  f.rate_Bps = 0;
  groups_[g].flows.push_back(id);
  for (uint32_t l : f.route->shared_links) {
    links_[l].group = g;
    ++links_[l].group_flows;
  }
}

void FlowNetwork::advance(uint32_t g, double now) {
  Group& grp = groups_[g];
  const double dt = now - grp.last_s;
  if (dt > 0) {
    for (uint32_t f : grp.flows) flows_[f].remaining_bytes -= flows_[f].rate_Bps * dt;
  }
  grp.last_s = now;
}

void FlowNetwork::cancel_timer(uint32_t g) {
  if (groups_[g].timer != nullptr) {
    groups_[g].timer->remove();
    groups_[g].timer = nullptr;
  }
}

void FlowNetwork::solve(uint32_t g, double now) {
  Group& grp = groups_[g];
  // The flows whose latency is paid share their links' capacities; the others wait.
  mm_active_.clear();
  mm_links_.clear();
  mm_capacity_Bps_.clear();
  if (mm_link_of_.size() < links_.size()) mm_link_of_.resize(links_.size(), UINT32_MAX);
  for (uint32_t f : grp.flows) {
    Flow& fl = flows_[f];
    fl.rate_Bps = 0;
    if (fl.latency_end_s > now) continue;
    mm_active_.push_back(f);
    for (uint32_t l : fl.route->shared_links) {
      if (mm_link_of_[l] == UINT32_MAX) {
        mm_link_of_[l] = static_cast<uint32_t>(mm_capacity_Bps_.size());
        mm_capacity_Bps_.push_back(links_[l].bandwidth_Bps);
      }
      mm_links_.push_back(mm_link_of_[l]);
    }
  }
  mm_flows_.resize(mm_active_.size());
  mm_rate_Bps_.resize(mm_active_.size());
  size_t at = 0;
  for (size_t i = 0; i < mm_active_.size(); ++i) {
    const FlowRoute& r = *flows_[mm_active_[i]].route;
    mm_flows_[i] =
        MaxMinFlow{std::span<const uint32_t>(mm_links_).subspan(at, r.shared_links.size()),
                   r.latency_s, r.bandwidth_Bps};
    at += r.shared_links.size();
  }
  weighted_max_min(mm_flows_, mm_capacity_Bps_, mm_rate_Bps_, mm_scratch_);
  for (uint32_t f : mm_active_) {
    for (uint32_t l : flows_[f].route->shared_links) mm_link_of_[l] = UINT32_MAX;
  }
  // The next event: a latency paid or a flow's end.
  double next = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < mm_active_.size(); ++i) {
    Flow& fl = flows_[mm_active_[i]];
    fl.rate_Bps = mm_rate_Bps_[i];
    if (!(fl.rate_Bps > 0)) throw InvalidArgument("FlowNetwork: a grouped flow got no bandwidth");
    step(fl, now, fl.rate_Bps);
    fl.finish_s = now + std::max(0.0, fl.remaining_bytes) / fl.rate_Bps;
    next = std::min(next, fl.finish_s);
  }
  for (uint32_t f : grp.flows) {
    if (flows_[f].latency_end_s > now) next = std::min(next, flows_[f].latency_end_s);
  }
  grp.timer = simgrid::kernel::timer::Timer::set(next, [this, g] { group_event(g); });
}

void FlowNetwork::group_event(uint32_t g) {
  const double now = sg4::Engine::get_clock();
  Group& grp = groups_[g];
  grp.timer = nullptr;  // SimGrid deletes a timer once it ran
  advance(g, now);
  // The flows that end now leave the group (their links too, where no other member crosses).
  done_.clear();
  for (size_t k = 0; k < grp.flows.size();) {
    const uint32_t f = grp.flows[k];
    Flow& fl = flows_[f];
    if (fl.rate_Bps > 0 && fl.finish_s <= now) {
      done_.push_back(f);
      for (uint32_t l : fl.route->shared_links) {
        if (--links_[l].group_flows == 0) links_[l].group = UINT32_MAX;
      }
      fl.group = UINT32_MAX;
      grp.flows[k] = grp.flows.back();
      grp.flows.pop_back();
      continue;
    }
    ++k;
  }
  if (grp.flows.empty()) {
    free_groups_.push_back(g);
  } else {
    solve(g, now);
  }
  // Report the ends last: an end may start flows that join this group.
  stats_.group_flows += static_cast<int64_t>(done_.size());
  std::vector<uint64_t> tags;
  tags.reserve(done_.size());
  for (uint32_t f : done_) {
    emit_rates(f);
    tags.push_back(flows_[f].tag);
    free_.push_back(f);
  }
  for (uint64_t tag : tags) on_done_(tag, now);
}

void FlowNetwork::hand_over_group(uint32_t g, double now) {
  advance(g, now);
  cancel_timer(g);
  Group& grp = groups_[g];
  for (uint32_t f : grp.flows) {
    for (uint32_t l : flows_[f].route->shared_links) {
      links_[l].group = UINT32_MAX;
      links_[l].group_flows = 0;
    }
  }
  std::vector<uint32_t> members;
  members.swap(grp.flows);
  free_groups_.push_back(g);
  for (uint32_t f : members) {
    Flow& fl = flows_[f];
    fl.group = UINT32_MAX;
    ++stats_.handovers;
    to_solver(f, std::max(0.0, fl.latency_end_s - now), fl.remaining_bytes);
  }
}

void FlowNetwork::solver_done(const sg4::Activity& a) {
  const auto id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(a.get_data<void>()));
  if (id >= flows_.size() || flows_[id].comm.get() != &a) return;
  // Drop the transfers that ended before this one (not this one: SimGrid still holds it).
  for (uint32_t done : to_release_) {
    flows_[done].comm = nullptr;
    free_.push_back(done);
  }
  to_release_.clear();
  to_release_.push_back(id);
  Flow& f = flows_[id];
  for (uint32_t l : f.route->shared_links) --links_[l].in_solver;
  --in_solver_;
  if (on_rates_) {
    sample_solver(sg4::Engine::get_clock(), id);
    const uint32_t slot = f.solver_slot;
    in_solver_list_[slot] = in_solver_list_.back();
    flows_[in_solver_list_[slot]].solver_slot = slot;
    in_solver_list_.pop_back();
    f.solver_slot = UINT32_MAX;
    emit_rates(id);
  }
  on_done_(f.tag, sg4::Engine::get_clock());
}

}  // namespace traintwin
