// libFuzzer target: the manifest parser and the safetensors header reader on arbitrary bytes.
// The first byte picks the parser ('M': manifest, anything else: safetensors file). Properties:
// no crash, no hang, no exception; every rejection is a kInvalidArgument Status with a message;
// an accepted manifest serializes to text that parses to the same text; parse_manifest (with its
// fast path for the canonical text) and parse_manifest_dom give the same manifest or error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

namespace {

void check_rejection(const ntp::Status& s) {
  if (s.code() != ntp::StatusCode::kInvalidArgument || s.message().empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'M') {
    ntp::Result<ntp::checkpoint::Manifest> m = ntp::checkpoint::parse_manifest(input);
    ntp::Result<ntp::checkpoint::Manifest> dom = ntp::checkpoint::parse_manifest_dom(input);
    if (m.ok() != dom.ok()) std::abort();
    if (!m.ok() && m.status().message() != dom.status().message()) std::abort();
    if (m.ok() &&
        ntp::checkpoint::manifest_to_string(*m) != ntp::checkpoint::manifest_to_string(*dom)) {
      std::abort();
    }
    if (!m.ok()) {
      check_rejection(m.status());
      return 0;
    }
    const std::string text = ntp::checkpoint::manifest_to_string(*m);
    ntp::Result<ntp::checkpoint::Manifest> again = ntp::checkpoint::parse_manifest(text);
    if (!again.ok() || ntp::checkpoint::manifest_to_string(*again) != text) std::abort();
  } else {
    ntp::Result<ntp::checkpoint::SafetensorsHeader> h =
        ntp::checkpoint::parse_safetensors_header(input, input.size());
    if (!h.ok()) check_rejection(h.status());
  }
  return 0;
}
