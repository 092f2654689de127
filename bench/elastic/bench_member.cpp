#include "bench_member.h"

#include <algorithm>
#include <string_view>

#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "comm/wait_observer.h"

namespace ntp::bench {
namespace {

constexpr std::chrono::milliseconds kHangDetect{1000};  // --hang-detect-ms default

std::vector<int> all_ids(int n) {
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  return ids;
}

std::vector<std::string> incarnations(const elastic::MemberList& list) {
  std::vector<std::string> out;
  for (int restart : list.restarts) out.push_back(comm::incarnation(0, restart));
  return out;
}

elastic::AgreementConfig agreement_config(std::shared_ptr<comm::Store> store, int id,
                                          elastic::Progress* progress, MemberMoments* moments) {
  elastic::AgreementConfig a;
  a.group = "train/a0";
  a.me = id;
  a.progress = progress;
  a.hang_detect = kHangDetect;
  a.window = 10 * kHangDetect;  // as train/live_run.cpp sets it
  a.incarnation = [](int who, const elastic::MemberList& list) {
    return comm::incarnation(0, list.restarts[static_cast<size_t>(who)]);
  };
  a.on_enter = [moments](int) { moments->announced.store(now_ns()); };
  a.on_phase = [moments](const char* phase, int) {
    if (std::string_view(phase) == "decider_publish") moments->decided.store(now_ns());
  };
  a.store = std::move(store);
  return a;
}

// World ranks (indices into `members`) of the members whose id satisfies `pick`.
template <typename Pick>
std::vector<int> ranks_where(const std::vector<int>& members, Pick pick) {
  std::vector<int> out;
  for (size_t r = 0; r < members.size(); ++r) {
    if (pick(members[r])) out.push_back(static_cast<int>(r));
  }
  return out;
}

}  // namespace

BenchMember::BenchMember(std::shared_ptr<comm::Store> store, int id, const MemberSetup& setup)
    : store_(std::make_shared<KillableStore>(std::move(store))),
      id_(id),
      setup_(setup),
      agreement_(agreement_config(store_, id, &progress_, &moments_)) {
  progress_.mark(elastic::Phase::kStep, 0);
  progress_.waiting(true);  // in the step's collective: waiting on its peers, not stuck
  heartbeat_ =
      std::make_unique<comm::Heartbeat>(store_, group_, id_, elastic::liveness_period(kHangDetect),
                                        [this] { return progress_.token(); });
  watch_ = std::make_unique<elastic::FailureWatch>(store_, elastic::liveness_period(kHangDetect),
                                                   kHangDetect, &progress_);
}

void BenchMember::start() {
  const elastic::MemberList first = elastic::initial_list(all_ids(setup_.members), setup_.members);
  watch_->arm({group_, 0, id_, first.members, incarnations(first),
               [this](const std::string& why) { on_abort(why); }});
  if (setup_.prepare_agreement) agreement_.prepare();  // before the thread that agrees exists
  thread_ = std::thread([this] { training_thread(); });
}

BenchMember::~BenchMember() {
  release();
  if (thread_.joinable()) thread_.join();
  if (watch_) watch_->disarm();
  groups_.clear();
  watch_.reset();
  heartbeat_.reset();
}

void BenchMember::die() {
  store_->kill();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dead_ = true;
  }
  wake_.notify_all();
  watch_->disarm();
  heartbeat_.reset();
}

void BenchMember::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
  }
  wake_.notify_all();
}

std::string BenchMember::abort_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abort_reason_;
}

std::string BenchMember::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

// On the watch's thread, under its lock (as the trainer's Job::abort_all): wakes the training
// thread, whose collective would now fail, and cancels a rendezvous in progress.
void BenchMember::on_abort(const std::string& reason) {
  if (!fault_posted_.load()) early_abort_.store(true);
  if (moments_.aborted.load() == 0) moments_.aborted.store(now_ns());
  if (cancel_) cancel_->store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    abort_reason_ = reason;
  }
  wake_.notify_all();
}

void BenchMember::training_thread() {
  comm::observe_waits(&progress_);  // as the trainer's thread: a rendezvous is a wait on peers
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [this] { return aborted_ || dead_ || released_; });
    if (dead_ || released_) return;
  }
  // The step failed: as LiveRun::run and LiveRun::reform do.
  progress_.waiting(false);
  agreement_.report_failure(0);
  watch_->disarm();
  progress_.mark(elastic::Phase::kReform, 0);
  elastic::MemberList last = elastic::initial_list(all_ids(setup_.members), setup_.members);
  Result<elastic::MemberList> agreed =
      agreement_.agree(last, {0, 0}, false, {}, [] { return std::string("bench layout"); });
  Status status = agreed.status();
  if (agreed.ok()) {
    moments_.epoch.store(agreed->epoch);
    moments_.size.store(static_cast<int>(agreed->members.size()));
    moments_.agreed.store(now_ns());
    if (setup_.form) status = form(*agreed);
    if (status.ok() && setup_.form) moments_.formed.store(now_ns());
  }
  progress_.mark(elastic::Phase::kStep, 1);
  progress_.waiting(true);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!status.ok())
    error_ = status.to_string() + " (the watch's last abort: " + abort_reason_ + ")";
  wake_.wait(lock, [this] { return released_; });
}

// build_job's groups over the agreed members (train/job.cpp): the world, then per replica its TP
// and sync groups (the same ranks over the same pairs), then the DP group of this member's slot
// position. Groups share the world's pairs (comm/pair_mesh.h) and connect their links on
// demand, so a group is formed once a first barrier over it returned: every link it needs is up
// and carried a message.
Status BenchMember::form(const elastic::MemberList& list) {
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  watch_->arm({group_, list.epoch, id_, list.members, incarnations(list),
               [this](const std::string& why) { on_abort(why); }});
  const auto me = std::find(list.members.begin(), list.members.end(), id_);
  comm::GlooOptions gloo;
  gloo.store = store_;
  gloo.rank = static_cast<int>(me - list.members.begin());
  gloo.size = static_cast<int>(list.members.size());
  gloo.prefix = group_ + "/e" + std::to_string(list.epoch);
  gloo.timeout = setup_.comm_timeout;
  gloo.cancel = cancel_;
  const int tp = setup_.tp, replica = id_ / tp, position = id_ % tp;
  const std::string d = std::to_string(replica);
  const std::vector<int> replica_ranks =
      ranks_where(list.members, [&](int id) { return id / tp == replica; });
  const std::vector<int> dp_ranks =
      ranks_where(list.members, [&](int id) { return id % tp == position; });
  if (setup_.one_batch) gloo.planned_subgroups = {replica_ranks, dp_ranks};
  NTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::connect_gloo(gloo));
  moments_.linked.store(now_ns());
  NTP_ASSIGN_OR_RETURN(auto tp_group, world->subgroup(replica_ranks, "tp" + d));
  NTP_ASSIGN_OR_RETURN(auto sync_group, world->subgroup(replica_ranks, "sync" + d));
  NTP_ASSIGN_OR_RETURN(auto dp_group, world->subgroup(dp_ranks, "dp" + std::to_string(position)));
  for (comm::Communicator* group :
       {world.get(), tp_group.get(), sync_group.get(), dp_group.get()}) {
    NTP_RETURN_IF_ERROR(group->barrier());
  }
  moments_.passed.store(now_ns());
  groups_.push_back(std::move(world));
  groups_.push_back(std::move(tp_group));
  groups_.push_back(std::move(sync_group));
  groups_.push_back(std::move(dp_group));
  return agreement_.mark_done(list);
}

}  // namespace ntp::bench
