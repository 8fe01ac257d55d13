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
#include "templates/kernel.h"

namespace fusejit::jit {

// A compiled kernel loaded into the Context's device. Shared by the Runtime's kernel table and
// every Executable that launches it; the module is unloaded when the last owner lets go, after
// the device's stream has finished the launches queued so far (unloading a module under a
// running kernel is undefined), so a table may forget a kernel at any time.
struct LoadedKernel {
  templates::Kernel kernel;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  std::shared_ptr<Device> device;  // its driver and stream, kept alive for the unload
  ~LoadedKernel();
};

// How the executor obtains a loaded kernel for generated source (the kernel caches sit behind
// this: memory, then disk, then NVRTC).
using KernelLoader = std::function<std::shared_ptr<LoadedKernel>(const templates::Kernel&)>;

struct Step {
  const fusion::Region* region = nullptr;
  std::shared_ptr<LoadedKernel> kernel;  // generated regions
  GemmCall gemm;                         // gemm regions: the cuBLASLt calls (jit/gemm_call.h)
  // A dynamic kernel (Kernel::dynamic): the outer extent of the sizes this executable runs at,
  // passed as its trailing argument and sizing its grid; 0 for a static kernel.
  int64_t outer = 0;
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
};

Executable build_executable(fusion::Plan plan, const KernelLoader& load,
                            const BuildOptions& options);
// Sets each step's `release`: the intermediates it is the last reader of.
void assign_releases(Executable& exe);

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
