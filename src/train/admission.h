// Admission of repairs: a replacement worker (NTP_RESTART_COUNT > 0) writes
// "<group>/join/<rank>" = its restart count and waits; world rank 0 of the job looks for such keys
// at every step boundary and tells everyone (a broadcast), then writes
// "<group>/admit/<rank>/<restart>" = the members' last member list, from which the joiner enters
// the same agreement as the members (docs/recovery.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "train/job.h"

namespace ntp::train {

std::string join_key(const std::string& group, int rank);

// "<group>/join_requests": a counter every joiner raises after writing its request.
std::string join_requests_key(const std::string& group);

// World rank 0: the slots asking to join that were not admitted yet (an unreadable request counts
// as none, to be seen at a later boundary). `seen`: the request count of the last look that found
// none pending; while the count stays there, the look is one store read (not two per slot).
std::vector<int> joiners_asking(const WorkerContext& ctx, const std::string& group, const Job& job,
                                int64_t& seen);

// World rank 0: admits `joiners` with the members' last list `last`.
Status admit(const WorkerContext& ctx, const std::string& group, const std::vector<int>& joiners,
             const elastic::MemberList& last);

// A joiner's wait: the members' last list once world rank 0 admitted it. kAborted when the job
// finished first; kUnavailable after 10 minutes.
Result<elastic::MemberList> wait_for_admission(const WorkerContext& ctx, const std::string& group,
                                               elastic::Progress& progress);

}  // namespace ntp::train
