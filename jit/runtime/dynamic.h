// jit/dynamic: dynamic dims at run time (docs/dynamic-shapes.md).
//
// A program evaluated at a new batch size records a new trace. DynamicDims finds the symbolic
// trace (ir/symbolic.h) it is an instance of: one found before, or one made now, when the user
// marked input axes dynamic (Context::mark_dynamic) or when a trace of the same structure was
// seen before at other sizes (the axes that changed become symbols, as torch's automatic dynamic
// does). A symbolic trace is planned once (DynamicPlan); each region whose kernel can take its
// outer extent as a runtime argument (templates::generate_dynamic) gets one kernel for every
// size, the others a static kernel per size. Index arithmetic that divides by a dim of a symbol
// (a table broadcast over one symbol of two, a permute moving a dynamic axis inward) takes
// that dim as a runtime extent with a precomputed fast divisor (templates/kir/fastdiv.h). An
// Executable for one set of sizes is then the plan instantiated, with no planning and, for
// dynamic regions, no compiling.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <spdlog/logger.h>

#include "fusion/pipeline.h"
#include "ir/symbolic.h"
#include "jit/runtime/executor.h"
#include "templates/kernel.h"

namespace fusejit::jit {

// A symbolic trace and the sizes of one eval of it.
struct DynamicMatch {
  std::shared_ptr<const ir::SymbolicGraph> trace;
  ir::Bindings values;
};

class DynamicDims {
 public:
  // At most `capacity` program structures are remembered (least recently seen dropped first).
  explicit DynamicDims(size_t capacity = 1024) : capacity_(capacity) {}

  // The symbolic trace `g` is an instance of, with its sizes; nullopt: `g` runs as it is.
  // `marks` are the input axes the user marked dynamic.
  std::optional<DynamicMatch> match(const ir::Graph& g, const std::vector<ir::DynamicAxis>& marks,
                                    spdlog::logger& log);

 private:
  struct Entry {
    std::vector<std::shared_ptr<const ir::SymbolicGraph>> symbolic;
    std::optional<ir::Graph> last;  // the last trace of this structure that ran as it is
    uint64_t used = 0;
  };
  Entry& entry(uint64_t hash);

  size_t capacity_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
};

// The plan of a symbolic trace, with the kernel of each region that serves every size.
struct DynamicPlan {
  fusion::Plan plan;  // made on the symbolic graph
  std::vector<ir::Symbol> symbols;
  // Per region: its dynamic kernel (none: a static kernel per size, or a GEMM), and the power of
  // each symbol in its outer extent.
  std::vector<std::optional<templates::Kernel>> kernels;
  // Per region with a dynamic kernel: its variant for sizes where some symbols of the region
  // are multiples of kAlignedSizes (generated at such values, so with the vectors and guards
  // those sizes allow), when its source differs from the kernel's. Which symbols
  // (Kernel::alignment): the fewest that give the source of all of them aligned.
  std::vector<std::optional<templates::Kernel>> aligned;
  // Per region: the register paths of its aligned variant, then of its kernel (multi-pass row
  // kernels whose row length is given at launch, templates::DynamicSizes::row_path), each
  // serving rows up to its Kernel::max_row_length; a launch prefers them, in this order, to
  // the kernels above, which read the row from memory in every pass.
  std::vector<std::vector<templates::Kernel>> paths;
  std::vector<std::vector<int>> outer_exponents;
  // Per region without a dynamic kernel: why (may be empty); per region whose dynamic kernel
  // takes runtime extents: which (fusejit plan prints both).
  std::vector<std::string> reasons;
};

// The alignment of DynamicPlan::aligned: sequence lengths, hidden sizes and batch sizes are
// mostly multiples of 8, which lets a row of 16-bit values move in 16-byte vectors.
inline constexpr int64_t kAlignedSizes = 8;

DynamicPlan plan_dynamic(const ir::SymbolicGraph& trace, const fusion::PlanOptions& plan_options,
                         const templates::CodegenOptions& codegen);
// Region `region`'s outer extent at `values`.
int64_t outer_extent(const DynamicPlan& plan, size_t region, const ir::Bindings& values);
// Whether region `region` runs its dynamic kernel at `values`: one exists and serves those sizes
// (its outer extent, its 32-bit index range, the range of its fast divisions).
bool runs_dynamic(const DynamicPlan& plan, size_t region, const ir::Bindings& values);

// The dynamic kernel region `region` launches at `values`: the first of its register paths
// that serves them, else its aligned variant where that does, else its kernel where that does;
// null when none does.
const templates::Kernel* dynamic_kernel_at(const DynamicPlan& plan, size_t region,
                                           const ir::Bindings& values);
// The launch arguments of a dynamic kernel's runtime extents at `values` (Kernel::
// runtime_extents): per extent its value and its fast-division magic, computed once per size.
std::vector<uint64_t> runtime_arguments(const templates::Kernel& k, const ir::Bindings& values);
// Every kernel that runs of the plan near `values` may launch, as `fusejit warm` compiles
// them: the dynamic kernels of the regions `values` serve (every variant and path, since
// another size may launch any of them), and the other regions' static kernels at `values`.
std::vector<templates::Kernel> kernels_at(const DynamicPlan& plan, const ir::Bindings& values,
                                          const templates::CodegenOptions& codegen);

// A DynamicPlan and the dynamic kernels loaded so far, as a Runtime keeps it. A kernel is
// loaded at the first size that launches it: a register path serves one range of row
// lengths, so a program that runs at a few sizes obtains (compiles, or reads from the kernel
// cache) the few paths those sizes take, not every path of the region (`fusejit warm`
// compiles them all: kernels_at). The scores softmax of test/traces/dynamic has 20 kernels; a
// size launches one.
struct DynamicExecutable {
  explicit DynamicExecutable(DynamicPlan p);

  DynamicPlan plan;
  // Per region, as plan.kernels, plan.aligned and plan.paths: the loaded kernel, null until a
  // size launches it (or where the plan has no such kernel).
  std::vector<std::shared_ptr<LoadedKernel>> kernels;
  std::vector<std::shared_ptr<LoadedKernel>> aligned;
  std::vector<std::vector<std::shared_ptr<LoadedKernel>>> paths;
};

// The executable at `values`: the plan instantiated, dynamic regions launching their kernel with
// their outer extent, the others' static kernels loaded through `loader`. The dynamic kernels
// these sizes launch that no size before them did are obtained first, on up to
// options.compile_threads threads, and kept in `dyn`; one that fails throws its error and is
// tried again at the next instantiation. Calls on one DynamicExecutable must be serialized (a
// Context's evals are, by its lock).
Executable instantiate_executable(DynamicExecutable& dyn, const ir::Bindings& values,
                                  const KernelLoader& loader, const BuildOptions& options);

}  // namespace fusejit::jit
