// templates/rowwise: the row-style kernel of reduction and normalization regions.
//
// Structure: a group of G threads owns one output row at a time (G <= 32: several rows per
// block, reduced with warp shuffles; G > 32: one row per block, reduced through shared
// memory); the block loops over rows with a grid stride. Within a row, thread g handles the
// vectors c*G + g, c < C, of V consecutive elements (compile-time trip counts), so a warp's
// accesses are contiguous 16-byte words when the row is contiguous.
//   row prelude  loads that are the same for the whole row (a per-row scale, ...);
//   cache pass   (multi-pass kernels) the row's values that later passes read again, held in
//                registers: each row is read from DRAM once;
//   pass s       accumulates the reductions of depth s (a layer norm's mean in pass 1, its
//                variance, which reads the mean, in pass 2), then reduces them over the group;
//                writes the outputs that need exactly the reductions before it;
//   row outputs  values with one element per row (the reductions and their epilogue), written
//                by the group's first thread.
// The reduced axes may be any set: row and k are split over the kept and the reduced axes
// (index.h), which for trailing axes makes k the contiguous inner offset.
// Thread-block clusters (sm_90 on, multi-pass kernels): a row that one block of at most half
// an SM's resident threads cannot hold in registers is cut into C pieces (C a power of two,
// 2..8), one per block of a cluster; each block caches its piece, and after each pass the
// blocks exchange their partials through distributed shared memory (reduction.h,
// device/fj_cluster.cuh). The row is read from DRAM once, and two or more blocks fit on an SM,
// so that one block loads while another waits on its reductions. Clusters loop over rows
// with a grid stride, every block of a cluster over the same rows.
// Math: accumulators in f32 for float types (i64 for integer sums); every tree is fixed, so
// results do not depend on timing.
// The kernel is kernel IR (templates/kir/kir.h), assembled from pieces (row_kernel.h: the
// guard, the row walk, the register cache and stages, the accumulators, the finish and the
// launch) that the layout (RowConfig, row_schedule.h) selects.
//
// This file is the "rows" scheduler: which regions it takes, its parameters (the layout, with
// online pairs and register paths decided here) and the kernel built from them.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/builders.h"
#include "templates/schedulers/reduction.h"
#include "templates/schedulers/registry.h"
#include "templates/schedulers/row_kernel.h"
#include "templates/schedulers/row_schedule.h"

