// jit/parallel: see parallel.h.
#include "jit/runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace fusejit::jit {

int default_compile_threads() {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hardware, 1, kMaxCompileThreads);
}

void parallel_for(size_t count, int threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_failed{count};  // items at or after it are not started
  std::mutex error_mutex;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t i = next++; i < count && i < first_failed.load(); i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (i < first_failed.load()) {
          first_failed = i;
          error = std::current_exception();
        }
      }
    }
  };
  const size_t pool = std::min(count, static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < pool; ++t) {
    try {
      helpers.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) do the work
    }
  }
  worker();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fusejit::jit
