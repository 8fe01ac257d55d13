// jit/device: see device.h.
#include "jit/device.h"

#include <cstdint>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "jit/cuda_check.h"

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

std::optional<DeviceInfo> probe_device(std::string* why) {
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
  cudaDeviceProp prop{};
  FUSEJIT_CUDA(cudaGetDeviceProperties(&prop, 0));
  DeviceInfo info;
  info.ordinal = 0;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.threads_per_sm = prop.maxThreadsPerMultiProcessor;
  info.registers_per_sm = prop.regsPerMultiprocessor;
  info.shared_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
  info.cluster_launch = prop.clusterLaunch != 0 ? 1 : 0;
  return info;
}

Device::Device(const DeviceInfo& info) : info_(info), driver_(Driver::load()) {
  FUSEJIT_CUDA(cudaSetDevice(info_.ordinal));
  FUSEJIT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FUSEJIT_CUDA(cudaDeviceGetDefaultMemPool(&pool_, info_.ordinal));
  // Keep freed memory in the pool instead of returning it to the driver at each
  // synchronization, so that a steady-state eval allocates nothing from the driver.
  uint64_t threshold = UINT64_MAX;
  FUSEJIT_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
}

Device::~Device() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

std::shared_ptr<DeviceBuffer> Device::allocate(size_t bytes) {
  return std::make_shared<DeviceBuffer>(*this, bytes);
}

void Device::synchronize() { FUSEJIT_CUDA(cudaStreamSynchronize(stream_)); }

DeviceBuffer::DeviceBuffer(Device& device, size_t bytes) : device_(device), bytes_(bytes) {
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr_, bytes == 0 ? 1 : bytes, device.pool_,
                                                     device.stream_);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemoryError(
        fmt::format("out of GPU memory: allocating {:.1f} MiB failed ({}); {:.1f} of {:.1f} MiB "
                    "are free on {}. Drop tensors you no longer need or use smaller shapes",
                    bytes / 1048576.0, cudaGetErrorString(status), free_bytes / 1048576.0,
                    total_bytes / 1048576.0, device.info().name),
        static_cast<int64_t>(bytes));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFreeAsync(ptr_, device_.stream_);
}

}  // namespace fusejit::jit
