// What a benchmark prints about the machine it ran on, so that figures can be compared.
#pragma once

#include <string>

namespace ntp::bench {

// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model();

// "CPU model, N cores, M GiB RAM" (best effort, from /proc), then compute_description().
std::string machine_description();

// "; <BLAS, its kernel set (and how it was chosen), ISA of ntp's kernels, BLAS threads>" when the
// kernels are part of the build (kernels::cpu::blas_description()), else "".
std::string compute_description();

// Prints "# <program argv[1] ...>" and "# machine: <machine_description()>" to stderr: the command
// that reproduces a bench's figures and the machine they came from.
void print_command_and_machine(const std::string& program, int argc, char** argv);

}  // namespace ntp::bench
