// jit/parallel: runs independent work items on a small, bounded pool of std::threads that lives
// for one call. What fusejit parallelizes is NVRTC compiles (one program per thread; NVRTC is
// thread-safe per program): a plan's missing kernels, `fusejit warm`'s kernels, the compile
// benchmark. Nothing here knows about kernels.
#pragma once

#include <cstddef>
#include <functional>

namespace fusejit::jit {

// The default number of compile threads: the hardware's threads, at least 1 and at most
// kMaxCompileThreads (compiles of one plan are few; more threads than that only cost memory).
inline constexpr int kMaxCompileThreads = 8;
int default_compile_threads();

// Calls fn(i) for every i in [0, count) on min(threads, count) threads, the calling thread being
// one of them, and returns when all calls have returned. Items are claimed in increasing order.
// When a call throws, items after it that no thread has claimed yet are skipped, and once every
// thread is done the exception of the lowest item that threw is rethrown: every item before it
// ran to the end, so "the first failure" means the same as in a serial loop.
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& fn);

}  // namespace fusejit::jit
