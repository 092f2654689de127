#include "checkpoint/manifest_scan.h"

#include <cctype>
#include <cstdint>
#include <string>

namespace ntp::checkpoint {
namespace {

// A cursor over the text; every method returns false when the text is not of the accepted form.
class Scanner {
 public:
  Scanner(std::string_view text, size_t pos) : s_(text), i_(pos) {}
  size_t pos() const { return i_; }

  void skip_ws() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  // Skips whitespace, then consumes `c` if it is next.
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  // A string of printable ASCII other than '"' and '\\'.
  bool string(std::string_view* out) {
    if (!eat('"')) return false;
    const size_t begin = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c < 0x20 || c >= 0x7F || c == '\\') return false;
      ++i_;
    }
    if (i_ == s_.size()) return false;
    *out = s_.substr(begin, i_ - begin);
    ++i_;
    return true;
  }
  bool string(std::string* out) {
    std::string_view v;
    if (!string(&v)) return false;
    out->assign(v);
    return true;
  }
  // A JSON integer without sign: 0, or a non-zero digit then digits; at most 19 digits.
  bool unsigned_int(uint64_t* out) {
    skip_ws();
    const size_t begin = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[i_] - '0');
      ++i_;
    }
    const size_t digits = i_ - begin;
    if (digits == 0 || digits > 19 || (digits > 1 && s_[begin] == '0')) return false;
    // Not the start of a fraction or exponent (a float in JSON, not an integer).
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return false;
    *out = v;
    return true;
  }
  // The integer -1 (the sign directly before the digit, as JSON has it).
  bool minus_one() {
    skip_ws();
    if (s_.substr(i_, 2) != "-1") return false;
    i_ += 2;
    return i_ == s_.size() || !(std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                s_[i_] == 'e' || s_[i_] == 'E');
  }
  bool key(std::string_view name) {
    std::string_view k;
    return string(&k) && k == name && eat(':');
  }
  // [u, u, ...] of at most `max` entries (empty allowed).
  bool unsigned_array(std::vector<uint64_t>* out, size_t max) {
    if (!eat('[')) return false;
    if (eat(']')) return true;
    do {
      uint64_t v = 0;
      if (out->size() == max || !unsigned_int(&v)) return false;
      out->push_back(v);
    } while (eat(','));
    return eat(']');
  }

 private:
  std::string_view s_;
  size_t i_;
};

// A shape as get_shape (records.cpp) accepts it: at most kMaxRank dims of at most kMaxDim.
bool shape(Scanner& in, std::vector<int64_t>* out) {
  std::vector<uint64_t> dims;
  if (!in.unsigned_array(&dims, kMaxRank)) return false;
  for (uint64_t d : dims) {
    if (d > kMaxDim) return false;
    out->push_back(static_cast<int64_t>(d));
  }
  return true;
}

bool index_runs(Scanner& in, std::vector<RawRun>* out) {
  if (!in.eat('[')) return false;
  if (in.eat(']')) return true;
  do {
    RawRun run;
    if (in.peek('[')) {
      std::vector<uint64_t> pair;
      if (!in.unsigned_array(&pair, 2) || pair.size() != 2) return false;
      run = {RawRun::kRun, pair[0], pair[1]};
    } else if (!in.unsigned_int(&run.begin)) {
      return false;
    } else {
      run.kind = RawRun::kId;
    }
    out->push_back(run);
  } while (in.eat(','));
  return in.eat(']');
}

// One piece object, keys in dump() order.
bool piece(Scanner& in, PieceFields* f) {
  PieceRecord& r = f->record;
  if (!in.eat('{') || !in.key("axis")) return false;
  if (in.peek('-')) {
    if (!in.minus_one()) return false;  // the only negative axis allowed
    r.spec.axis = -1;
  } else {
    uint64_t axis = 0;
    if (!in.unsigned_int(&axis) || axis > 15) return false;
    r.spec.axis = static_cast<int>(axis);
  }
  uint64_t chunk = 0;
  if (!in.eat(',') || !in.key("chunk_bytes") || !in.unsigned_int(&chunk) || chunk < 4 ||
      chunk > static_cast<uint64_t>(kMaxChunkBytes)) {
    return false;
  }
  r.chunk_bytes = static_cast<int64_t>(chunk);
  std::vector<uint64_t> crcs;
  if (!in.eat(',') || !in.key("crc32c") || !in.unsigned_array(&crcs, SIZE_MAX)) return false;
  f->crcs_is_array = true;
  f->crcs.reserve(crcs.size());
  for (uint64_t c : crcs) f->crcs.push_back(c <= 0xFFFFFFFFu ? static_cast<int64_t>(c) : -1);
  if (!in.eat(',') || !in.key("file") || !in.string(&r.file)) return false;
  if (!in.eat(',') || !in.key("index") || !index_runs(in, &f->index)) return false;
  f->index_is_array = true;
  if (!in.eat(',') || !in.key("key") || !in.string(&r.key)) return false;
  if (!in.eat(',') || !in.key("kind") || !in.string(&r.spec.kind)) return false;
  if (!in.eat(',') || !in.key("logical_shape") || !shape(in, &r.spec.logical_shape)) return false;
  if (!in.eat(',') || !in.key("shape") || !shape(in, &f->shape)) return false;
  if (!in.eat(',') || !in.key("tensor") || !in.string(&r.spec.tensor)) return false;
  return in.eat('}');
}

}  // namespace

std::optional<std::vector<PieceFields>> scan_pieces(std::string_view text, size_t* pos) {
  Scanner in(text, *pos);
  std::vector<PieceFields> out;
  if (!in.eat('[')) return std::nullopt;
  if (!in.eat(']')) {
    do {
      if (!piece(in, &out.emplace_back())) return std::nullopt;
    } while (in.eat(','));
    if (!in.eat(']')) return std::nullopt;
  }
  *pos = in.pos();
  return out;
}

}  // namespace ntp::checkpoint
