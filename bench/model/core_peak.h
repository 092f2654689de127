// The float32 FMA peak of one core, three ways, for benchmarks that report model FLOP/s against
// it (train_step_bench, gemm_backends_bench):
//   measured   a register-only loop of independent 256-bit FMAs on one thread
//   by clock   2 FMA units x 8 float32 lanes (256 bits) x 2 FLOPs x the core clock, with the clock
//              measured as the rate of a chain of dependent integer adds (1 cycle each on every
//              x86-64 core since the Pentium Pro), so it is the clock the core actually ran at,
//              turbo and hypervisor included, not a number from a table
//   nominal    the same with /proc/cpuinfo's "cpu MHz" (what the kernel was told; under a
//              hypervisor often the TSC rate)
// 2 x 256-bit FMA pipes is Haswell through Zen 4 with AVX2; AVX-512 hosts with two 512-bit FMA
// units have twice this (the measured loop, 256-bit, does not see it).
#pragma once

namespace ntp::bench {

struct CorePeak {
  double measured_flops = 0;  // 0 without AVX2+FMA
  double clock_hz = 0;        // measured
  double nominal_hz = 0;      // /proc/cpuinfo, 0 when absent
  double by_clock_flops() const { return 32.0 * clock_hz; }
  double nominal_flops() const { return 32.0 * nominal_hz; }
};

// Best of 15 short runs of each loop by thread CPU time (~0.3 s in all).
CorePeak measure_core_peak();

}  // namespace ntp::bench
