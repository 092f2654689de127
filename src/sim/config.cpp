#include "sim/config.h"

#include <toml++/toml.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "shard/balance.h"

namespace ntp::sim {

namespace {

// Reads the keys of one section, remembering which were seen so leftovers are reported.
class Section {
 public:
  Section(const toml::table* table, std::string name) : table_(table), name_(std::move(name)) {}

  Status get(const char* key, double& out, double lo, double hi) {
    const toml::node* n = find(key);
    if (!n) return ok_status();
    std::optional<double> v = n->value<double>();
    if (!v || !(n->is_number())) return type_error(key, "a number");
    if (!(*v >= lo && *v <= hi)) return range_error(key, config_number(*v), lo, hi);
    out = *v;
    return ok_status();
  }
  Status get(const char* key, int& out, double lo, double hi) {
    std::int64_t v = out;
    NTP_RETURN_IF_ERROR(get(key, v, lo, hi));
    out = static_cast<int>(v);
    return ok_status();
  }
  Status get(const char* key, std::int64_t& out, double lo, double hi) {
    const toml::node* n = find(key);
    if (!n) return ok_status();
    if (!n->is_integer()) return type_error(key, "an integer");
    const std::int64_t v = n->value<std::int64_t>().value();
    if (!(static_cast<double>(v) >= lo && static_cast<double>(v) <= hi)) {
      return range_error(key, std::to_string(v), lo, hi);
    }
    out = v;
    return ok_status();
  }
  Status get(const char* key, std::uint64_t& out) {
    std::int64_t v = static_cast<std::int64_t>(out);
    NTP_RETURN_IF_ERROR(get(key, v, 0, 9.0e18));
    out = static_cast<std::uint64_t>(v);
    return ok_status();
  }
  Status get(const char* key, bool& out) {
    const toml::node* n = find(key);
    if (!n) return ok_status();
    if (!n->is_boolean()) return type_error(key, "true or false");
    out = n->value<bool>().value();
    return ok_status();
  }
  Status get(const char* key, std::string& out) {
    const toml::node* n = find(key);
    if (!n) return ok_status();
    if (!n->is_string()) return type_error(key, "a string");
    out = n->value<std::string>().value();
    return ok_status();
  }
  // Arrays of numbers or strings. With `scalar_ok` a single value stands for a one-element array
  // (so that `--sweep fail_slow.factors=0.5,0.8` sweeps single factors).
  template <typename T>
  Status get_array(const char* key, std::vector<T>& out, bool scalar_ok = false) {
    const toml::node* n = find(key);
    if (!n) return ok_status();
    const toml::array* arr = n->as_array();
    if constexpr (std::is_floating_point_v<T>) {
      if (!arr && scalar_ok && n->is_number()) {
        out = {n->value<double>().value()};
        return ok_status();
      }
    }
    if (!arr) return type_error(key, "an array");
    std::vector<T> values;
    for (const toml::node& e : *arr) {
      std::optional<T> v = e.value<T>();
      if constexpr (std::is_same_v<T, std::string>) {
        if (!e.is_string()) v.reset();
      } else if constexpr (std::is_integral_v<T>) {
        if (!e.is_integer()) v.reset();
      } else {
        if (!e.is_number()) v.reset();
      }
      if (!v) return type_error(key, "an array of the same type of value");
      values.push_back(*v);
    }
    out = std::move(values);
    return ok_status();
  }

  bool has(const char* key) const { return table_ && table_->get(key) != nullptr; }

  // Any key of the section that no get() asked for.
  Status check_unknown() const {
    if (!table_) return ok_status();
    for (const auto& [k, v] : *table_) {
      if (!used_.count(std::string(k.str()))) {
        return invalid_argument("unknown key '" + name_ + "." + std::string(k.str()) +
                                "'; see docs/sim.md for the keys of [" + name_ + "]");
      }
    }
    return ok_status();
  }

