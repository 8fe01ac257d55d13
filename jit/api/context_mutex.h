// jit/context_mutex: the lock every Context entry point takes (ContextImpl::mutex).
//
// A recursive mutex, since composites record through the primitives, made for the case that
// dominates: one thread recording op after op with nobody else waiting. Taking it then is one
// compare-and-swap and giving it back one exchange, both inline; std::recursive_mutex goes
// through pthread's type dispatch and owner bookkeeping on each, about 70 instructions of a
// recorded op's 1,000. Contended, a thread sleeps on the lock word (a futex, through
// std::atomic::wait) instead of spinning.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace fusejit::detail {

class ContextMutex {
 public:
  ContextMutex() = default;
  ContextMutex(const ContextMutex&) = delete;
  ContextMutex& operator=(const ContextMutex&) = delete;

  void lock() {
    const std::thread::id me = std::this_thread::get_id();
    // Only this thread ever stores its own id, so a relaxed read that sees it is this thread's
    // own earlier store: the lock is already held here.
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    int expected = kFree;
    if (!state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      wait_for_it();
    }
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
  }

  bool try_lock() {
    const std::thread::id me = std::this_thread::get_id();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return true;
    }
    int expected = kFree;
    if (!state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      return false;
    }
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
    return true;
  }

  // Only by the thread that holds it, once per lock.
  void unlock() {
    if (--depth_ != 0) return;
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    if (state_.exchange(kFree, std::memory_order_release) == kContended) state_.notify_one();
  }

 private:
  static constexpr int kFree = 0;
  static constexpr int kHeld = 1;       // held, nobody asleep on it
  static constexpr int kContended = 2;  // held, and a thread may be asleep on it

  // The slow path: marks the lock contended and sleeps until it is given back. A thread that
  // takes it this way leaves it marked contended, so that its unlock wakes the next sleeper.
  void wait_for_it() {
    while (state_.exchange(kContended, std::memory_order_acquire) != kFree) {
      state_.wait(kContended, std::memory_order_relaxed);
    }
  }

  std::atomic<int> state_{kFree};
  std::atomic<std::thread::id> owner_{};
  uint32_t depth_ = 0;  // written only by the holder
};

}  // namespace fusejit::detail
