// A worker's own compute speed, measured without its peers: what a worker dropped as too slow
// (--drop-below) watches to know when to ask to rejoin (train/live_run.h, LiveRun::sit_out).
//
// The workload is a fixed float product (128 x 128 x 128, 8 times: 34 MFLOP, a few milliseconds),
// timed in this thread's CPU seconds, so that other processes sharing the core do not count; the
// best of three runs. A throttled worker's training compute takes 1/factor as long
// (LiveRun::throttle), and so does its probe: probe_speed divides by the factor the same way.
#pragma once

namespace ntp::train {

// CPU seconds of one run of the workload, the best of three.
double probe_cpu_seconds();

// The worker's speed relative to its own baseline (probe_cpu_seconds at full speed) at
// compute factor `factor` (1: unthrottled): baseline / (probe / factor).
double probe_speed(double baseline_s, double factor);

}  // namespace ntp::train
