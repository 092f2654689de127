// Child process of crash_test: saves checkpoint 1 completely, prints "committed 1", then saves
// checkpoint 2, printing "piece N" before every piece and pausing in the second writer's shard, so
// that the parent can SIGKILL it in the middle of the save.
//
//   ckpt_crash_child SAVE_DIR
#include <chrono>
#include <cstdio>
#include <thread>

#include "ckpt_test_util.h"

int main(int argc, char** argv) {
  using namespace ntp::checkpoint;
  if (argc != 2) {
    std::fprintf(stderr, "usage: ckpt_crash_child SAVE_DIR\n");
    return 2;
  }
  const auto ranks = testing::make_ranks(testing::tiny_config(), 2, 4);
  testing::SaveSpec spec;
  spec.step = 1;
  if (!testing::save_ranks(argv[1], ranks, spec).ok()) return 1;
  std::printf("committed 1\n");
  std::fflush(stdout);
  spec.step = 2;
  // Pieces are numbered across both writers: rank 0 writes 84 (all of its params, 3 kinds), rank
  // 1 writes 84..122, each after a pause, which leaves the parent seconds to kill it mid-shard.
  spec.write_options.before_piece = [count = size_t{0}](size_t) mutable {
    std::printf("piece %zu\n", count);
    std::fflush(stdout);
    if (count++ >= 84) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  const auto saved = testing::save_ranks(argv[1], ranks, spec);
  std::printf("committed 2 (the parent should have killed this process)\n");
  return saved.ok() ? 0 : 1;
}
