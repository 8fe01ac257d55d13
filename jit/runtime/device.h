// jit/device: the GPU a Context runs on: its properties, its stream (its own or the caller's),
// its stream-ordered memory pool (its own, never the device's default pool) and the driver
// functions. Everything here is reached at first GPU use; with no GPU (or no driver),
// probe_device() says so and fusejit falls back to the CPU reference.
//
// No process-wide side effects: nothing here changes the caller's current device for longer
// than a DeviceGuard's scope, and the default pool's attributes are left as they are.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "jit/runtime/driver.h"
#include "templates/target.h"

namespace fusejit::jit {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;
  int threads_per_sm = 0, registers_per_sm = 0, shared_per_sm = 0;
  size_t l2_bytes = 0;      // the L2 cache
  int cluster_launch = -1;  // cudaDevAttrClusterLaunch: 1 or 0; -1 when not probed
  std::string arch() const;  // "sm_90"
  // The per-SM limits code generation sizes kernels for (the device's own figures).
  templates::Target target() const;
};

// GPU `ordinal`, or nullopt (with the reason in `why`) when no GPU can be used. Throws
// fusejit::UsageError when there are GPUs but `ordinal` is not one of them.
std::optional<DeviceInfo> probe_device(std::string* why = nullptr, int ordinal = 0);

// Makes `ordinal` the calling thread's current device for the guard's scope and restores the
// caller's afterwards (touching nothing when it already is). Every entry point that calls CUDA
// on a Context's behalf holds one, so that fusejit never changes the caller's current device.
// Never throws: a failure to switch shows in the CUDA call that follows.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: unchanged
};

// The alignment of every pool allocation, which code generation and the GEMM plans assume of
// every buffer they are given (templates/kernel.h). Caller memory that is less aligned is
// copied into an aligned buffer instead of being used in place.
inline constexpr size_t kBufferAlignment = 256;
bool is_aligned(const void* ptr);

class Device;

// Device memory: from the pool and returned to it (stream-ordered) when the last owner lets go,
// or borrowed from the caller (Context::wrap, eval_into), whose `release` is then queued behind
// the work queued so far on the stream, without blocking, and called once that work has run
// (Device::run_releases).
class DeviceBuffer {
 public:
  DeviceBuffer(std::shared_ptr<Device> device, size_t bytes);
  DeviceBuffer(std::shared_ptr<Device> device, void* borrowed, size_t bytes,
               std::function<void()> release);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool borrowed() const { return borrowed_; }
  // Whether [data, data + bytes) and [other, other + other_bytes) share a byte.
  bool overlaps(const void* other, size_t other_bytes) const;

 private:
  std::shared_ptr<Device> device_;  // a buffer keeps its pool and stream alive
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool borrowed_ = false;
  std::function<void()> release_;
};

class Device : public std::enable_shared_from_this<Device> {
 public:
  // Work goes on `stream` (the caller's, which must belong to the device and outlive every
  // buffer of this Device) or, when null, on a stream of the Device's own.
  explicit Device(const DeviceInfo& info, cudaStream_t stream = nullptr);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const Driver& driver() const { return driver_; }
  cudaStream_t stream() const { return stream_; }

  // Stream-ordered allocation from the Device's own pool; throws fusejit::OutOfMemoryError
  // naming the size when the GPU is out of memory. Every allocation is kBufferAlignment-aligned.
  std::shared_ptr<DeviceBuffer> allocate(size_t bytes);
  // Caller memory used in place; `release` (may be empty) as DeviceBuffer says.
  std::shared_ptr<DeviceBuffer> borrow(void* ptr, size_t bytes, std::function<void()> release);
  // Waits for the stream, then calls every queued release.
  void synchronize();
  // Calls the queued releases of borrowed memory whose work has run (never waits). Releases run
  // on the calling thread, outside any lock of the Device: they may call CUDA (cudaFree).
  void run_releases();

 private:
  friend class DeviceBuffer;
  // A borrowed buffer's release, waiting for `done` (recorded on the stream when the buffer was
  // let go) to complete.
  struct QueuedRelease {
    cudaEvent_t done = nullptr;
    std::function<void()> release;
  };
  void queue_release(std::function<void()> release);
  std::mutex releases_mutex_;  // buffers are let go on any thread
  std::vector<QueuedRelease> releases_;
  DeviceInfo info_;
  Driver driver_;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace fusejit::jit
