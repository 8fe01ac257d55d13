// jit/runtime: a Context's GPU side: the device, the cuBLASLt handle, the loaded modules (by
// kernel source, over the persistent KernelCache) and the trace-level memo (ready Executables by
// structural hash of the trace), so that a repeated eval of a trace costs a hash, a lookup and
// the launches. Both tables are bounded (FUSEJIT_KERNELS_MAX, FUSEJIT_MEMO_MAX) and forget their
// least recently used entries.
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

#include "cache/lru.h"
#include "fusejit/context.h"
#include "fusejit/options.h"
#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/libs/blas.h"
#include "jit/runtime/device.h"
#include "jit/runtime/dynamic.h"
#include "jit/runtime/executor.h"
#include "jit/runtime/kernel_cache.h"
#include "jit/runtime/replay_run.h"
#include "jit/runtime/trace_memo.h"

namespace fusejit::jit {

// The planning and codegen options that FUSEJIT_DISABLE and FUSEJIT_ROUNDING select, for
// kernels that run on `target`.
fusion::PlanOptions plan_options(const Options& options);
BuildOptions build_options(const Options& options, const templates::Target& target);

// Where a Runtime looks for dynamic dims on a trace-memo miss (jit/runtime/dynamic.h); null:
// nowhere.
struct DynamicSource {
  DynamicDims* dims = nullptr;
  const std::vector<ir::DynamicAxis>* marks = nullptr;  // the user's, or none
};

class Runtime {
 public:
  // Work goes on `stream` (the caller's, on that device) or on a stream of the Runtime's own.
  Runtime(const DeviceInfo& info, const Options& options, spdlog::logger& log,
          Context::Stats& stats, cudaStream_t stream = nullptr);
  ~Runtime();

  Device& device() { return *device_; }
  // The same, shared: what a module loaded into it keeps (LoadedKernel::device).
  const std::shared_ptr<Device>& shared_device() const { return device_; }
  Blas& blas() { return *blas_; }

  // The executable for `g` (its outputs set): from the trace memo, or from the plan of the
  // symbolic trace `g` is an instance of, or planned, generated, compiled and loaded now.
  std::shared_ptr<const Executable> executable_for(const ir::Graph& g,
                                                   const DynamicSource& source = {});
  // The executable for `g`, an instance of `match`'s symbolic trace at its values.
  std::shared_ptr<const Executable> executable_for(const ir::Graph& g, const DynamicMatch& match);

  // Runs `g` (its outputs set) with its inputs bound to `inputs`; returns one buffer per output.
  // `into`, when not empty, gives per output the buffer it must end up in (null: allocated);
  // RunOptions::outputs says when a kernel writes there directly. Inputs that are not
  // kBufferAlignment-aligned (caller memory) are copied into aligned buffers first (and an
  // update_slice's destination copied back after the run: the write lands in the caller's
  // memory, and the update's result is that buffer).
  std::vector<std::shared_ptr<DeviceBuffer>> run(
      const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
      const std::vector<std::shared_ptr<DeviceBuffer>>& into = {},
      const DynamicSource& source = {});

  // A ReplayRun of `g` (its outputs set) on `inputs`, which must be kBufferAlignment-aligned
  // (fusejit::Replay). Plans and builds as run would; runs nothing.
  std::unique_ptr<ReplayRun> replay(const ir::Graph& g,
                                    const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                                    const DynamicSource& source = {});
  // Queues one run of it on the stream; counts it (and a graph launch) in the stats.
  void run_replay(ReplayRun& replay);

  std::shared_ptr<DeviceBuffer> upload(const ir::HostTensor& host);
  // Copies a buffer into `host` (whose dtype and shape are set) and waits for it.
  void download(const DeviceBuffer& buffer, ir::HostTensor& host);
  // Queues a device-to-device copy on the stream.
  void copy(void* dst, const void* src, size_t bytes);
  // Throws fusejit::UsageError, naming `what`, unless `ptr` is device (or managed) memory that
  // this device can use in place.
  void require_device_pointer(const void* ptr, std::string_view what);

 private:
  // The three steps of build_executable's KernelLoader (jit/runtime/executor.h).
  std::shared_ptr<LoadedKernel> find_loaded(const templates::Kernel& k);
  ObtainedKernel obtain(const templates::Kernel& k);
  std::shared_ptr<LoadedKernel> load(const templates::Kernel& k, const ObtainedKernel& o);
  // build_executable's loader: the three steps above.
  KernelLoader loader();
  std::shared_ptr<const Executable> remember(const ir::Graph& g, uint64_t hash,
                                             std::shared_ptr<const Executable> exe);
  // After a run on realigned copies of `inputs`: each update_slice output of `g` written into
  // a copy is copied back into the caller's buffer, which becomes its result in `outs`.
  void write_back(const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                  const std::vector<std::shared_ptr<DeviceBuffer>>& copies,
                  std::vector<std::shared_ptr<DeviceBuffer>>& outs);
  // build_options plus, when `attention` (the plan has an attention region) and
  // FUSEJIT_ATTENTION allows it, the cuDNN session: made at the first such call; when cuDNN
  // cannot be loaded or a handle made, one log line and no session (the kernel runs).
  BuildOptions build_options_here(bool attention);

  const Options& options_;
  spdlog::logger& log_;
  Context::Stats& stats_;
  KernelCache kernel_cache_;  // memory, disk store and NVRTC, shared by every kernel it loads
  std::shared_ptr<Device> device_;  // shared with every buffer it allocated
  std::string target_arch_;  // what NVRTC compiles for: the device's sm_XX, or compute_XX
  std::unique_ptr<Blas> blas_;
  // Loaded kernels by source, the FUSEJIT_KERNELS_MAX most recently loaded or reused.
  cache::LruMap<std::string, std::shared_ptr<LoadedKernel>> kernels_;
  TraceMemo memo_;  // FUSEJIT_MEMO_MAX traces, ready to run
  // Dynamic plans by symbolic trace (the key is kept alive by the entry), as many as the memo.
  struct DynamicEntry {
    std::shared_ptr<const ir::SymbolicGraph> trace;
    std::shared_ptr<DynamicExecutable> executable;  // its kernels loaded as sizes need them
  };
  cache::LruMap<const ir::SymbolicGraph*, DynamicEntry> dynamic_;
  RunScratch scratch_;  // run's bookkeeping vectors, reused (the Context serializes runs)
  std::shared_ptr<CudnnSession> cudnn_;
  bool cudnn_tried_ = false;
};

}  // namespace fusejit::jit
