#include "elastic/agreement_machine.h"

#include <algorithm>
#include <cstdlib>

#include "comm/exit_notice.h"
#include "comm/survivors.h"
#include "elastic/agreement.h"

namespace ntp::elastic {
namespace {

// The decider's read of new announcements blocks at most this long; it looks at the candidates
// that have not announced (exit notice, silent record, heartbeat) every kGoneLook.
constexpr std::chrono::milliseconds kDeciderRead{20};
constexpr std::chrono::milliseconds kGoneLook{100};
// A waiter's read of the job's events blocks at most this long before it looks at the decider.
constexpr std::chrono::milliseconds kWaiterRead{250};
// Epochs one agreement may skip or give up on before it returns an error (each costs a fault or
// a dead decider; far more than the three nested faults the protocol is checked against).
constexpr int kMaxEpochs = 32;

}  // namespace

void AgreementMachine::tick(std::int64_t step) {
  if (p_.progress != nullptr) p_.progress->mark(Phase::kReform, step);
}

bool AgreementMachine::reported_gone(int id, const MemberList& last,
                                     const std::optional<std::string>& notice) {
  if (!notice || !p_.incarnation) return false;
  return *notice == p_.incarnation(id, last);
}

Task<Status> post_failure(IoSlot& io, std::string group, int epoch, FailurePoster poster) {
  // Every member of a failed epoch may post: a relayer's event goes out only when it is the first
  // (readers read the stream whole), a witness's always (agreement_machine.h).
  io::Op count = io::Add{fail_key(group, epoch), 1};
  io::Reply posters = co_await io.perform(std::move(count));
  if (!posters.status.ok()) co_return posters.status;
  if (posters.number > 1 && poster == FailurePoster::kRelay) co_return ok_status();
  io::Op event = io::Append{job_events(group), "fail " + std::to_string(epoch)};
  io::Reply appended = co_await io.perform(std::move(event));
  co_return appended.status;
}

Task<Status> AgreementMachine::report_failure(int epoch) {
  return post_failure(io_, p_.group, epoch);
}

Task<EpochView> AgreementMachine::view(int epoch) {
  EpochView v;
  io::Op look = io::get(fail_key(p_.group, epoch), epoch_key(p_.group, epoch, "list"));
  io::Reply keys = co_await io_.perform(std::move(look));
  if (!keys.status.ok()) co_return v;  // nothing known of the epoch
  v.failed = keys.values[0].has_value();
  if (const std::optional<std::string>& text = keys.values[1]) {
    if (const std::optional<int> by = decode_tombstone(*text)) {
      v.superseded_by = *by;
      co_return v;
    }
    Result<MemberList> list = decode_member_list(*text);
    v.has_me = list.ok() && list->has(p_.me);
    v.parks_me = list.ok() && list->parks(p_.me);
  }
  co_return v;
}

namespace {

// next_target's view of the epochs read so far: an epoch not read yet answers "nothing known"
// (where a walk stops) and is remembered as the one to read next.
struct ReadSoFar {
  const std::map<int, EpochView>* seen;
  std::optional<int>* missing;
  EpochView operator()(int epoch) const {
    const auto it = seen->find(epoch);
    if (it != seen->end()) return it->second;
    *missing = epoch;
    return EpochView{};
  }
};

}  // namespace

Task<int> AgreementMachine::walk(int received, int* newest) {
  // next_target stays the one pure rule: it is run over the views read so far, and an epoch it
  // asks for that is not read yet is read, and the walk taken again. Each epoch is read once, in
  // the walk's order.
  std::map<int, EpochView> seen;
  for (;;) {
    std::optional<int> missing;
    const int target = next_target(received, ReadSoFar{&seen, &missing}, newest);
    if (!missing) co_return target;
    const int epoch = *missing;
    seen[epoch] = co_await view(epoch);
  }
}

Task<bool> AgreementMachine::complete(const MemberList& list) {
  if (list.epoch == 0) co_return true;  // the first job: built with drawn (or loaded) state
  std::vector<std::string> keys;
  for (int id : list.members) keys.push_back(done_key(p_.group, list.epoch, id));
  io::Op ask = io::GetMany{std::move(keys)};
  io::Reply done = co_await io_.perform(std::move(ask));
  co_return done.status.ok() &&
      std::all_of(done.values.begin(), done.values.end(),
                  [](const std::optional<std::string>& d) { return d.has_value(); });
}

Task<bool> AgreementMachine::look_at_absent(int epoch, const MemberList& last,
                                            const std::vector<int>& expected,
                                            const std::map<int, Announcement>& announced,
                                            Stillness& stillness, std::set<int>& gone) {
  std::vector<int> absent;
  for (int id : expected) {
    if (announced.count(id) == 0) absent.push_back(id);
  }
  std::vector<std::string> keys{fail_key(p_.group, epoch)};
  for (int id : absent) {
    keys.insert(keys.end(), {comm::exit_notice_key(id), silent_key(p_.group, id),
                             comm::Heartbeat::key(p_.group, id)});
  }
  const Time asked = io_.now();
  io::Op ask = io::GetMany{std::move(keys)};
  io::Reply values = co_await io_.perform(std::move(ask));
  const Time now = io_.now();
  // As the failure watch: a look slower than a beat's period convicts no one of stillness.
  const bool fresh = values.status.ok() && now - asked <= liveness_period(p_.hang_detect);
  gone.clear();
  for (size_t i = 0; i < absent.size(); ++i) {
    const int id = absent[i];
    if (!values.status.ok()) {  // nothing known of anyone: their stillness starts over
      stillness.still(id, std::nullopt, now);
      continue;
    }
    const std::optional<std::string>& notice = values.values[1 + 3 * i];
    const std::optional<std::string>& silent = values.values[2 + 3 * i];
    const std::optional<std::string>& beat = values.values[3 + 3 * i];
    if (reported_gone(id, last, notice) || still_since_recorded(silent, beat) ||
        stillness.still(id, fresh ? beat : std::nullopt, now)) {
      gone.insert(id);
    }
  }
  co_return values.status.ok() && values.values[0].has_value();
}

Task<Result<std::optional<MemberList>>> AgreementMachine::decide_epoch(
    int epoch, const MemberList& last, const std::vector<int>& joiners,
    const std::function<std::string()>& encode_layout, const std::vector<int>& dropping) {
  std::vector<int> expected = last.members;
  expected.insert(expected.end(), joiners.begin(), joiners.end());
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  Stillness stillness(p_.hang_detect);
  std::set<int> gone;
  const Time start = io_.now();
  DecisionInput in;
  in.epoch = epoch;
  in.last = &last;
  in.expected = expected;
  in.domain_size = p_.domain_size;
  in.min_tp = p_.min_tp;
  in.dropped = dropping;
  in.gone = [&gone](int id) { return gone.count(id) > 0; };
  std::vector<comm::StreamCursor> alive{{epoch_key(p_.group, epoch, "alive"), ""}};
  Time next_look = start;
  for (;;) {
    if (io_.now() >= next_look) {
      next_look = io_.now() + kGoneLook;
      const bool failed =
          co_await look_at_absent(epoch, last, expected, in.announced, stillness, gone);
      if (failed) co_return std::optional<MemberList>();
    }
    in.window_over = io_.now() - start >= p_.window;
    in.last_complete = false;  // first: is every candidate accounted for?
    if (decide(in).has_value()) {
      in.last_complete = co_await complete(last);
      if (in.last_complete) in.last_layout = encode_layout();
      co_return decide(in);
    }
    tick(last.step);
    io::Op read = io::ReadStreams{alive, kDeciderRead};
    io::Reply news = co_await io_.perform(std::move(read));
    if (!news.status.ok()) {
      io::Op back_off = io::Sleep{kDeciderRead};
      const io::Reply slept = co_await io_.perform(std::move(back_off));  // the look retries
      (void)slept;  // (a named result: see elastic/task.h on GCC 12)
      continue;
    }
    alive = std::move(news.cursors);
    for (const comm::StreamEvent& event : news.events) {
      const auto space = event.value.find(' ');
      const int id = std::atoi(event.value.substr(0, space).c_str());
      if (space == std::string::npos || !std::binary_search(expected.begin(), expected.end(), id)) {
        continue;
      }
      if (Result<Announcement> parsed = decode_announcement(event.value.substr(space + 1));
          parsed.ok()) {
        in.announced[id] = *parsed;
      }
    }
  }
}

Task<Result<std::optional<MemberList>>> AgreementMachine::await_list(int epoch,
                                                                     const MemberList& last) {
  Stillness stillness(p_.hang_detect);
  const Time start = io_.now();
  std::vector<comm::StreamCursor> events{{job_events(p_.group), ""}};
  std::optional<int> decider;
  for (;;) {
    std::vector<std::string> keys{epoch_key(p_.group, epoch, "list"), fail_key(p_.group, epoch),
                                  epoch_key(p_.group, epoch, "decider")};
    if (decider) {
      keys.insert(keys.end(), {comm::exit_notice_key(*decider), silent_key(p_.group, *decider),
                               comm::Heartbeat::key(p_.group, *decider)});
    }
    const Time asked = io_.now();
    io::Op ask = io::GetMany{std::move(keys)};
    io::Reply seen = co_await io_.perform(std::move(ask));
    const bool fresh = io_.now() - asked <= liveness_period(p_.hang_detect);
    if (seen.status.ok()) {
      const std::vector<std::optional<std::string>>& v = seen.values;
      if (v[0] && decode_tombstone(*v[0])) co_return std::optional<MemberList>();  // collected
      if (v[0]) {
        NTP_CO_ASSIGN_OR_RETURN(MemberList list, decode_member_list(*v[0]));
        co_return std::optional<MemberList>(std::move(list));
      }
      if (v[1]) co_return std::optional<MemberList>();  // someone gave up on this epoch: so do we
      if (!decider && v[2]) decider = std::atoi(v[2]->c_str());  // looked at from the next round
      if (decider && v.size() == 6) {
        if (reported_gone(*decider, last, v[3]) || still_since_recorded(v[4], v[5])) {
          co_return std::optional<MemberList>();
        }
        if (stillness.still(*decider, fresh ? v[5] : std::nullopt, io_.now())) {
          // Recorded as the failure watch records a hung member, so that the next epoch's
          // decider takes it as gone at once instead of watching it stand still again.
          io::Op record = io::set(silent_key(p_.group, *decider), stillness.last_value(*decider));
          const io::Reply recorded = co_await io_.perform(std::move(record));
          (void)recorded;  // best effort
          co_return std::optional<MemberList>();
        }
      }
    }
    if (io_.now() - start > p_.window + std::chrono::seconds(2)) {
      co_return std::optional<MemberList>();
    }
    tick(last.step);
    // Blocks until the job's next event (a list published, an epoch failed) or kWaiterRead.
    io::Op read_events = io::ReadStreams{events, kWaiterRead};
    io::Reply read = co_await io_.perform(std::move(read_events));
    if (read.status.ok()) {
      events = std::move(read.cursors);
    } else {
      io::Op back_off = io::Sleep{kWaiterRead};
      const io::Reply slept = co_await io_.perform(std::move(back_off));
      (void)slept;
    }
  }
}

Task<Result<std::optional<MemberList>>> AgreementMachine::read_list(int epoch) {
  io::Op ask = io::get(epoch_key(p_.group, epoch, "list"));
  io::Reply text = co_await io_.perform(std::move(ask));
  if (!text.status.ok()) co_return text.status;
  if (!text.values[0]) {
    co_return Status(StatusCode::kNotFound, "no list for epoch " + std::to_string(epoch));
  }
  if (decode_tombstone(*text.values[0])) co_return std::optional<MemberList>();
  NTP_CO_ASSIGN_OR_RETURN(MemberList list, decode_member_list(*text.values[0]));
  co_return std::optional<MemberList>(std::move(list));
}

Task<Result<MemberList>> AgreementMachine::agree(MemberList& last, Announcement mine, bool joiner,
                                                 std::vector<int> joiners,
                                                 std::function<std::string()> encode_layout,
                                                 std::vector<int> dropping) {
  for (int tries = 0; tries < kMaxEpochs; ++tries) {
    int newest = last.epoch;
    const int target = co_await walk(last.epoch, &newest);
    if (target == kFenced) {
      co_return Status(StatusCode::kAborted, "fenced at epoch " + std::to_string(newest));
    }
    // A list read after the walk may have been collected since (it is then a tombstone): the
    // walk is taken again, and passes it.
    if (target == kParked) {  // a list this member missed parked it
      NTP_CO_ASSIGN_OR_RETURN(std::optional<MemberList> parking, co_await read_list(newest));
      if (!parking) continue;
      co_return std::move(*parking);
    }
    if (newest != last.epoch) {  // catch up: adopt the newest list that names this member
      NTP_CO_ASSIGN_OR_RETURN(std::optional<MemberList> newer, co_await read_list(newest));
      if (!newer) continue;
      last = std::move(*newer);
    }
    const EpochView target_view = co_await view(target);
    if (target_view.has_me.value_or(false)) {  // published (and not failed): follow it
      NTP_CO_ASSIGN_OR_RETURN(std::optional<MemberList> published, co_await read_list(target));
      if (!published) continue;
      last = std::move(*published);
      co_return last;
    }
    if (p_.on_enter) p_.on_enter(target);
    io::Op announce = io::Append{epoch_key(p_.group, target, "alive"),
                                 std::to_string(p_.me) + " " + encode(mine)};
    io::Reply announced = co_await io_.perform(std::move(announce));
    NTP_CO_RETURN_IF_ERROR(announced.status);
    if (!joiner) {
      // The first claim decides the epoch, and names its decider in the same operation: a decider
      // killed right after it is a decider its waiters can watch (its exit notice, its beat).
      io::Op claim = io::Claim{epoch_key(p_.group, target, "decider"), std::to_string(p_.me)};
      io::Reply claimed = co_await io_.perform(std::move(claim));
      NTP_CO_RETURN_IF_ERROR(claimed.status);
      if (claimed.number == 1) {
        NTP_CO_ASSIGN_OR_RETURN(
            std::optional<MemberList> decided,
            co_await decide_epoch(target, last, joiners, encode_layout, dropping));
        if (decided) {
          decided->decider = p_.me;
          if (p_.on_phase) p_.on_phase("decider_publish", target);
          io::Op publish = io::set(epoch_key(p_.group, target, "list"), encode(*decided));
          io::Reply published = co_await io_.perform(std::move(publish));
          NTP_CO_RETURN_IF_ERROR(published.status);
          io::Op event = io::Append{job_events(p_.group), "list " + std::to_string(target)};
          const io::Reply announced_list = co_await io_.perform(std::move(event));
          (void)announced_list;  // best effort: waiters also read the list key
        }
      }
    }
    NTP_CO_ASSIGN_OR_RETURN(std::optional<MemberList> list, co_await await_list(target, last));
    if (!list) {  // the epoch is given up: tell its members, and try the next one
      const Status reported = co_await report_failure(target);
      (void)reported;  // best effort
      continue;
    }
    if (list->parks(p_.me)) co_return std::move(*list);  // `last` stays: this member sits out
    if (!list->has(p_.me)) {
      co_return Status(StatusCode::kAborted, "fenced at epoch " + std::to_string(target));
    }
    last = std::move(*list);
    co_return last;
  }
  co_return unavailable("no member list agreed after " + std::to_string(kMaxEpochs) + " epochs");
}

Task<Status> AgreementMachine::mark_done(MemberList list) {
  io::Op mark = io::set(done_key(p_.group, list.epoch, p_.me), "1");
  io::Reply done = co_await io_.perform(std::move(mark));
  NTP_CO_RETURN_IF_ERROR(done.status);
  if (list.decider == p_.me) {
    const Status collected = co_await collect_below(list.epoch);
    (void)collected;  // best effort: the next collection redoes what this one left
  }
  co_return ok_status();
}

Task<Status> AgreementMachine::collect_below(int below) {
  const std::string floor_key = p_.group + "/collected";
  io::Op ask = io::get(floor_key);
  io::Reply floor = co_await io_.perform(std::move(ask));
  if (!floor.status.ok()) co_return floor.status;
  const int from = std::max(1, floor.values[0] ? std::atoi(floor.values[0]->c_str()) : 1);
  if (from >= below) co_return ok_status();  // epoch 0 has no keys; the rest are collected
  std::vector<std::string> list_keys, streams, erased;
  std::vector<std::pair<std::string, std::string>> tombstones;
  for (int e = from; e < below; ++e) {
    list_keys.push_back(epoch_key(p_.group, e, "list"));
    streams.push_back(epoch_key(p_.group, e, "alive"));
    erased.push_back(epoch_key(p_.group, e, "decider"));
    tombstones.emplace_back(list_keys.back(), encode_tombstone(below));
  }
  io::Op ask_lists = io::GetMany{list_keys};
  io::Reply lists = co_await io_.perform(std::move(ask_lists));
  if (!lists.status.ok()) co_return lists.status;
  for (int e = from; e < below; ++e) {
    const std::optional<std::string>& text = lists.values[static_cast<size_t>(e - from)];
    if (!text || decode_tombstone(*text)) continue;  // none published, or collected already
    Result<MemberList> list = decode_member_list(*text);
    if (!list.ok()) continue;
    for (int id : list->members) erased.push_back(done_key(p_.group, e, id));
  }
  // The tombstones last: a collection cut short leaves lists that the next one finds and reads.
  io::Op erase = io::Erase{std::move(erased)};
  const io::Reply keys_erased = co_await io_.perform(std::move(erase));
  if (!keys_erased.status.ok()) co_return keys_erased.status;
  io::Op erase_streams = io::EraseStreams{std::move(streams)};
  const io::Reply streams_erased = co_await io_.perform(std::move(erase_streams));
  if (!streams_erased.status.ok()) co_return streams_erased.status;
  io::Op bury = io::SetMany{std::move(tombstones)};
  const io::Reply buried = co_await io_.perform(std::move(bury));
  if (!buried.status.ok()) co_return buried.status;
  io::Op move_floor = io::set(floor_key, std::to_string(below));
  const io::Reply moved = co_await io_.perform(std::move(move_floor));
  co_return moved.status;
}

}  // namespace ntp::elastic
