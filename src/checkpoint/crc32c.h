// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and safetensors tooling): the checksum of
// every chunk of checkpoint data.
//
// crc32c(data) equals the standard CRC-32C (reflected, init and final xor 0xFFFFFFFF): the check
// value of "123456789" is 0xE3069283. On x86-64 CPUs with SSE4.2 the hardware instruction is used
// (chosen once at run time); elsewhere a table-driven software version gives the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ntp::checkpoint {

// CRC-32C of `data`.
uint32_t crc32c(std::span<const std::byte> data);
// Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a followed by b).
uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> data);

// The portable version, exposed so that tests can compare it with the hardware one.
uint32_t crc32c_extend_portable(uint32_t crc, std::span<const std::byte> data);
// True when crc32c uses the SSE4.2 instruction on this machine.
bool crc32c_hardware_available();

}  // namespace ntp::checkpoint
