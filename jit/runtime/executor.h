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
#include "jit/libs/attention_call.h"
#include "jit/libs/blas.h"
#include "jit/runtime/device.h"
#include "jit/libs/gemm_call.h"
#include "jit/runtime/graph_replay.h"
#include "jit/runtime/kernel_cache.h"
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

// A compiled kernel as the kernel cache gave it, and where it came from.
struct ObtainedKernel {
  CompiledKernel compiled;
  KernelCache::Outcome outcome = KernelCache::Outcome::compiled;
  double obtain_ms = 0.0;  // how long finding or compiling it took (for the debug log)
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
  // The kernel's pointer arguments: this region's buffers, in the order of the Kernel::params
  // generated for it. Not kernel->kernel.params: regions whose kernels have the same source
  // share one loaded kernel (load_kernels, a Runtime's table), and it holds the parameters of
  // the region it was loaded for.
  std::vector<ir::NodeId> arguments;
  GemmCall gemm;                         // gemm regions: the cuBLASLt calls (jit/libs/gemm_call.h)
  // attention regions that cuDNN runs (FUSEJIT_ATTENTION=cudnn; jit/libs/attention_call.h); those
  // it does not take have a kernel.
  std::shared_ptr<const AttentionCall> attention;
  // A dynamic kernel (Kernel::dynamic): the outer extent of the sizes this executable runs at,
  // passed as its trailing argument and sizing its grid; 0 for a static kernel.
  int64_t outer = 0;
  // A register path's row length at the sizes launched (templates::launch_grid); 0: none.
  int64_t row_length = 0;
  // Its runtime extents' arguments (jit::runtime_arguments), after fj_outer, one slot each.
  std::vector<uint64_t> runtime_extents;
  // Node ids whose buffers can be released after this step.
  std::vector<ir::NodeId> release;
  // The NVTX range around its launch, "fj <region kind>: <ops>" (range_name), so that Nsight
  // timelines say what each hashed kernel computes; made once per plan, never per launch.
  std::string range;
};

struct Executable {
  fusion::Plan plan;
  std::vector<Step> steps;
  size_t kernel_steps = 0;   // steps that launch a generated kernel
  size_t kernel_params = 0;  // their parameters together
  size_t output_bytes = 0;   // every region output's bytes together
  std::string graph_range;  // the NVTX range around a graph replay of all its steps
  // The CUDA graph its launches replay as (RunOptions::graph_min_launches), built at the first
  // run that replays. Run-time state of a shared, otherwise immutable value: runs of one
  // Executable must be serialized (a Context's evals are, by its lock).
  mutable std::unique_ptr<GraphReplay> graph;
};

