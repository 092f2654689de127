#include "launch/comm_worker.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "comm/survivors.h"
#include "launch/identity.h"
#include "launch/stall.h"
#include "launch/step_report.h"

namespace ntp::launch {
namespace {

constexpr const char* kGroup = "workers";

double contribution(int id, long long step, std::size_t i) {
  const auto mix = static_cast<long long>(i) * 3 + step * 7 + id * 11;
  return static_cast<double>(mix % 61 - 30);
}

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

class Worker {
 public:
  Worker(const CommWorkerOptions& options, WorkerIdentity id, std::shared_ptr<comm::Store> store)
      : options_(options), id_(std::move(id)), store_(std::move(store)) {}

  int run() {
    comm::Heartbeat heartbeat(store_, kGroup, id_.rank, std::chrono::milliseconds(100));
    if (id_.restart_count == 0) {
      for (int r = 0; r < id_.world_size; ++r) members_.push_back(r);
      if (!connect().ok()) return recover_or_fail() ? loop() : 1;
    } else if (int code = join(); code != 0) {
      return code;
    }
    return loop();
  }

 private:
  int loop() {
    while (step_ < options_.steps) {
      (void)report_step(*store_, id_.rank, step_);
      stall_if_asked(step_);  // --inject stall: this thread blocks, the heartbeat goes on
      Result<bool> admitted = admit_joiners();
      Status status = admitted.status();
      if (admitted.ok() && *admitted) continue;  // a new group: start the step over together
      if (status.ok()) status = step_allreduce();
      if (status.code() == StatusCode::kInternal) {
        std::printf("rank %d: %s\n", id_.rank, status.to_string().c_str());
        return 1;
      }
      if (!status.ok()) {
        if (status.code() == StatusCode::kAborted) return 3;
        if (!recover_or_fail()) return excluded_ ? 3 : 1;
        continue;
      }
      ++step_;
      std::this_thread::sleep_for(options_.step_time);
    }
    std::printf("rank %d: finished %lld steps, epoch %d, members [%s]\n", id_.rank, step_, epoch_,
                join_ids(members_).c_str());
    std::fflush(stdout);
    (void)report_finished(*store_, id_.rank, comm::incarnation(id_.attempt, id_.restart_count),
                          step_);
    return 0;
  }

  Status connect() {
    comm_.reset();
    const auto me = std::find(members_.begin(), members_.end(), id_.rank);
    comm::GlooOptions gloo;
    gloo.store = store_;
    gloo.rank = static_cast<int>(me - members_.begin());
    gloo.size = static_cast<int>(members_.size());
    gloo.prefix = std::string(kGroup) + "/e" + std::to_string(epoch_);
    gloo.timeout = options_.timeout;
    if (!id_.local_addr.empty()) gloo.hostname = id_.local_addr;
    NTP_ASSIGN_OR_RETURN(comm_, comm::connect_gloo(gloo));
    // Members may have failed at different steps (one finished the step the others lost):
    // continue from the smallest.
    std::vector<std::int64_t> mine{step_};
    std::vector<std::int64_t> all(members_.size());
    NTP_RETURN_IF_ERROR(comm_->allgather(comm::const_view(mine), comm::view(all),
                                         std::vector<std::size_t>(members_.size(), 1)));
    step_ = *std::min_element(all.begin(), all.end());
    return ok_status();
  }

  comm::AgreementOptions agreement() const {
    comm::AgreementOptions a;
    a.window = options_.timeout * 2 + std::chrono::milliseconds(2000);
    a.stale_after = std::chrono::milliseconds(600);
    return a;
  }

  // After a failure: agree on the survivors of the next epoch and rebuild. False when this
  // worker cannot go on.
  bool recover_or_fail() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      ++epoch_;
      Result<comm::Membership> m =
          comm::agree_on_survivors(*store_, kGroup, epoch_, id_.rank, members_, agreement());
      if (!m.ok()) {
        if (m.status().code() == StatusCode::kAborted) {
          excluded_ = true;
          std::printf("rank %d: left out of the group: %s\n", id_.rank,
                      m.status().message().c_str());
          return false;
        }
        continue;
      }
      members_ = m->members;
      if (static_cast<int>(members_.size()) < options_.min_world) {
        std::printf("rank %d: only %zu workers left, below --min-world %d\n", id_.rank,
                    members_.size(), options_.min_world);
        return false;
      }
      Status connected = connect();
      std::printf("rank %d: epoch %d members [%s] -> %s\n", id_.rank, epoch_,
                  join_ids(members_).c_str(), connected.ok() ? "rebuilt" : "rebuild failed");
      std::fflush(stdout);
      if (connected.ok()) return true;
    }
    return false;
  }

