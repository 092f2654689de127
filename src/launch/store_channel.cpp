#include "launch/store_channel.h"

#include "launch/step_report.h"

namespace ntp::launch {
namespace {

constexpr std::chrono::milliseconds kStepPeriod{20};

}  // namespace

StoreChannel::StoreChannel(std::shared_ptr<comm::Store> store, std::string spec, std::string run_id,
                           std::vector<int> ranks)
    : store_(std::move(store)),
      spec_(std::move(spec)),
      run_id_(std::move(run_id)),
      ranks_(std::move(ranks)) {
  thread_ = std::thread([this] { serve(); });
}

StoreChannel::~StoreChannel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    calls_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void StoreChannel::enqueue(std::function<void(comm::Store&)> call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(std::move(call));
  }
  wake_.notify_all();
}

void StoreChannel::post(std::function<void(comm::Store&)> write) { enqueue(std::move(write)); }

std::future<bool> StoreChannel::probe() {
  auto promise = std::make_shared<std::promise<bool>>();
  std::future<bool> answer = promise->get_future();
  const std::string key = step_key(ranks_.empty() ? 0 : ranks_.front());
  enqueue([this, promise, key](comm::Store& store) {
    if (store.exists(key).ok()) {
      promise->set_value(true);
      return;
    }
    Result<std::shared_ptr<comm::Store>> fresh = comm::open_store(spec_, run_id_);
    if (!fresh.ok()) {
      promise->set_value(false);
      return;
    }
    store_ = *fresh;  // the thread's own: later calls use the fresh connection
    promise->set_value(store_->exists(key).ok());
  });
  return answer;
}

void StoreChannel::watch_steps(bool on) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (watching_ == on) return;
    watching_ = on;
  }
  wake_.notify_all();
}

void StoreChannel::reset_step(int rank) {
  enqueue([this, rank](comm::Store& store) {
    (void)store.set(step_key(rank), "-1");
    std::lock_guard<std::mutex> lock(mutex_);
    const int generation = ++generations_[rank];
    readings_[rank] = StepReading{-1, generation};
  });
}

std::map<int, StepReading> StoreChannel::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return readings_;
}

void StoreChannel::read_steps() {
  for (int rank : ranks_) {
    Result<std::string> value = store_->get(step_key(rank));
    if (!value.ok()) continue;
    long long step = 0;
    try {
      step = std::stoll(*value);
    } catch (const std::exception&) {
      continue;  // being written
    }
    std::lock_guard<std::mutex> lock(mutex_);
    readings_[rank] = StepReading{step, generations_[rank]};
  }
}

void StoreChannel::serve() {
  auto next_read = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (closing_) return;
    if (!calls_.empty()) {
      std::function<void(comm::Store&)> call = std::move(calls_.front());
      calls_.pop_front();
      lock.unlock();
      call(*store_);
      lock.lock();
      continue;
    }
    if (watching_ && std::chrono::steady_clock::now() >= next_read) {
      lock.unlock();
      read_steps();
      lock.lock();
      next_read = std::chrono::steady_clock::now() + kStepPeriod;
      continue;
    }
    if (watching_) {
      wake_.wait_until(lock, next_read);
    } else {
      wake_.wait(lock);
    }
  }
}

}  // namespace ntp::launch
