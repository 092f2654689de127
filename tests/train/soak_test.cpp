// The soak target (not in the default suite: `scripts/soak.sh`, ctest label `soak`): the chaos run
// of the live-recovery suite at 100 faults (80 SIGKILLs, 20 SIGSTOPs, each repaired), about 1,100
// steps of a 3 x 4 job, against a failure-free run of the same length.
#include <gtest/gtest.h>

#include "recovery_jobs.h"

namespace ntp::train {
namespace {

TEST(SoakTest, HundredKillsHangsAndRepairs) { run_chaos("soak", 1700, 100, 7); }

}  // namespace
}  // namespace ntp::train
