#include "train/hierarchy_plane.h"

#include <chrono>
#include <utility>

#include "comm/wait_observer.h"

namespace ntp::train {
namespace {

using Clock = std::chrono::steady_clock;

// How often next_list looks at what only the runtime knows (the member declared dead, an error).
constexpr std::chrono::milliseconds kLook{50};

elastic::HierarchyRuntimeSetup runtime_setup(const TrainConfig& c, const WorkerContext& ctx) {
  elastic::HierarchyRuntimeSetup setup;
  elastic::HierarchyMemberParams& m = setup.member;
  const std::string prefix = "train/a" + std::to_string(ctx.attempt);
  m.global_group = prefix + "/leaders";
  m.domain = ctx.slot_rank / c.tp;
  m.slot = ctx.slot_rank % c.tp;
  m.domain_group = prefix + "/domain" + std::to_string(m.domain);
  m.domain_size = c.tp;
  m.domain_count = c.domains;
  m.hang_detect = std::chrono::milliseconds(c.hang_detect_ms);
  m.global_hang_detect = 3 * m.hang_detect;  // a leader's watch sees its domain's first
  setup.domain_store = ctx.domain_store;
  setup.global_store = ctx.store;
  return setup;
}

}  // namespace

HierarchyPlane::HierarchyPlane(const TrainConfig& c, const WorkerContext& ctx,
                               elastic::Progress* progress, std::function<void()> on_fenced) {
  elastic::HierarchyRuntimeSetup setup = runtime_setup(c, ctx);
  setup.progress = progress;
  setup.on_fenced = std::move(on_fenced);
  setup.owner_ready = [this](std::chrono::milliseconds wait) { return ready(wait); };
  setup.on_left = [this] { left(); };
  setup.member.announce = [this, restart = ctx.restart_count] {
    return elastic::Announcement{committed_.load(), restart};
  };
  // No base layout: every member of a list holds state (no joiners yet), and re-forms from its
  // own job's layout.
  setup.member.encode_layout = [] { return std::string(); };
  setup.form = [this](const elastic::MemberList& full) { return form(full); };
  setup.on_reforming = [this] { reforming(); };
  runtime_ = std::make_unique<elastic::HierarchyRuntime>(std::move(setup));
}

HierarchyPlane::~HierarchyPlane() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    watched_ = nullptr;
  }
  changed_.notify_all();
  runtime_.reset();
}

void HierarchyPlane::start() { runtime_->start(); }

void HierarchyPlane::watch(Job* job) {
  std::lock_guard<std::mutex> lock(mutex_);
  watched_ = job;
  // Its list went stale while the training thread took it (the domain re-forms): abort at once
  // rather than wait for the rendezvous's timeout.
  if (job != nullptr && left_) job->abort_all("the other members declared this worker dead");
  if (job != nullptr && stale_) job->abort_all("its domain re-forms again");
}

void HierarchyPlane::report_failure(int epoch) { runtime_->report_failure(epoch); }

Result<elastic::MemberList> HierarchyPlane::next_list(std::chrono::milliseconds patience) {
  const Clock::time_point end = Clock::now() + patience;
  comm::ScopedWait wait;  // on its peers' agreement: waiting, not stuck (its progress stands)
  struct Waiting {        // in_next_list_ while this thread is in here
    HierarchyPlane& plane;
    explicit Waiting(HierarchyPlane& p) : plane(p) { set(true); }
    ~Waiting() { set(false); }
    void set(bool in) {
      {
        std::lock_guard<std::mutex> lock(plane.mutex_);
        plane.in_next_list_ = in;
      }
      plane.changed_.notify_all();
    }
  } waiting(*this);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, kLook, [this] { return offered_.has_value() || left_ || stopping_; });
      if (offered_) {
        elastic::MemberList list = std::move(*offered_);
        offered_.reset();
        taken_epoch_ = list.epoch;
        stale_ = false;
        return list;
      }
      if (left_) return Status(StatusCode::kAborted, "the other members declared this worker dead");
    }
    // Without mutex_: the runtime calls reforming() under its lock, which takes mutex_.
    if (const std::string error = runtime_->error(); !error.empty()) {
      return internal_error("the control plane failed: " + error);
    }
    if (Clock::now() > end) {
      return deadline_exceeded("no member list agreed within " +
                               std::to_string(patience.count() / 1000) + " s");
    }
  }
}

void HierarchyPlane::formed(const elastic::MemberList& list, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (taken_epoch_ != list.epoch) return;
    result_ = status;
  }
  changed_.notify_all();
}

Status HierarchyPlane::form(const elastic::MemberList& full) {
  std::unique_lock<std::mutex> lock(mutex_);
  offered_ = full;
  withdrawn_ = false;
  result_.reset();
  changed_.notify_all();
  const auto answered = [this, epoch = full.epoch] {
    return result_.has_value() && taken_epoch_ == epoch;
  };
  changed_.wait(lock, [&] { return stopping_ || withdrawn_ || answered(); });
  // Withdrawn: the runtime drops this formation whatever it returns (the domain re-forms).
  Status out = answered()  ? *result_
               : stopping_ ? Status(StatusCode::kAborted, "the worker stops")
                           : unavailable("its domain re-formed before it formed");
  result_.reset();
  return out;
}

void HierarchyPlane::reforming() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (watched_ != nullptr) watched_->abort_all("its domain re-forms");
    offered_.reset();
    withdrawn_ = true;
    if (taken_epoch_) stale_ = true;
  }
  changed_.notify_all();
}

void HierarchyPlane::left() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left_ = true;
    if (watched_ != nullptr) watched_->abort_all("the other members declared this worker dead");
    offered_.reset();
    withdrawn_ = true;
  }
  changed_.notify_all();
}

bool HierarchyPlane::ready(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, wait, [this] { return in_next_list_ || stopping_; });
}

}  // namespace ntp::train
