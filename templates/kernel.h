// templates/kernel: what code generation produces for one region: the CUDA C source of one
// kernel, its name, its parameter layout and how to launch it.
//
// The source never depends on the device's SM count, so one compiled kernel serves every GPU of
// an arch; the launcher sizes the grid in waves of the SMs it finds (see launch_grid).
//
// Launch contract (every template):
//   - a 1-D block of exactly `block` threads, a 1-D grid of any size >= 1 (every kernel loops
//     over its work with a grid stride, so a smaller grid is correct, only slower) that is a
//     multiple of `cluster` (launch_grid gives one);
//   - `cluster` > 1: the kernel declares __cluster_dims__(cluster, 1, 1), so the CUBIN carries
//     the cluster shape and a plain cuLaunchKernel launches clusters; it needs sm_90 or later;
//   - `shared_bytes` of dynamic shared memory (0 today: the templates use static shared
//     memory, under 48 KiB);
//   - arguments: one device pointer per entry of `params`, in order (region inputs, then region
//     outputs), each buffer dense row-major in its node's dtype and 16-byte aligned (the pool's
//     256-byte alignment is more than enough); then, for a `dynamic` kernel only, the outer
//     extent as a 64-bit integer (`long long fj_outer`, 1 <= outer <= max_outer), with every
//     buffer sized for that extent; then its runtime extents (Kernel::runtime_extents), two
//     arguments each; nothing else.
//   - a kernel with serial_launches set must not run concurrently with itself (same module);
//   - outputs are written completely (every element, whatever they held before); inputs are
//     only read. An output buffer must not alias an input buffer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusejit/options.h"
#include "fusion/plan.h"
#include "ir/symbolic.h"
#include "templates/target.h"

