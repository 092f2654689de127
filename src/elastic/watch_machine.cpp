#include "elastic/watch_machine.h"

#include <algorithm>

#include "comm/exit_notice.h"
#include "comm/survivors.h"
#include "elastic/agreement.h"

namespace ntp::elastic {

std::string still_reason(int id, const std::string& why) {
  return "rank " + std::to_string(id) + " made no progress: " + why;
}

std::vector<int> ring_neighbours(const std::vector<int>& members, int me) {
  const auto n = static_cast<long>(members.size());
  const auto it = std::find(members.begin(), members.end(), me);
  if (n < 2 || it == members.end()) return {};
  const long i = it - members.begin();
  std::vector<int> out{members[static_cast<size_t>((i + 1) % n)]};
  if (n > 2) out.push_back(members[static_cast<size_t>((i + n - 1) % n)]);
  return out;
}

Task<std::string> NoticeMachine::round(const WatchedEpoch& e, bool new_epoch,
                                       std::chrono::milliseconds retry) {
  if (cursors_.size() != 2 || cursors_[1].stream != job_events(e.group)) {
    cursors_ = {{comm::kLaunchEvents, ""}, {job_events(e.group), ""}};  // from their start
    failed_epochs_.clear();
    join_notices_ = 0;
  }
  if (new_epoch) {  // what arrived before the epoch was armed counts too
    std::string reason = known_notice(e);
    if (!reason.empty()) co_return reason;
  }
  io::Op read_events = io::ReadStreams{cursors_, kNoticeBlock};
  io::Reply read = co_await io_.perform(std::move(read_events));
  if (!read.status.ok()) {
    io::Op back_off = io::Sleep{retry};
    const io::Reply slept = co_await io_.perform(std::move(back_off));  // look again shortly
    (void)slept;
    co_return std::string();
  }
  cursors_ = std::move(read.cursors);
  for (const comm::StreamEvent& event : read.events) remember(event);
  co_return known_notice(e);
}

void NoticeMachine::remember(const comm::StreamEvent& event) {
  if (event.stream == 0) {
    if (std::optional<comm::ExitEvent> exit = comm::parse_exit_event(event.value)) {
      exited_[exit->rank].insert(exit->who);
    }
  } else if (std::optional<int> epoch = parse_failure_event(event.value)) {
    failed_epochs_.insert(*epoch);
  } else if (is_join_event(event.value)) {
    ++join_notices_;
  }
}

std::string NoticeMachine::known_notice(const WatchedEpoch& e) const {
  if (failed_epochs_.count(e.epoch) > 0) {
    return "a member's step failed (epoch " + std::to_string(e.epoch) + ")";
  }
  for (int id : e.members) {
    const auto it = exited_.find(id);
    if (id != e.me && it != exited_.end() &&
        it->second.count(e.incarnations[static_cast<size_t>(id)]) > 0) {
      return "the launcher reported rank " + std::to_string(id) + " gone";
    }
  }
  return "";
}

Task<LivenessMachine::Look> LivenessMachine::round(const WatchedEpoch& e, bool new_epoch) {
  if (new_epoch) stillness_.clear();  // every neighbour's stillness afresh
  Look look;
  const std::vector<int> neighbours =
      hang_detect_.count() > 0 ? ring_neighbours(e.members, e.me) : std::vector<int>();
  std::vector<std::string> keys;
  for (int id : neighbours) keys.push_back(comm::Heartbeat::key(e.group, id));
  if (own_progress_ != nullptr) keys.push_back(silent_key(e.group, e.me));
  if (keys.empty()) co_return look;
  const Time asked = io_.now();
  io::Op ask = io::GetMany{std::move(keys)};
  io::Reply values = co_await io_.perform(std::move(ask));
  const Time now = io_.now();
  // A look that took longer than a beat's period tells nothing of the neighbours: the store is
  // saturated, their beats may be queued behind it, and a slow store must not convict anyone.
  const bool fresh = values.status.ok() && now - asked <= poll_;
  if (own_progress_ != nullptr && values.status.ok() && values.values.back()) {
    look.fenced = parse_progress(*values.values.back()).moving == own_progress_->moving();
  }
  for (size_t i = 0; i < neighbours.size(); ++i) {
    const int id = neighbours[i];
    // A store that did not answer (in time) tells nothing of the neighbour: its stillness starts
    // over.
    std::optional<std::string> value;
    if (fresh) value = values.values[i] ? *values.values[i] : std::string(kAbsentBeat);
    if (stillness_.still(id, value, now)) {
      look.still = id;
      look.why = stillness_.verdict(id);
      io::Op record = io::set(silent_key(e.group, id), stillness_.last_value(id));
      const io::Reply recorded = co_await io_.perform(std::move(record));
      (void)recorded;  // best effort
      co_return look;
    }
  }
  co_return look;
}

}  // namespace ntp::elastic
