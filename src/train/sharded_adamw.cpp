#include "train/sharded_adamw.h"

#include "core/check.h"

namespace ntp::train {

ShardedAdamW::ShardedAdamW(std::vector<std::vector<float>> master, kernels::cpu::AdamWHyper hyper)
    : hyper_(hyper), master_(std::move(master)) {
  for (const std::vector<float>& w : master_) {
    m_.emplace_back(w.size(), 0.0f);
    v_.emplace_back(w.size(), 0.0f);
  }
}

void ShardedAdamW::step(const std::vector<OwnedChunk>& chunks,
                        const std::vector<model::Param>& params, float lr, float grad_scale) {
  NTP_CHECK(chunks.size() == master_.size());
  ++steps_;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const OwnedChunk& chunk = chunks[c];
    NTP_CHECK(chunk.grad.size() == master_[c].size());
    const auto& blocks = chunk.layout.blocks();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int64_t begin = blocks[i].offset;
      const int64_t end = chunk.layout.block_end(i);
      kernels::cpu::AdamWHyper h = hyper_;
      h.lr = lr;
      if (params[static_cast<size_t>(blocks[i].param)].logical_shape.size() != 2) {
        h.weight_decay = 0.0f;
      }
      // The clip scale is applied inside the update: the reduced gradient stays as it was
      // reduced (the norm was taken from it).
      kernels::cpu::adamw_step(master_[c].data() + begin, chunk.grad.data() + begin,
                               m_[c].data() + begin, v_[c].data() + begin, end - begin, steps_, h,
                               grad_scale);
    }
  }
}

}  // namespace ntp::train
