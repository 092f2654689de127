#include "launch/launch_summary.h"

#include <string.h>

namespace ntp::launch {

std::string describe_exit(int exit_code) {
  std::string text = "exit code " + std::to_string(exit_code);
  if (exit_code > 128 && exit_code < 128 + 65) {
    const char* name = ::sigabbrev_np(exit_code - 128);
    if (name != nullptr) text += std::string(" (SIG") + name + ")";
  }
  return text;
}

int job_exit_code(const JobEnd& end) {
  if (end.finished_rank) return 0;
  if (end.failed_rank) return end.failed_code;
  if (end.reported_steps && !end.lost.empty()) return 1;
  return 0;
}

std::vector<std::string> summary_lines(const JobEnd& end, int code) {
  std::vector<std::string> lines;
  if (end.lost.empty() && code == 0) return lines;
  if (end.finished_rank) {
    lines.push_back("the job finished: rank " + std::to_string(*end.finished_rank) +
                    " reported its last step (" + std::to_string(end.finished_steps) +
                    " steps); exit code 0");
  } else if (end.failed_rank) {
    lines.push_back("the job did not finish: rank " + std::to_string(*end.failed_rank) +
                    " failed (" + describe_exit(end.failed_code) + "); exit code " +
                    std::to_string(code));
  } else if (code != 0) {
    lines.push_back(std::string("the job did not finish: no worker reported its last step") +
                    (end.store_answered ? "" : " (the store did not answer)") + "; exit code " +
                    std::to_string(code));
  }
  const std::size_t n = end.lost.size();
  if (n > 0) {
    lines.push_back("lost " + std::to_string(n) + " worker" + (n == 1 ? "" : "s") + ":");
  }
  for (const LostWorker& w : end.lost) {
    lines.push_back("  rank " + std::to_string(w.rank) + " (restart " +
                    std::to_string(w.restart_count) + ", attempt " + std::to_string(w.attempt) +
                    "): " + w.cause + "; ended with " + w.ended);
  }
  return lines;
}

}  // namespace ntp::launch
