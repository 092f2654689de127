// The soak target (not in the default suite: `scripts/soak.sh`, ctest label `soak`): the chaos run
// of the live-recovery suite at 100 faults (80 SIGKILLs, 20 SIGSTOPs, each repaired), about 1,100
// steps of a 3 x 4 job, against a failure-free run of the same length.
#include <gtest/gtest.h>

#include "recovery_jobs.h"

namespace ntp::train {
namespace {

// Over 1,700 steps rounding differences between layouts grow: the soak showed losses within
// 3.0e-6 of the failure-free run (bound 1e-5, 3.3x) and final weights 4.2e-3 of the change away
// from the replay of its 189 layouts, as far as the failure-free run (4.7e-3; bound 1e-2, 2.4x).
TEST(SoakTest, HundredKillsHangsAndRepairs) { run_chaos("soak", 1700, 100, 7, 1e-5, 1e-2); }

}  // namespace
}  // namespace ntp::train
