// Writes a checkpoint for tests that run outside C++ (the Python safetensors check, the fuzz
// seed corpus): a tiny GPT-2 saved by 3 ranks of a shuffled layout at step 42, with moments and
// replicated tensors split into row ranges, plus the logical weights as a reference:
//   REF_DIR/reference.json   [{"name", "shape", "offset"}] (offset in floats into reference.bin)
//   REF_DIR/reference.bin    every logical "value" tensor, float32 little-endian, concatenated
// With --fuzz-seeds DIR, also writes fuzz seeds: "M" + manifest.json, "S" + a shard file.
//
//   ckpt_fixture SAVE_DIR REF_DIR [--fuzz-seeds DIR]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "ckpt_test_util.h"

namespace {

namespace fs = std::filesystem;

}  // namespace

int main(int argc, char** argv) {
  using namespace ntp::checkpoint;
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--fuzz-seeds")) {
    std::fprintf(stderr, "usage: ckpt_fixture SAVE_DIR REF_DIR [--fuzz-seeds DIR]\n");
    return 2;
  }
  const fs::path save_dir = argv[1], ref_dir = argv[2];
  const auto config = testing::tiny_config();
  testing::SaveSpec spec;
  spec.step = 42;
  spec.split_replicated = true;
  spec.write_options.chunk_bytes = 256;
  auto saved = testing::save_ranks(save_dir, testing::make_ranks(config, 3, 17), spec);
  if (!saved.ok()) {
    std::fprintf(stderr, "ckpt_fixture: %s\n", saved.status().to_string().c_str());
    return 1;
  }
  fs::create_directories(ref_dir);
  const auto logical = testing::make_ranks(config, 1, 0);
  nlohmann::json index = nlohmann::json::array();
  std::ofstream bin(ref_dir / "reference.bin", std::ios::binary);
  int64_t offset = 0;
  for (const ntp::model::Param& p : logical[0].params()) {
    index.push_back({{"name", p.name}, {"shape", p.logical_shape}, {"offset", offset}});
    bin.write(reinterpret_cast<const char*>(p.value.data()),
              static_cast<std::streamsize>(p.value.numel() * 4));
    offset += p.value.numel();
  }
  std::ofstream(ref_dir / "reference.json") << index.dump(1) << "\n";
  if (argc == 5) {
    const fs::path seeds = argv[4];
    fs::create_directories(seeds);
    const fs::path step = step_dir_path(save_dir, 42);
    std::ofstream(seeds / "manifest", std::ios::binary)
        << "M" << testing::read_all(step / kManifestFile);
    std::ofstream(seeds / "shard", std::ios::binary)
        << "S" << testing::read_all(step / "shard_1.safetensors");
  }
  std::printf("wrote %s and %s\n", save_dir.c_str(), ref_dir.c_str());
  return 0;
}
