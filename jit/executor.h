// jit/executor: turns a Plan into an Executable (kernels generated, compiled and loaded; GEMMs
// described for cuBLASLt) and runs it on the Context's stream. An Executable is what the
// trace-level memo keeps, so that a repeated eval of the same trace does no planning, codegen
// or compiling: only the launches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda.h>

#include "fusion/plan.h"
#include "jit/blas.h"
#include "jit/device.h"
#include "jit/gemm_call.h"
#include "jit/kernel_cache.h"
#include "templates/kernel.h"

namespace fusejit::jit {

// A compiled kernel loaded into the Context's device.
struct LoadedKernel {
  templates::Kernel kernel;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  const Driver* driver = nullptr;
  ~LoadedKernel();
};

// A compiled kernel as the kernel cache gave it, and where it came from.
struct ObtainedKernel {
  CompiledKernel compiled;
  KernelCache::Outcome outcome = KernelCache::Outcome::compiled;
};

// How the executor obtains loaded kernels for generated sources: build_executable asks `find`
// for every kernel of the plan, then `obtain`s the ones it did not find concurrently (NVRTC
// compiles, or the kernel cache's memory and disk), then `load`s those in plan order. `find`
// and `load` run on the thread that called build_executable; `obtain` runs on a pool of
// threads, several at once, and must be thread-safe.
struct KernelLoader {
  // The kernel already loaded (a Context's table), or null.
  std::function<std::shared_ptr<LoadedKernel>(const templates::Kernel&)> find;
  std::function<ObtainedKernel(const templates::Kernel&)> obtain;
  std::function<std::shared_ptr<LoadedKernel>(const templates::Kernel&, const ObtainedKernel&)>
      load;
};

struct Step {
  const fusion::Region* region = nullptr;
  std::shared_ptr<LoadedKernel> kernel;  // generated regions
  GemmCall gemm;                         // gemm regions: the cuBLASLt calls (jit/gemm_call.h)
  // Node ids whose buffers can be released after this step.
  std::vector<ir::NodeId> release;
};

struct Executable {
  fusion::Plan plan;
  std::vector<Step> steps;
};

struct BuildOptions {
  templates::CodegenOptions codegen;
  bool allow_tf32 = false;
  int compile_threads = 1;  // threads that obtain a plan's missing kernels at once (jit/parallel.h)
};

// The loaded kernel for each of `kernels` (null where a kernel has no name: a slot with no
// kernel): those `find` does not know are obtained on up to `threads` threads at once, then
// loaded in order on this thread. A source that occurs twice is found or obtained once and its
// slots share the loaded kernel. When kernels fail, the first failure in order is rethrown.
std::vector<std::shared_ptr<LoadedKernel>> load_kernels(
    const std::vector<templates::Kernel>& kernels, const KernelLoader& loader, int threads);

// Generates every kernel of the plan, obtains the missing ones on up to options.compile_threads
// threads, and loads them. A kernel that fails (NVRTC, FUSEJIT_REQUIRE_WARM) throws its error;
// when several fail, the first in plan order, as a serial build would.
Executable build_executable(fusion::Plan plan, const KernelLoader& loader,
                            const BuildOptions& options);

// What a run can do besides running, for `fusejit run` and the GPU tests.
struct RunOptions {
  bool poison_outputs = false;  // fill every region output with 0xFF bytes (NaN) first
  // When set: one pair of events per step, recorded around it (created by the caller or here).
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>>* step_events = nullptr;
  // When set: per graph output, the buffer it must end up in (null: one is allocated). The
  // region that computes an output writes it there directly when the buffer has the output's
  // size and kBufferAlignment, overlaps no input and is not asked for twice; otherwise the
  // output is computed into a buffer of the pool and copied there (device to device) at the end.
  const std::vector<std::shared_ptr<DeviceBuffer>>* outputs = nullptr;
  int64_t* outputs_copied = nullptr;  // when set: counts the outputs copied there
};

// Runs `exe` with its graph's inputs bound to `inputs` (in input order); returns one buffer per
// graph output (options.outputs' where given). Work is queued on the device's stream; nothing
// synchronizes.
std::vector<std::shared_ptr<DeviceBuffer>> run_executable(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device, Blas& blas, const RunOptions& options = {});

// Bytes a step must move at least (each region input read once, each output written once), and
// for gemm steps the flops (2*M*N*K per batch, over all calls); for `fusejit run` and the
// benchmark.
int64_t step_bytes(const Executable& exe, const Step& step);
double step_flops(const Step& step);
// "fj_pointwise_3f2a..." or "cublasLt 512x512x64 x16 (8 calls) bf16+bias+relu".
std::string step_label(const Executable& exe, const Step& step);

}  // namespace fusejit::jit
