// `ntp power plan`: the least power boost that lets one degraded scale-up domain keep pace.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "power/boost_planner.h"
#include "sim/config.h"
#include "sim/workload.h"

namespace ntp::cli {

namespace {

struct PowerPlanOptions {
  std::string config;
  std::optional<int> failed;
  std::optional<double> speed;
  std::optional<double> headroom;
  std::optional<double> tdp;
  bool json = false;
};

int run_power_plan(const PowerPlanOptions& o) {
  sim::SimConfig config;
  if (!o.config.empty()) {
    Result<sim::SimConfig> loaded = sim::load_config(o.config);
    if (!loaded.ok()) return report_error("power plan", loaded.status());
    config = *loaded;
  } else {
    const Status valid = sim::validate(config);
    if (!valid.ok()) return report_error("power plan", valid);
  }
  if (o.headroom) {
    if (!(*o.headroom >= 0 && *o.headroom <= 10)) {
      return report_error("power plan",
                          invalid_argument("--headroom " + std::to_string(*o.headroom) +
                                           " must be in [0, 10] (0.3 = +30% TDP)"));
    }
    config.power.headroom = *o.headroom;
  }
  if (o.tdp) {
    if (!(*o.tdp > 0)) {
      return report_error(
          "power plan", invalid_argument("--tdp " + std::to_string(*o.tdp) + " must be > 0 watts"));
    }
    config.system.tdp_watts = *o.tdp;
  }
  const int tp = config.parallel.tp;
  const sim::Workload workload(config);
  int failed = o.failed.value_or(1);
  if (failed < 0 || failed > tp) {
    return report_error("power plan", invalid_argument("--failed " + std::to_string(failed) +
                                                       " must be in [0, parallel.tp = " +
                                                       std::to_string(tp) + "]"));
  }
  int degree = workload.degree_after_failures(failed);
  double speed = 0;
  if (o.speed) {
    if (!(*o.speed > 0 && *o.speed <= 1)) {
      return report_error("power plan", invalid_argument("--speed " + std::to_string(*o.speed) +
                                                         " must be in (0, 1]"));
    }
    speed = *o.speed;
  } else {
    if (degree == 0) {
      return report_error("power plan",
                          invalid_argument("--failed " + std::to_string(failed) +
                                           " leaves the domain below "
                                           "parallel.min_degree = " +
                                           std::to_string(config.parallel.min_degree) +
                                           "; it cannot run, so no boost helps"));
    }
    speed = workload.speed(degree);
  }
  // The GPUs that do work: the reduced degree (survivors beyond it idle), or every survivor when
  // the speed is given directly.
  const int survivors = o.speed ? tp - failed : degree;
  const power::PowerModel model;
  const power::BoostPlan plan =
      power::plan_boost(model, speed, {survivors, config.system.tdp_watts, config.power.headroom});
  // Energy per unit of work relative to a healthy domain at TDP:
  // (survivors x factor) / (tp x achieved speed).
  const double energy_per_work =
      (survivors * plan.power_factor) / (static_cast<double>(tp) * plan.speed);
  if (o.json) {
    nlohmann::json j;
    j["tp"] = tp;
    j["failed_gpus"] = failed;
    j["degree"] = degree;
    j["unboosted_speed"] = speed;
    j["needed_speedup"] = 1.0 / speed;
    j["power_factor"] = plan.power_factor;
    j["achieved_speed"] = plan.speed;
    j["keeps_pace"] = plan.keeps_pace;
    j["batch_share"] = plan.batch_share;
    j["perf_per_watt"] = model.perf_per_watt(plan.power_factor);
    j["domain_watts"] = plan.domain_watts;
    j["rack_budget_watts"] = plan.rack_budget_watts;
    j["energy_per_work_vs_healthy"] = energy_per_work;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("domain: TP %d with %d failed GPU(s) -> degree %d\n", tp, failed, degree);
  std::printf("unboosted speed:   %.4f of a healthy domain (needs %.4fx to keep pace)\n", speed,
              1.0 / speed);
  std::printf("power boost:       %.4fx TDP per surviving GPU (cap %.2fx; perf/W %.4f)\n",
              plan.power_factor, 1.0 + config.power.headroom,
              model.perf_per_watt(plan.power_factor));
  std::printf("achieved speed:    %.4f -> %s\n", plan.speed,
              plan.keeps_pace ? "keeps pace, full batch share"
                              : "budget short: falls back to `scale` for the rest");
  std::printf("batch share:       %.4f of a healthy replica's samples\n", plan.batch_share);
  std::printf(
      "domain power:      %.1f kW of a %.1f kW rack budget (%d active GPUs x %.0f W x %.2f)\n",
      plan.domain_watts / 1e3, plan.rack_budget_watts / 1e3, survivors, config.system.tdp_watts,
      1.0 + config.power.headroom);
  std::printf("energy per work:   %.4f x a healthy domain's\n", energy_per_work);
  return kExitOk;
}

}  // namespace

void add_power_command(CLI::App& app, int& exit_code) {
  CLI::App* power = app.add_subcommand("power", "Power-boost model and planner");
  power->require_subcommand(1);
  CLI::App* plan = power->add_subcommand(
      "plan", "Least power boost that lets one degraded scale-up domain keep pace");
  auto opts = std::make_shared<PowerPlanOptions>();
  plan->add_option("--config", opts->config,
                   "sim config (TOML) for the workload; default: the paper's B200 NVL32 setup");
  plan->add_option("--failed", opts->failed, "failed GPUs in the domain's TP group (default 1)");
  plan->add_option("--speed", opts->speed,
                   "unboosted relative speed in (0, 1] instead of the workload model's");
  plan->add_option("--headroom", opts->headroom,
                   "extra TDP fraction per surviving GPU the rack allows (default 0.3)");
  plan->add_option("--tdp", opts->tdp, "GPU TDP in watts");
  plan->add_flag("--json", opts->json, "print JSON");
  plan->callback([opts, &exit_code] { exit_code = run_power_plan(*opts); });
}

}  // namespace ntp::cli
