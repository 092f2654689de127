#include "elastic/agreement.h"

#include <algorithm>
#include <thread>

#include "comm/survivors.h"

namespace ntp::elastic {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{5};
// Epochs one agreement may skip or give up on before it returns an error (each costs a fault or
// a dead decider; far more than the three nested faults the protocol is checked against).
constexpr int kMaxEpochs = 32;

std::string epoch_key(const std::string& group, int epoch, const std::string& what) {
  return group + "/e" + std::to_string(epoch) + "/" + what;
}

std::optional<std::string> read(comm::Store& store, const std::string& key) {
  Result<std::string> v = store.get(key);
  if (!v.ok()) return std::nullopt;
  return *v;
}

}  // namespace

std::string fail_key(const std::string& group, int epoch) {
  return group + "/fail/" + std::to_string(epoch);
}
std::string done_key(const std::string& group, int epoch, int id) {
  return epoch_key(group, epoch, "done/" + std::to_string(id));
}
std::string silent_key(const std::string& group, int id) {
  return group + "/silent/" + std::to_string(id);
}

bool still_silent(comm::Store& store, const std::string& group, int id) {
  const std::optional<std::string> seen = read(store, silent_key(group, id));
  if (!seen) return false;
  const std::optional<std::string> now = read(store, comm::Heartbeat::key(group, id));
  return now && parse_progress(*now).moving == parse_progress(*seen).moving;
}

void Agreement::tick(std::int64_t step) {
  if (c_.progress != nullptr) c_.progress->mark(Phase::kReform, step);
}

EpochView Agreement::view(int epoch) {
  EpochView v;
  Result<bool> failed = c_.store->exists(fail_key(c_.group, epoch));
  v.failed = failed.ok() && *failed;
  if (std::optional<std::string> text = read(*c_.store, epoch_key(c_.group, epoch, "list"))) {
    Result<MemberList> list = decode_member_list(*text);
    v.has_me = list.ok() && list->has(c_.me);
    v.parks_me = list.ok() && list->parks(c_.me);
  }
  return v;
}

bool Agreement::complete(const MemberList& list) {
  if (list.epoch == 0) return true;  // the first job: built with drawn (or loaded) state
  for (int id : list.members) {
    Result<bool> done = c_.store->exists(done_key(c_.group, list.epoch, id));
    if (!done.ok() || !*done) return false;
  }
  return true;
}

Result<std::optional<MemberList>> Agreement::decide_epoch(
    int epoch, const MemberList& last, const std::vector<int>& joiners,
    const std::function<std::string()>& encode_layout, const std::vector<int>& dropping) {
  std::vector<int> expected = last.members;
  expected.insert(expected.end(), joiners.begin(), joiners.end());
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  Stillness stillness(c_.hang_detect);
  const Clock::time_point start = Clock::now();
  DecisionInput in;
  in.epoch = epoch;
  in.last = &last;
  in.expected = expected;
  in.domain_size = c_.domain_size;
  in.min_tp = c_.min_tp;
  in.dropped = dropping;
  in.gone = [&](int id) {
    if (c_.exited && c_.exited(id, last)) return true;
    if (still_silent(*c_.store, c_.group, id)) return true;
    return stillness.still(id, read(*c_.store, comm::Heartbeat::key(c_.group, id)), Clock::now());
  };
  for (;;) {
    if (Result<bool> failed = c_.store->exists(fail_key(c_.group, epoch)); failed.ok() && *failed) {
      return std::optional<MemberList>();
    }
    in.announced.clear();
    for (int id : expected) {
      std::optional<std::string> a =
          read(*c_.store, epoch_key(c_.group, epoch, "alive/" + std::to_string(id)));
      if (!a) continue;
      if (Result<Announcement> parsed = decode_announcement(*a); parsed.ok()) {
        in.announced[id] = *parsed;
      }
    }
    in.window_over = Clock::now() - start >= c_.window;
    in.last_complete = false;  // first: is every candidate accounted for?
    if (decide(in).has_value()) {
      in.last_complete = complete(last);
      if (in.last_complete) in.last_layout = encode_layout();
      return decide(in);
    }
    tick(last.step);
    std::this_thread::sleep_for(kPoll);
  }
}

