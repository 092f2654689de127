#include "elastic/agreement.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "comm/exit_notice.h"
#include "comm/survivors.h"

namespace ntp::elastic {

std::string epoch_key(const std::string& group, int epoch, const std::string& what) {
  return group + "/e" + std::to_string(epoch) + "/" + what;
}

namespace {

using Clock = std::chrono::steady_clock;
// The decider's read of new announcements blocks at most this long; it looks at the candidates
// that have not announced (exit notice, silent record, heartbeat) every kGoneLook.
constexpr std::chrono::milliseconds kDeciderRead{20};
constexpr std::chrono::milliseconds kGoneLook{100};
// A waiter's read of the job's events blocks at most this long before it looks at the decider.
constexpr std::chrono::milliseconds kWaiterRead{250};
// Epochs one agreement may skip or give up on before it returns an error (each costs a fault or
// a dead decider; far more than the three nested faults the protocol is checked against).
constexpr int kMaxEpochs = 32;

std::optional<std::string> read(comm::Store& store, const std::string& key) {
  Result<std::string> v = store.get(key);
  if (!v.ok()) return std::nullopt;
  return *v;
}

}  // namespace

std::string fail_key(const std::string& group, int epoch) {
  return group + "/fail/" + std::to_string(epoch);
}
std::string job_events(const std::string& group) { return group + "/events"; }

Status post_failure_notice(comm::Store& store, const std::string& group, int epoch) {
  // Every member of a failed epoch may post: only the first one's event goes out, so that the
  // stream holds one event per failed epoch, not one per member (readers read it whole).
  NTP_ASSIGN_OR_RETURN(std::int64_t posters, store.add(fail_key(group, epoch), 1));
  if (posters > 1) return ok_status();
  return store.append(job_events(group), "fail " + std::to_string(epoch));
}

std::optional<int> parse_failure_event(const std::string& event) {
  if (event.rfind("fail ", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long epoch = std::strtol(event.c_str() + 5, &end, 10);
  if (end == event.c_str() + 5 || *end != '\0') return std::nullopt;
  return static_cast<int>(epoch);
}

Status post_join_notice(comm::Store& store, const std::string& group, int id) {
  return store.append(job_events(group), "join " + std::to_string(id));
}

bool is_join_event(const std::string& event) { return event.rfind("join ", 0) == 0; }

std::string done_key(const std::string& group, int epoch, int id) {
  return epoch_key(group, epoch, "done/" + std::to_string(id));
}
std::string silent_key(const std::string& group, int id) {
  return group + "/silent/" + std::to_string(id);
}

void forget_silent_record(comm::Store& store, const std::string& group, int id) {
  if (!store.erase({silent_key(group, id)}).ok()) (void)store.set(silent_key(group, id), "");
}

bool still_since_recorded(const std::optional<std::string>& silent,
                          const std::optional<std::string>& beat) {
  return silent && beat && parse_progress(*beat).moving == parse_progress(*silent).moving;
}

bool still_silent(comm::Store& store, const std::string& group, int id) {
  return still_since_recorded(read(store, silent_key(group, id)),
                              read(store, comm::Heartbeat::key(group, id)));
}

void Agreement::tick(std::int64_t step) {
  if (c_.progress != nullptr) c_.progress->mark(Phase::kReform, step);
}

Agreement::~Agreement() = default;

comm::StreamReader& Agreement::reader() {
  if (!reader_) reader_ = c_.store->open_reader();
  return *reader_;
}

bool Agreement::reported_gone(int id, const MemberList& last,
                              const std::optional<std::string>& notice) {
  if (!notice || !c_.incarnation) return false;
  return *notice == c_.incarnation(id, last);
}

EpochView Agreement::view(int epoch) {
  EpochView v;
  Result<std::vector<std::optional<std::string>>> keys =
      c_.store->get_many({fail_key(c_.group, epoch), epoch_key(c_.group, epoch, "list")});
  if (!keys.ok()) return v;  // nothing known of the epoch
  v.failed = (*keys)[0].has_value();
  if (const std::optional<std::string>& text = (*keys)[1]) {
    if (const std::optional<int> by = decode_tombstone(*text)) {
      v.superseded_by = *by;
      return v;
    }
    Result<MemberList> list = decode_member_list(*text);
    v.has_me = list.ok() && list->has(c_.me);
    v.parks_me = list.ok() && list->parks(c_.me);
  }
  return v;
}

bool Agreement::complete(const MemberList& list) {
  if (list.epoch == 0) return true;  // the first job: built with drawn (or loaded) state
  std::vector<std::string> keys;
  for (int id : list.members) keys.push_back(done_key(c_.group, list.epoch, id));
  Result<std::vector<std::optional<std::string>>> done = c_.store->get_many(keys);
  return done.ok() &&
         std::all_of(done->begin(), done->end(),
                     [](const std::optional<std::string>& d) { return d.has_value(); });
}

Result<bool> Agreement::look_at_absent(int epoch, const MemberList& last,
                                       const std::vector<int>& expected,
                                       const std::map<int, Announcement>& announced,
                                       Stillness& stillness, std::set<int>& gone) {
  std::vector<int> absent;
  for (int id : expected) {
    if (announced.count(id) == 0) absent.push_back(id);
  }
  std::vector<std::string> keys{fail_key(c_.group, epoch)};
  for (int id : absent) {
    keys.insert(keys.end(), {comm::exit_notice_key(id), silent_key(c_.group, id),
                             comm::Heartbeat::key(c_.group, id)});
  }
  const Clock::time_point asked = Clock::now();
  Result<std::vector<std::optional<std::string>>> values = c_.store->get_many(keys);
  const Clock::time_point now = Clock::now();
  // As the failure watch: a look slower than a beat's period convicts no one of stillness.
  const bool fresh = values.ok() && now - asked <= liveness_period(c_.hang_detect);
  gone.clear();
  for (size_t i = 0; i < absent.size(); ++i) {
    const int id = absent[i];
    if (!values.ok()) {  // nothing known of anyone: their stillness starts over
      stillness.still(id, std::nullopt, now);
      continue;
    }
    const std::optional<std::string>& notice = (*values)[1 + 3 * i];
    const std::optional<std::string>& silent = (*values)[2 + 3 * i];
    const std::optional<std::string>& beat = (*values)[3 + 3 * i];
    if (reported_gone(id, last, notice) || still_since_recorded(silent, beat) ||
        stillness.still(id, fresh ? beat : std::nullopt, now)) {
      gone.insert(id);
    }
  }
  return values.ok() && (*values)[0].has_value();
}

Result<std::optional<MemberList>> Agreement::decide_epoch(
    int epoch, const MemberList& last, const std::vector<int>& joiners,
    const std::function<std::string()>& encode_layout, const std::vector<int>& dropping) {
  std::vector<int> expected = last.members;
  expected.insert(expected.end(), joiners.begin(), joiners.end());
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  Stillness stillness(c_.hang_detect);
  std::set<int> gone;
  const Clock::time_point start = Clock::now();
  DecisionInput in;
  in.epoch = epoch;
  in.last = &last;
  in.expected = expected;
  in.domain_size = c_.domain_size;
  in.min_tp = c_.min_tp;
  in.dropped = dropping;
  in.gone = [&gone](int id) { return gone.count(id) > 0; };
  std::vector<comm::StreamCursor> alive{{epoch_key(c_.group, epoch, "alive"), ""}};
  Clock::time_point next_look = start;
  for (;;) {
    if (Clock::now() >= next_look) {
      next_look = Clock::now() + kGoneLook;
      NTP_ASSIGN_OR_RETURN(bool failed,
                           look_at_absent(epoch, last, expected, in.announced, stillness, gone));
      if (failed) return std::optional<MemberList>();
    }
    in.window_over = Clock::now() - start >= c_.window;
    in.last_complete = false;  // first: is every candidate accounted for?
    if (decide(in).has_value()) {
      in.last_complete = complete(last);
      if (in.last_complete) in.last_layout = encode_layout();
      return decide(in);
    }
    tick(last.step);
    Result<std::vector<comm::StreamEvent>> news = reader().read(alive, kDeciderRead);
    if (!news.ok()) {
      std::this_thread::sleep_for(kDeciderRead);  // the store is away: the look above retries
      continue;
    }
    for (const comm::StreamEvent& event : *news) {
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

Result<std::optional<MemberList>> Agreement::await_list(int epoch, const MemberList& last,
                                                        bool drew_ticket) {
  Stillness stillness(c_.hang_detect);
  const Clock::time_point start = Clock::now();
  std::vector<comm::StreamCursor> events{{job_events(c_.group), ""}};
  std::optional<int> decider;
  for (;;) {
    std::vector<std::string> keys{epoch_key(c_.group, epoch, "list"), fail_key(c_.group, epoch),
                                  epoch_key(c_.group, epoch, "decider")};
    if (decider) {
      keys.insert(keys.end(), {comm::exit_notice_key(*decider), silent_key(c_.group, *decider),
                               comm::Heartbeat::key(c_.group, *decider)});
    }
    const Clock::time_point asked = Clock::now();
    Result<std::vector<std::optional<std::string>>> seen = c_.store->get_many(keys);
    const bool fresh = Clock::now() - asked <= liveness_period(c_.hang_detect);
    if (seen.ok()) {
      const std::vector<std::optional<std::string>>& v = *seen;
      if (v[0] && decode_tombstone(*v[0])) return std::optional<MemberList>();  // collected
      if (v[0]) {
        NTP_ASSIGN_OR_RETURN(MemberList list, decode_member_list(*v[0]));
        return std::optional<MemberList>(std::move(list));
      }
      if (v[1]) return std::optional<MemberList>();  // someone gave up on this epoch: so do we
      if (!decider && v[2]) decider = std::atoi(v[2]->c_str());  // looked at from the next round
      if (decider && v.size() == 6) {
        if (reported_gone(*decider, last, v[3]) || still_since_recorded(v[4], v[5])) {
          return std::optional<MemberList>();
        }
        if (stillness.still(*decider, fresh ? v[5] : std::nullopt, Clock::now())) {
          // Recorded as the failure watch records a hung member, so that the next epoch's
          // decider takes it as gone at once instead of watching it stand still again.
          (void)c_.store->set(silent_key(c_.group, *decider), stillness.last_value(*decider));
          return std::optional<MemberList>();
        }
      }
    }
    if (!decider && drew_ticket && Clock::now() - start > c_.hang_detect) {
      // The ticket was drawn (this member drew a later one) but its holder never said who it is:
      // it died between the draw and naming itself, and no one else can tell it gone.
      return std::optional<MemberList>();
    }
    if (Clock::now() - start > c_.window + std::chrono::seconds(2)) {
      return std::optional<MemberList>();
    }
    tick(last.step);
    // Blocks until the job's next event (a list published, an epoch failed) or kWaiterRead.
    if (!reader().read(events, kWaiterRead).ok()) std::this_thread::sleep_for(kWaiterRead);
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
    // A list read after the walk may have been collected since (it is then a tombstone): the
    // walk is taken again, and passes it.
    if (target == kParked) {  // a list this member missed parked it
      NTP_ASSIGN_OR_RETURN(std::optional<MemberList> parking, read_list(newest));
      if (!parking) continue;
      return std::move(*parking);
    }
    if (newest != last.epoch) {  // catch up: adopt the newest list that names this member
      NTP_ASSIGN_OR_RETURN(std::optional<MemberList> newer, read_list(newest));
      if (!newer) continue;
      last = std::move(*newer);
    }
    if (view(target).has_me.value_or(false)) {  // published (and not failed): follow it
      NTP_ASSIGN_OR_RETURN(std::optional<MemberList> published, read_list(target));
      if (!published) continue;
      last = std::move(*published);
      return last;
    }
    NTP_RETURN_IF_ERROR(c_.store->append(epoch_key(c_.group, target, "alive"),
                                         std::to_string(c_.me) + " " + encode(mine)));
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
          (void)c_.store->append(job_events(c_.group), "list " + std::to_string(target));
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

Status Agreement::mark_done(const MemberList& list) {
  NTP_RETURN_IF_ERROR(c_.store->set(done_key(c_.group, list.epoch, c_.me), "1"));
  if (list.decider == c_.me) collect_below(list.epoch);
  return ok_status();
}

Result<std::optional<MemberList>> Agreement::read_list(int epoch) {
  NTP_ASSIGN_OR_RETURN(std::string text, c_.store->get(epoch_key(c_.group, epoch, "list")));
  if (decode_tombstone(text)) return std::optional<MemberList>();
  NTP_ASSIGN_OR_RETURN(MemberList list, decode_member_list(text));
  return std::optional<MemberList>(std::move(list));
}

void Agreement::collect_below(int below) {
  const std::string floor_key = c_.group + "/collected";
  const std::optional<std::string> floor = read(*c_.store, floor_key);
  const int from = std::max(1, floor ? std::atoi(floor->c_str()) : 1);  // epoch 0 has no keys
  if (from >= below) return;
  std::vector<std::string> list_keys, streams, erased;
  std::vector<std::pair<std::string, std::string>> tombstones;
  for (int e = from; e < below; ++e) {
    list_keys.push_back(epoch_key(c_.group, e, "list"));
    streams.push_back(epoch_key(c_.group, e, "alive"));
    erased.push_back(epoch_key(c_.group, e, "ticket"));
    erased.push_back(epoch_key(c_.group, e, "decider"));
    tombstones.emplace_back(list_keys.back(), encode_tombstone(below));
  }
  Result<std::vector<std::optional<std::string>>> lists = c_.store->get_many(list_keys);
  if (!lists.ok()) return;
  for (int e = from; e < below; ++e) {
    const std::optional<std::string>& text = (*lists)[static_cast<size_t>(e - from)];
    if (!text || decode_tombstone(*text)) continue;  // none published, or collected already
    Result<MemberList> list = decode_member_list(*text);
    if (!list.ok()) continue;
    for (int id : list->members) erased.push_back(done_key(c_.group, e, id));
  }
  // The tombstones last: a collection cut short leaves lists that the next one finds and reads.
  if (c_.store->erase(erased).ok() && c_.store->erase_streams(streams).ok() &&
      c_.store->set_many(tombstones).ok()) {
    (void)c_.store->set(floor_key, std::to_string(below));
  }
}

void Agreement::report_failure(int epoch) { (void)post_failure_notice(*c_.store, c_.group, epoch); }

}  // namespace ntp::elastic