namespace fusejit::templates {

// Bump when generated code changes in a way the source hash would not show (it is part of the
// kernel cache key).
inline constexpr int kCodegenVersion = 1;

// The line that separates the pasted device helpers from the kernel proper in Kernel::source
// (golden tests and dumps show what follows it).
inline constexpr std::string_view kKernelMarker = "// ==== kernel ====";

struct Kernel {
  std::string name;    // e.g. "fj_pointwise_3f2a9c01d4e5b677": kind plus a hash of the source
  std::string source;  // complete CUDA C, compilable by NVRTC with no include path
  // With CodegenOptions::keep_kir: the kernel IR after each lowering step (kir::dump), for
  // FUSEJIT_DUMP=kir; empty otherwise.
  std::string kir;
  // The scheduler that made it and its parameters, one line (templates/schedulers/registry.h:
  // schedule_text), for dumps; not part of the source, so not of the cache key. Kernels of the
  // same source share one loaded kernel, and so this line.
  std::string schedule;
  // Parameters, in order: one pointer per region input, then one per region output (node ids of
  // the region's graph), then nothing else: shapes are constants in the source (but the outer
  // extent of a dynamic kernel, its trailing scalar argument; see the launch contract).
  std::vector<ir::NodeId> params;
  int block = 256;          // threads per block
  int64_t work_blocks = 1;  // blocks that cover all work with no grid-stride loop
  int blocks_per_sm = 8;    // residency target for one wave
  // The grid is capped at this many full waves (kernels loop over the rest with a grid stride,
  // which pays where a block sets something up once: hoisted loads, shared memory); 0: no cap,
  // one block per unit of work (the linear pointwise sweep, whose blocks set nothing up: measured
  // 2.5-5% faster on an H200 than 4 waves for streams at the copy bandwidth).
  int waves = 4;
  int shared_bytes = 0;     // dynamic shared memory per block
  // Blocks per thread-block cluster (1: none). Compiled into the kernel (__cluster_dims__);
  // here so that the launcher sizes the grid in whole clusters.
  int cluster = 1;
  // Not empty: the launch bounds ask for more resident blocks per SM than may fit the kernel's
  // registers; jit::compile reads ptxas's report and, should it spill, compiles the kernel
  // again asking for the next of these (fewer each time; the macro FJ_MIN_BLOCKS in the
  // source), until it does not spill or none is left.
  std::vector<int> relaxed_min_blocks;
  // The kernel keeps scratch in module-scope device memory (reductions whose few long rows or
  // columns are split over several blocks): launches of one loaded module must not overlap in time (one
  // stream at a time; a second stream needs its own loaded copy of the module).
  bool serial_launches = false;
  // Launched with programmatic stream serialization (CodegenOptions::grid_dependency): it may
  // be scheduled before the grid ahead of it in the stream has finished, and waits for it in
  // its first statement.
  bool programmatic = false;
  // Dynamic kernels (generate_dynamic): the region's outer extent is not in the source but a
  // trailing argument, and one kernel serves every extent 1 <= outer <= max_outer (its index
  // arithmetic fits its index type up to there). The work is items_per_outer * outer items
  // (vectors of a sweep, rows) in blocks of items_per_block; work_blocks is that at max_outer.
  bool dynamic = false;
  int64_t max_outer = 0;
  int64_t items_per_outer = 0;
  int64_t items_per_block = 1;
  // Runtime extents (dynamic kernels whose index arithmetic divides by or multiplies with a dim
  // of a symbol, templates/kir/fastdiv.h): after fj_outer, per extent k, `int fj_e<k>` (the value
  // of runtime_extents[k] at the sizes launched, exponents in the order of the symbols) and
  // `unsigned long long fj_m<k>` (FastDivisor::packed of it). Such a kernel is exact while each of
  // dividend_bounds is at most kFastDivMaxDividend at those sizes.
  std::vector<ir::DimTerms> runtime_extents;
  std::vector<ir::DimTerms> dividend_bounds;
  // A dynamic kernel with 32-bit index arithmetic serves only sizes at which every node of its
  // region has at most this many elements (0: 64-bit, no limit beyond max_outer).
  int64_t max_elements = 0;
  // A dynamic kernel generated where symbol k was a multiple of alignment[k] (a power of two;
  // DynamicSizes::alignment) serves only sizes where it still is. Empty: every size.
  std::vector<int64_t> alignment;
  // A register path of a row kernel (DynamicSizes::row_path) serves only sizes at which
  // row_length (a runtime extent: the row's length) is at most max_row_length (0: no bound)
  // and at least min_row_length: one element more than the path before it holds. The
  // vectors every such row fills are neither predicated nor clamped, so a shorter row must not
  // launch it.
  ir::DimTerms row_length;
  int64_t max_row_length = 0;
  int64_t min_row_length = 0;
  // > 0: a register path whose items are elements. Given the row length at launch, its grid is
  // a block per rows_per_block rows, as a static kernel's is, instead of per items_per_block
  // elements (sized for the shortest row the path takes: at twice that length, half its
  // blocks would have no row).
  int64_t rows_per_block = 0;
};

// Grid size: the work's blocks (for a dynamic kernel, those of `outer`, which must be in
// [1, max_outer]; a static kernel takes outer 0), capped at Kernel::waves full waves of the
// device (the kernels loop over the rest with a grid stride), in whole clusters (a multiple of
// Kernel::cluster, at least one). `row_length` is a register path's row length at the sizes
// launched (Kernel::rows_per_block; 0: not known, the grid of the path's shortest rows).
// Throws InternalError for an outer extent the kernel does not take.
int64_t launch_grid(const Kernel& k, int sm_count, int64_t outer = 0, int64_t row_length = 0);
// The blocks that cover the work with no grid-stride loop at outer extent `outer` (0 for a
// static kernel: work_blocks) and `row_length` (as launch_grid's); throws InternalError like
// launch_grid.
int64_t work_blocks_at(const Kernel& k, int64_t outer, int64_t row_length = 0);

struct CodegenOptions {
  bool vectorize = true;  // 16-byte accesses where contiguity and alignment allow
  // Where f16/bf16 values are rounded; with Rounding::store, regions whose every output is
  // f16/bf16 also use the approximate math of device/fj_math.cuh (docs/numerics.md).
  Rounding rounding = Rounding::store;
  Target target;  // per-SM limits of the GPU the kernel is for
  // Rows held in registers by one block per SM (or by a cluster's blocks) stage the inputs of
  // their register cache in shared memory one row ahead (RowConfig::staged), and bf16/f16 rows
  // one block cannot hold take a cluster. Off by default until it has been timed and checked on
  // a GPU; the tests generate and compile it for sm_90.
  bool stage_rows = false;
  // Which GEMM regions the skinny-GEMM kernel takes (templates/schedulers/gemv.h,
  // jit/libs/gemm_call.h: gemv_spec) run it instead of cuBLASLt (FUSEJIT_GEMV).
  GemvMode gemv = GemvMode::large;
  // A skinny GEMM that the generated kernel runs computes its A from the pointwise or
  // normalization region just before it, as it stages A, instead of reading what that region
  // wrote (templates::GemvPrologue; jit/libs/prologue.h). Off by default, since as timed on GPUs
  // so far it makes the decode step slower (FUSEJIT_GEMV_PROLOGUE=1 turns it on); the tests
  // generate, emulate and compile it.
  bool gemv_prologue = false;
  // The same at the GEMM's other end: the pointwise region that alone reads a skinny GEMM's D,
  // evaluated at the store (templates::GemvEpilogue; jit/libs/prologue.h), D never written. Off
  // by default until timed (FUSEJIT_GEMV_EPILOGUE=1); the tests generate, emulate and compile
  // it.
  bool gemv_epilogue = false;
  // The skinny-GEMM kernel's CUDA-core variant streams its weights through a ring of stages in
  // shared memory where the SM has room (GemvParams::ring; FUSEJIT_GEMV_RING=1). Off by default
  // (Options::gemv_ring says why); the tests generate, emulate and compile it.
  bool gemv_ring = false;
  // Programmatic dependent launch (FUSEJIT_PDL; honoured from sm_90): every kernel begins with
  // fj_grid_dependency_wait() (device/fj_pdl.cuh), before which it reads and writes nothing
  // (the skinny-GEMM kernel only streams its first weights: into its ring, or into L2), and is
  // marked Kernel::programmatic for the launcher.
  bool grid_dependency = false;
  // Programmatic dependent launch for the skinny-GEMM kernel only (FUSEJIT_PDL=gemv): it is
  // generated as with grid_dependency; every other kernel only begins with
  // fj_grid_dependents_launch(), so that a skinny GEMM after it may start streaming its weights,
  // and is launched as before.
  bool gemv_grid_dependency = false;
  // Keep the kernel IR of each lowering step in Kernel::kir (FUSEJIT_DUMP=kir). Changes no
  // kernel.
  bool keep_kir = false;
};

// Generates the kernel of a pointwise, reduction, normalization or attention region, by the
// first scheduler of the registry that takes it (templates/schedulers/registry.h). Throws
// fusejit::InternalError for a gemm region or a region no scheduler takes (naming each one's
// reason).
//
// What a region must look like (fusion/plan.h):
//   pointwise      elementwise ops, constants and views; outputs of any shapes (outputs with
//                  the same element count share one sweep).
//   reduction,     one or more reduce nodes, all reducing the same operand shape over the same
//   normalization  axes (any axes), plus elementwise ops and views before and after them. Each
//                  output has either one value per element of that shape, or one per reduced
//                  row. A reduce result may only be read at its own row (broadcast back over the
//                  reduced axes, as softmax does, is fine). Reductions may read each other's
//                  results (layer norm's variance reads the mean): each depth is one pass over
//                  the row held in registers.
//   Region inputs (loaded from memory) are listed in `inputs` and may be any node; `nodes`
//   holds the computed nodes (constants and views included).
//   attention      the pattern fusion/attention.h finds, which the attention kernel takes
//                  (templates/schedulers/attention.h); one kernel per size (generate_dynamic
//                  refuses it).
Kernel generate(const ir::Graph& g, const fusion::Region& region,
                const CodegenOptions& options = {});

// The sizes a dynamic kernel is built at: one instance of the region's symbolic sizes. The
// region's outer extent (odd, unless some symbol is aligned) and the symbols' values, in the
// order of the symbols: distinct primes that divide no static extent of the graph, so that a
// count which changes with the symbols is one that a symbol's value divides (RegionInfo::
// symbolic) and decodes to its dims. The kernel serves every outer extent up to `outer`.
struct DynamicSizes {
  int64_t outer = 0;
  std::vector<int64_t> symbols;
  // Per symbol, 1: its value is an odd prime, and the kernel serves every size of it. A power
  // of two A: it is A times an odd prime, and the kernel serves the sizes where A divides it
  // (what the templates decide from a count's divisibility by a power of two holds wherever
  // the count is divisible by at least as much: wider vectors, fewer guards). Empty: 1 for
  // every symbol.
  std::vector<int64_t> alignment;
  // Multi-pass row kernels whose row length is given at launch read the row from memory in
  // every pass (they serve every length). row_path k >= 1 asks instead for their k-th register
  // path: a kernel that holds rows of at most some bound in registers, as a kernel compiled for
  // the length does (Kernel::max_row_length), refused (nothing, with `why`) where the region has
  // no such path.
  int row_path = 0;
};

// A kernel of the region whose sizes are runtime arguments (Kernel::dynamic), or nothing when
// the region's kernel would depend on them beyond what its parameters express (then a static
// kernel per size, from generate, is always correct); `why`, when given, gets the reason.
//
// `g` is the region's graph instantiated at `sizes`. The kernel is built once, with the outer
// extent a parameter (fj_outer: loop bounds are a count per outer unit times it) and every
// count that changes with the symbols a runtime extent (fj_e<k>, fj_m<k>); a scheduler that
// would need such a count's value to decide (a schedule, a grid, an unrolled count, a split
// over blocks or clusters) refuses through RegionInfo's accessors (NotSizeIndependent), and a
// kernel that would still hold one as a constant is refused by kir::symbolic_constant (see
// generate.cpp). Index width from the sizes: it serves every outer <= sizes.outer.
// Supported: the linear pointwise sweep and row-style reductions and normalizations over
// trailing axes (one thread group per row, no rows split over blocks or clusters), where every
// sweep's element count (every reduction's row count) is a fixed number per outer unit.
std::optional<Kernel> generate_dynamic(const ir::Graph& g, const fusion::Region& region,
                                       const DynamicSizes& sizes,
                                       const CodegenOptions& options = {},
                                       std::string* why = nullptr);

// The variants of the region's dynamic kernel at these sizes (`sizes.row_path` ignored) that
// generate_dynamic may be asked for, DynamicSizes::row_path 1..n (the register paths of a looped
// row kernel), as its scheduler counts them (templates/schedulers/registry.h); 0: none. Each may
// still be refused.
int dynamic_variants(const ir::Graph& g, const fusion::Region& region, const DynamicSizes& sizes,
                     const CodegenOptions& options = {});

}  // namespace fusejit::templates