Result<std::optional<MemberList>> Agreement::await_list(int epoch, const MemberList& last,
                                                        bool drew_ticket) {
  const std::string list_key = epoch_key(c_.group, epoch, "list");
  Stillness stillness(c_.hang_detect);
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (std::optional<std::string> text = read(*c_.store, list_key)) {
      NTP_ASSIGN_OR_RETURN(MemberList list, decode_member_list(*text));
      return std::optional<MemberList>(std::move(list));
    }
    if (Result<bool> failed = c_.store->exists(fail_key(c_.group, epoch)); failed.ok() && *failed) {
      return std::optional<MemberList>();  // someone gave up on this epoch: so does this member
    }
    if (std::optional<std::string> d = read(*c_.store, epoch_key(c_.group, epoch, "decider"))) {
      const int decider = std::atoi(d->c_str());
      if ((c_.exited && c_.exited(decider, last)) || still_silent(*c_.store, c_.group, decider)) {
        return std::optional<MemberList>();
      }
      if (stillness.still(decider, read(*c_.store, comm::Heartbeat::key(c_.group, decider)),
                          Clock::now())) {
        // Recorded as the failure watch records a hung member, so that the next epoch's decider
        // takes it as gone at once instead of watching it stand still again.
        (void)c_.store->set(silent_key(c_.group, decider), stillness.last_value(decider));
        return std::optional<MemberList>();
      }
    } else if (drew_ticket && Clock::now() - start > c_.hang_detect) {
      // The ticket was drawn (this member drew a later one) but its holder never said who it is:
      // it died between the draw and naming itself, and no one else can tell it gone.
      return std::optional<MemberList>();
    }
    if (Clock::now() - start > c_.window + std::chrono::seconds(2)) {
      return std::optional<MemberList>();
    }
    tick(last.step);
    std::this_thread::sleep_for(kPoll);
  }
}

Result<MemberList> Agreement::agree(MemberList& last, const Announcement& mine, bool joiner,
                                    const std::vector<int>& joiners,
                                    const std::function<std::string()>& encode_layout,
                                    const std::vector<int>& dropping) {
  for (int tries = 0; tries < kMaxEpochs; ++tries) {
    int newest = last.epoch;
    const int target = next_target(
        last.epoch, [this](int e) { return view(e); }, &newest);
    if (target == kFenced) {
      return Status(StatusCode::kAborted, "fenced at epoch " + std::to_string(newest));
    }
    if (target == kParked) {  // a list this member missed parked it
      NTP_ASSIGN_OR_RETURN(std::string text, c_.store->get(epoch_key(c_.group, newest, "list")));
      return decode_member_list(text);
    }
    if (newest != last.epoch) {  // catch up: adopt the newest list that names this member
      NTP_ASSIGN_OR_RETURN(std::string text, c_.store->get(epoch_key(c_.group, newest, "list")));
      NTP_ASSIGN_OR_RETURN(last, decode_member_list(text));
    }
    if (view(target).has_me.value_or(false)) {  // published (and not failed): follow it
      NTP_ASSIGN_OR_RETURN(std::string text, c_.store->get(epoch_key(c_.group, target, "list")));
      NTP_ASSIGN_OR_RETURN(last, decode_member_list(text));
      return last;
    }
    NTP_RETURN_IF_ERROR(
        c_.store->set(epoch_key(c_.group, target, "alive/" + std::to_string(c_.me)), encode(mine)));
    if (!joiner) {
      NTP_ASSIGN_OR_RETURN(std::int64_t ticket,
                           c_.store->add(epoch_key(c_.group, target, "ticket"), 1));
      if (ticket == 1) {
        NTP_RETURN_IF_ERROR(
            c_.store->set(epoch_key(c_.group, target, "decider"), std::to_string(c_.me)));
        NTP_ASSIGN_OR_RETURN(std::optional<MemberList> decided,
                             decide_epoch(target, last, joiners, encode_layout, dropping));
        if (decided) {
          decided->decider = c_.me;
          if (c_.on_phase) c_.on_phase("decider_publish", target);
          NTP_RETURN_IF_ERROR(c_.store->set(epoch_key(c_.group, target, "list"), encode(*decided)));
        }
      }
    }
    NTP_ASSIGN_OR_RETURN(std::optional<MemberList> list, await_list(target, last, !joiner));
    if (!list) {  // the epoch is given up: tell its members, and try the next one
      report_failure(target);
      continue;
    }
    if (list->parks(c_.me)) return std::move(*list);  // `last` stays: this member sits out
    if (!list->has(c_.me)) {
      return Status(StatusCode::kAborted, "fenced at epoch " + std::to_string(target));
    }
    last = std::move(*list);
    return last;
  }
  return unavailable("no member list agreed after " + std::to_string(kMaxEpochs) + " epochs");
}

Status Agreement::mark_done(int epoch) {
  return c_.store->set(done_key(c_.group, epoch, c_.me), "1");
}

void Agreement::report_failure(int epoch) { (void)c_.store->set(fail_key(c_.group, epoch), "1"); }

}  // namespace ntp::elastic
