#include "train/event_log.h"

#include <filesystem>

#include "core/wall_clock.h"

namespace ntp::train {

EventLog::EventLog(const std::string& out_dir, int rank) : rank_(rank) {
  if (out_dir.empty()) return;
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(out_dir) / "events";
  std::filesystem::create_directories(dir, error);
  file_ = std::fopen((dir / ("rank_" + std::to_string(rank) + ".jsonl")).c_str(), "a");
}

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventLog::log(const std::string& event, nlohmann::json fields) {
  if (file_ == nullptr) return;
  fields["time"] = unix_seconds();
  fields["rank"] = rank_;
  fields["event"] = event;
  const std::string line = fields.dump() + "\n";
  std::lock_guard<std::mutex> lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace ntp::train
