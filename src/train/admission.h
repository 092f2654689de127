// Admission of repairs: a replacement worker (NTP_RESTART_COUNT > 0), or a worker whose replica
// left the job (parked below --min-tp), writes "<group>/join/<rank>" = its ticket and waits;
// world rank 0 of the job looks for such keys at every step boundary and tells everyone (a
// broadcast), then writes "<group>/admit/<rank>/<ticket>" = the members' last member list, from
// which the joiner enters the same agreement as the members (docs/recovery.md). A ticket is the
// restart count, then for a parked worker ".p<epoch>" (the epoch that parked it): each request of
// one incarnation is admitted once.
#pragma once

#include <chrono>
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

// "<group>/stopped": the job stopped (live recovery could not go on); parked workers leave.
std::string stopped_key(const std::string& group);

// World rank 0: the slots asking to join that were not admitted yet (an unreadable request counts
// as none, to be seen at a later boundary), less those of a domain that left the job while they
// are fewer than `min_tp` (admitted, they would be parked again). `seen`: the request count of
// the last look that found none pending; while the count stays there, the look is one store read
// (not two per slot).
std::vector<int> joiners_asking(const WorkerContext& ctx, const std::string& group, const Job& job,
                                int min_tp, int64_t& seen);

// World rank 0: admits `joiners` with the members' last list `last`.
Status admit(const WorkerContext& ctx, const std::string& group, const std::vector<int>& joiners,
             const elastic::MemberList& last);

// kAborted naming why when the job finished or stopped (a worker outside it then leaves); ok else.
Status job_still_running(const WorkerContext& ctx, const std::string& group);

// A joiner's wait under `ticket`: the members' last list once world rank 0 admitted it.
// kAborted when the job finished or stopped first; kUnavailable after `patience`.
Result<elastic::MemberList> wait_for_admission(const WorkerContext& ctx, const std::string& group,
                                               const std::string& ticket,
                                               elastic::Progress& progress,
                                               std::chrono::seconds patience);

}  // namespace ntp::train
