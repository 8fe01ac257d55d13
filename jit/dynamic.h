// jit/dynamic: dynamic dims at run time (DESIGN.md "Kernels worth generating").
//
// A program evaluated at a new batch size records a new trace. DynamicDims finds the symbolic
// trace (ir/symbolic.h) it is an instance of: one found before, or one made now, when the user
// marked input axes dynamic (Context::mark_dynamic) or when a trace of the same structure was
// seen before at other sizes (the axes that changed become symbols, as torch's automatic dynamic
// does). A symbolic trace is planned once (DynamicPlan); each region whose kernel can take its
// outer extent as a runtime argument (templates::generate_dynamic) gets one kernel for every
// size, the others a static kernel per size. Index arithmetic that divides by a dim of a symbol
// (a table broadcast over one symbol of two, a permute moving a dynamic axis inward) takes
// that dim as a runtime extent with a precomputed fast divisor (templates/fastdiv.h). An
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
#include "jit/executor.h"
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
// Every kernel a run at `values` loads: the dynamic kernels of the regions they serve (every
// variant and path, as load_dynamic loads them), and the other regions' static ones.
std::vector<templates::Kernel> kernels_at(const DynamicPlan& plan, const ir::Bindings& values,
                                          const templates::CodegenOptions& codegen);

// A DynamicPlan with its dynamic kernels loaded, as a Runtime keeps it.
struct DynamicExecutable {
  DynamicPlan plan;
  std::vector<std::shared_ptr<LoadedKernel>> kernels;  // per region; null where not dynamic
  std::vector<std::shared_ptr<LoadedKernel>> aligned;  // per region; null where no variant
  std::vector<std::vector<std::shared_ptr<LoadedKernel>>> paths;  // per region, as plan.paths
};

// Loads the plan's dynamic kernels (the missing ones obtained on up to `threads` threads).
DynamicExecutable load_dynamic(DynamicPlan plan, const KernelLoader& loader, int threads);
// The executable at `values`: the plan instantiated, dynamic regions launching their kernel with
// their outer extent, the others' static kernels loaded through `loader`.
Executable instantiate_executable(const DynamicExecutable& dyn, const ir::Bindings& values,
                                  const KernelLoader& loader, const BuildOptions& options);

}  // namespace fusejit::jit
