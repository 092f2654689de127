#include "sim/control_plane_curve.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"

namespace ntp::sim {

namespace {

using nlohmann::json;

Status bad(const std::string& source, const std::string& what) {
  return invalid_argument("control-plane curve '" + source + "': " + what +
                          "; regenerate it with scripts/control_plane_curve.sh");
}

// One run line's figure `key`: a positive number.
Result<double> phase(const json& line, const char* key, const std::string& source,
                     const std::string& where) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) {
    return bad(source, where + " has no number '" + key + "' (the run did not get that far)");
  }
  const double v = it->get<double>();
  if (!(v > 0) || !std::isfinite(v)) {
    return bad(source, where + " has " + key + " = " + it->dump() + ", not a positive duration");
  }
  return v;
}

}  // namespace

double interpolate_log_log(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  NTP_CHECK(xs.size() == ys.size() && xs.size() >= 2 && x > 0);
  // The segment: the one holding x, else the nearest end's.
  std::size_t i = 1;
  while (i + 1 < xs.size() && x > xs[i]) ++i;
  const double x0 = xs[i - 1], x1 = xs[i], y0 = ys[i - 1], y1 = ys[i];
  if (x == x0) return y0;
  if (x == x1) return y1;
  const double slope = std::log(y1 / y0) / std::log(x1 / x0);
  return y0 * std::exp(slope * std::log(x / x0));
}

Result<ControlPlaneCurve> ControlPlaneCurve::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return not_found("cannot read the control-plane curve '" + path +
                     "'; generate it with scripts/control_plane_curve.sh, point "
                     "recovery.control_plane_curve at it, or set "
                     "recovery.control_plane = \"ops-model\"");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

Result<ControlPlaneCurve> ControlPlaneCurve::parse(const std::string& text,
                                                   const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    return bad(source, std::string("not JSON: ") + e.what());
  }
  if (!root.is_object() || !root.contains("runs") || !root["runs"].is_object()) {
    return bad(source, "no \"runs\" object");
  }
  ControlPlaneCurve c;
  c.source_ = source;
  auto text_of = [&](const char* key) {
    return root.contains(key) && root[key].is_string() ? root[key].get<std::string>() : "";
  };
  c.command_ = text_of("command");
  c.commit_ = text_of("commit");
  c.date_ = text_of("date");
  if (!root.contains("hang_detect_s") || !root["hang_detect_s"].is_number() ||
      !(root["hang_detect_s"].get<double>() > 0)) {
    return bad(source, "no positive \"hang_detect_s\" (the hang runs' --hang-detect-ms / 1000)");
  }
  c.hang_detect_s_ = root["hang_detect_s"].get<double>();

  std::vector<ControlPlanePoint> kill, hang;
  for (const char* fault : {"kill", "hang"}) {
    const json& runs = root["runs"].contains(fault) ? root["runs"][fault] : json();
    if (!runs.is_array() || runs.size() < 2) {
      return bad(source, std::string("runs.") + fault + " needs runs at two GPU counts or more");
    }
    std::vector<ControlPlanePoint>& out = std::string(fault) == "kill" ? kill : hang;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const json& line = runs[k];
      const std::string where = std::string("runs.") + fault + "[" + std::to_string(k) + "]";
      if (!line.is_object() || !line.contains("gpus") || !line["gpus"].is_number_integer()) {
        return bad(source, where + " has no integer 'gpus'");
      }
      if (line.value("invariants", std::string()) != "ok") {
        return bad(source, where + " broke an invariant: " + line.value("invariants", "none"));
      }
      if (!line.value("hierarchy", false)) {
        return bad(source, where + " was not run with --hierarchy");
      }
      if (line.value("fault", std::string()) != fault) {
        return bad(source, where + " is not a --fault " + fault + " run");
      }
      const int domain = line.value("domain", 0);
      if (c.domain_ == 0) c.domain_ = domain;
      if (domain <= 0 || domain != c.domain_) {
        return bad(source, where + " has domain " + std::to_string(domain) + ", not " +
                               std::to_string(c.domain_) + " like the first run");
      }
      ControlPlanePoint p;
      p.gpus = line["gpus"].get<std::int64_t>();
      if (!out.empty() && p.gpus <= out.back().gpus) {
        return bad(source, where + ": GPU counts must ascend");
      }
      ControlPlanePhases& ph = std::string(fault) == "kill" ? p.kill : p.hang;
      NTP_ASSIGN_OR_RETURN(ph.detect_s, phase(line, "abort_all_s", source, where));
      NTP_ASSIGN_OR_RETURN(ph.agree_s, phase(line, "agree_s", source, where));
      NTP_ASSIGN_OR_RETURN(ph.rebuild_s, phase(line, "form_s", source, where));
      out.push_back(p);
    }
  }
  if (kill.size() != hang.size()) {
    return bad(source, "runs.kill and runs.hang hold different GPU counts");
  }
  for (std::size_t k = 0; k < kill.size(); ++k) {
    if (kill[k].gpus != hang[k].gpus) {
      return bad(source, "runs.kill and runs.hang hold different GPU counts");
    }
    kill[k].hang = hang[k].hang;
  }
  c.points_ = std::move(kill);
  return c;
}

ControlPlanePhases ControlPlaneCurve::at(double gpus, bool hang) const {
  std::vector<double> xs, detect, agree, rebuild;
  for (const ControlPlanePoint& p : points_) {
    const ControlPlanePhases& ph = hang ? p.hang : p.kill;
    xs.push_back(static_cast<double>(p.gpus));
    detect.push_back(ph.detect_s);
    agree.push_back(ph.agree_s);
    rebuild.push_back(ph.rebuild_s);
  }
  ControlPlanePhases out;
  out.detect_s = interpolate_log_log(xs, detect, gpus);
  out.agree_s = interpolate_log_log(xs, agree, gpus);
  out.rebuild_s = interpolate_log_log(xs, rebuild, gpus);
  return out;
}

bool ControlPlaneCurve::covers(double gpus) const {
  return !points_.empty() && gpus >= static_cast<double>(points_.front().gpus) &&
         gpus <= static_cast<double>(points_.back().gpus);
}

}  // namespace ntp::sim
