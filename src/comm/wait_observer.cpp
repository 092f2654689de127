#include "comm/wait_observer.h"

namespace ntp::comm {
namespace {

thread_local WaitObserver* observed = nullptr;

}  // namespace

void observe_waits(WaitObserver* observer) { observed = observer; }

ScopedWait::ScopedWait() : observer_(observed) {
  if (observer_ != nullptr) observer_->waiting(true);
}

ScopedWait::~ScopedWait() {
  if (observer_ != nullptr) observer_->waiting(false);
}

}  // namespace ntp::comm