namespace fusejit::templates {

// Online softmax pairs (ReduceSpace::online) save a pass over rows read from memory, but cost
// a serial chain of rescalings per thread: on an H200 they slowed softmax over rows held in
// registers (16384 bf16: 0.29 -> 0.49 ms) and sped up rows that are not (128256 bf16: 0.58 ->
// 0.48 ms). So rows that fit the register cache keep separate passes.
const ReduceSpace& choose_online(const RegionInfo& info, const ReduceSpace& space, int v,
                                 ReduceSpace& plain) {
  if (space.online.empty()) return space;
  plain = analyze_reduction(info, /*online=*/false);
  const RowConfig cfg = row_config(info, plain, v, element_passes(plain) > 1);
  return cfg.cached() ? plain : space;
}

namespace {

// A looped multi-pass kernel reads the row from memory in every pass; where DRAM (or L2) does
// not keep up with that, it ran 1.3-2x the time of a kernel compiled for the length (Nsight
// Compute on an H200, the scores softmax at B=8 S=2048: 53% of DRAM bandwidth against 81%).
// Its register paths (bounded_row_configs) are row kernels of their own, each holding rows up
// to its `piece` in registers as a static kernel does (separate passes rather than online
// pairs); the launch picks the first whose bound holds the length. (One kernel with every path
// behind a branch on the length took the registers of the largest path for all of them, the
// loop included, and ran up to 1.7x slower than the loop alone.)
KernelBody build_register_path(const RegionInfo& info, const RowConfig& cfg) {
  const ReduceSpace plain = analyze_reduction(info, /*online=*/false);
  // The vectors per thread, chosen at launch: the fewest that hold the row, from those of the
  // shortest row the path takes (one more than the path before it holds) to its own, and at
  // least half its own (the first path's shorter rows take that many). The row loop is
  // written once per count, each with every vector computed and only the last one's tail
  // predicated, as a static kernel of that layout is; a uniform branch on the length picks
  // one. (With the count fixed
  // at the path's own, rows just past the path before it computed up to twice the values a
  // static kernel does: the bf16 scores softmax at S=2049, 16 scalars per thread against 9,
  // ran 1.53x the static kernel's time on an H200; at S=520, 4 vectors against 3, 1.13x.)
  const int64_t step = cfg.group * cfg.v;
  const int64_t shortest = cfg.shortest;
  const int64_t fewest =
      std::min(cfg.chunks, std::max(ceil_div(shortest, step), ceil_div(cfg.chunks, 2)));
  // Each count's cache holds the arrays the path's own does, so that no copy needs more
  // registers than the path's own count, by which register_path_blocks sized its launch bounds.
  const std::set<ir::NodeId> cacheable = frontier(info, plain);
  const int64_t entries = kCacheBudget / (cfg.chunks * cfg.v);
  const auto row_loop = [&](int64_t chunks) {
    RowConfig at = cfg;
    at.chunks = chunks;
    at.piece = chunks * step;
    // A copy after the first sees only rows the copies before it do not hold; the first, rows
    // of at least `shortest` (jit::dynamic_kernel_at launches no shorter row on this path).
    at.full_chunks = chunks > fewest ? chunks - 1 : std::min(chunks - 1, shortest / step);
    at.shortest = shortest;
    RowKernel kernel = build_row_kernel(info, plain, at, cacheable, entries);
    if (!kernel.caches) {
      throw NotSizeIndependent("no pass of the row kernel reads a value again: no register path");
    }
    return std::move(kernel.body);
  };
  KernelBody kb = row_loop(cfg.chunks);
  kb.row_length = plain.length;
  kb.max_row_length = cfg.piece;
  kb.min_row_length = shortest;
  if (fewest == cfg.chunks) return kb;
  kir::Block chain;
  chain.comment("vectors per thread: the fewest of {} to {} that hold the row", fewest,
                cfg.chunks);
  for (int64_t n = fewest; n < cfg.chunks; ++n) {
    kir::Block& body =
        chain.branch(kir::infix(kir::extent(plain.length), "<=", kir::lit(n * step)));
    body.splice(row_loop(n).fn.body);
    body.jump("return");
  }
  chain.splice(kb.fn.body);
  kb.fn.body = std::move(chain);
  return kb;
}

// Vectors only pay when some access is contiguous (not so for most generic axis sets): a
// layout of v > 1 whose kernel makes no vector access is laid out again with v = 1.
bool vectors_pay(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                 const std::set<ir::NodeId>& cacheable) {
  if (cfg.v == 1) return true;
  return build_row_kernel(info, space, cfg, cacheable).vector_accesses > 0;
}

// The register path `info.row_path` of the looped kernel `looped` (bounded_row_configs), with
// the shortest row it takes: one element more than the path before it holds.
RowParams register_path_params(const RegionInfo& info, const RowConfig& looped) {
  const ReduceSpace plain = analyze_reduction(info, /*online=*/false);
  if (element_passes(plain) < 2) {
    throw NotSizeIndependent("a single-pass row kernel reads the row once: no register path");
  }
  const std::vector<RowConfig> paths = bounded_row_configs(info, plain, looped);
  if (static_cast<size_t>(info.row_path) > paths.size()) {
    throw NotSizeIndependent(
        fmt::format("the row kernel has {} register path(s), not {}", paths.size(), info.row_path));
  }
  const size_t index = static_cast<size_t>(info.row_path) - 1;
  RowParams p{.config = paths[index], .online = false, .register_path = info.row_path};
  p.config.shortest = index == 0 ? 1 : paths[index - 1].piece + 1;
  return p;
}

// A row length given at launch: never held in registers, so online softmax pairs save a pass.
// (The length's static coefficient decides the vector width, which an odd prime leaves alone:
// the same at every size.)
RowParams looped_params(const RegionInfo& info, const ReduceSpace& online_space, int v) {
  for (;;) {
    const std::optional<RowConfig> cfg = looped_row_config(info, online_space, v);
    if (!cfg) {
      throw NotSizeIndependent(fmt::format(
          "the row length changes with the sizes, and {} row(s) are too few to give each "
          "thread block one",
          online_space.rows));
    }
    if (!vectors_pay(info, online_space, *cfg, {})) {
      v = 1;
      continue;
    }
    if (info.row_path > 0) {
      // The looped kernel is built first, as where it is the kernel: what it refuses, its
      // register paths refuse too.
      if (cfg->v == 1) build_row_kernel(info, online_space, *cfg, {});
      return register_path_params(info, *cfg);
    }
    return RowParams{.config = *cfg, .online = !online_space.online.empty(), .register_path = 0};
  }
}

RowParams row_params(const RegionInfo& info, const CodegenOptions& options) {
  const ReduceSpace online_space = analyze_reduction(info);
  // Dynamic kernels: reductions over trailing axes only, whose kept axes hold the outer extent
  // (so that the row count scales with it and the row length does not).
  if (info.dynamic() && online_space.layout != ReduceLayout::row) {
    throw NotSizeIndependent("the reduced axes are not the trailing ones");
  }
  int v = vector_width(info, options.vectorize, {online_space.length});
  if (info.dynamic() && info.symbolic(online_space.length)) {
    return looped_params(info, online_space, v);
  }
  ReduceSpace plain;
  for (;;) {
    const ReduceSpace& space = choose_online(info, online_space, v, plain);
    const bool multi_pass = element_passes(space) > 1;
    const RowConfig cfg = row_config(info, space, v, multi_pass);
    // Rows split over blocks or clusters size their scratch and grids by the row count.
    if (info.dynamic() && cfg.pieces() > 1) {
      throw NotSizeIndependent(fmt::format("the rows are split over {} {}", cfg.pieces(),
                                           cfg.split > 1 ? "blocks" : "blocks of a cluster"));
    }
    if (!vectors_pay(info, space, cfg,
                     multi_pass ? frontier(info, space) : std::set<ir::NodeId>{})) {
      v = 1;
      continue;
    }
    return RowParams{.config = cfg, .online = !space.online.empty(), .register_path = 0};
  }
}

KernelBody build_rows(const RegionInfo& info, const RowParams& p) {
  if (p.register_path > 0) return build_register_path(info, p.config);
  const ReduceSpace space = analyze_reduction(info, p.online);
  std::set<ir::NodeId> cacheable;
  if (!p.config.looped && element_passes(space) > 1) cacheable = frontier(info, space);
  return build_row_kernel(info, space, p.config, cacheable).body;
}

// Every reduction and normalization region the column kernel does not take: one thread group
// per output row, any axes.
class RowScheduler final : public Scheduler {
 public:
  std::string_view name() const override { return "rows"; }
  std::optional<std::string> refusal(const RegionInfo& info, const CodegenOptions&) const override {
    const fusion::RegionKind kind = info.region.kind;
    if (kind != fusion::RegionKind::reduction && kind != fusion::RegionKind::normalization) {
      return "not a reduction or normalization region";
    }
    return std::nullopt;
  }
  ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const override {
    return row_params(info, options);
  }
  KernelBody build(const RegionInfo& info, const CodegenOptions&,
                   const ScheduleParams& params) const override {
    return build_rows(info, std::get<RowParams>(params));
  }
  // The register paths of a multi-pass kernel whose row length is given at launch.
  int variants(const RegionInfo& info, const CodegenOptions& options) const override {
    const ReduceSpace online_space = analyze_reduction(info);
    if (!info.dynamic() || online_space.layout != ReduceLayout::row ||
        !info.symbolic(online_space.length) ||
        element_passes(analyze_reduction(info, /*online=*/false)) < 2) {
      return 0;
    }
    RegionInfo looped = info;
    looped.row_path = 0;
    try {
      const RowParams p = looped_params(
          looped, online_space, vector_width(info, options.vectorize, {online_space.length}));
      return static_cast<int>(
          bounded_row_configs(info, analyze_reduction(info, /*online=*/false), p.config).size());
    } catch (const NotSizeIndependent&) {
      return 0;
    }
  }
};

}  // namespace

const Scheduler& row_scheduler() {
  static const RowScheduler scheduler;
  return scheduler;
}

}  // namespace fusejit::templates
