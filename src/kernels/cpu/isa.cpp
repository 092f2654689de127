#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>

#include "core/named_values.h"

namespace ntp::kernels::cpu {
namespace {

constexpr NamedValue<Isa> kIsaNames[] = {
    {Isa::kBaseline, "baseline"}, {Isa::kAvx2, "avx2"}, {Isa::kAvx512, "avx512"}};

unsigned long long xgetbv0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c & (1u << 27)) != 0;
  if (!osxsave) return f;
  const unsigned long long xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;
  f.avx = ymm_state && (c & (1u << 28)) != 0;
  f.fma = f.avx && (c & (1u << 12)) != 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return f;
  const unsigned max_sub = a;
  f.avx2 = f.avx && (b & (1u << 5)) != 0;
  f.avx512f = zmm_state && (b & (1u << 16)) != 0;
  f.avx512dq = f.avx512f && (b & (1u << 17)) != 0;
  f.avx512cd = f.avx512f && (b & (1u << 28)) != 0;
  f.avx512bw = f.avx512f && (b & (1u << 30)) != 0;
  f.avx512vl = f.avx512f && (b & (1u << 31)) != 0;
  const bool amx_state = (xcr0 & (3ull << 17)) == (3ull << 17);
  f.amx_tile = amx_state && (d & (1u << 24)) != 0;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0) {
    f.avx512_bf16 = f.avx512f && (a & (1u << 5)) != 0;
  }
  return f;
}

Isa best_of(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx2 && f.fma) return Isa::kAvx512;
  if (f.avx2 && f.fma) return Isa::kAvx2;
  return Isa::kBaseline;
}

Isa lowered(Isa isa) {
  return static_cast<int>(isa) > static_cast<int>(host_isa()) ? host_isa() : isa;
}

Isa initial_isa() {
  const char* env = std::getenv("NTP_ISA");
  if (env != nullptr) {
    if (const std::optional<Isa> isa = value_named(kIsaNames, env)) return lowered(*isa);
  }
  return host_isa();
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(initial_isa())};
  return slot;
}

}  // namespace

const CpuFeatures& host_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* isa_name(Isa isa) { return name_of(kIsaNames, isa); }

Isa host_isa() {
  static const Isa isa = best_of(host_cpu_features());
  return isa;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(host_isa())) out.push_back(isa);
  }
  return out;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

Isa set_active_isa(Isa isa) {
  return static_cast<Isa>(active_slot().exchange(static_cast<int>(lowered(isa))));
}

std::string cpu_feature_list(const CpuFeatures& f) {
  std::string out;
  const std::pair<bool, const char*> flags[] = {
      {f.avx, "avx"},           {f.avx2, "avx2"},         {f.fma, "fma"},
      {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"},
      {f.avx512dq, "avx512dq"}, {f.avx512cd, "avx512cd"}, {f.avx512_bf16, "avx512_bf16"},
      {f.amx_tile, "amx_tile"}};
  for (const auto& [set, name] : flags) {
    if (!set) continue;
    if (!out.empty()) out += ' ';
    out += name;
  }
  return out;
}

}  // namespace ntp::kernels::cpu