struct BuildOptions {
  templates::CodegenOptions codegen;
  bool allow_tf32 = false;
  int compile_threads = 1;  // threads that obtain a plan's missing kernels at once (jit/runtime/parallel.h)
  // When set (FUSEJIT_ATTENTION=cudnn and cuDNN found): attention regions are planned on cuDNN
  // first, and get the generated kernel where cuDNN refuses them (a decision says why).
  std::shared_ptr<CudnnSession> cudnn;
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
// `prebuilt`, when given, may fill the kernel step of region i itself (a dynamic kernel with its
// outer extent and its arguments, jit/runtime/dynamic.h) and return true; the other regions'
// kernels are generated.
using PrebuiltKernel = std::function<bool(size_t region, Step& step)>;
Executable build_executable(fusion::Plan plan, const KernelLoader& loader,
                            const BuildOptions& options, const PrebuiltKernel& prebuilt = {});
// Sets each step's `release` (the intermediates it is the last reader of), the counts a graph
// replay sizes itself by, and the NVTX range names; the steps must be complete.
void assign_releases(Executable& exe);
// "fj <region kind>: <ops>": the region's computing ops (no views, inputs or constants), each
// once, in order, at most 8 (then "..."). E.g. "fj normalization: mean sub mul rsqrt".
std::string range_name(const ir::Graph& g, const fusion::Region& r);

// Graph replay keeps every region output alive for the whole run (a launch at a time frees an
// intermediate after its last reader): it is for plans of small tensors, where launches cost
// more than the kernels.
inline constexpr size_t kGraphMaxBytes = size_t{64} << 20;

// run_executable's bookkeeping, by node id and by launch.
struct RunScratch {
  std::vector<std::shared_ptr<DeviceBuffer>> values;  // per node: its buffer
  std::vector<std::shared_ptr<DeviceBuffer>> direct;  // per node: the caller buffer it goes to
  std::vector<void*> pointers;                        // kernel arguments, launch after launch
  std::vector<void*> args;                            // &pointers[i]
  std::vector<KernelLaunch> launches;
  // When set: the workspace of every cuDNN attention step (at least the largest one's), instead
  // of one from the pool per call. ReplayRun sets it, so that its runs allocate nothing.
  std::shared_ptr<DeviceBuffer> attention_workspace;
};

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
  // Replay the kernels as one CUDA graph (jit/runtime/graph_replay.h) when the plan launches at
  // least this many and does nothing else (no GEMM), nothing asks for per-step events or poisoning,
  // and its region outputs together fit kGraphMaxBytes. 0: never.
  int graph_min_launches = 0;
  int64_t* graph_launches = nullptr;  // when set: counts the runs replayed as a graph
  // Vectors reused from run to run, so that a steady-state run allocates no host memory for
  // its bookkeeping (null: the run's own). Holds no buffer after the run.
  RunScratch* scratch = nullptr;
};


// Runs `exe` with its graph's inputs bound to `inputs` (in input order); returns one buffer per
// graph output (options.outputs' where given). Work is queued on the device's stream; nothing
// synchronizes.
std::vector<std::shared_ptr<DeviceBuffer>> run_executable(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device, Blas& blas, const RunOptions& options = {});

// Which region outputs of a plan may share a buffer in a fixed run: per node its slot (-1 for
// a graph input, a node no region computes, and an update, which is written into its
// destination's storage), and per slot its bytes (the most any of its nodes needs). A slot is
// taken again only by an output computed after the last region that reads what the slot held
// (that storage's last reader, updates written into it included): the smallest free slot that
// holds it, else the largest free one, grown. Graph outputs keep theirs. So a replay holds about
// what an eval holds at its peak, not every intermediate at once. Needs no GPU.
struct BufferSlots {
  std::vector<int> slot;      // per node
  std::vector<size_t> bytes;  // per slot
};
BufferSlots buffer_slots(const fusion::Plan& plan);

// A run on fixed buffers, repeated (jit/runtime/replay_run.h): every node's buffer, by node id:
// the inputs as bound (in input order), and for each region output the buffer of its slot
// (buffer_slots; an update's, its destination's). Nothing is allocated or released by a run, so
// the same buffers serve every run.
std::vector<std::shared_ptr<DeviceBuffer>> fixed_buffers(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device);
// Queues every step of `exe` on the device's stream with `values` (fixed_buffers'), allocating
// and releasing nothing when scratch.attention_workspace holds the cuDNN attention steps'
// workspace (attention_workspace_bytes), so that it may run while the stream is being captured
// into a CUDA graph.
void run_fixed(const Executable& exe, std::vector<std::shared_ptr<DeviceBuffer>>& values,
               Device& device, Blas& blas, RunScratch& scratch);
// The largest workspace a cuDNN attention step of `exe` asks for (0: none, or no such step).
int64_t attention_workspace_bytes(const Executable& exe);

// Bytes a step must move at least (each region input read once, each output written once), and
// for gemm steps the flops (2*M*N*K per batch, over all calls); for `fusejit run` and the
// benchmark.
int64_t step_bytes(const Executable& exe, const Step& step);
double step_flops(const Step& step);
// "fj_pointwise_3f2a..." or "cublasLt 512x512x64 x16 (8 calls) bf16+bias+relu".
std::string step_label(const Executable& exe, const Step& step);

}  // namespace fusejit::jit
