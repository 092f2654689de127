#include "comm/exit_notice.h"

#include <stdexcept>

namespace ntp::comm {
namespace {

std::string notice_key(int rank) { return "launch/exit/" + std::to_string(rank); }
const char* const kCountKey = "launch/exits";

}  // namespace

std::string incarnation(int attempt, int restart_count) {
  return std::to_string(attempt) + "." + std::to_string(restart_count);
}

Status post_exit_notice(Store& store, int rank, const std::string& who) {
  // The notice first, then the counter: a watcher that sees the count move finds the notice.
  NTP_RETURN_IF_ERROR(store.set(notice_key(rank), who));
  return store.add(kCountKey, 1).status();
}

bool has_exited(Store& store, int rank, const std::string& who) {
  Result<std::string> value = store.get(notice_key(rank));
  return value.ok() && *value == who;
}

std::int64_t exit_notice_count(Store& store) {
  // A plain read (both stores keep counters as decimal text): polled often, it must not lock.
  Result<std::string> count = store.get(kCountKey);
  if (!count.ok()) return 0;
  try {
    return std::stoll(*count);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace ntp::comm
