#include "train/fault_point.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/wall_clock.h"

namespace ntp::train {
namespace {

std::atomic<int64_t> current_step{-1};

constexpr int64_t kAnyStep = -2;

enum class Action { kKill, kStop, kFail, kKillTogether };

struct Target {
  std::string phase;
  std::string role;  // empty: this worker's rank
  int64_t step = -1;
  Action action = Action::kKill;
  std::vector<std::string> together;  // kKillTogether: every rank of its group (this one too)
  // Set by the one firing of a once-only action (stop, fail): a fired target matches no more.
  std::unique_ptr<std::atomic<bool>> fired = std::make_unique<std::atomic<bool>>(false);
};

// The action an item's fourth field names (none: kill); nullopt for an unknown one.
std::optional<Action> parse_action(const std::vector<std::string>& parts) {
  if (parts.size() < 4) return Action::kKill;
  if (parts[3] == "fail") return Action::kFail;
  if (parts[3] == "stop") return Action::kStop;
  if (parts[3] == "together") return Action::kKillTogether;
  return std::nullopt;
}

// The ranks of the `together` items of `text` with this phase and step.
std::vector<std::string> together_group(const char* text, const std::string& phase,
                                        const std::string& step) {
  std::vector<std::string> ranks;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::vector<std::string> parts;
    std::stringstream fields(item);
    for (std::string f; std::getline(fields, f, ':');) parts.push_back(f);
    if (parts.size() == 4 && parts[3] == "together" && parts[0] == phase && parts[1] == step) {
      ranks.push_back(parts[2]);
    }
  }
  return ranks;
}

// kKillTogether: this rank's marker in NTP_FAULT_DIR, then a wait (at most 30 s) for the markers
// of the rest of its group, so that all of them die before any survivor can see one death.
void await_group(const Target& t, const char* rank) {
  const char* dir = std::getenv("NTP_FAULT_DIR");
  if (dir == nullptr) return;  // no rendezvous possible: each dies on arrival
  auto marker = [&](const std::string& r) {
    return std::string(dir) + "/" + t.phase + "." + std::to_string(t.step) + "." + r;
  };
  if (std::FILE* f = std::fopen(marker(rank).c_str(), "w")) std::fclose(f);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (const std::string& r : t.together) {
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::FILE* f = std::fopen(marker(r).c_str(), "r")) {
        std::fclose(f);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// This worker's targets, parsed once from NTP_FAULT_POINT.
const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    std::vector<Target> out;
    const char* text = std::getenv("NTP_FAULT_POINT");
    const char* rank = std::getenv("NTP_RANK");
    if (text == nullptr || rank == nullptr) return out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {  // PHASE:STEP:RANK[:ACTION]
      std::vector<std::string> parts;
      std::stringstream fields(item);
      for (std::string f; std::getline(fields, f, ':');) parts.push_back(f);
      if (parts.size() < 3) continue;
      const std::optional<Action> action = parse_action(parts);
      if (!action) {  // a typo must not turn into a kill
        std::fprintf(stderr,
                     "ntp fault point: unknown action '%s' in '%s' (fail or stop); ignored\n",
                     parts[3].c_str(), item.c_str());
        continue;
      }
      const bool is_rank = parts[2].find_first_not_of("0123456789") == std::string::npos;
      if (is_rank && parts[2] != rank) continue;
      Target t;
      t.phase = parts[0];
      if (!is_rank) t.role = parts[2];
      t.step = parts[1] == "*" ? kAnyStep : std::strtoll(parts[1].c_str(), nullptr, 10);
      t.action = *action;
      if (t.action == Action::kKillTogether) t.together = together_group(text, parts[0], parts[1]);
      out.push_back(std::move(t));
    }
    return out;
  }();
  return all;
}

// The first target not fired yet for `phase` at the current step and this rank (role null) or
// `role`, whose action is kFail (`fail`) or one of the others.
const Target* matching(const char* phase, bool fail, const char* role) {
  const int64_t step = current_step.load(std::memory_order_relaxed);
  for (const Target& t : targets()) {
    if (t.step != step && t.step != kAnyStep) continue;
    if ((t.action == Action::kFail) != fail || t.phase != phase) continue;
    if (t.fired->load()) continue;
    if (t.role.empty() ? role == nullptr : role != nullptr && t.role == role) return &t;
  }
  return nullptr;
}

}  // namespace

void set_fault_step(int64_t step) { current_step.store(step, std::memory_order_relaxed); }

void fault_point(const char* phase, const char* role) {
  if (targets().empty()) return;
  const Target* t = matching(phase, false, role);
  if (t == nullptr) return;
  const bool stop = t->action == Action::kStop;
  if (stop && t->fired->exchange(true)) return;  // another thread took it
  if (t->action == Action::kKillTogether) await_group(*t, std::getenv("NTP_RANK"));
  // The moment of the fault, on the same clock as the metrics' "time" fields (benchmarks put
  // detection and recovery on one timeline with it).
  std::fprintf(stderr, "ntp fault point: %s in %s of step %lld%s%s at %.6f\n",
               stop ? "SIGSTOP" : "SIGKILL", phase, static_cast<long long>(current_step.load()),
               role ? " as the " : "", role ? role : "", unix_seconds());
  std::fflush(stderr);
  std::raise(stop ? SIGSTOP : SIGKILL);  // SIGSTOP: returns once the process is continued
}

bool fault_point_fails(const char* phase) {
  if (targets().empty()) return false;
  const Target* t = matching(phase, true, nullptr);
  if (t == nullptr || t->fired->exchange(true)) return false;
  std::fprintf(stderr, "ntp fault point: failure in %s of step %lld at %.6f\n", phase,
               static_cast<long long>(current_step.load()), unix_seconds());
  std::fflush(stderr);
  // The others finish what they were doing with this worker first (their all-reduce of the step
  // completes and they apply it): the failure splits them deterministically.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return true;
}

}  // namespace ntp::train
