#include "sim/failures.h"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace ntp::sim {

FailureProcess::FailureProcess(const SimConfig& config, Rng rng, double start_s)
    : f_(config.failures),
      rng_(rng),
      arrivals_(config.system.gpus,
                cluster_rate_per_s(config.system.gpus, f_.rate_per_gpu_day, f_.rate_multiplier),
                start_s) {
  for (double w : f_.blast_weights) weight_total_ += w;
}

FailureEvent FailureProcess::next() {
  FailureEvent e;
  const GpuArrivals::Arrival at = arrivals_.next(rng_);
  e.time_s = at.time_s;
  if (at.time_s == std::numeric_limits<double>::infinity()) return e;
  const std::size_t i = pick_weighted(rng_.uniform() * weight_total_, f_.blast_sizes.size(),
                                      [this](std::size_t k) { return f_.blast_weights[k]; });
  e.count = f_.blast_sizes[i];
  e.first_gpu = at.gpu / e.count * e.count;
  e.hardware = rng_.uniform() < f_.hardware_fraction;
  const double mean_h = e.hardware ? f_.hardware_repair_hours : f_.software_recovery_hours;
  e.repair_s = rng_.exponential(1.0 / (mean_h * 3600.0));
  return e;
}

Result<std::vector<FailureEvent>> load_trace(const std::string& path, const SimConfig& config) {
  std::ifstream in(path);
  if (!in) {
    return invalid_argument("cannot read failures.trace '" + path + "'; check the path");
  }
  std::string line;
  if (!std::getline(in, line) || line.rfind("hours,gpu,kind,repair_hours", 0) != 0) {
    return invalid_argument("failures.trace '" + path +
                            "' must start with the header hours,gpu,kind,repair_hours[,blast]");
  }
  std::vector<FailureEvent> events;
  int line_no = 1;
  double last = -std::numeric_limits<double>::infinity();
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (cells.size() != 4 && cells.size() != 5) {
      return invalid_argument(where + "expected 4 or 5 comma-separated values, got " +
                              std::to_string(cells.size()));
    }
    auto number = [&](const std::string& text, const char* name, double& out) -> Status {
      char* end = nullptr;
      out = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(out >= 0)) {
        return invalid_argument(where + name + " '" + text + "' must be a number >= 0");
      }
      return ok_status();
    };
    FailureEvent e;
    double hours = 0, gpu = 0, repair = 0, blast = 1;
    NTP_RETURN_IF_ERROR(number(cells[0], "hours", hours));
    NTP_RETURN_IF_ERROR(number(cells[1], "gpu", gpu));
    NTP_RETURN_IF_ERROR(number(cells[3], "repair_hours", repair));
    if (cells.size() == 5) NTP_RETURN_IF_ERROR(number(cells[4], "blast", blast));
    if (gpu >= static_cast<double>(config.system.gpus) ||
        gpu != static_cast<double>(static_cast<std::int64_t>(gpu))) {
      return invalid_argument(
          where + "gpu '" + cells[1] +
          "' must be an integer below system.gpus = " + std::to_string(config.system.gpus));
    }
    const bool in_range = blast >= 1 && blast <= config.parallel.domain_size;
    const int b = in_range ? static_cast<int>(blast) : 0;
    if (!in_range || b != blast || config.parallel.domain_size % b != 0) {
      return invalid_argument(where + "blast '" + cells[4] +
                              "' must be a whole number of GPUs dividing parallel.domain_size");
    }
    if (cells[2] != "hardware" && cells[2] != "software") {
      return invalid_argument(where + "kind '" + cells[2] + "' must be hardware or software");
    }
    if (hours < last) {
      return invalid_argument(where + "hours '" + cells[0] +
                              "' is earlier than the row before; sort the trace by time");
    }
    last = hours;
    e.time_s = hours * 3600.0;
    e.count = b;
    e.first_gpu = static_cast<std::int64_t>(gpu) / b * b;
    e.hardware = cells[2] == "hardware";
    e.repair_s = repair * 3600.0;
    events.push_back(e);
  }
  return events;
}

}  // namespace ntp::sim
