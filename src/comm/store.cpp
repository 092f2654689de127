#include "comm/store.h"

#include <thread>

#include "comm/file_store.h"
#include "comm/redis_store.h"

namespace ntp::comm {

Status Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    bool all = true;
    for (const std::string& key : keys) {
      NTP_ASSIGN_OR_RETURN(bool present, exists(key));
      if (!present) {
        all = false;
        break;
      }
    }
    if (all) return ok_status();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (const std::string& key : keys) names += (names.empty() ? "" : ", ") + key;
      return deadline_exceeded("store " + describe() + ": keys [" + names + "] missing after " +
                               std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

Status Store::set_many(const std::vector<std::pair<std::string, std::string>>& entries) {
  for (const auto& [key, value] : entries) NTP_RETURN_IF_ERROR(set(key, value));
  return ok_status();
}

Status Store::erase(const std::vector<std::string>& keys) {
  (void)keys;
  return unimplemented("store " + describe() + " cannot erase keys");
}

Result<std::vector<std::optional<std::string>>> Store::get_many(
    const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    Result<std::string> value = get(key);
    if (value.ok()) {
      values.emplace_back(std::move(*value));
    } else if (value.status().code() == StatusCode::kNotFound) {
      values.emplace_back(std::nullopt);
    } else {
      return value.status();
    }
  }
  return values;
}

Status Store::append(const std::string& stream, const std::string& value) {
  return append_by_keys(*this, stream, value);
}

Status Store::erase_streams(const std::vector<std::string>& streams) {
  return erase_by_keys(*this, streams);
}

std::unique_ptr<StreamReader> Store::open_reader() { return open_polling_reader(*this); }

namespace {
bool valid_run_id(const std::string& run_id) {
  if (run_id.empty() || run_id.size() > 128) return false;
  for (unsigned char c : run_id) {
    if (std::isalnum(c) == 0 && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}
}  // namespace

Result<std::shared_ptr<Store>> open_store(const std::string& spec, const std::string& run_id) {
  if (!valid_run_id(run_id)) {
    return invalid_argument("run id '" + run_id +
                            "' is invalid: use 1-128 characters from [A-Za-z0-9._-]");
  }
  if (spec.rfind("file:", 0) == 0) {
    NTP_ASSIGN_OR_RETURN(std::shared_ptr<FileStore> store, FileStore::open(spec.substr(5), run_id));
    return std::shared_ptr<Store>(std::move(store));
  }
  if (spec.rfind("redis://", 0) == 0) {
    NTP_ASSIGN_OR_RETURN(std::shared_ptr<RedisStore> store, RedisStore::open(spec, run_id));
    return std::shared_ptr<Store>(std::move(store));
  }
  return invalid_argument("store '" + spec +
                          "' is not understood: use file:DIR or redis://[:PASSWORD@]HOST:PORT");
}

}  // namespace ntp::comm
