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

Status ThreadTpGroup::all_gather_v(std::span<const float> in, std::span<float> out,
                                   std::span<const std::size_t> counts) {
  Shared& s = *shared_;
  NTP_CHECK(counts.size() == s.posted.size() && in.size() == counts[static_cast<size_t>(rank_)]);
  s.posted[static_cast<size_t>(rank_)] = in;
  s.barrier.arrive_and_wait();
  size_t offset = 0;
  for (size_t r = 0; r < s.posted.size(); ++r) {
    NTP_CHECK_MSG(s.posted[r].size() == counts[r], "all_gather_v counts differ between ranks");
    NTP_CHECK(offset + counts[r] <= out.size());
    std::copy(s.posted[r].begin(), s.posted[r].end(), out.begin() + static_cast<long>(offset));
    offset += counts[r];
  }
  NTP_CHECK(offset == out.size());
  s.barrier.arrive_and_wait();
  return ok_status();
}

Status ThreadTpGroup::all_to_all_v(std::span<const float> in,
                                   std::span<const std::size_t> send_counts, std::span<float> out,
                                   std::span<const std::size_t> recv_counts) {
  Shared& s = *shared_;
  const size_t n = s.posted.size(), me = static_cast<size_t>(rank_);
  NTP_CHECK(send_counts.size() == n && recv_counts.size() == n);
  s.posted[me] = in;
  s.posted_counts[me] = send_counts;
  s.barrier.arrive_and_wait();
  size_t offset = 0;
  for (size_t src = 0; src < n; ++src) {
    const std::span<const std::size_t> theirs = s.posted_counts[src];
    NTP_CHECK_MSG(theirs[me] == recv_counts[src], "all_to_all_v counts differ between ranks");
    size_t at = 0;  // where src's piece for this rank starts in src's input
    for (size_t d = 0; d < me; ++d) at += theirs[d];
    NTP_CHECK(at + theirs[me] <= s.posted[src].size() && offset + theirs[me] <= out.size());
    std::copy_n(s.posted[src].begin() + static_cast<long>(at), theirs[me],
                out.begin() + static_cast<long>(offset));
    offset += theirs[me];
  }
  NTP_CHECK(offset == out.size());
  s.barrier.arrive_and_wait();
  return ok_status();
}

}  // namespace ntp::model
