#include "elastic/sim/sim_watch.h"

#include <utility>

#include "comm/survivors.h"
#include "elastic/agreement_machine.h"

namespace ntp::elastic::sim {

SimWatch::SimWatch(StoreLink link, std::string group, int me, std::chrono::milliseconds hang_detect,
                   const Progress* progress, std::shared_ptr<bool> live,
                   std::function<void(const std::string&)> on_fire)
    : link_(link),
      hang_detect_(hang_detect),
      progress_(progress),
      live_(std::move(live)),
      on_fire_(std::move(on_fire)),
      notices_(notice_io_),
      liveness_(live_io_, liveness_period(hang_detect), hang_detect, progress) {
  epoch_.group = std::move(group);
  epoch_.me = me;
}

void SimWatch::start_beats(Duration offset, int beater) {
  link_.after(offset, [this, beater] { beat(beater); });
}

void SimWatch::beat(int beater) {
  if (!*live_) return;
  link_.send(io::set(comm::Heartbeat::key(epoch_.group, epoch_.me),
                     "s" + std::to_string(beater) + "." + std::to_string(beats_++) + "|" +
                         progress_->token()),
             nullptr);
  link_.after(liveness_period(hang_detect_), [this, beater] { beat(beater); });
}

void SimWatch::arm(int epoch, const std::vector<int>& members,
                   const std::vector<std::string>& incarnations) {
  epoch_.epoch = epoch;
  epoch_.members = members;
  epoch_.incarnations = incarnations;
  armed_ = true;
  fired_ = false;
  ++generation_;
  link_.store->wake(&notice_io_);  // a read blocked for the last epoch looks at this one now
  if (!notice_running_) notice_round();
  if (!liveness_running_) liveness_round();
}

void SimWatch::disarm() {
  armed_ = false;
  ++generation_;
}

void SimWatch::fire(std::uint64_t generation, const std::string& reason) {
  if (reason.empty() || generation != generation_ || !armed_ || fired_) return;
  fired_ = true;
  on_fire_(reason);
}

std::optional<SimWatch::RoundStart> SimWatch::start_round(bool& running, std::uint64_t& looked) {
  running = *live_ && armed_;
  if (!running) return std::nullopt;
  const RoundStart start{generation_, generation_ != looked};
  looked = generation_;
  return start;
}

void SimWatch::notice_round() {
  const std::optional<RoundStart> start = start_round(notice_running_, notice_looked_);
  if (!start) return;
  const std::uint64_t generation = start->generation;
  drive(link_, notice_io_, notices_.round(epoch_, start->new_epoch, liveness_period(hang_detect_)),
        live_, [this, generation](std::string reason) {
          fire(generation, reason);
          notice_round();
        });
}

void SimWatch::liveness_round() {
  const std::optional<RoundStart> start = start_round(liveness_running_, liveness_looked_);
  if (!start) return;
  const std::uint64_t generation = start->generation;
  const int epoch = epoch_.epoch;
  drive(link_, live_io_, liveness_.round(epoch_, start->new_epoch), live_,
        [this, generation, epoch](LivenessMachine::Look look) {
          if (look.fenced && !fenced_) {
            fenced_ = true;
            if (on_fenced_) on_fenced_();
          }
          auto next = [this] {
            link_.after(liveness_period(hang_detect_), [this] { liveness_round(); });
          };
          if (!look.still) return next();
          fire(generation, still_reason(*look.still, look.why));
          drive(link_, live_io_,
                post_failure(live_io_, epoch_.group, epoch, FailurePoster::kWitness), live_,
                [next](Status) { next(); });
        });
}

}  // namespace ntp::elastic::sim
