#include "train/admission.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "elastic/agreement.h"

namespace ntp::train {

std::string join_key(const std::string& group, int rank) {
  return group + "/join/" + std::to_string(rank);
}

std::string stopped_key(const std::string& group) { return group + "/stopped"; }

namespace {

// Drops the joiners of domains that left the job while fewer than min_tp of them ask.
std::vector<int> admissible(std::vector<int> asking, const shard::ClusterLayout& layout,
                            int min_tp) {
  const int tp = layout.spec.domain_size;
  std::vector<int> per_domain(static_cast<size_t>(layout.spec.domains), 0);
  for (int r : asking) ++per_domain[static_cast<size_t>(r / tp)];
  std::erase_if(asking, [&](int r) {
    const int d = r / tp;
    return layout.spec.has_left(d) && per_domain[static_cast<size_t>(d)] < min_tp;
  });
  return asking;
}

}  // namespace

std::vector<int> joiners_asking(const WorkerContext& ctx, const std::string& group, const Job& job,
                                int min_tp, std::int64_t notices, std::int64_t& seen) {
  if (notices == seen) return {};
  const int slots = job.layout.spec.domains * job.layout.spec.domain_size;
  const std::vector<int> members = slot_ranks(job.layout);
  std::vector<int> outside;
  std::vector<std::string> keys;  // per slot outside: its request, then its admission
  for (int r = 0; r < slots; ++r) {
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    outside.push_back(r);
    keys.push_back(join_key(group, r));
    keys.push_back(join_key(group, r) + "/taken");
  }
  if (keys.empty()) {
    seen = notices;
    return {};
  }
  Result<std::vector<std::optional<std::string>>> values = ctx.store->get_many(keys);
  if (!values.ok()) return {};  // looked for again at the next boundary
  std::vector<int> out;
  for (size_t i = 0; i < outside.size(); ++i) {
    // Pending: a join request whose restart count was not admitted yet.
    const std::optional<std::string>& asked = (*values)[2 * i];
    const std::optional<std::string>& taken = (*values)[2 * i + 1];
    if (asked && !(taken && *taken == *asked)) out.push_back(outside[i]);
  }
  out = admissible(std::move(out), job.layout, min_tp);
  // Seen once none is left to admit: an admission that did not complete is looked for again.
  if (out.empty()) seen = notices;
  return out;
}

Status admit(const WorkerContext& ctx, const std::string& group, const std::vector<int>& joiners,
             const elastic::MemberList& last) {
  const std::string text = elastic::encode(last);
  for (int r : joiners) {
    NTP_ASSIGN_OR_RETURN(std::string restart, ctx.store->get(join_key(group, r)));
    NTP_RETURN_IF_ERROR(
        ctx.store->set(group + "/admit/" + std::to_string(r) + "/" + restart, text));
    NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, r) + "/taken", restart));
  }
  return ok_status();
}

Status job_still_running(const WorkerContext& ctx, const std::string& group) {
  if (Result<bool> finished = ctx.store->exists(group + "/finished"); finished.ok() && *finished) {
    return Status(StatusCode::kAborted, "the job finished before this worker was admitted");
  }
  if (Result<bool> stopped = ctx.store->exists(stopped_key(group)); stopped.ok() && *stopped) {
    return Status(StatusCode::kAborted, "the job stopped before this worker was admitted");
  }
  return ok_status();
}

Result<elastic::MemberList> wait_for_admission(const WorkerContext& ctx, const std::string& group,
                                               const std::string& ticket,
                                               elastic::Progress& progress,
                                               std::chrono::seconds patience) {
  NTP_RETURN_IF_ERROR(ctx.store->set(join_key(group, ctx.slot_rank), ticket));
  NTP_RETURN_IF_ERROR(elastic::post_join_notice(*ctx.store, group, ctx.slot_rank));  // after it
  const std::string key = group + "/admit/" + std::to_string(ctx.slot_rank) + "/" + ticket;
  const Clock::time_point start = Clock::now();
  while (true) {
    progress.mark(elastic::Phase::kJoin, -1);
    Result<std::string> text = ctx.store->get(key);
    if (text.ok()) return elastic::decode_member_list(*text);
    NTP_RETURN_IF_ERROR(job_still_running(ctx, group));
    if (seconds_since(start) > static_cast<double>(patience.count())) {
      return unavailable("not admitted within " + std::to_string(patience.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace ntp::train
