// jit/device: the GPU a Context runs on: its properties, its stream, its stream-ordered memory
// pool and the driver functions. Everything here is reached at first GPU use; with no GPU (or
// no driver), probe() says so and fusejit falls back to the CPU reference.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "jit/driver.h"
#include "templates/target.h"

namespace fusejit::jit {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;
  int threads_per_sm = 0, registers_per_sm = 0, shared_per_sm = 0;
  int cluster_launch = -1;  // cudaDevAttrClusterLaunch: 1 or 0; -1 when not probed
  std::string arch() const;  // "sm_90"
  // The per-SM limits code generation sizes kernels for (the device's own figures).
  templates::Target target() const;
};

// The first GPU, or nullopt (with the reason in `why`) when none can be used.
std::optional<DeviceInfo> probe_device(std::string* why = nullptr);

class Device;

// Device memory from the pool, returned to it (stream-ordered) when the last owner lets go.
class DeviceBuffer {
 public:
  DeviceBuffer(Device& device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Device& device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Device {
 public:
  explicit Device(const DeviceInfo& info);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const Driver& driver() const { return driver_; }
  cudaStream_t stream() const { return stream_; }

  // Stream-ordered allocation; throws fusejit::Error naming the size when the GPU is out of
  // memory. Every allocation is at least 256-byte aligned (the codegen relies on it).
  std::shared_ptr<DeviceBuffer> allocate(size_t bytes);
  void synchronize();

 private:
  friend class DeviceBuffer;
  DeviceInfo info_;
  Driver driver_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace fusejit::jit
