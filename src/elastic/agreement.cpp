#include "elastic/agreement.h"

#include "comm/survivors.h"

namespace ntp::elastic {

std::string epoch_key(const std::string& group, int epoch, const std::string& what) {
  return group + "/e" + std::to_string(epoch) + "/" + what;
}

namespace {

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
  IoSlot io;
  return StoreDriver(store).run(post_failure(io, group, epoch), io);
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

Agreement::Agreement(AgreementConfig config)
    : store_(std::move(config.store)),
      driver_(*store_),
      machine_(std::move(static_cast<AgreementParams&>(config)), io_) {}

Result<MemberList> Agreement::agree(MemberList& last, const Announcement& mine, bool joiner,
                                    const std::vector<int>& joiners,
                                    const std::function<std::string()>& encode_layout,
                                    const std::vector<int>& dropping) {
  return driver_.run(machine_.agree(last, mine, joiner, joiners, encode_layout, dropping), io_);
}

Status Agreement::mark_done(const MemberList& list) {
  return driver_.run(machine_.mark_done(list), io_);
}

void Agreement::prepare() { (void)driver_.prepare_reader(); }

void Agreement::report_failure(int epoch) {
  (void)driver_.run(machine_.report_failure(epoch), io_);
}

}  // namespace ntp::elastic
