// ControlPlaneCurve: the control plane's phases after one fault as control_plane_sim simulates
// them with the domain hierarchy (elastic/sim/control_plane_sim.h), per GPU count, read from the
// file scripts/control_plane_curve.sh writes (configs/sim/control_plane_curve.json), so that the
// recovery cost model (sim/recovery_cost.h) prices NTP-LIVE's detect, agree and rebuild phases at
// the cluster's size instead of from fixed store operations per member.
//
// The file: {"command", "date", "host", "commit", "domain", "hang_detect_s",
// "runs": {"kill": [LINE...], "hang": [LINE...]}} where each LINE is one JSON line of
// control_plane_sim (gpus, abort_all_s, agree_s, form_s, invariants, ...). The phases are
// consecutive durations in seconds: abort_all_s from the fault to every survivor aborted,
// agree_s from then to every survivor agreed, form_s from then to every survivor formed.
//
// Between points each phase is interpolated log-log (a power law through the two neighbours):
// the hierarchy's phases grow as powers of the GPU count (the global store's queue and the
// leaders' agreement grow with the domains), a power law is reproduced exactly, and a phase
// stays positive. Outside the points the nearest segment's power law extends it (a line in
// log GPUs would extend an O(N) phase as O(log N)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::sim {

// One fault's phases at one GPU count, seconds.
struct ControlPlanePhases {
  double detect_s = 0;   // control_plane_sim abort_all_s
  double agree_s = 0;    // agree_s
  double rebuild_s = 0;  // form_s
};

struct ControlPlanePoint {
  std::int64_t gpus = 0;
  ControlPlanePhases kill, hang;
};

class ControlPlaneCurve {
 public:
  // kNotFound when the file cannot be read; kInvalidArgument naming the file and the entry when
  // it is not such a file or its figures make no sense (fewer than two GPU counts, counts not
  // ascending or not the same for both faults, a null or non-positive phase, a run whose
  // invariants are not "ok", runs of different domain sizes or without the hierarchy).
  static Result<ControlPlaneCurve> load(const std::string& path);
  static Result<ControlPlaneCurve> parse(const std::string& json_text, const std::string& source);

  // The phases of a kill (`hang` false) or a hang at `gpus`, interpolated log-log per phase.
  ControlPlanePhases at(double gpus, bool hang) const;
  // gpus within [first point, last point]: interpolated, not extrapolated.
  bool covers(double gpus) const;

  const std::vector<ControlPlanePoint>& points() const { return points_; }
  int domain() const { return domain_; }
  double hang_detect_s() const { return hang_detect_s_; }  // the hang runs' detection threshold
  const std::string& source() const { return source_; }    // the path it was read from
  const std::string& command() const { return command_; }
  const std::string& commit() const { return commit_; }
  const std::string& date() const { return date_; }

 private:
  std::vector<ControlPlanePoint> points_;
  int domain_ = 0;
  double hang_detect_s_ = 1;
  std::string source_, command_, commit_, date_;
};

// y at x on the piecewise power law through (xs[i], ys[i]): xs strictly ascending and positive,
// ys positive, at least two points. Exact at the points, monotone between neighbours; beyond the
// ends the first or last segment's power law.
double interpolate_log_log(const std::vector<double>& xs, const std::vector<double>& ys, double x);

}  // namespace ntp::sim
