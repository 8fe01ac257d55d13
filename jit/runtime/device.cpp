// jit/device: see device.h.
#include "jit/runtime/device.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

std::string DeviceInfo::arch() const { return fmt::format("sm_{}{}", cc_major, cc_minor); }

templates::Target DeviceInfo::target() const {
  templates::Target t = templates::target_for_arch(arch());
  if (threads_per_sm > 0) t.threads_per_sm = threads_per_sm;
  if (registers_per_sm > 0) t.registers_per_sm = registers_per_sm;
  if (shared_per_sm > 0) t.shared_per_sm = shared_per_sm;
  if (cluster_launch == 0) t.cluster_blocks = 1;  // an arch that has clusters, a device that does not
  return t;
}

std::optional<DeviceInfo> probe_device(std::string* why, int ordinal) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why) {
      *why = status != cudaSuccess ? fmt::format("{} ({})", cudaGetErrorString(status),
                                                 cudaGetErrorName(status))
                                   : "no CUDA device found";
    }
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return std::nullopt;
  }
  if (ordinal < 0 || ordinal >= count) {
    throw UsageError(fmt::format("Placement: device {} does not exist; this machine has {} CUDA "
                                 "device{} (ordinals 0 to {})",
                                 ordinal, count, count == 1 ? "" : "s", count - 1));
  }
  cudaDeviceProp prop{};
  FUSEJIT_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.threads_per_sm = prop.maxThreadsPerMultiProcessor;
  info.registers_per_sm = prop.regsPerMultiprocessor;
  info.shared_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
  info.l2_bytes = static_cast<size_t>(std::max(prop.l2CacheSize, 0));
  info.cluster_launch = prop.clusterLaunch != 0 ? 1 : 0;
  return info;
}

DeviceGuard::DeviceGuard(int ordinal) {
  // Never throws (guards run in destructors too, also while the process exits): a failure here
  // shows in the CUDA call the guard protects.
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  // Set even when it is already the current device the first time on a thread: on a thread
  // that has made no runtime call yet, this is what makes the device's primary context current,
  // which the driver API calls (module loads, launches) need. After that, a guard on a thread
  // whose current device is already `ordinal` has nothing to do: the hot path of an eval holds
  // several guards, and cudaSetDevice costs more than cudaGetDevice. Only a change of device is
  // undone.
  thread_local int primed = -1;  // the device a guard last made current on this thread
  if (current == ordinal && primed == ordinal) return;
  if (cudaSetDevice(ordinal) == cudaSuccess) {
    primed = ordinal;
    if (current != ordinal) previous_ = current;
  } else {
    cudaGetLastError();
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

bool is_aligned(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % kBufferAlignment == 0;
}

Device::Device(const DeviceInfo& info, cudaStream_t stream)
    : info_(info), driver_(Driver::load()), stream_(stream) {
  const DeviceGuard guard(info_.ordinal);
  if (!stream_) {
    FUSEJIT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owns_stream_ = true;
  } else {
    int stream_device = -1;
    FUSEJIT_CUDA(cudaStreamGetDevice(stream_, &stream_device));
    if (stream_device != info_.ordinal) {
      throw UsageError(fmt::format("Placement: the stream belongs to device {}, not to device {} "
                                   "that the Context runs on; pass a stream of device {} or set "
                                   "Placement::device to {}",
                                   stream_device, info_.ordinal, info_.ordinal, stream_device));
    }
  }
  // A pool of fusejit's own: freed memory stays in it instead of going back to the driver at
  // each synchronization (so a steady-state eval allocates nothing from the driver), without
  // changing the release threshold of the device's default pool, which is the caller's.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = info_.ordinal;
  FUSEJIT_CUDA(cudaMemPoolCreate(&pool_, &props));
  uint64_t threshold = UINT64_MAX;
  FUSEJIT_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
}

Device::~Device() {
  const DeviceGuard guard(info_.ordinal);
  if (stream_) cudaStreamSynchronize(stream_);
  for (QueuedRelease& q : releases_) {
    cudaEventDestroy(q.done);
    q.release();
  }
  if (owns_stream_) cudaStreamDestroy(stream_);
  if (pool_) cudaMemPoolDestroy(pool_);
}

std::shared_ptr<DeviceBuffer> Device::allocate(size_t bytes) {
  return std::make_shared<DeviceBuffer>(shared_from_this(), bytes);
}

std::shared_ptr<DeviceBuffer> Device::borrow(void* ptr, size_t bytes,
                                             std::function<void()> release) {
  return std::make_shared<DeviceBuffer>(shared_from_this(), ptr, bytes, std::move(release));
}

void Device::synchronize() {
  FUSEJIT_CUDA(cudaStreamSynchronize(stream_));
  run_releases();
}

void Device::queue_release(std::function<void()> release) {
  cudaEvent_t done = nullptr;
  if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(done, stream_) != cudaSuccess) {
    // No event to wait on (a failing device): wait for the stream instead, as a last resort.
    cudaGetLastError();
    if (done) cudaEventDestroy(done);
    cudaStreamSynchronize(stream_);
    release();
    return;
  }
  const std::lock_guard<std::mutex> lock(releases_mutex_);
  releases_.push_back({done, std::move(release)});
}

void Device::run_releases() {
  std::vector<QueuedRelease> ready;
  {
    const std::lock_guard<std::mutex> lock(releases_mutex_);
    if (releases_.empty()) return;
    const DeviceGuard guard(info_.ordinal);
    // Events complete in stream order: the ready ones are a prefix.
    size_t n = 0;
    while (n < releases_.size() && cudaEventQuery(releases_[n].done) == cudaSuccess) ++n;
    cudaGetLastError();  // cudaErrorNotReady is an answer, not an error to keep
    ready.assign(std::make_move_iterator(releases_.begin()),
                 std::make_move_iterator(releases_.begin() + static_cast<std::ptrdiff_t>(n)));
    releases_.erase(releases_.begin(), releases_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  for (QueuedRelease& q : ready) {
    cudaEventDestroy(q.done);
    q.release();
  }
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, size_t bytes)
    : device_(std::move(device)), bytes_(bytes) {
  const DeviceGuard guard(device_->info().ordinal);
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr_, bytes == 0 ? 1 : bytes,
                                                     device_->pool_, device_->stream_);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemoryError(
        fmt::format("out of GPU memory: allocating {:.1f} MiB failed ({}); {:.1f} of {:.1f} MiB "
                    "are free on {}. Drop tensors you no longer need or use smaller shapes",
                    bytes / 1048576.0, cudaGetErrorString(status), free_bytes / 1048576.0,
                    total_bytes / 1048576.0, device_->info().name),
        static_cast<int64_t>(bytes));
  }
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, void* borrowed, size_t bytes,
                           std::function<void()> release)
    : device_(std::move(device)),
      ptr_(borrowed),
      bytes_(bytes),
      borrowed_(true),
      release_(std::move(release)) {}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  const DeviceGuard guard(device_->info().ordinal);
  if (!borrowed_) {
    cudaFreeAsync(ptr_, device_->stream_);
  } else if (release_) {
    // The caller may free the memory as soon as it hears: the work reading it must be done
    // first. Queued behind it on the stream, so that letting go never blocks the host.
    device_->queue_release(std::move(release_));
  }
}

bool DeviceBuffer::overlaps(const void* other, size_t other_bytes) const {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr_);
  const auto b = reinterpret_cast<std::uintptr_t>(other);
  return a < b + other_bytes && b < a + bytes_;
}

}  // namespace fusejit::jit
