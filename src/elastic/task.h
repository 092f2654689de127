// How the recovery protocol's machines are written: as C++20 coroutines that await I/O they never
// perform. `co_await io.perform(op)` suspends the machine with `op` pending in its IoSlot; the
// driver (elastic/store_driver.h, or the simulator's) does the op however it does I/O, then
// resumes the machine with the reply and the time it arrived. Between two awaits a machine only
// computes, so one that is fed the same replies at the same times does the same thing: that is
// what lets a deterministic simulator replay a schedule, and a real store drive the same code.
// (FoundationDB's Flow actors run under its simulator the same way; etcd's raft returns its I/O
// in a Ready struct: this is that contract, with the protocol's control flow kept readable.)
//
// Task<T> is a lazy coroutine: it starts when first resumed (by its driver, or by a co_await of
// it from another task) and hands its result to whoever awaited it. A task's frame is destroyed
// with the Task object; destroying a suspended top-level task (a killed member in the simulator)
// destroys the tasks it awaits. One IoSlot carries one chain of awaiting tasks at a time.
//
// GCC 12 destroys some temporaries of a co_await's full expression twice (a double free): a
// machine builds each op in a named io::Op before it awaits it, binds every co_await's result
// to a named variable (also one it ignores), and keeps braced lists out of co_await expressions.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

#include "core/check.h"
#include "core/non_copyable.h"
#include "core/status.h"
#include "elastic/io.h"

namespace ntp::elastic {

class IoSlot : NonCopyable {
 public:
  struct Awaiter {
    IoSlot* slot;
    io::Op op;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> waiting) noexcept {
      slot->pending_ = std::move(op);
      slot->waiting_ = waiting;
    }
    io::Reply await_resume() { return std::move(slot->reply_); }
  };

  explicit IoSlot(Time now = {}) : now_(now) {}

  // The machine's side: suspends until the driver resumes it with op's reply.
  Awaiter perform(io::Op&& op) { return Awaiter{this, std::move(op)}; }
  // The time of the last reply (or of set_now): the machine's only clock.
  Time now() const { return now_; }

  // The driver's side.
  bool has_pending() const { return pending_.has_value(); }
  // The op the machine waits on; the slot then holds none until the machine's next await.
  io::Op take_pending() {
    NTP_CHECK(pending_.has_value());
    io::Op op = std::move(*pending_);
    pending_.reset();
    return op;
  }
  // Resumes the machine with the reply of the op it took; returns once the machine awaits its
  // next op or finishes.
  void resume(io::Reply reply) {
    NTP_CHECK(waiting_ && !pending_.has_value());
    now_ = reply.now;
    reply_ = std::move(reply);
    std::coroutine_handle<> waiting = std::exchange(waiting_, nullptr);
    waiting.resume();
  }
  void set_now(Time now) { now_ = now; }

 private:
  std::optional<io::Op> pending_;
  io::Reply reply_;
  std::coroutine_handle<> waiting_;
  Time now_;
};

template <typename T>
class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::optional<T> value;
    std::coroutine_handle<> continuation = std::noop_coroutine();

    Task get_return_object() {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct Final {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> done) noexcept {
        return done.promise().continuation;
      }
      void await_resume() noexcept {}
    };
    Final final_suspend() noexcept { return {}; }
    template <typename U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
    void unhandled_exception() { std::terminate(); }  // the project does not throw
  };

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  // Awaited by another task: runs this one, then hands its value over.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  T await_resume() { return std::move(*handle_.promise().value); }

  // Driven at the top: runs it up to its first await (or to its end).
  void start() {
    NTP_CHECK(handle_ && !started_);
    started_ = true;
    handle_.resume();
  }
  bool done() const { return handle_ && handle_.done(); }
  T& result() {
    NTP_CHECK(done());
    return *handle_.promise().value;
  }

 private:
  explicit Task(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  void reset() {
    if (handle_) handle_.destroy();
    handle_ = nullptr;
  }

  std::coroutine_handle<promise_type> handle_;
  bool started_ = false;
};

}  // namespace ntp::elastic

// NTP_RETURN_IF_ERROR and NTP_ASSIGN_OR_RETURN for coroutines (co_return).
#define NTP_CO_RETURN_IF_ERROR(expr) NTP_RETURN_IF_ERROR_WITH(co_return, expr)
#define NTP_CO_ASSIGN_OR_RETURN(lhs, expr) \
  NTP_ASSIGN_OR_RETURN_WITH(co_return, ntp_co_result_, lhs, expr)
