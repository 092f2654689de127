#include "model/thread_tp_group.h"

#include <algorithm>

#include "core/check.h"

namespace ntp::model {

std::vector<std::unique_ptr<ThreadTpGroup>> ThreadTpGroup::create(int size) {
  NTP_CHECK(size >= 1);
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::unique_ptr<ThreadTpGroup>> group;
  for (int r = 0; r < size; ++r) group.emplace_back(new ThreadTpGroup(shared, r));
  return group;
}

Status ThreadTpGroup::all_reduce_sum(std::span<float> data) {
  Shared& s = *shared_;
  s.posted[static_cast<size_t>(rank_)] = data;
  s.barrier.arrive_and_wait();  // every input posted
  sum_.assign(data.size(), 0.0f);
  for (const std::span<const float>& in : s.posted) {
    NTP_CHECK_MSG(in.size() == data.size(), "all_reduce_sum counts differ between ranks");
    for (size_t i = 0; i < data.size(); ++i) sum_[i] += in[i];
  }
  s.barrier.arrive_and_wait();  // nobody reads the inputs any more
  std::copy(sum_.begin(), sum_.end(), data.begin());
  return ok_status();
}

Status ThreadTpGroup::all_gather(std::span<const float> in, std::span<float> out) {
  Shared& s = *shared_;
  NTP_CHECK(out.size() == in.size() * s.posted.size());
  s.posted[static_cast<size_t>(rank_)] = in;
  s.barrier.arrive_and_wait();
  for (size_t r = 0; r < s.posted.size(); ++r) {
    NTP_CHECK_MSG(s.posted[r].size() == in.size(), "all_gather counts differ between ranks");
    std::copy(s.posted[r].begin(), s.posted[r].end(), out.begin() + r * in.size());
  }
  s.barrier.arrive_and_wait();
  return ok_status();
}

}  // namespace ntp::model
