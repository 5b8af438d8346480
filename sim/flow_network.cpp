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
#include <unordered_set>

#include "core/error.hpp"

namespace traintwin {

namespace sg4 = simgrid::s4u;

FlowNetwork::FlowNetwork(OnDone on_done, bool lone_flows_in_closed_form)
    : on_done_(std::move(on_done)), closed_form_(lone_flows_in_closed_form) {
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
    if (inserted) links_.emplace_back();
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
    f = Flow{};
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
    alone = links_[l].lone == UINT32_MAX && links_[l].in_solver == 0;
  }
  if (alone) {
    for (uint32_t l : r.shared_links) links_[l].lone = id;
    const double end = now + r.latency_s + flows_[id].bytes / r.bandwidth_Bps;
    flows_[id].timer = simgrid::kernel::timer::Timer::set(end, [this, id] { lone_done(id); });
    return;
  }
  // Lone flows met on the way join the solver first, with what they have left now.
  for (uint32_t l : r.shared_links) {
    if (links_[l].lone != UINT32_MAX) hand_over(links_[l].lone, now);
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
  f.comm = sg4::Comm::sendto_init(f.from, f.to);
  f.comm->set_payload_size(static_cast<uint64_t>(std::max(1.0, std::round(remaining_bytes))));
  f.comm->set_data(reinterpret_cast<void*>(static_cast<uintptr_t>(id)));
  f.comm->start();
  latency_factor_ = 1.0;
}

void FlowNetwork::lone_done(uint32_t id) {
  Flow& f = flows_[id];
  f.timer = nullptr;  // SimGrid deletes a timer once it ran
  for (uint32_t l : f.route->shared_links) links_[l].lone = UINT32_MAX;
  ++stats_.lone_flows;
  const uint64_t tag = f.tag;
  free_.push_back(id);
  on_done_(tag, sg4::Engine::get_clock());
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
  on_done_(f.tag, sg4::Engine::get_clock());
}

}  // namespace traintwin
