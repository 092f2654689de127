#include "launch/fault_injector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ntp::launch {
namespace {

// Stream keys of the chaos draws added after kills and hangs (which keep the node's stream).
constexpr std::uint64_t kSlowStream = 0x510E;
constexpr std::uint64_t kStallStream = 0x57A1;
constexpr double kChaosStallShare = 0.25;
constexpr long long kChaosStallFirstStep = 2;
constexpr long long kChaosStallSteps = 18;  // steps [2, 20)
constexpr double kChaosFactors[] = {0.25, 0.5, 0.75};

const Slot* find_slot(const std::vector<Slot>& slots, int rank) {
  for (const Slot& slot : slots) {
    if (slot.id.rank == rank) return &slot;
  }
  return nullptr;
}

long long max_live_step(const std::vector<Slot>& slots) {
  long long best = -1;
  for (const Slot& slot : slots) {
    if (slot.state == SlotState::kRunning) best = std::max(best, slot.step);
  }
  return best;
}

std::vector<const Slot*> running(const std::vector<Slot>& slots) {
  std::vector<const Slot*> live;
  for (const Slot& slot : slots) {
    if (slot.state == SlotState::kRunning) live.push_back(&slot);
  }
  return live;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

FaultInjector::FaultInjector(std::vector<FaultSpec> faults, std::optional<ChaosSpec> chaos,
                             int node_rank, int local_slots)
    : chaos_(chaos),
      local_slots_(local_slots),
      kill_hang_(chaos ? Rng(chaos->seed).fork(static_cast<std::uint64_t>(node_rank)) : Rng(0)),
      slow_(kill_hang_.fork(kSlowStream)),
      stall_(kill_hang_.fork(kStallStream)) {
  for (const FaultSpec& fault : faults) {
    if (fault.kind == FaultKind::kPoint) {  // carried out by the workers themselves
      points_ += (points_.empty() ? "" : ",") + fault.point;
    } else {
      pending_.push_back(Pending{fault, false});
    }
  }
}

std::optional<long long> FaultInjector::stall_step(int rank) {
  if (chaos_ && !chaos_stall_armed_ && local_slots_ > 1 && stall_.uniform() < kChaosStallShare) {
    FaultSpec stall;
    stall.kind = FaultKind::kStall;
    stall.rank = rank;
    stall.step = kChaosStallFirstStep + static_cast<long long>(stall_.below(kChaosStallSteps));
    pending_.push_back(Pending{stall, true});
    chaos_stall_armed_ = true;
  }
  for (const Pending& p : pending_) {
    if (p.fault.kind == FaultKind::kStall && p.fault.rank == rank) return *p.fault.step;
  }
  return std::nullopt;
}

std::optional<std::string> FaultInjector::throttle_env(int rank) const {
  for (const Pending& p : pending_) {
    if (p.fault.kind != FaultKind::kThrottle || p.fault.rank != rank) continue;
    char factor[32];
    std::snprintf(factor, sizeof(factor), "%.17g", p.fault.factor);
    std::string value = std::string(factor) + "," + std::to_string(*p.fault.step);
    if (p.fault.until) value += "," + std::to_string(*p.fault.until);
    return value;
  }
  return std::nullopt;
}

bool FaultInjector::needs_steps() const {
  for (const Pending& p : pending_) {
    if (p.fault.step) return true;
  }
  for (const Slowdown& s : slowdowns_) {
    if (s.until_step) return true;
  }
  return false;
}

bool FaultInjector::armed_for(int rank) const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [rank](const Pending& p) { return p.chaos && p.fault.rank == rank; });
}

void FaultInjector::forget_slowdown(int rank) {
  std::erase_if(slowdowns_, [rank](const Slowdown& s) { return s.rank == rank; });
}

void FaultInjector::begin_slowdown(const FaultSpec& fault, std::optional<double> until_seconds) {
  forget_slowdown(fault.rank);  // a new slowdown replaces the one in progress
  slowdowns_.push_back(Slowdown{fault.rank, fault.until, until_seconds});
}

