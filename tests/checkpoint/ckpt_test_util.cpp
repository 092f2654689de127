#include "ckpt_test_util.h"

#include <fstream>
#include <numeric>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_pieces.h"
#include "core/check.h"
#include "model_shapes.h"

namespace ntp::checkpoint::testing {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

model::GptConfig tiny_config() { return ntp::testing::tiny_gpt(/*vocab_size=*/260); }

nlohmann::json model_config_json(const model::GptConfig& c) {
  return {{"n_layer", c.n_layer},  {"n_head", c.n_head}, {"n_embd", c.n_embd},
          {"n_ffn", c.n_ffn},      {"n_ctx", c.n_ctx},   {"vocab_size", c.vocab_size},
          {"ffn_unit", c.ffn_unit}};
}

std::vector<model::GptModel> make_ranks(const model::GptConfig& config, int degree,
                                        uint64_t layout_seed, uint64_t init_seed) {
  const std::vector<model::TpShard> layout =
      layout_seed == 0 ? model::contiguous_layout(config, degree)
                       : model::shuffled_layout(config, degree, layout_seed);
  std::vector<model::GptModel> ranks;
  for (const model::TpShard& shard : layout) {
    ranks.push_back(model::GptModel::create(config, shard, init_seed).value());
  }
  return ranks;
}

float fake_exp_avg(float value) { return value * 0.25f + 1.0f; }
float fake_exp_avg_sq(float value) { return value * value; }

RankPieces rank_pieces(const std::vector<model::GptModel>& ranks, size_t rank,
                       const SaveSpec& spec) {
  RankPieces out;
  const auto degree = static_cast<int64_t>(ranks.size());
  std::vector<PieceSpec> specs;
  std::vector<std::vector<float>> values;
  for (const model::Param& p : ranks[rank].params()) {
    PieceSpec piece = param_piece(p, "value");
    std::vector<float> data(p.value.span().begin(), p.value.span().end());
    if (p.replicated() && spec.split_replicated) {
      // Rows [begin, end) of axis 0 for this rank; other rows are written by the other ranks.
      const int64_t rows = p.logical_shape[0];
      const int64_t row_len = p.value.numel() / rows;
      const int64_t begin = rows * static_cast<int64_t>(rank) / degree;
      const int64_t end = rows * static_cast<int64_t>(rank + 1) / degree;
      piece.axis = 0;
      piece.index.resize(static_cast<size_t>(end - begin));
      std::iota(piece.index.begin(), piece.index.end(), begin);
      data.assign(p.value.span().begin() + begin * row_len, p.value.span().begin() + end * row_len);
    } else if (p.replicated() && rank != 0) {
      continue;
    }
    specs.push_back(piece);
    values.push_back(data);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    out.data.push_back(values[i]);
    out.views.push_back({specs[i], {}});
    if (!spec.moments) continue;
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      std::vector<float> m = values[i];
      const bool sq = std::string(kind) == "exp_avg_sq";
      for (float& v : m) v = sq ? fake_exp_avg_sq(v) : fake_exp_avg(v);
      PieceSpec s = specs[i];
      s.kind = kind;
      out.data.push_back(std::move(m));
      out.views.push_back({s, {}});
    }
  }
  for (size_t i = 0; i < out.views.size(); ++i) out.views[i].data = out.data[i];
  return out;
}

Result<Manifest> save_ranks(const std::filesystem::path& save_dir,
                            const std::vector<model::GptModel>& ranks, const SaveSpec& spec) {
  NTP_ASSIGN_OR_RETURN(const std::filesystem::path dir, prepare_step_dir(save_dir, spec.step));
  std::vector<ShardRecord> records;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankPieces pieces = rank_pieces(ranks, r, spec);
    NTP_ASSIGN_OR_RETURN(ShardRecord record,
                         write_shard(dir, std::to_string(r), pieces.views, spec.write_options));
    // Through a string, as the trainer's gather does.
    NTP_ASSIGN_OR_RETURN(ShardRecord copy,
                         shard_record_from_string(shard_record_to_string(record)));
    records.push_back(std::move(copy));
  }
  CheckpointMeta meta;
  meta.step = spec.step;
  meta.model_config = model_config_json(ranks[0].config());
  meta.layout = {{"tp_degree", ranks.size()}};
  meta.data = {{"position", spec.step * 1000}};
  return commit_checkpoint(save_dir, meta, records, {.keep_last = spec.keep_last});
}

}  // namespace ntp::checkpoint::testing
