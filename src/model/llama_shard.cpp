#include "model/llama_shard.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "core/rng.h"

namespace ntp::model {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

// Rank r of `degree` gets units [n r / degree, n (r + 1) / degree) of `order`.
std::vector<std::vector<int64_t>> deal(const std::vector<int64_t>& order, int degree) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(degree));
  const int64_t n = static_cast<int64_t>(order.size());
  for (int r = 0; r < degree; ++r) {
    out[static_cast<size_t>(r)].assign(order.begin() + n * r / degree,
                                       order.begin() + n * (r + 1) / degree);
  }
  return out;
}

std::vector<int64_t> shuffled(int64_t n, Rng& rng) {
  std::vector<int64_t> v = iota(n);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
  return v;
}

std::vector<LlamaShard> assemble(const std::vector<std::vector<int64_t>>& heads,
                                 const std::vector<std::vector<int64_t>>& ffn,
                                 const std::vector<std::vector<int64_t>>& vocab,
                                 const std::vector<std::vector<int64_t>>& head_rows) {
  std::vector<LlamaShard> layout(heads.size());
  for (size_t r = 0; r < layout.size(); ++r) {
    layout[r] = LlamaShard{heads[r], ffn[r], vocab[r], head_rows[r]};
  }
  return layout;
}

Status check_space(const char* space, int64_t count,
                   const std::vector<const std::vector<int64_t>*>& lists, bool require_all) {
  std::vector<int> seen(static_cast<size_t>(count), 0);
  for (const auto* list : lists) {
    for (int64_t u : *list) {
      if (u < 0 || u >= count) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is out of range [0, " + std::to_string(count) + ")");
      }
      if (++seen[static_cast<size_t>(u)] > 1) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is assigned more than once");
      }
    }
  }
  if (require_all) {
    for (int64_t u = 0; u < count; ++u) {
      if (seen[static_cast<size_t>(u)] == 0) {
        return invalid_argument(std::string(space) + " unit " + std::to_string(u) +
                                " is assigned to no rank");
      }
    }
  }
  return ok_status();
}

}  // namespace

std::vector<int64_t> kv_groups(const LlamaConfig& config, const LlamaShard& shard) {
  std::vector<int64_t> groups;
  for (int64_t h : shard.heads) groups.push_back(config.kv_group(h));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

bool owns_kv_group(const LlamaConfig& config, const LlamaShard& shard, int64_t g) {
  const int64_t first = g * config.q_per_kv();
  return std::find(shard.heads.begin(), shard.heads.end(), first) != shard.heads.end();
}

LlamaShard full_shard(const LlamaConfig& config) {
  return LlamaShard{iota(config.n_head), iota(config.ffn_units()), iota(config.vocab_size),
                    iota(config.vocab_size)};
}

std::vector<LlamaShard> contiguous_layout(const LlamaConfig& config, int degree) {
  NTP_CHECK(degree >= 1);
  return assemble(deal(iota(config.n_head), degree), deal(iota(config.ffn_units()), degree),
                  deal(iota(config.vocab_size), degree), deal(iota(config.vocab_size), degree));
}

std::vector<LlamaShard> shuffled_layout(const LlamaConfig& config, int degree, uint64_t seed) {
  NTP_CHECK(degree >= 1);
  Rng rng(seed);
  auto heads = deal(shuffled(config.n_head, rng), degree);
  auto ffn = deal(shuffled(config.ffn_units(), rng), degree);
  auto vocab = deal(shuffled(config.vocab_size, rng), degree);
  auto head_rows = deal(shuffled(config.vocab_size, rng), degree);
  return assemble(heads, ffn, vocab, head_rows);
}

Status validate_shard(const LlamaConfig& config, const LlamaShard& shard) {
  NTP_RETURN_IF_ERROR(check_space("query head", config.n_head, {&shard.heads}, false));
  NTP_RETURN_IF_ERROR(check_space("ffn", config.ffn_units(), {&shard.ffn_units}, false));
  NTP_RETURN_IF_ERROR(check_space("vocabulary", config.vocab_size, {&shard.vocab_rows}, false));
  return check_space("lm_head row", config.vocab_size, {&shard.head_rows}, false);
}

Status validate_layout(const LlamaConfig& config, const std::vector<LlamaShard>& layout) {
  if (layout.empty()) return invalid_argument("a TP layout needs at least one rank");
  std::vector<const std::vector<int64_t>*> heads, ffn, vocab, head_rows;
  for (const LlamaShard& s : layout) {
    heads.push_back(&s.heads);
    ffn.push_back(&s.ffn_units);
    vocab.push_back(&s.vocab_rows);
    head_rows.push_back(&s.head_rows);
  }
  NTP_RETURN_IF_ERROR(check_space("query head", config.n_head, heads, true));
  NTP_RETURN_IF_ERROR(check_space("ffn", config.ffn_units(), ffn, true));
  NTP_RETURN_IF_ERROR(check_space("vocabulary", config.vocab_size, vocab, true));
  return check_space("lm_head row", config.vocab_size, head_rows, true);
}

}  // namespace ntp::model