  // A replacement worker: ask to join, wait to be admitted, agree and connect.
  int join() {
    const std::string restart = std::to_string(id_.restart_count);
    if (!store_->set("join/" + std::to_string(id_.rank), restart).ok()) return 1;
    const std::string admit = "admit/" + std::to_string(id_.rank) + "/" + restart;
    if (!store_->wait({admit}, std::chrono::seconds(120)).ok()) {
      std::printf("rank %d: never admitted\n", id_.rank);
      return 1;
    }
    // "epoch;candidates"
    const std::string text = *store_->get(admit);
    const auto semi = text.find(';');
    epoch_ = std::stoi(text.substr(0, semi));
    const std::vector<int> candidates = parse_ids(text.substr(semi + 1));
    Result<comm::Membership> m =
        comm::agree_on_survivors(*store_, kGroup, epoch_, id_.rank, candidates, agreement());
    if (!m.ok()) {
      std::printf("rank %d: join failed: %s\n", id_.rank, m.status().to_string().c_str());
      return 1;
    }
    members_ = m->members;
    step_ = options_.steps;  // connect() takes the group's smallest step
    Status connected = connect();
    std::printf("rank %d: joined at epoch %d, members [%s] -> %s\n", id_.rank, epoch_,
                join_ids(members_).c_str(), connected.ok() ? "ok" : connected.to_string().c_str());
    std::fflush(stdout);
    if (!connected.ok()) return recover_or_fail() ? 0 : 1;
    return 0;
  }

  // Rank 0 of the group looks for replacement workers; everyone learns the result by broadcast.
  // When there are any, all rebuild with them (a new epoch) and the result is true.
  Result<bool> admit_joiners() {
    const std::size_t slots = static_cast<std::size_t>(id_.world_size);
    std::vector<std::int64_t> joiners(slots, -1);  // joiners[id] = restart count, -1 = none
    if (comm_->rank() == 0) {
      for (int id = 0; id < id_.world_size; ++id) {
        if (std::find(members_.begin(), members_.end(), id) != members_.end()) continue;
        Result<std::string> restart = store_->get("join/" + std::to_string(id));
        if (!restart.ok()) continue;
        Result<bool> done = store_->exists("admit/" + std::to_string(id) + "/" + *restart);
        if (done.ok() && !*done) joiners[static_cast<std::size_t>(id)] = std::stoll(*restart);
      }
    }
    NTP_RETURN_IF_ERROR(comm_->broadcast(comm::view(joiners), 0));
    std::vector<int> candidates = members_;
    for (std::size_t id = 0; id < slots; ++id) {
      if (joiners[id] >= 0) candidates.push_back(static_cast<int>(id));
    }
    if (candidates.size() == members_.size()) return false;
    std::sort(candidates.begin(), candidates.end());
    ++epoch_;
    if (comm_->rank() == 0) {
      for (std::size_t id = 0; id < slots; ++id) {
        if (joiners[id] < 0) continue;
        NTP_RETURN_IF_ERROR(
            store_->set("admit/" + std::to_string(id) + "/" + std::to_string(joiners[id]),
                        std::to_string(epoch_) + ";" + join_ids(candidates)));
      }
    }
    NTP_ASSIGN_OR_RETURN(
        comm::Membership m,
        comm::agree_on_survivors(*store_, kGroup, epoch_, id_.rank, candidates, agreement()));
    members_ = m.members;
    NTP_RETURN_IF_ERROR(connect());
    std::printf("rank %d: epoch %d members [%s] -> admitted replacements\n", id_.rank, epoch_,
                join_ids(members_).c_str());
    std::fflush(stdout);
    return true;
  }

  Status step_allreduce() {
    std::vector<float> data(options_.elements);
    for (std::size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<float>(contribution(id_.rank, step_, i));
    }
    NTP_RETURN_IF_ERROR(comm_->allreduce(comm::view(data)));
    for (std::size_t i = 0; i < data.size(); ++i) {
      double sum = 0;
      for (int id : members_) sum += contribution(id, step_, i);
      if (data[i] != static_cast<float>(sum)) {
        return internal_error("step " + std::to_string(step_) + ": wrong sum at " +
                              std::to_string(i) + " with members [" + join_ids(members_) + "]");
      }
    }
    return ok_status();
  }

  CommWorkerOptions options_;
  WorkerIdentity id_;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<comm::Communicator> comm_;
  std::vector<int> members_;
  int epoch_ = 0;
  long long step_ = 0;
  bool excluded_ = false;
};

}  // namespace

int run_comm_worker(const CommWorkerOptions& options) {
  Result<WorkerIdentity> id = worker_identity_from_env(process_env());
  if (!id.ok()) {
    std::fprintf(stderr, "ntp comm-worker: error: %s\n", id.status().message().c_str());
    return 2;
  }
  Result<std::shared_ptr<comm::Store>> store = comm::open_store(id->store, id->run_id);
  if (!store.ok()) {
    std::fprintf(stderr, "ntp comm-worker: error: %s\n", store.status().message().c_str());
    return 1;
  }
  Worker worker(options, *id, *store);
  return worker.run();
}

}  // namespace ntp::launch
