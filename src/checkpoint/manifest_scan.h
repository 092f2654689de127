// The fast path of parse_manifest: the "pieces" array in the exact form manifest_to_string writes
// it, read without building a JSON DOM (the DOM took most of CheckpointReader::open's time for a
// sharded model's thousand pieces).
//
// Accepted: an array of objects, each with exactly the keys piece_record_to_json writes, in the
// order nlohmann's dump() prints them (axis, chunk_bytes, crc32c, file, index, key, kind,
// logical_shape, shape, tensor); strings of printable ASCII without escapes; integers without
// sign (but axis -1), fraction or exponent; JSON whitespace between tokens. Anything else, or a
// value outside the ranges piece_record_from_json's type checks allow, returns nullopt: the caller
// then parses the whole manifest with the general JSON parser, which names the error. What it
// returns is finish_piece's input (records.h), so both paths accept exactly the same records.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "checkpoint/records.h"

namespace ntp::checkpoint {

// Scans the array starting at text[*pos] (a '['); on success *pos is just past its ']'.
std::optional<std::vector<PieceFields>> scan_pieces(std::string_view text, size_t* pos);

}  // namespace ntp::checkpoint
