// One member's failure watch at one level of the simulator, as the runtime's FailureWatch and
// Heartbeat run it (elastic/failure_watch.h): a beat every liveness period, the notice loop's
// blocking reads of the event streams and the liveness loop's looks at the ring neighbours, each
// machine (elastic/watch_machine.h) on an IoSlot of its own, over one store link. A flat member
// has one; a domain leader of the hierarchy has a second on the global store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/non_copyable.h"
#include "elastic/progress.h"
#include "elastic/sim/sim_link.h"
#include "elastic/watch_machine.h"

namespace ntp::elastic::sim {

class SimWatch : NonCopyable {
 public:
  // `on_fire(reason)` runs once per armed epoch, when the watch takes it as failed; a neighbour
  // seen still has its failure posted after that. `live` false: the member is dead or hung.
  SimWatch(StoreLink link, std::string group, int me, std::chrono::milliseconds hang_detect,
           const Progress* progress, std::shared_ptr<bool> live,
           std::function<void(const std::string& reason)> on_fire);

  // Beats `Heartbeat::key(group, me)` every liveness period from `offset` on; `beater` names the
  // process in the value (a domain's id beaten by its leader of the moment).
  void start_beats(Duration offset, int beater);
  // Watches `members` (ids of this level) in `epoch`; `incarnations[id]` as the launcher names
  // them. A read blocked for the last epoch looks at this one at once.
  void arm(int epoch, const std::vector<int>& members,
           const std::vector<std::string>& incarnations);
  void disarm();
  bool armed() const { return armed_; }
  // A watcher recorded this member silent while it lived.
  bool fenced() const { return fenced_; }
  // Runs once, when this member first reads that a watcher recorded it silent (the runtime's
  // member then leaves the job).
  void on_fenced(std::function<void()> fn) { on_fenced_ = std::move(fn); }

 private:
  // Which arming a round looks at, and whether its loop has not looked at that arming before.
  struct RoundStart {
    std::uint64_t generation;
    bool new_epoch;
  };

  void beat(int beater);
  // Opens a round of one loop (notice or liveness), given that loop's running flag and the last
  // generation it looked at: nullopt, with the loop marked stopped, once the member is dead or the
  // watch disarmed; else the loop is marked running and records that it looks at this arming.
  std::optional<RoundStart> start_round(bool& running, std::uint64_t& looked);
  void notice_round();
  void liveness_round();
  void fire(std::uint64_t generation, const std::string& reason);

  StoreLink link_;
  std::chrono::milliseconds hang_detect_;
  const Progress* progress_;
  std::shared_ptr<bool> live_;
  std::function<void(const std::string&)> on_fire_;
  std::function<void()> on_fenced_;
  IoSlot notice_io_, live_io_;
  NoticeMachine notices_;
  LivenessMachine liveness_;
  WatchedEpoch epoch_;
  std::int64_t beats_ = 0;
  bool armed_ = false, fired_ = false, fenced_ = false;
  bool notice_running_ = false, liveness_running_ = false;
  std::uint64_t generation_ = 0, notice_looked_ = 0, liveness_looked_ = 0;
};

}  // namespace ntp::elastic::sim
