// Admission of repairs: a replacement worker (NTP_RESTART_COUNT > 0), or a worker whose replica
// left the job (parked below --min-tp), writes "<group>/join/<rank>" = its ticket, posts a join
// notice on the job's events (elastic/agreement.h) and waits. Every failure watch counts those
// notices; when the job's world rank 0 sees the count move, it says so in the next step's
// totals (live_step.cpp), looks for the requests at the step boundary after it, tells everyone
// (a broadcast), then writes "<group>/admit/<rank>/<ticket>" = the members' last member list,
// from which the joiner enters the same agreement as the members (docs/recovery.md). A ticket is
// the restart count, then for a parked worker ".p<epoch>" (the epoch that parked it): each
// request of one incarnation is admitted once.
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

// "<group>/stopped": the job stopped (live recovery could not go on); parked workers leave.
std::string stopped_key(const std::string& group);

// World rank 0: the slots asking to join that were not admitted yet (an unreadable request counts
// as none, to be seen at a later boundary), less those of a domain that left the job while they
// are fewer than `min_tp` (admitted, they would be parked again: a later request of their domain
// looks again). `notices`: the join notices its watch has read; `seen`: their count at the last
// look that left none to admit. While `notices` == `seen` the look is no store I/O at all; else
// it is one get_many (every slot out of the job: its request and its admission).
std::vector<int> joiners_asking(const WorkerContext& ctx, const std::string& group, const Job& job,
                                int min_tp, std::int64_t notices, std::int64_t& seen);

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
