// The control-plane curve (sim/control_plane_curve.h) and how the recovery cost model prices
// NTP-LIVE with it: log-log interpolation exact at the points and monotone between, the shipped
// file equal to what control_plane_sim computes today at its small points (so a stale file fails
// here), the curve read at the cluster's size, and the ops-per-member model unchanged when chosen.
#include "sim/control_plane_curve.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "elastic/sim/control_plane_sim.h"
#include "sim/config.h"
#include "sim/recovery_cost.h"

namespace ntp::sim {
namespace {

const std::string kShipped = std::string(NTP_SOURCE_DIR) + "/configs/sim/control_plane_curve.json";

ControlPlaneCurve shipped() {
  Result<ControlPlaneCurve> c = ControlPlaneCurve::load(kShipped);
  NTP_CHECK_MSG(c.ok(), c.status().to_string());
  return *c;
}

TEST(ControlPlaneCurve, InterpolationIsExactAtThePointsAndMonotoneBetween) {
  const std::vector<double> xs = {144, 1152, 4608, 16416};
  const std::vector<double> ys = {0.02, 0.06, 0.05, 0.4};  // a dip: monotone per segment
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(interpolate_log_log(xs, ys, xs[i]), ys[i]);
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    double prev = ys[i];
    for (int k = 1; k <= 64; ++k) {
      const double x = xs[i] + (xs[i + 1] - xs[i]) * k / 64.0;
      const double y = interpolate_log_log(xs, ys, x);
      if (ys[i + 1] >= ys[i]) {
        EXPECT_GE(y, prev) << x;
      } else {
        EXPECT_LE(y, prev) << x;
      }
      EXPECT_GE(y, std::min(ys[i], ys[i + 1]) * (1 - 1e-12));
      EXPECT_LE(y, std::max(ys[i], ys[i + 1]) * (1 + 1e-12));
      prev = y;
    }
  }
}

TEST(ControlPlaneCurve, APowerLawIsReproducedAndExtendedPastTheEnds) {
  const std::vector<double> xs = {100, 400, 1600};
  std::vector<double> ys;
  for (double x : xs) ys.push_back(0.001 * std::pow(x, 0.75));
  for (double x : {10.0, 250.0, 1000.0, 102400.0}) {
    EXPECT_NEAR(interpolate_log_log(xs, ys, x), 0.001 * std::pow(x, 0.75),
                1e-12 * std::pow(x, 0.75));
  }
}

TEST(ControlPlaneCurve, TheShippedCurveIsReadExactlyAtItsPoints) {
  const ControlPlaneCurve c = shipped();
  ASSERT_GE(c.points().size(), 2u);
  EXPECT_EQ(c.domain(), 72);
  EXPECT_EQ(c.points().front().gpus, 144);
  for (const ControlPlanePoint& p : c.points()) {
    EXPECT_EQ(p.gpus % c.domain(), 0);
    const double n = static_cast<double>(p.gpus);
    EXPECT_TRUE(c.covers(n));
    for (bool hang : {false, true}) {
      const ControlPlanePhases want = hang ? p.hang : p.kill;
      const ControlPlanePhases got = c.at(n, hang);
      EXPECT_EQ(got.detect_s, want.detect_s) << p.gpus;
      EXPECT_EQ(got.agree_s, want.agree_s) << p.gpus;
      EXPECT_EQ(got.rebuild_s, want.rebuild_s) << p.gpus;
    }
  }
  EXPECT_FALSE(c.covers(72));
}

// What keeps the shipped file honest: control_plane_sim's figures at the curve's small points,
// computed now by the library it runs (elastic/sim/control_plane_sim.h, the command line's
// defaults), equal the file's to the 4 decimals the command line prints. A difference means the
// protocol or its model changed since the file was generated.
TEST(ControlPlaneCurve, TheShippedCurveIsWhatControlPlaneSimComputesToday) {
  const ControlPlaneCurve c = shipped();
  const std::string fix = "\n" + kShipped + " (generated at commit " + c.commit() +
                          ") is stale: regenerate it with scripts/control_plane_curve.sh";
  int checked = 0;
  for (const ControlPlanePoint& p : c.points()) {
    if (p.gpus > 1152) continue;
    for (bool hang : {false, true}) {
      elastic::sim::SimConfig s;
      s.gpus = static_cast<int>(p.gpus);
      s.tp = c.domain();
      s.hierarchy = true;
      s.fault = hang ? elastic::sim::Fault::kHang : elastic::sim::Fault::kKill;
      s.hang_detect = std::chrono::milliseconds(std::lround(c.hang_detect_s() * 1000));
      const elastic::sim::SimResult r = elastic::sim::simulate(s);
      ASSERT_EQ(r.invariants, "ok");
      auto printed = [](double v) { return std::round(v * 1e4) / 1e4; };
      const ControlPlanePhases& want = hang ? p.hang : p.kill;
      const std::string at = std::to_string(p.gpus) + " GPUs, " + (hang ? "hang" : "kill") + ": ";
      EXPECT_EQ(printed(r.abort_all_s), want.detect_s) << at << "abort_all_s" << fix;
      EXPECT_EQ(printed(r.agree_s), want.agree_s) << at << "agree_s" << fix;
      EXPECT_EQ(printed(r.form_s), want.rebuild_s) << at << "form_s" << fix;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4) << "the curve should hold 144 and 1,152 GPUs";
}

// A minimal curve file's text: runs at `gpus` with the given phases for both faults.
std::string curve_text(const std::string& kill_runs, const std::string& hang_runs) {
  return R"({"command": "test", "commit": "c0ffee", "hang_detect_s": 1, "runs": {"kill": [)" +
         kill_runs + R"(], "hang": [)" + hang_runs + "]}}";
}

std::string run(int gpus, const char* fault, const std::string& figures,
                const char* invariants = "ok") {
  return R"({"gpus": )" + std::to_string(gpus) +
         R"(, "domain": 72, "hierarchy": true, "fault": ")" + fault + R"(", )" + figures +
         R"(, "invariants": ")" + invariants + R"("})";
}

TEST(ControlPlaneCurve, FiguresThatMakeNoSenseAreRejectedNamingTheEntry) {
  const std::string ok = R"("abort_all_s": 0.01, "agree_s": 0.02, "form_s": 0.06)";
  auto parse = [](const std::string& text) { return ControlPlaneCurve::parse(text, "x.json"); };
  Result<ControlPlaneCurve> good =
      parse(curve_text(run(144, "kill", ok) + "," + run(1152, "kill", ok),
                       run(144, "hang", ok) + "," + run(1152, "hang", ok)));
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(good->commit(), "c0ffee");
  struct Bad {
    std::string text, needle;
  };
  const std::vector<Bad> bad = {
      {"{", "not JSON"},
      {curve_text(run(144, "kill", ok), run(144, "hang", ok)), "two GPU counts"},
      {curve_text(run(1152, "kill", ok) + "," + run(144, "kill", ok),
                  run(144, "hang", ok) + "," + run(1152, "hang", ok)),
       "ascend"},
      {curve_text(run(144, "kill", ok) + "," +
                      run(1152, "kill", R"("abort_all_s": 0.01, "agree_s": null, "form_s": 1)"),
                  run(144, "hang", ok) + "," + run(1152, "hang", ok)),
       "runs.kill[1] has no number 'agree_s'"},
      {curve_text(run(144, "kill", ok) + "," + run(1152, "kill", ok, "two lists in epoch 1"),
                  run(144, "hang", ok) + "," + run(1152, "hang", ok)),
       "two lists in epoch 1"},
      {curve_text(run(144, "kill", ok) + "," + run(1152, "kill", ok),
                  run(144, "hang", ok) + "," + run(2304, "hang", ok)),
       "different GPU counts"},
      {curve_text(run(144, "kill", ok) + "," + run(1152, "hang", ok),
                  run(144, "hang", ok) + "," + run(1152, "hang", ok)),
       "not a --fault kill run"},
  };
  for (const Bad& b : bad) {
    Result<ControlPlaneCurve> c = parse(b.text);
    ASSERT_FALSE(c.ok()) << b.needle;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(b.needle), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("scripts/control_plane_curve.sh"), std::string::npos);
  }
  Result<ControlPlaneCurve> missing = ControlPlaneCurve::load("/nonexistent/curve.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

SimConfig shipped_config(const char* name, std::vector<std::string> overrides) {
  Result<SimConfig> c =
      load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/" + name, overrides);
  NTP_CHECK_MSG(c.ok(), c.status().to_string());
  return *c;
}

TEST(ControlPlaneCurve, ShippedConfigsDefaultToTheCurveBesideThem) {
  const SimConfig c = shipped_config("h100-70b-tp8.toml", {});
  EXPECT_EQ(c.recovery.control_plane, "curve");
  ASSERT_NE(c.recovery.curve, nullptr);
  EXPECT_EQ(c.recovery.curve->points().size(), shipped().points().size());
  const SimConfig ops = shipped_config("h100-70b-tp8.toml", {"recovery.control_plane=ops-model"});
  EXPECT_EQ(ops.recovery.control_plane, "ops-model");
  EXPECT_EQ(ops.recovery.curve, nullptr);
  // Unset and no curve beside the config: the ops model, saying why.
  Result<SimConfig> text = parse_config("", {"recovery.control_plane_curve=none.json"});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text->recovery.control_plane, "ops-model");
  EXPECT_NE(text->recovery.control_plane_note.find("none.json"), std::string::npos);
  // Asked for and missing: an error naming the key and the file.
  Result<SimConfig> asked =
      parse_config("", {"recovery.control_plane=curve", "recovery.control_plane_curve=none.json"});
  ASSERT_FALSE(asked.ok());
  EXPECT_NE(asked.status().message().find("recovery.control_plane"), std::string::npos);
  EXPECT_NE(asked.status().message().find("none.json"), std::string::npos);
  Result<SimConfig> typo = parse_config("", {"recovery.control_plane=curves"});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("ops-model"), std::string::npos);
}

RecoveryCostModel model_of(const SimConfig& c) {
  Result<RecoveryCostModel> m = RecoveryCostModel::create(c);
  NTP_CHECK_MSG(m.ok(), m.status().to_string());
  return *m;
}

// gb200-nvl72 at 1,152 GPUs (4 pipelines of TP 72 x PP 4): the curve's own point, so the model's
// agree and rebuild are control_plane_sim's at that count.
TEST(ControlPlaneCurve, TheCurvePricesThePhasesAtTheClustersSize) {
  const ControlPlaneCurve curve = shipped();
  const ControlPlanePoint* at1152 = nullptr;
  for (const ControlPlanePoint& p : curve.points()) {
    if (p.gpus == 1152) at1152 = &p;
  }
  ASSERT_NE(at1152, nullptr);
  const std::vector<std::string> base = {"system.gpus=1152", "recovery.detect_kill_seconds=0",
                                         "recovery.detect_hang_seconds=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return model_of(shipped_config("gb200-nvl72.toml", extra));
  };
  const RecoveryCostModel kill = with({"recovery.hang_fraction=0"});
  EXPECT_EQ(kill.control_plane().model, "curve");
  EXPECT_FALSE(kill.control_plane().extrapolated);
  const RecoveryCost f = kill.event(true, {{0, 72, 70}}, 72);
  EXPECT_EQ(f.detect_s, at1152->kill.detect_s);
  EXPECT_EQ(f.agree_s, at1152->kill.agree_s);
  EXPECT_EQ(f.rebuild_s, at1152->kill.rebuild_s);
  EXPECT_NEAR(f.total_s, f.lost_step_s + f.detect_s + f.agree_s + f.rebuild_s + f.reshard_s, 1e-12);
  const RecoveryCost r = kill.event(false, {{0, 70, 72}}, 72);
  EXPECT_EQ(r.detect_s, 0.0);
  EXPECT_EQ(r.lost_step_s, 0.0);
  EXPECT_EQ(r.agree_s, at1152->kill.agree_s);
  EXPECT_EQ(r.rebuild_s, at1152->kill.rebuild_s);
  // A hang: the curve's own threshold (1 s) gives its figures; a 30 s threshold adds 29 s.
  const RecoveryCost h = with({"recovery.hang_fraction=1"}).event(true, {{0, 72, 70}}, 72);
  EXPECT_NEAR(h.detect_s, at1152->hang.detect_s, 1e-12);
  EXPECT_EQ(h.agree_s, at1152->hang.agree_s);
  EXPECT_EQ(h.rebuild_s, at1152->hang.rebuild_s);
  const RecoveryCost h30 = with({"recovery.hang_fraction=1", "recovery.detect_hang_seconds=30"})
                               .event(true, {{0, 72, 70}}, 72);
  EXPECT_NEAR(h30.detect_s, at1152->hang.detect_s + 29, 1e-12);
  // detect_kill_seconds stays the floor of a kill's detection: the simulation posts the exit
  // notice at the fault.
  const RecoveryCost k1 = with({"recovery.hang_fraction=0", "recovery.detect_kill_seconds=1"})
                              .event(true, {{0, 72, 70}}, 72);
  EXPECT_EQ(k1.detect_s, 1.0);
  // Outside the curve (past 102,384 GPUs): flagged.
  const RecoveryCostModel big =
      model_of(shipped_config("gb200-nvl72.toml", {"system.gpus=103680"}));
  EXPECT_TRUE(big.control_plane().extrapolated);
}

// "ops-model" prices exactly as before the curve: h100-70b-tp8 at 16,384 GPUs, by hand from the
// [recovery] defaults (store 100,000 ops/s; notice 8, agreement 15, formation 10 ops per member).
TEST(ControlPlaneCurve, TheOpsModelStillGivesItsOldNumbers) {
  const RecoveryCostModel m =
      model_of(shipped_config("h100-70b-tp8.toml", {"recovery.control_plane=ops-model"}));
  EXPECT_EQ(m.control_plane().model, "ops-model");
  const RecoveryCost f = m.event(true, {{0, 8, 7}}, 8);
  const double notice = 8 * 16384 / 1e5, agree = 15 * 16384 / 1e5, form = 10 * 16384 / 1e5;
  EXPECT_NEAR(f.detect_s, 0.9 * std::max(1.0, notice) + 0.1 * std::max(30.0, notice), 1e-12);
  // The stale wait (1 s) is shorter than the notice's fan-out: no wait.
  EXPECT_NEAR(f.agree_s, std::max(4 * 0.005, agree), 1e-12);
  EXPECT_NEAR(f.rebuild_s, std::max(0.055, form), 1e-12);
}

}  // namespace
}  // namespace ntp::sim
