#include "sim/calibration.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ntp::sim {

namespace {

// A cause that says the peer was silent until the timeout, rather than that it died.
bool is_hang(const std::string& cause) {
  for (const char* word : {"timed out", "timeout", "still running after", "deadline"}) {
    if (cause.find(word) != std::string::npos) return true;
  }
  return false;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

Result<RuntimeMetrics> read_runtime_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("cannot read metrics file '" + path + "'; check the path");
  RuntimeMetrics out;
  std::vector<double> steps;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return invalid_argument(where +
                              " is not a JSON object; give the file `ntp train --metrics` "
                              "wrote");
    }
    const std::string type = j.value("type", "");
    if (type == "step" && j.contains("step_s") && j["step_s"].is_number()) {
      steps.push_back(j["step_s"].get<double>());
      continue;
    }
    if (type != "recovery") continue;
    MeasuredRecovery e;
    try {
      e.cause = j.at("cause").get<std::string>();
      e.old_degrees = j.at("old_degrees").get<std::vector<int>>();
      e.degrees = j.at("degrees").get<std::vector<int>>();
      e.detect_s = j.at("detect_s").get<double>();
      e.agree_s = j.at("agree_s").get<double>();
      e.rebuild_s = j.at("rebuild_s").get<double>();
      e.reshard_s = j.at("reshard_s").get<double>();
      e.total_s = j.at("total_s").get<double>();
      e.reshard_bytes = j.at("reshard_bytes").get<std::int64_t>();
      if (j.contains("reshard_busiest_rank_bytes")) {  // reshard_bytes is then the job's total
        e.busiest_rank_bytes = j.at("reshard_busiest_rank_bytes").get<std::int64_t>();
        e.reshard_bytes = -1;
      }
    } catch (const nlohmann::json::exception& ex) {
      return invalid_argument(where +
                              ": a recovery line needs cause, old_degrees, degrees, "
                              "detect_s, agree_s, rebuild_s, reshard_s, total_s and "
                              "reshard_bytes (" +
                              std::string(ex.what()) + ")");
    }
    e.repair = e.cause == "repair";
    e.hang = !e.repair && is_hang(e.cause);
    out.events.push_back(std::move(e));
  }
  if (out.events.empty()) {
    return invalid_argument("metrics file '" + path +
                            "' has no {\"type\":\"recovery\"} line; run a job with a fault (see "
                            "docs/recovery.md \"A real run\")");
  }
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    out.median_step_s = steps[steps.size() / 2];
  }
  return out;
}

Result<Calibration> calibrate(const SimConfig& config, const RuntimeMetrics& metrics) {
  Calibration cal;
  cal.step_s = metrics.median_step_s;
  RecoveryConfig& f = cal.fitted;
  f = config.recovery;
  // The fit is of the ops-per-member model's constants: price with it, whatever the config says.
  f.control_plane = "ops-model";
  f.curve.reset();

  // The reshards on the run's exact cluster (the bandwidth does not change the bytes).
  NTP_ASSIGN_OR_RETURN(RecoveryCostModel model, RecoveryCostModel::create(config));
  std::vector<ReshardEstimate> plans;
  std::vector<std::int64_t> leader;
  for (const MeasuredRecovery& e : metrics.events) {
    std::int64_t into_leader = 0;
    Result<ReshardEstimate> r = model.cluster_reshard(e.old_degrees, e.degrees, &into_leader);
    if (!r.ok()) {
      return r.status().with_context("recovery event TP " + std::to_string(e.old_degrees.size()) +
                                     " domains: the config's parallel.tp and model must match "
                                     "the run");
    }
    plans.push_back(*r);
    leader.push_back(into_leader);
  }

  std::vector<double> kill_detect, hang_detect, repair_agree, fail_agree;
  std::vector<double> rebuilds;
  double bytes = 0, seconds = 0;
  for (std::size_t i = 0; i < metrics.events.size(); ++i) {
    const MeasuredRecovery& e = metrics.events[i];
    if (e.repair) {
      repair_agree.push_back(e.agree_s);
    } else {
      (e.hang ? hang_detect : kill_detect).push_back(e.detect_s - cal.step_s / 2);
      fail_agree.push_back(e.agree_s);
    }
    rebuilds.push_back(e.rebuild_s);
    bytes += static_cast<double>(plans[i].busiest_gpu_bytes);
    seconds += e.reshard_s;
  }
  if (!kill_detect.empty()) f.detect_kill_seconds = std::max(0.0, mean(kill_detect));
  if (!hang_detect.empty()) f.detect_hang_seconds = std::max(0.0, mean(hang_detect));
  const double trips = std::max(1, f.agree_round_trips);
  if (!repair_agree.empty()) f.store_rtt_seconds = mean(repair_agree) / trips;
  if (!fail_agree.empty()) {
    // agree = max(0, stale - detect) + round trips x rtt over the failures' detection mix.
    const double stale_wait = mean(fail_agree) - f.agree_round_trips * f.store_rtt_seconds;
    const double detect = kill_detect.empty() ? f.detect_hang_seconds : f.detect_kill_seconds;
    f.heartbeat_stale_seconds = std::max(0.0, stale_wait) + detect;
    f.hang_fraction = static_cast<double>(hang_detect.size()) /
                      static_cast<double>(kill_detect.size() + hang_detect.size());
  }
  // One formation per event (the runtime's small jobs are far below the store's capacity).
  if (!rebuilds.empty()) f.formation_seconds = mean(rebuilds);
  cal.reshard_bytes_per_s = seconds > 0 && bytes > 0 ? bytes / seconds : 0.0;
  if (cal.reshard_bytes_per_s > 0) f.reshard_gbytes_per_s = cal.reshard_bytes_per_s / 1e9;

  // Predictions with the fitted constants, both links at the fitted bandwidth.
  SimConfig fitted = config;
  fitted.recovery = f;
  if (cal.reshard_bytes_per_s > 0) {
    fitted.system.scale_out_gbits_per_s = cal.reshard_bytes_per_s * 8 / 1e9;
  }
  NTP_ASSIGN_OR_RETURN(RecoveryCostModel priced, RecoveryCostModel::create(fitted));
  for (std::size_t i = 0; i < metrics.events.size(); ++i) {
    const MeasuredRecovery& e = metrics.events[i];
    NTP_ASSIGN_OR_RETURN(ReshardEstimate r, priced.cluster_reshard(e.old_degrees, e.degrees));
    CalibrationRow row;
    row.measured = e;
    // The event's own kind of detection, not the fitted mix.
    SimConfig one = fitted;
    one.recovery.hang_fraction = e.hang ? 1.0 : 0.0;
    NTP_ASSIGN_OR_RETURN(RecoveryCostModel kind_model, RecoveryCostModel::create(one));
    row.predicted = kind_model.price(!e.repair, r, cal.step_s);
    row.predicted_leader_bytes = leader[i];
    cal.rows.push_back(row);
  }
  cal.set_lines = {
      "recovery.detect_kill_seconds=" + config_number(f.detect_kill_seconds),
      "recovery.detect_hang_seconds=" + config_number(f.detect_hang_seconds),
      "recovery.hang_fraction=" + config_number(f.hang_fraction),
      "recovery.heartbeat_stale_seconds=" + config_number(f.heartbeat_stale_seconds),
      "recovery.store_rtt_seconds=" + config_number(f.store_rtt_seconds),
      "recovery.formation_seconds=" + config_number(f.formation_seconds),
      "recovery.reshard_gbytes_per_s=" + config_number(f.reshard_gbytes_per_s),
      "system.scale_out_gbits_per_s=" + config_number(fitted.system.scale_out_gbits_per_s),
      "recovery.control_plane=ops-model",
  };
  return cal;
}

