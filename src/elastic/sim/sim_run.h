// What the flat simulation (control_plane_sim.cpp) and the hierarchy's (hierarchy_sim.cpp) do
// alike around their members: start them with seeded beat phases, count the store's ops by kind
// over the steady window, and turn the survivors' moments into the three phases of SimResult.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "elastic/progress.h"
#include "elastic/sim/control_plane_sim.h"
#include "elastic/sim/event_loop.h"
#include "elastic/watch_machine.h"

namespace ntp::elastic::sim {

// The trainer's full-mesh bound (comm/pair_mesh.h): groups up to this size form every link.
inline constexpr int kFullMeshMaxSize = 32;

inline double seconds(Duration d) { return 1e-9 * static_cast<double>(d.count()); }

// 0, 1, ..., n - 1.
inline std::vector<int> iota_ids(int n) {
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  return ids;
}

// The failure-free time before the fault, and the steady window at its end: the last kNoticeBlock
// (2 s), a whole period of every loop (a shorter window would count each member's blocking read
// once or not at all).
struct SteadyWindow {
  Time fault_at, from;
  double seconds;
};
inline SteadyWindow steady_window(const SimConfig& c) {
  const Time fault_at = Time(c.steady);
  return {fault_at, fault_at - kNoticeBlock, seconds(kNoticeBlock)};
}

// Members 0 .. c.gpus - 1 of world `w` (M(w, id)), each started with its beats at a phase of the
// liveness period drawn from the seed, run up to `window`'s start (events counted in `out`).
template <typename M, typename World>
std::vector<std::unique_ptr<M>> start_members(World& w, const SimConfig& c,
                                              const SteadyWindow& window, SimResult& out) {
  std::vector<std::unique_ptr<M>> members;
  members.reserve(static_cast<size_t>(c.gpus));
  for (int id = 0; id < c.gpus; ++id) members.push_back(std::make_unique<M>(w, id));
  Rng rng(c.seed);
  const Duration period = liveness_period(c.hang_detect);
  for (const auto& m : members) {
    m->start(
        Duration(static_cast<std::int64_t>(rng.uniform() * static_cast<double>(period.count()))));
  }
  out.events += w.loop.run_until(window.from, [] { return false; });
  return members;
}

// Ops by kind in `after` less those in `before`.
inline std::map<std::string, std::int64_t> kinds_since(
    const std::map<std::string, std::int64_t>& before,
    const std::map<std::string, std::int64_t>& after) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [kind, count] : after) {
    const auto it = before.find(kind);
    out[kind] = count - (it == before.end() ? 0 : it->second);
  }
  return out;
}

// The last survivor's moment `moment(member)` (nullopt while a survivor has none).
template <typename M, typename Moment>
std::optional<Time> last_of(const std::vector<std::unique_ptr<M>>& members,
                            const std::set<int>& victims, Moment moment) {
  Time last{};
  for (size_t i = 0; i < members.size(); ++i) {
    if (victims.count(static_cast<int>(i)) > 0) continue;
    const std::optional<Time>& t = std::invoke(moment, *members[i]);
    if (!t) return std::nullopt;
    last = std::max(last, *t);
  }
  return last;
}

// What every survivor of a run must not have done, as the violation naming it `who` ("" when
// none): its watch fired before the fault, a watcher fenced it, or it failed.
template <typename M>
std::string survivor_fault(const M& m, const std::string& who) {
  if (m.fired_early) return who + "'s watch fired before the fault (" + m.failure() + ")";
  if (m.fenced()) return who + " was fenced while healthy";
  if (!m.failure().empty()) return who + " failed: " + m.failure();
  return "";
}

// SimResult's three consecutive phases from the survivors' last abort, agreement and formation.
template <typename M>
void set_phases(SimResult& out, const std::vector<std::unique_ptr<M>>& members,
                const std::set<int>& victims, Time fault_at) {
  const std::optional<Time> aborted = last_of(members, victims, &M::aborted),
                            agreed = last_of(members, victims, &M::agreed),
                            formed = last_of(members, victims, &M::formed);
  if (aborted) out.abort_all_s = seconds(*aborted - fault_at);
  if (aborted && agreed) out.agree_s = seconds(*agreed - *aborted);
  if (agreed && formed) out.form_s = seconds(*formed - *agreed);
}

}  // namespace ntp::elastic::sim