 private:
  const toml::node* find(const char* key) {
    used_.insert(key);
    return table_ ? table_->get(key) : nullptr;
  }
  Status type_error(const char* key, const char* want) const {
    return invalid_argument("key '" + name_ + "." + key + "' must be " + want);
  }
  Status range_error(const char* key, const std::string& value, double lo, double hi) const {
    return invalid_argument("key '" + name_ + "." + key + "' = " + value +
                            " is out of range; use a value in [" + config_number(lo) + ", " +
                            config_number(hi) + "]");
  }

  const toml::table* table_;
  std::string name_;
  std::set<std::string> used_;
};

constexpr double kBig = 1e18;

// Settles recovery.control_plane to "curve" (with the curve loaded) or "ops-model".
Status resolve_control_plane(RecoveryConfig& r, const std::string& base_dir) {
  if (r.control_plane != "" && r.control_plane != "curve" && r.control_plane != "ops-model") {
    return invalid_argument("key 'recovery.control_plane' = \"" + r.control_plane +
                            "\" is not a model; use \"curve\" (the control_plane_sim curve) or "
                            "\"ops-model\" (store operations per member)");
  }
  if (r.control_plane_curve.empty()) {
    return invalid_argument(
        "key 'recovery.control_plane_curve' is empty; name the curve file, "
        "e.g. \"control_plane_curve.json\"");
  }
  if (std::filesystem::path(r.control_plane_curve).is_relative()) {
    r.control_plane_curve = (std::filesystem::path(base_dir) / r.control_plane_curve).string();
  }
  r.curve.reset();
  r.control_plane_note.clear();
  if (r.control_plane == "ops-model") return ok_status();
  Result<ControlPlaneCurve> curve = ControlPlaneCurve::load(r.control_plane_curve);
  if (curve.ok()) {
    r.control_plane = "curve";
    r.curve = std::make_shared<const ControlPlaneCurve>(std::move(*curve));
    return ok_status();
  }
  if (r.control_plane == "curve") {
    return curve.status().with_context("key 'recovery.control_plane' = \"curve\"");
  }
  r.control_plane = "ops-model";
  r.control_plane_note = curve.status().message();
  return ok_status();
}

Status apply_override(toml::table& root, const std::string& text) {
  const auto eq = text.find('=');
  const auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 ||
      eq == dot + 1) {
    return invalid_argument("override '" + text +
                            "' must look like section.key=value, e.g. "
                            "failures.rate_multiplier=2");
  }
  const std::string section = text.substr(0, dot);
  const std::string key = text.substr(dot + 1, eq - dot - 1);
  const std::string value = text.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    // Bare words (policy names, paths) are taken as strings.
    parsed = toml::table{{"v", value}};
  }
  toml::table* sec = root[section].as_table();
  if (!sec) {
    root.insert_or_assign(section, toml::table{});
    sec = root[section].as_table();
  }
  sec->insert_or_assign(key, *parsed.get("v"));
  return ok_status();
}

