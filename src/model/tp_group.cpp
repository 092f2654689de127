#include "model/tp_group.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

namespace ntp::model {

Status TpGroup::all_gather(std::span<const float> in, std::span<float> out) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), in.size());
  return all_gather_v(in, out, counts);
}

Status SoloTpGroup::all_gather_v(std::span<const float> in, std::span<float> out,
                                 std::span<const std::size_t> counts) {
  NTP_CHECK(counts.size() == 1 && counts[0] == in.size() && out.size() == in.size());
  std::copy(in.begin(), in.end(), out.begin());
  return ok_status();
}

Status SoloTpGroup::all_to_all_v(std::span<const float> in,
                                 std::span<const std::size_t> send_counts, std::span<float> out,
                                 std::span<const std::size_t> recv_counts) {
  NTP_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 &&
            send_counts[0] == recv_counts[0] && in.size() == send_counts[0] &&
            out.size() == in.size());
  std::copy(in.begin(), in.end(), out.begin());
  return ok_status();
}

}  // namespace ntp::model
