// WaitObserver: lets the thread that drives training tell its liveness tracker when it blocks on
// its peers (elastic/progress.h). A worker whose training thread waits in a collective for a
// stuck peer is waiting, not stuck: its heartbeat says so, and the stuck one is found instead.
//
// The training thread calls observe_waits(&observer) once; every blocking wait of a communicator
// on that thread (a synchronous operation, Work::wait, a rendezvous) is then bracketed by
// observer->waiting(true) / waiting(false). Other threads (progress, executor) are not observed.
#pragma once

#include "core/non_copyable.h"

namespace ntp::comm {

class WaitObserver {
 public:
  virtual ~WaitObserver() = default;
  // Called on the observed thread as it starts (true) and ends (false) a blocking wait.
  virtual void waiting(bool begins) = 0;
};

// Observes the calling thread's waits (nullptr: stops).
void observe_waits(WaitObserver* observer);

// Brackets one blocking wait of the calling thread (nothing when it is not observed).
class ScopedWait : NonCopyable {
 public:
  ScopedWait();
  ~ScopedWait();

 private:
  WaitObserver* observer_;
};

}  // namespace ntp::comm
