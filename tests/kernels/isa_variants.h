// Runs a test body once per kernel ISA variant the host supports (baseline, AVX2, AVX-512; see
// kernels/cpu/isa.h), with the variant named in failure messages.
#pragma once

#include <gtest/gtest.h>

#include "kernels/cpu/isa.h"

namespace ntp::kernels {

template <class Body>
void for_each_isa(Body&& body) {
  const cpu::Isa saved = cpu::active_isa();
  for (cpu::Isa isa : cpu::supported_isas()) {
    cpu::set_active_isa(isa);
    SCOPED_TRACE(std::string("kernel ISA variant ") + cpu::isa_name(isa));
    body(isa);
  }
  cpu::set_active_isa(saved);
}

}  // namespace ntp::kernels