std::vector<Injection> FaultInjector::due(const std::vector<Slot>& slots, double elapsed,
                                          double dt) {
  std::vector<Injection> out;
  due_slowdown_ends(slots, elapsed, &out);
  due_pending(slots, elapsed, &out);
  if (chaos_) due_chaos(slots, elapsed, dt, &out);
  return out;
}

void FaultInjector::due_pending(const std::vector<Slot>& slots, double elapsed,
                                std::vector<Injection>* out) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const FaultSpec& fault = it->fault;
    const Slot* slot = find_slot(slots, fault.rank);
    bool due = false;
    std::string why;
    if (fault.seconds) {
      due = elapsed >= *fault.seconds;
      why = "at " + std::to_string(*fault.seconds) + " s";
    } else if (fault.kind == FaultKind::kRepair) {
      due = max_live_step(slots) >= *fault.step;  // the job's progress: the slot is down
      why = "at step " + std::to_string(*fault.step);
    } else {
      due = slot->state != SlotState::kDone && slot->step >= *fault.step;
      why = std::string(it->chaos ? "chaos, " : "") + "at step " + std::to_string(*fault.step);
    }
    if (due && fault.kind == FaultKind::kRepair && slot->state == SlotState::kRunning) {
      due = false;  // wait until the slot is dead, hung or stalled
    }
    if (!due) {
      ++it;
      continue;
    }
    if (fault.kind == FaultKind::kSlow && slot->state == SlotState::kRunning) {
      begin_slowdown(fault, std::nullopt);
    }
    if (it->chaos) chaos_stall_armed_ = false;
    out->push_back(Injection{fault, why, false});
    it = pending_.erase(it);
  }
}

void FaultInjector::due_slowdown_ends(const std::vector<Slot>& slots, double elapsed,
                                      std::vector<Injection>* out) {
  for (auto it = slowdowns_.begin(); it != slowdowns_.end();) {
    const Slot* slot = find_slot(slots, it->rank);
    const bool at_step = it->until_step && slot->step >= *it->until_step;
    const bool at_time = it->until_seconds && elapsed >= *it->until_seconds;
    if (!at_step && !at_time) {
      ++it;
      continue;
    }
    FaultSpec end;
    end.kind = FaultKind::kSlow;
    end.rank = it->rank;
    out->push_back(Injection{end,
                             at_step ? "at step " + std::to_string(*it->until_step)
                                     : "after " + seconds_text(elapsed) + " since launch",
                             true});
    it = slowdowns_.erase(it);
  }
}

void FaultInjector::due_chaos(const std::vector<Slot>& slots, double elapsed, double dt,
                              std::vector<Injection>* out) {
  if (dt <= 0) return;
  const double p = 1.0 - std::exp(-chaos_->rate_per_second * dt);
  const std::string why = "chaos at " + std::to_string(elapsed) + " s";
  // Kills and hangs: the draws of the launcher before slowdowns and stalls existed.
  if (kill_hang_.uniform() < p) {
    const std::vector<const Slot*> live = running(slots);
    // Never the last live worker; a worker armed with a chaos stall will not stay live either.
    const auto armed = static_cast<std::size_t>(std::count_if(
        live.begin(), live.end(), [this](const Slot* s) { return armed_for(s->id.rank); }));
    if (live.size() - armed >= 2) {
      FaultSpec fault;
      fault.rank = live[kill_hang_.below(live.size())]->id.rank;
      fault.kind = kill_hang_.below(2) == 0 ? FaultKind::kKill : FaultKind::kHang;
      out->push_back(Injection{fault, why, false});
    }
  }
  if (slow_.uniform() < p) {
    const std::vector<const Slot*> live = running(slots);
    if (!live.empty()) {
      FaultSpec fault;
      fault.kind = FaultKind::kSlow;
      fault.rank = live[slow_.below(live.size())]->id.rank;
      fault.factor = kChaosFactors[slow_.below(std::size(kChaosFactors))];
      const double duration = 0.5 + 1.5 * slow_.uniform();
      begin_slowdown(fault, elapsed + duration);
      out->push_back(Injection{fault, why + ", for " + seconds_text(duration), false});
    }
  }
}

}  // namespace ntp::launch
