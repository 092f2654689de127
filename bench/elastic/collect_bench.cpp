// What the collection of finished epochs (elastic/agreement.h, "Collection") costs the decider
// of an epoch on its re-formation path, against a real redis-server that the bench starts and
// stops: the epochs below are filled as an agreement of N members leaves them (a list of N
// members, N done keys, an announcement stream of N entries and a decider key each),
// then the decider's mark_done, which collects them, is timed beside a plain member's mark_done
// (one SET), and the server's own command count is read around it.
//
//   build/bench/elastic/collect_bench [--members 256,1024,4096,16384] [--epochs 1,4]
//       [--repeats 3] [--redis-server PATH]
//
// One JSON line per (N, epochs): median seconds of each mark_done, their ratio, the store
// commands of one collection, and whether the epochs were collected (their done keys gone,
// their lists tombstones).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_flags.h"
#include "bench_timing.h"
#include "comm/store.h"
#include "elastic/agreement.h"
#include "elastic/member_list.h"
#include "machine_info.h"
#include "redis_process.h"

namespace {

using ntp::bench::median;
using ntp::bench::seconds_of;

constexpr const char* kProgram = "collect_bench";
constexpr const char* kGroup = "train/a0";

struct Options {
  std::vector<int> members{256, 1024, 4096, 16384};
  std::vector<int> epochs{1, 4};
  int repeats = 3;
  std::string redis_server = "redis-server";
};

Options parse(int argc, char** argv) {
  Options o;
  ntp::bench::NumberListFlag members(o.members), epochs(o.epochs);
  ntp::bench::for_each_flag(
      kProgram, argc, argv, [&](const std::string& flag, const std::string& value) {
        if (flag == "--members") {
          members.take(kProgram, flag, value, 2, 131072);
        } else if (flag == "--epochs") {
          epochs.take(kProgram, flag, value, 1, 30);
        } else if (flag == "--repeats") {
          o.repeats = static_cast<int>(ntp::bench::whole_number(kProgram, flag, value, 1, 100));
        } else if (flag == "--redis-server") {
          if (value.empty()) ntp::bench::flag_error(kProgram, "--redis-server '': give a path");
          o.redis_server = value;
        } else {
          ntp::bench::flag_error(kProgram, "unknown flag '" + flag +
                                               "': use --members N[,N...], --epochs E[,E...], "
                                               "--repeats, --redis-server");
        }
      });
  return o;
}

template <typename T>
T or_die(ntp::Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

void or_die(const ntp::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, s.to_string().c_str());
    std::exit(1);
  }
}

std::vector<int> ids(int n) {
  std::vector<int> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}

// Epochs 1..epochs as N members' agreements leave them.
void fill(ntp::comm::Store& store, int n, int epochs) {
  ntp::elastic::MemberList list = ntp::elastic::initial_list(ids(n), n);
  for (int e = 1; e <= epochs; ++e) {
    list.epoch = e;
    list.decider = 0;
    std::vector<std::pair<std::string, std::string>> keys{
        {ntp::elastic::epoch_key(kGroup, e, "list"), ntp::elastic::encode(list)},
        {ntp::elastic::epoch_key(kGroup, e, "decider"), "0"}};
    for (int id = 0; id < n; ++id) keys.emplace_back(ntp::elastic::done_key(kGroup, e, id), "1");
    or_die(store.set_many(keys));
    const std::string alive = ntp::elastic::epoch_key(kGroup, e, "alive");
    for (int id = 0; id < n; ++id) or_die(store.append(alive, std::to_string(id) + " 0 0.0"));
  }
}

ntp::elastic::MemberList next_list(int n, int epoch) {
  ntp::elastic::MemberList list = ntp::elastic::initial_list(ids(n), n);
  list.epoch = epoch;
  list.decider = 0;
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ntp::bench::print_command_and_machine(kProgram, argc, argv);
  bool all_collected = true;
  for (int n : o.members) {
    for (int epochs : o.epochs) {
      std::vector<double> collect_s, plain_s;
      std::int64_t commands = 0;
      bool collected = true;
      for (int r = 0; r < o.repeats; ++r) {
        // A fresh server each time: what the collection erases is the same every repeat.
        const auto server = or_die(ntp::bench::RedisProcess::start(o.redis_server, 0));
        const auto store = or_die(ntp::comm::open_store(server->spec(), "collect"));
        fill(*store, n, epochs);
        ntp::elastic::AgreementConfig config;
        config.store = store;
        config.group = kGroup;
        config.me = 0;
        ntp::elastic::Agreement decider(config);
        config.me = 1;
        ntp::elastic::Agreement member(config);
        const ntp::elastic::MemberList list = next_list(n, epochs + 1);
        plain_s.push_back(seconds_of([&] { or_die(member.mark_done(list)); }));
        const auto before = or_die(server->counts());
        collect_s.push_back(seconds_of([&] { or_die(decider.mark_done(list)); }));
        commands = or_die(server->counts()).commands - before.commands;
        for (int e = 1; e <= epochs; ++e) {
          const bool done_gone = !or_die(store->exists(ntp::elastic::done_key(kGroup, e, n - 1)));
          const std::string text = or_die(store->get(ntp::elastic::epoch_key(kGroup, e, "list")));
          collected = collected && done_gone && ntp::elastic::decode_tombstone(text).has_value();
        }
      }
      nlohmann::ordered_json line;
      line["members"] = n;
      line["epochs_collected"] = epochs;
      line["decider_mark_done_s"] = median(collect_s);
      line["member_mark_done_s"] = median(plain_s);
      line["decider_over_member"] = median(collect_s) / median(plain_s);
      line["collection_store_commands"] = commands;
      line["collected"] = collected;
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      all_collected = all_collected && collected;
    }
  }
  return all_collected ? 0 : 1;
}
