// python/gil: Python callbacks from threads that may not take the GIL (bindings.h, with_gil).
#include <mutex>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

std::mutex queue_mutex;
std::vector<std::function<void()>> queue;  // under queue_mutex
bool scheduled = false;                    // a pending call is asked for; under queue_mutex

int pending_call(void*) {
  run_queued();
  return 0;
}

}  // namespace

void with_gil(std::function<void()> fn) {
  if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing left to hand back to
  if (PyGILState_Check()) {
    fn();
    return;
  }
  bool schedule = false;
  {
    const std::lock_guard<std::mutex> lock(queue_mutex);
    queue.push_back(std::move(fn));
    schedule = !scheduled;
    scheduled = true;
  }
  // Needs neither the GIL nor a thread state. When the interpreter's list is full, the next
  // return through without_gil runs the queue.
  if (schedule && Py_AddPendingCall(&pending_call, nullptr) != 0) {
    const std::lock_guard<std::mutex> lock(queue_mutex);
    scheduled = false;
  }
}

void run_queued() noexcept {
  std::vector<std::function<void()>> ready;
  {
    const std::lock_guard<std::mutex> lock(queue_mutex);
    ready.swap(queue);
    scheduled = false;
  }
  for (std::function<void()>& fn : ready) {
    try {
      fn();
    } catch (...) {  // a release has nobody to report to
    }
  }
}

}  // namespace fusejit::python
