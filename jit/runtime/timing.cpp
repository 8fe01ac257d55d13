// jit/timing: see timing.h.
#include "jit/runtime/timing.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "ir/shape.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

namespace {

class Events {
 public:
  Events() {
    FUSEJIT_CUDA(cudaEventCreate(&start));
    FUSEJIT_CUDA(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  double ms() const {
    float t = 0.0f;
    FUSEJIT_CUDA(cudaEventElapsedTime(&t, start, stop));
    return t;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
};

// Holds the stream until the host has enqueued a whole timed run, so that the GPU runs it back
// to back: timed from its first event, a run of short kernels would otherwise include the
// host's time to launch each one (4-5 us apiece, the size of a small kernel), and its figure
// would swing with the host. The wait gives up after kMaxWait, so that a run that synchronizes
// on the stream while enqueueing (and would wait for the gate) still ends; it is then timed as
// it was launched.
class Gate {
 public:
  static constexpr std::chrono::milliseconds kMaxWait{20};
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // A run that threw leaves the gate enqueued: it is opened and waited for, so that the wait
  // never reads a gate that is gone.
  ~Gate() {
    if (!enqueued_) return;
    open();
    cudaStreamSynchronize(stream_);
  }
  // Enqueues the closed gate on `stream`.
  void close(cudaStream_t stream) {
    open_.store(false, std::memory_order_relaxed);
    FUSEJIT_CUDA(cudaLaunchHostFunc(stream, &Gate::wait, this));
    stream_ = stream;
    enqueued_ = true;
  }
  void open() { open_.store(true, std::memory_order_release); }

 private:
  static void CUDART_CB wait(void* self) {
    const auto& gate = *static_cast<const Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + kMaxWait;
    while (!gate.open_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  }
  std::atomic<bool> open_{true};
  cudaStream_t stream_ = nullptr;  // where it was last enqueued, if it was
  bool enqueued_ = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class Body>
double median_ms(Device& device, int warmup, int iters, Body&& body) {
  Events ev;
  Gate gate;
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    gate.close(device.stream());
    FUSEJIT_CUDA(cudaEventRecord(ev.start, device.stream()));
    body();
    FUSEJIT_CUDA(cudaEventRecord(ev.stop, device.stream()));
    gate.open();
    FUSEJIT_CUDA(cudaEventSynchronize(ev.stop));
    if (i >= warmup) times.push_back(ev.ms());
  }
  return median(times);
}

}  // namespace

int64_t io_bytes(const ir::Graph& g) {
  int64_t bytes = 0;
  for (const std::vector<ir::NodeId>& ids : {g.inputs(), g.outputs()}) {
    for (ir::NodeId id : ids) bytes += ir::numel(g.node(id).shape) * dtype_size(g.node(id).dtype);
  }
  return bytes;
}

double copy_bandwidth(Device& device) {
  constexpr size_t kBytes = size_t{1} << 30;
  auto src = device.allocate(kBytes), dst = device.allocate(kBytes);
  FUSEJIT_CUDA(cudaMemsetAsync(src->data(), 1, kBytes, device.stream()));
  const double ms = median_ms(device, 3, 20, [&] {
    FUSEJIT_CUDA(cudaMemcpyAsync(dst->data(), src->data(), kBytes, cudaMemcpyDeviceToDevice,
                                 device.stream()));
  });
  return 2.0 * static_cast<double>(kBytes) / (ms * 1e-3);
}

double gemm_rate(Device& device, Blas& blas, DType dtype, int64_t m, int64_t n, int64_t k) {
  const size_t elem = static_cast<size_t>(dtype_size(dtype));
  auto a = device.allocate(static_cast<size_t>(m * k) * elem);
  auto b = device.allocate(static_cast<size_t>(k * n) * elem);
  auto d = device.allocate(static_cast<size_t>(m * n) * elem);
  // Small non-zero values (0x3c00 is 1.0 in f16, ~1 in bf16 is 0x3f80): timing zeros is
  // misleadingly fast on tensor cores.
  FUSEJIT_CUDA(cudaMemsetAsync(a->data(), 0x3c, a->bytes(), device.stream()));
  FUSEJIT_CUDA(cudaMemsetAsync(b->data(), 0x3b, b->bytes(), device.stream()));
  GemmProblem p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  const double ms = median_ms(device, 3, 10, [&] {
    blas.gemm(p, a->data(), b->data(), nullptr, nullptr, d->data());
  });
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
         (ms * 1e-3);
}

int rotation_sets(int64_t run_bytes, int64_t l2_bytes, int64_t spare_bytes) {
  constexpr int64_t kMaxSets = 64;
  if (run_bytes <= 0 || l2_bytes <= 0 || run_bytes >= 2 * l2_bytes) return 1;
  const int64_t between = (2 * l2_bytes + run_bytes - 1) / run_bytes;  // runs between two uses
  const int64_t copies =
      std::min({between, std::max<int64_t>(spare_bytes, 0) / run_bytes, kMaxSets - 1});
  return static_cast<int>(1 + copies);
}

namespace {

// `sets` sets of inputs: `inputs` itself, then device copies (inputs that share a buffer share
// its copy, so that a trace that reads and writes one buffer through two inputs still does).
std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> input_sets(
    const std::vector<std::shared_ptr<DeviceBuffer>>& inputs, int sets, Device& device) {
  std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> out{inputs};
  for (int s = 1; s < sets; ++s) {
    std::map<const DeviceBuffer*, std::shared_ptr<DeviceBuffer>> copies;
    std::vector<std::shared_ptr<DeviceBuffer>>& set = out.emplace_back();
    for (const auto& buf : inputs) {
      if (!buf) {
        set.push_back(nullptr);
        continue;
      }
      auto& copy = copies[buf.get()];
      if (!copy) {
        copy = device.allocate(buf->bytes());
        FUSEJIT_CUDA(cudaMemcpyAsync(copy->data(), buf->data(), buf->bytes(),
                                     cudaMemcpyDeviceToDevice, device.stream()));
      }
      set.push_back(copy);
    }
  }
  return out;
}

}  // namespace

ExecutableTiming time_executable(const Executable& exe,
                                 const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                                 Device& device, Blas& blas, int iters, int warmup) {
  const int sets =
      std::min(rotation_sets(io_bytes(exe.plan.graph), static_cast<int64_t>(device.info().l2_bytes),
                             static_cast<int64_t>(device.info().total_memory / 16)),
               std::max(1, warmup + iters));
  const auto rotation = input_sets(inputs, sets, device);
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  RunOptions options{.step_events = &events};
  std::vector<std::vector<double>> per_step(exe.steps.size());
  Events whole;
  Gate gate;
  std::vector<double> totals;
  for (int i = 0; i < warmup + iters; ++i) {
    gate.close(device.stream());
    FUSEJIT_CUDA(cudaEventRecord(whole.start, device.stream()));
    run_executable(exe, rotation[static_cast<size_t>(i % sets)], device, blas, options);
    FUSEJIT_CUDA(cudaEventRecord(whole.stop, device.stream()));
    gate.open();
    FUSEJIT_CUDA(cudaEventSynchronize(whole.stop));
    if (i < warmup) continue;
    totals.push_back(whole.ms());
    for (size_t s = 0; s < exe.steps.size(); ++s) {
      float t = 0.0f;
      FUSEJIT_CUDA(cudaEventElapsedTime(&t, events[s].first, events[s].second));
      per_step[s].push_back(t);
    }
  }
  for (auto& [a, b] : events) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  ExecutableTiming timing;
  timing.input_sets = sets;
  timing.total_ms = median(totals);
  for (auto& v : per_step) timing.step_ms.push_back(median(v));
  return timing;
}

}  // namespace fusejit::jit
