// How one member's I/O reaches the simulator's world: its store, the host's CPU, the agenda. A
// member of the domain hierarchy has two links (its domain's store and the global one); a flat
// member has one. `drive` runs a machine's task over a link, one awaited op at a time.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "elastic/io.h"
#include "elastic/sim/event_loop.h"
#include "elastic/sim/host_cpu.h"
#include "elastic/sim/sim_store.h"
#include "elastic/task.h"

namespace ntp::elastic::sim {

// A member process stopped and continued (SIGSTOP, SIGCONT): while it is paused nothing of it
// runs; what reaches it (store replies, its timers' expiries) waits in arrival order and runs when
// it is continued, as a stopped process's socket buffers and expired timers do. What it sent
// before the pause is served meanwhile. Only a member armed to be paused (before it sends its first
// op) routes its replies and timers through here: the others' ops take no extra step.
class ProcessPause {
 public:
  void arm() { armed_ = true; }
  bool armed() const { return armed_; }
  void deliver(std::function<void()> fn) {
    if (paused_) {
      held_.push_back(std::move(fn));
    } else {
      fn();
    }
  }
  void pause() { paused_ = true; }
  void resume() {
    paused_ = false;
    std::vector<std::function<void()>> held;
    held.swap(held_);
    for (std::function<void()>& fn : held) deliver(std::move(fn));
  }
  bool paused() const { return paused_; }

 private:
  bool armed_ = false, paused_ = false;
  std::vector<std::function<void()>> held_;
};

struct StoreLink {
  EventLoop* loop = nullptr;
  SimStore* store = nullptr;
  HostCpu* host = nullptr;
  Duration cpu_per_op{0};         // the member's CPU per op sent and per reply taken in
  ProcessPause* pause = nullptr;  // the member's, where it can be paused (must outlive the run)
  // More CPU for the reply to a blocking stream read that carries events (SimConfig::wake_cpu).
  Duration wake_cpu{0};

  // The member's CPU to take in `reply`, the reply to a blocking stream read or not.
  Duration reply_cpu(bool blocking_read, const io::Reply& reply) const {
    return blocking_read && !reply.events.empty() ? cpu_per_op + wake_cpu : cpu_per_op;
  }

  // fn, run as the member: at once, or when it is continued if it is paused then.
  std::function<void()> as_member(std::function<void()> fn) const {
    if (pause == nullptr || !pause->armed()) return fn;
    return [p = pause, fn = std::move(fn)]() mutable { p->deliver(std::move(fn)); };
  }
  // A timer of the member's: fn runs `wait` from now, or when it is continued.
  void after(Duration wait, std::function<void()> fn) const {
    loop->after(wait, as_member(std::move(fn)));
  }

  // A member's store op: its CPU to send it, the store, its CPU to take the reply in. A sleep
  // costs no CPU. `reader` names the member's stream reader (SimStore::wake). A paused member
  // takes the reply in when it is continued, at that moment's time.
  void send(io::Op op, std::function<void(io::Reply)> done, const void* reader = nullptr) const {
    if (pause != nullptr && pause->armed() && done) {
      done = [p = pause, l = loop, done = std::move(done)](io::Reply reply) mutable {
        p->deliver([l, done, reply = std::move(reply)]() mutable {
          reply.now = l->now();
          done(std::move(reply));
        });
      };
    }
    if (std::holds_alternative<io::Sleep>(op) ||
        (cpu_per_op.count() == 0 && wake_cpu.count() == 0)) {
      store->submit(std::move(op), std::move(done), reader);
      return;
    }
    const StoreLink self = *this;
    host->run(cpu_per_op, [self, op = std::move(op), done = std::move(done), reader]() mutable {
      const auto* read = std::get_if<io::ReadStreams>(&op);
      const bool blocking_read = read != nullptr && read->block.count() > 0;
      self.store->submit(
          std::move(op),
          [self, blocking_read, done = std::move(done)](io::Reply reply) mutable {
            const Duration cpu = self.reply_cpu(blocking_read, reply);
            self.host->run(cpu, [self, done = std::move(done), reply = std::move(reply)]() mutable {
              reply.now = self.loop->now();
              if (done) done(std::move(reply));
            });
          },
          reader);
    });
  }
};

namespace detail {
template <typename T, typename Done>
void pump(const StoreLink& link, IoSlot& io, std::shared_ptr<Task<T>> task,
          std::shared_ptr<bool> live, Done done) {
  if (!io.has_pending()) {
    done(std::move(task->result()));
    return;
  }
  link.send(
      io.take_pending(),
      [link, &io, task, live, done](io::Reply reply) mutable {
        if (!*live) return;  // the member died (or dropped the task): its replies go nowhere
        io.resume(std::move(reply));
        pump(link, io, std::move(task), std::move(live), std::move(done));
      },
      &io);
}
}  // namespace detail

// Runs `task` on `io` over `link`; `done` gets its result, unless `*live` turned false first.
// `io` must outlive the task (a dropped task's last reply still finds it).
template <typename T, typename Done>
void drive(const StoreLink& link, IoSlot& io, Task<T> task, std::shared_ptr<bool> live, Done done) {
  auto t = std::make_shared<Task<T>>(std::move(task));
  io.set_now(link.loop->now());
  t->start();
  detail::pump(link, io, std::move(t), std::move(live), std::move(done));
}

}  // namespace ntp::elastic::sim