std::string format_calibration(const Calibration& cal) {
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%zu recovery event(s); the run's median step %.3f s (a failure redoes half of "
                "one on average)\n",
                cal.rows.size(), cal.step_s);
  os << buf;
  std::snprintf(buf, sizeof(buf), "%-3s %-16s %-7s %17s %17s %17s %17s %17s %23s %s\n", "#",
                "event", "TP after", "detect+lost s", "agree s", "rebuild s", "reshard s",
                "re-form s", "leader bytes", "busiest GPU bytes");
  os << buf;
  std::snprintf(buf, sizeof(buf), "%-3s %-16s %-7s %17s %17s %17s %17s %17s %23s\n", "", "", "",
                "meas / pred", "meas / pred", "meas / pred", "meas / pred", "meas / pred",
                "meas / pred");
  os << buf;
  auto known = [](std::int64_t bytes) {
    return bytes < 0 ? std::string("-") : std::to_string(bytes);
  };
  int i = 0;
  for (const CalibrationRow& r : cal.rows) {
    const MeasuredRecovery& m = r.measured;
    const RecoveryCost& p = r.predicted;
    std::string degrees;
    for (std::size_t d = 0; d < m.degrees.size(); ++d) {
      degrees += (d ? "," : "") + std::to_string(m.degrees[d]);
    }
    const char* kind = m.repair ? "repair" : (m.hang ? "failure (hang)" : "failure (kill)");
    std::snprintf(buf, sizeof(buf),
                  "%-3d %-16s %-7s %8.3f / %6.3f %8.3f / %6.3f %8.3f / %6.3f %8.3f / %6.3f "
                  "%8.3f / %6.3f %11s / %9lld %s\n",
                  ++i, kind, degrees.c_str(), m.detect_s, p.detect_s + p.lost_step_s, m.agree_s,
                  p.agree_s, m.rebuild_s, p.rebuild_s, m.reshard_s, p.reshard_s, m.total_s,
                  p.agree_s + p.rebuild_s + p.reshard_s, known(m.reshard_bytes).c_str(),
                  static_cast<long long>(r.predicted_leader_bytes),
                  (m.busiest_rank_bytes >= 0 ? known(m.busiest_rank_bytes) + " / " : std::string())
                      .append(std::to_string(p.busiest_gpu_bytes))
                      .c_str());
    os << buf;
  }
  os << "(re-form = agree + rebuild + reshard, the runtime's total_s; the sim stalls the cluster "
        "for detect+lost + re-form)\n";
  const RecoveryConfig& f = cal.fitted;
  std::snprintf(
      buf, sizeof(buf),
      "fitted: detect %.3f s (kill) / %.3f s (hang), heartbeat stale %.3f s, store round trip "
      "%.4f s x %d, formation %.4f s, reshard %.3g GB/s\n",
      f.detect_kill_seconds, f.detect_hang_seconds, f.heartbeat_stale_seconds, f.store_rtt_seconds,
      f.agree_round_trips, f.formation_seconds, cal.reshard_bytes_per_s / 1e9);
  os << buf << "as overrides:";
  for (const std::string& s : cal.set_lines) os << " --set " << s;
  os << "\n";
  return os.str();
}

}  // namespace ntp::sim
