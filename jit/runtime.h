// jit/runtime: a Context's GPU side: the device, the cuBLASLt handle, the loaded modules (by
// kernel source, over the persistent KernelCache) and the trace-level memo (ready Executables by structural hash of
// the trace), so that a repeated eval of a trace costs a hash, a lookup and the launches.
// Every public method makes the Runtime's device current for its duration (DeviceGuard) and
// restores the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <spdlog/logger.h>

#include "fusejit/context.h"
#include "fusejit/options.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/blas.h"
#include "jit/device.h"
#include "fusion/pipeline.h"
#include "jit/executor.h"
#include "jit/kernel_cache.h"

namespace fusejit::jit {

// The planning and codegen options that FUSEJIT_DISABLE and FUSEJIT_ROUNDING select, for
// kernels that run on `target`.
fusion::PlanOptions plan_options(const Options& options);
BuildOptions build_options(const Options& options, const templates::Target& target);

class Runtime {
 public:
  // Work goes on `stream` (the caller's, on that device) or on a stream of the Runtime's own.
  Runtime(const DeviceInfo& info, const Options& options, spdlog::logger& log,
          Context::Stats& stats, cudaStream_t stream = nullptr);
  ~Runtime();

  Device& device() { return *device_; }
  Blas& blas() { return *blas_; }

  // The executable for `g` (its outputs set): from the trace memo, or planned, generated,
  // compiled and loaded now.
  std::shared_ptr<const Executable> executable_for(const ir::Graph& g);

  // Runs `g` (its outputs set) with its inputs bound to `inputs`; returns one buffer per output.
  // `into`, when not empty, gives per output the buffer it must end up in (null: allocated);
  // RunOptions::outputs says when a kernel writes there directly. Inputs that are not
  // kBufferAlignment-aligned (caller memory) are copied into aligned buffers first.
  std::vector<std::shared_ptr<DeviceBuffer>> run(
      const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
      const std::vector<std::shared_ptr<DeviceBuffer>>& into = {});

  std::shared_ptr<DeviceBuffer> upload(const ir::HostTensor& host);
  // Copies a buffer into `host` (whose dtype and shape are set) and waits for it.
  void download(const DeviceBuffer& buffer, ir::HostTensor& host);
  // Queues a device-to-device copy on the stream.
  void copy(void* dst, const void* src, size_t bytes);
  // Throws fusejit::UsageError, naming `what`, unless `ptr` is device (or managed) memory that
  // this device can use in place.
  void require_device_pointer(const void* ptr, std::string_view what);

 private:
  // The three steps of build_executable's KernelLoader (jit/executor.h).
  std::shared_ptr<LoadedKernel> find_loaded(const templates::Kernel& k);
  ObtainedKernel obtain(const templates::Kernel& k);
  std::shared_ptr<LoadedKernel> load(const templates::Kernel& k, const ObtainedKernel& o);

  const Options& options_;
  spdlog::logger& log_;
  Context::Stats& stats_;
  KernelCache kernel_cache_;  // memory, disk store and NVRTC, shared by every kernel it loads
  std::shared_ptr<Device> device_;  // shared with every buffer it allocated
  std::string target_arch_;  // what NVRTC compiles for: the device's sm_XX, or compute_XX
  std::unique_ptr<Blas> blas_;
  std::unordered_map<std::string, std::shared_ptr<LoadedKernel>> kernels_;  // by source
  // Trace memo: structural hash -> (trace, executable); the trace is compared on a hit.
  std::unordered_multimap<uint64_t, std::pair<ir::Graph, std::shared_ptr<const Executable>>> memo_;
};

}  // namespace fusejit::jit
