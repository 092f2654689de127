// The float32 FMA peak of one core, three ways, for benchmarks that report model FLOP/s against
// it (train_step_bench, gemm_backends_bench):
//   measured   a register-only loop of independent FMAs on one thread, at the widest vector the
//              host has (512 bits with AVX-512F, else 256 bits with AVX2+FMA)
//   by clock   FMA units x float32 lanes x 2 FLOPs x the core clock. The clock is measured as the
//              rate of a chain of dependent 64-bit multiplies (3 cycles each on every x86-64 core
//              since Core 2 and on AMD since K10; an add chain is not used: Golden Cove and later
//              fold dependent adds of an immediate at rename and read 22 GHz), so it is the clock
//              the core actually ran at, turbo and hypervisor included. The units per core (one
//              or two) are the measured loop's FLOPs per cycle over the lanes' 2 x width, rounded:
//              Xeons with one 512-bit FMA unit exist beside ones with two, and no cpuid bit says.
//   nominal    the same with /proc/cpuinfo's "cpu MHz" (what the kernel was told; under a
//              hypervisor often the TSC rate)
#pragma once

#include <string>

namespace ntp::bench {

struct CorePeak {
  double measured_flops = 0;  // 0 without AVX2+FMA
  int lanes = 8;              // float32 lanes of the measured loop's vectors: 16 with AVX-512F
  int fma_units = 2;          // from the measured loop and the clock (see above)
  double clock_hz = 0;        // measured; 0 when the chain gave an impossible rate (> 7 GHz)
  double nominal_hz = 0;      // /proc/cpuinfo, 0 when absent
  double flops_per_cycle() const { return 2.0 * lanes * fma_units; }
  double by_clock_flops() const { return flops_per_cycle() * clock_hz; }
  double nominal_flops() const { return flops_per_cycle() * nominal_hz; }
  // One line: "<measured> GFLOP/s measured (512-bit FMA loop); 2 FMA x 16 lanes x 2 x 3.500 GHz
  // (measured clock) = ... GFLOP/s; at /proc/cpuinfo's ... GHz: ... GFLOP/s".
  std::string describe() const;
  // The reference the benches divide by: by clock when the clock was measured, else measured.
  double reference_flops() const { return clock_hz > 0 ? by_clock_flops() : measured_flops; }
};

// Best of 15 short runs of each loop by thread CPU time (~0.3 s in all).
CorePeak measure_core_peak();

}  // namespace ntp::bench