Status parse_sections(const toml::table& root, SimConfig& c, const std::string& base_dir) {
  static const std::set<std::string> kSections = {"model",    "parallel",  "system",   "power",
                                                  "failures", "fail_slow", "recovery", "sim"};
  for (const auto& [k, v] : root) {
    if (!kSections.count(std::string(k.str()))) {
      return invalid_argument("unknown section or key '" + std::string(k.str()) +
                              "'; sections are [model] [parallel] [system] [power] [failures] "
                              "[fail_slow] [recovery] [sim]");
    }
    if (!v.is_table()) {
      return invalid_argument("'" + std::string(k.str()) + "' must be a [section]");
    }
  }
  auto table = [&](const char* name) { return root[name].as_table(); };

  Section m(table("model"), "model");
  NTP_RETURN_IF_ERROR(m.get("layers", c.model.layers, 1, 1e6));
  NTP_RETURN_IF_ERROR(m.get("hidden", c.model.hidden, 1, 1e7));
  NTP_RETURN_IF_ERROR(m.get("heads", c.model.heads, 1, 1e6));
  NTP_RETURN_IF_ERROR(m.get("ffn_multiplier", c.model.ffn_multiplier, 1e-3, 1e3));
  NTP_RETURN_IF_ERROR(m.get("sequence", c.model.sequence, 1, 1e9));
  NTP_RETURN_IF_ERROR(m.get("global_batch_tokens", c.model.global_batch_tokens, 1, kBig));
  NTP_RETURN_IF_ERROR(m.get("ffn_unit_columns", c.model.ffn_unit_columns, 1, 1e7));
  NTP_RETURN_IF_ERROR(
      m.get("activation_bytes_per_elem", c.model.activation_bytes_per_elem, 0, 1e4));
  NTP_RETURN_IF_ERROR(m.get("vocab", c.model.vocab, 0, 1e9));
  NTP_RETURN_IF_ERROR(m.get("experts", c.model.experts, 0, 1e6));
  NTP_RETURN_IF_ERROR(m.get("top_k", c.model.top_k, 1, 1e6));
  NTP_RETURN_IF_ERROR(m.get("expert_ffn_multiplier", c.model.expert_ffn_multiplier, 0, 1e3));
  std::string split = c.model.experts_whole ? "whole" : "columns";
  NTP_RETURN_IF_ERROR(m.get("expert_split", split));
  if (split != "whole" && split != "columns") {
    return invalid_argument("model.expert_split = '" + split +
                            "' is unknown; use \"whole\" (expert parallelism) or \"columns\" "
                            "(expert tensor parallelism)");
  }
  c.model.experts_whole = split == "whole";
  NTP_RETURN_IF_ERROR(m.check_unknown());

  Section p(table("parallel"), "parallel");
  NTP_RETURN_IF_ERROR(p.get("tp", c.parallel.tp, 1, 1e5));
  NTP_RETURN_IF_ERROR(p.get("pp", c.parallel.pp, 1, 1e5));
  NTP_RETURN_IF_ERROR(p.get("domain_size", c.parallel.domain_size, 1, 1e6));
  NTP_RETURN_IF_ERROR(p.get("min_degree", c.parallel.min_degree, 1, 1e5));
  NTP_RETURN_IF_ERROR(p.get("degree_multiple", c.parallel.degree_multiple, 1, 1e5));
  NTP_RETURN_IF_ERROR(p.get("microbatch_sequences", c.parallel.microbatch_sequences, 1, 1e6));
  NTP_RETURN_IF_ERROR(p.get("distributed_optimizer", c.parallel.distributed_optimizer));
  NTP_RETURN_IF_ERROR(p.get("tp_overlap", c.parallel.tp_overlap, 0, 1));
  NTP_RETURN_IF_ERROR(p.get("dp_overlap", c.parallel.dp_overlap, 0, 1));
  NTP_RETURN_IF_ERROR(p.check_unknown());

  Section s(table("system"), "system");
  NTP_RETURN_IF_ERROR(s.get("gpus", c.system.gpus, 1, 1e9));
  NTP_RETURN_IF_ERROR(s.get("peak_tflops", c.system.peak_tflops, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(s.get("efficiency", c.system.efficiency, 1e-6, 1));
  NTP_RETURN_IF_ERROR(s.get("hbm_gb", c.system.hbm_gb, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(s.get("scale_up_gbytes_per_s", c.system.scale_up_gbytes_per_s, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(s.get("scale_out_gbits_per_s", c.system.scale_out_gbits_per_s, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(s.get("tdp_watts", c.system.tdp_watts, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(s.get("idle_power_fraction", c.system.idle_power_fraction, 0, 1));
  NTP_RETURN_IF_ERROR(s.check_unknown());

  Section w(table("power"), "power");
  NTP_RETURN_IF_ERROR(w.get("headroom", c.power.headroom, 0, 10));
  NTP_RETURN_IF_ERROR(w.check_unknown());

  Section f(table("failures"), "failures");
  NTP_RETURN_IF_ERROR(f.get("rate_per_gpu_day", c.failures.rate_per_gpu_day, 0, 1e3));
  NTP_RETURN_IF_ERROR(f.get("rate_multiplier", c.failures.rate_multiplier, 0, 1e6));
  NTP_RETURN_IF_ERROR(f.get("hardware_fraction", c.failures.hardware_fraction, 0, 1));
  NTP_RETURN_IF_ERROR(f.get("hardware_repair_hours", c.failures.hardware_repair_hours, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(
      f.get("software_recovery_hours", c.failures.software_recovery_hours, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(f.get_array("blast_sizes", c.failures.blast_sizes));
  NTP_RETURN_IF_ERROR(f.get_array("blast_weights", c.failures.blast_weights));
  NTP_RETURN_IF_ERROR(f.get("warm_start", c.failures.warm_start));
  NTP_RETURN_IF_ERROR(f.get("trace", c.failures.trace));
  NTP_RETURN_IF_ERROR(f.check_unknown());
  if (!c.failures.trace.empty() && std::filesystem::path(c.failures.trace).is_relative()) {
    c.failures.trace = (std::filesystem::path(base_dir) / c.failures.trace).string();
  }

  Section fs(table("fail_slow"), "fail_slow");
  FailSlowConfig& slow = c.fail_slow;
  NTP_RETURN_IF_ERROR(fs.get("enabled", slow.enabled));
  NTP_RETURN_IF_ERROR(fs.get("rate_per_gpu_day", slow.rate_per_gpu_day, 0, 1e3));
  NTP_RETURN_IF_ERROR(fs.get("rate_multiplier", slow.rate_multiplier, 0, 1e6));
  NTP_RETURN_IF_ERROR(fs.get_array("factors", slow.factors, /*scalar_ok=*/true));
  if (fs.has("factors")) slow.factor_weights.clear();  // equal weights unless given too
  NTP_RETURN_IF_ERROR(fs.get_array("factor_weights", slow.factor_weights, /*scalar_ok=*/true));
  NTP_RETURN_IF_ERROR(fs.get("mean_hours", slow.mean_hours, 1e-6, kBig));
  NTP_RETURN_IF_ERROR(fs.get("drop_below", slow.drop_below, 0, 1));
  NTP_RETURN_IF_ERROR(fs.check_unknown());

  Section r(table("recovery"), "recovery");
  NTP_RETURN_IF_ERROR(r.get("restart_minutes", c.recovery.restart_minutes, 0, kBig));
  NTP_RETURN_IF_ERROR(
      r.get("checkpoint_write_seconds", c.recovery.checkpoint_write_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("replace_hours", c.recovery.replace_hours, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("live_recovery_seconds", c.recovery.live_recovery_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("detect_kill_seconds", c.recovery.detect_kill_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("detect_hang_seconds", c.recovery.detect_hang_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("hang_fraction", c.recovery.hang_fraction, 0, 1));
  NTP_RETURN_IF_ERROR(
      r.get("heartbeat_stale_seconds", c.recovery.heartbeat_stale_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("agree_round_trips", c.recovery.agree_round_trips, 0, 1e6));
  NTP_RETURN_IF_ERROR(r.get("store_rtt_seconds", c.recovery.store_rtt_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("store_ops_per_s", c.recovery.store_ops_per_s, 1, kBig));
  NTP_RETURN_IF_ERROR(
      r.get("notice_store_ops_per_member", c.recovery.notice_store_ops_per_member, 0, 1e9));
  NTP_RETURN_IF_ERROR(
      r.get("agree_store_ops_per_member", c.recovery.agree_store_ops_per_member, 0, 1e9));
  for (const char* gone : {"base_communicators", "communicator_connect_seconds"}) {
    if (r.has(gone)) {
      return invalid_argument(std::string("recovery.") + gone +
                              " is gone: a re-formation forms its groups once, over shared "
                              "links, not once per communicator; set recovery.formation_seconds "
                              "(and recovery.formation_store_ops_per_member) instead");
    }
  }
  NTP_RETURN_IF_ERROR(r.get("formation_seconds", c.recovery.formation_seconds, 0, kBig));
  NTP_RETURN_IF_ERROR(
      r.get("formation_store_ops_per_member", c.recovery.formation_store_ops_per_member, 0, 1e9));
  NTP_RETURN_IF_ERROR(r.get("reshard_gbytes_per_s", c.recovery.reshard_gbytes_per_s, 0, kBig));
  NTP_RETURN_IF_ERROR(r.get("state_bytes_per_param", c.recovery.state_bytes_per_param, 1, 1e3));
  NTP_RETURN_IF_ERROR(r.get("control_plane", c.recovery.control_plane));
  NTP_RETURN_IF_ERROR(r.get("control_plane_curve", c.recovery.control_plane_curve));
  NTP_RETURN_IF_ERROR(r.check_unknown());
  NTP_RETURN_IF_ERROR(resolve_control_plane(c.recovery, base_dir));

  Section u(table("sim"), "sim");
  NTP_RETURN_IF_ERROR(u.get("days", c.run.days, 1e-6, 1e5));
  NTP_RETURN_IF_ERROR(u.get("trials", c.run.trials, 1, 1e7));
  NTP_RETURN_IF_ERROR(u.get("seed", c.run.seed));
  NTP_RETURN_IF_ERROR(u.get("sample_hours", c.run.sample_hours, 1e-3, 1e6));
  NTP_RETURN_IF_ERROR(u.get("fixed_batch", c.run.fixed_batch));
  NTP_RETURN_IF_ERROR(u.get("target_batch_fraction", c.run.target_batch_fraction, 0, 1));
  NTP_RETURN_IF_ERROR(u.get("spares", c.run.spares, 0, 1e7));
  std::vector<std::string> names;
  NTP_RETURN_IF_ERROR(u.get_array("policies", names));
  NTP_RETURN_IF_ERROR(u.check_unknown());
  if (!names.empty()) {
    c.run.policies.clear();
    for (const std::string& n : names) {
      Result<PolicySpec> spec = parse_policy(n);
      if (!spec.ok()) return spec.status().with_context("key 'sim.policies'");
      c.run.policies.push_back(*spec);
    }
  }
  return ok_status();
}

}  // namespace

std::vector<PolicySpec> default_policies() {
  return {{PolicyKind::kDpDrop, 0}, {PolicyKind::kSpares, 16}, {PolicyKind::kCkptRestart, 0},
          {PolicyKind::kNtp, 0},    {PolicyKind::kNtpPw, 0},   {PolicyKind::kNtpLive, 0}};
}

Result<SimConfig> parse_config(const std::string& toml_text,
                               const std::vector<std::string>& overrides,
                               const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << "config is not valid TOML at line " << e.source().begin.line << ": " << e.description();
    return invalid_argument(os.str());
  }
  for (const std::string& o : overrides) NTP_RETURN_IF_ERROR(apply_override(root, o));
  SimConfig config;
  config.run.policies = default_policies();
  NTP_RETURN_IF_ERROR(parse_sections(root, config, base_dir));
  NTP_RETURN_IF_ERROR(validate(config));
  return config;
}

Result<SimConfig> load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return invalid_argument("cannot read config file '" + path + "'; check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  Result<SimConfig> c = parse_config(ss.str(), overrides, dir.empty() ? "." : dir);
  if (!c.ok()) return c.status().with_context(path);
  return c;
}

std::string config_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace ntp::sim
