// templates/row_launch: the launch piece of a row kernel (row_kernel.h): the grid, residency,
// cluster and shared memory of the kernel, its header comments and scratch, and the loop over
// rows around the row's body (per block, per split piece or per cluster). Owns what a launch
// reads; not the row's body (row_kernel.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

namespace {

// A looped kernel's grid follows the rows when they are a fixed number per outer unit, else
// the elements: a block per vector of each thread, so that short rows (attention scores at a
// sequence of 128, a warp's row in one step) still get a warp each and fill the device;
// Kernel::waves caps the grid of long rows, and blocks past the rows exit at once. (At 8
// vectors per block's thread, the scores softmax at B=64 S=128 ran 256 blocks, 0.39 waves of an
// H200, and took 3.2x the static kernel's time.)
void set_looped_grid(KernelBody& kb, const RowFrame& f) {
  const RegionInfo& info = f.info;
  const RowConfig& cfg = f.cfg;
  const int64_t elements = f.space.rows * f.space.length;
  if (info.fixed_per_outer(f.space.rows)) {
    kb.items_per_outer = info.per_outer(f.space.rows, "the reduction's rows");
    kb.items_per_block = cfg.rows_per_block;
  } else if (info.fixed_per_outer(elements)) {
    kb.items_per_outer = info.per_outer(elements, "the reduction's elements");
    kb.items_per_block = cfg.block * cfg.v;
    // A register path's blocks each take rows_per_block rows of at least `shortest`
    // elements: no more blocks than rows, at its shortest rows. (A block per vector of each
    // thread gave the 16-thread path at S=512 four times the blocks that had rows.)
    // The launcher, given the row length, sizes it by rows (Kernel::rows_per_block).
    if (cfg.bounded) {
      kb.items_per_block = std::max(kb.items_per_block, cfg.rows_per_block * cfg.shortest);
      kb.rows_per_block = cfg.rows_per_block;
    }
  } else {
    throw NotSizeIndependent(fmt::format(
        "neither the reduction's rows ({}) nor its elements ({}) are a fixed number per unit "
        "of the outer extent",
        f.space.rows, elements));
  }
}

// g, the thread's place in its row's group.
void add_group_index(kir::Block& body, const RowFrame& f) {
  const RowConfig& cfg = f.cfg;
  if (cfg.group > 1) {
    const kir::ExprP thread = kir::thread_index();
    body.let(f.vars.g,
             cfg.group == cfg.block ? thread : kir::infix(thread, "%", kir::lit(cfg.group)));
  }
}

// The comment lines of a kernel whose rows are not a register path's.
void add_row_comments(kir::Block& head, const RowFrame& f, std::string_view kind,
                      const std::string& threads, bool caches) {
  const RowConfig& cfg = f.cfg;
  if (cfg.looped) {
    head.comment(
        "{}, row-style over rows whose length is given at launch: {}, striding over the row in "
        "vectors of {}; {} pass(es) over the row, each reading it from memory",
        kind, threads, cfg.v, element_passes(f.space));
  } else {
    head.comment(
        "{}, row-style: {} rows{} of {} elements; {}, {} vector(s) of {} per thread; {} pass(es) "
        "over the row{}",
        kind, f.info.per_outer(f.space.rows, "the reduction's rows"),
        f.info.dynamic() ? " per outer unit" : "", f.space.length, threads, cfg.chunks, cfg.v,
        element_passes(f.space), caches ? ", row cached in registers" : "");
  }
  if (f.pieces.spread == RowSpread::cluster) {
    head.comment(
        "the blocks of a cluster exchange their partial statistics through distributed shared "
        "memory");
  }
}

// Split rows: the loop over row pieces, piece-major, with `fj_last` for the combination.
kir::Block& add_split_row_loop(kir::Block& out, const RowFrame& f) {
  const kir::ExprP rows = kir::lit(f.space.rows);
  out.let_mut(f.split.last);
  const auto [loop, u] = out.loop(f.vars.u, kir::block_index(),
                                  kir::lit(f.space.rows * f.cfg.split), kir::grid_blocks());
  // Piece-major: the blocks running together read the same piece of every row (one region
  // of memory when the reduced axes are not the inner ones).
  loop.let_if_read(f.vars.row, kir::infix(u, "%", rows));
  loop.let_if_read(f.vars.s, kir::infix(u, "/", rows));
  return loop;
}

// The grid-stride loop over rows, rows_per_block of them per block step.
kir::Block& add_block_row_loop(kir::Block& out, const RowFrame& f) {
  const std::string& idx = f.idx;
  const kir::ExprP rows = f.rows_bound();
  const kir::ExprP row0 = kir::var(f.vars.row0);
  kir::Block* loop = nullptr;
  if (f.cfg.rows_per_block > 1) {
    const kir::ExprP per_block = kir::lit(f.cfg.rows_per_block);
    const kir::ExprP first = kir::mul(static_cast_to(idx, kir::block_index()), per_block);
    const kir::ExprP stride = kir::mul(static_cast_to(idx, kir::grid_blocks()), per_block);
    loop = &out.loop(f.vars.row0, first, rows, stride).body;
  } else {
    loop = &out.loop(f.vars.row0, kir::block_index(), rows, kir::grid_blocks()).body;
  }
  loop->let_if_read(
      f.vars.row, f.cfg.rows_per_block > 1
                      ? kir::add(row0, kir::infix(kir::thread_index(), "/", kir::lit(f.cfg.group)))
                      : row0);
  return *loop;
}

// Clusters: the grid-stride loop over rows runs per cluster (every block of a cluster takes the
// same rows, the piece of rank s of each), after the exchange slots and the phase that
// alternates them; a last cluster barrier follows it, so that no block exits while another
// may still read its shared memory.
void add_cluster_row_loop(kir::Block& out, const RowFrame& f, const kir::Block& row_body,
                          const kir::Block& cluster_slots) {
  const std::string& idx = f.idx;
  out.let_if_read(f.vars.s, static_cast_to(idx, kir::call("fj_cluster_rank", {})));
  out.splice(cluster_slots);
  if (f.phase) out.let_mut(f.vars.phase, kir::lit(0));
  kir::Block& loop =
      out.loop(f.vars.row, static_cast_to(idx, kir::call("fj_cluster_id", {})),
               kir::lit(f.space.rows), static_cast_to(idx, kir::call("fj_cluster_count", {})));
  loop.splice(row_body);
  if (f.phase) loop.assign(f.phase, kir::lit(1), "^=");
  out.eval(kir::sync_cluster(), "before exit: other blocks may still read this block's slots");
}

}  // namespace

KernelBody row_kernel_body(const RowFrame& f, const RowStages& stages) {
  const RowConfig& cfg = f.cfg;
  KernelBody kb;
  kb.kind = std::string(fusion::region_kind_name(f.info.region.kind));
  kb.reduces = true;
  kb.welford = !f.space.welford.empty();
  kb.block = static_cast<int>(cfg.block);
  kb.blocks_per_sm = std::max(1, f.info.target.blocks_per_sm(static_cast<int>(cfg.block)));
  kb.work_blocks = ceil_div(f.space.rows, cfg.rows_per_block) * cfg.pieces();
  if (cfg.looped) {
    set_looped_grid(kb, f);
  } else if (f.pieces.spread == RowSpread::block) {
    kb.items_per_outer = f.info.per_outer(f.space.rows, "the reduction's rows");
    kb.items_per_block = cfg.rows_per_block;
  }
  kb.serial_launches = f.pieces.spread == RowSpread::split;
  // A schedule that asks for more resident blocks than usual falls back to the usual where
  // ptxas would spill (jit::compile).
  const int usual = min_resident_blocks(f.info.target, cfg.block);
  kb.fn = kernel_function(f.info, static_cast<int>(cfg.block),
                          cfg.min_blocks > usual ? cfg.min_blocks : usual);
  if (cfg.min_blocks > usual) {
    if (cfg.fallback_blocks > usual) kb.fn.relaxed_min_blocks.push_back(cfg.fallback_blocks);
    kb.fn.relaxed_min_blocks.push_back(usual);
  }
  kb.fn.cluster = static_cast<int>(cfg.cluster);
  if (!stages.empty()) {
    // One wave of the blocks that stay resident, each taking many rows: a block's first row is
    // the only one whose loads nothing overlaps.
    kb.stages = true;
    kb.shared_bytes = static_cast<int>(stages.bytes());
    kb.blocks_per_sm = usual;
    // (Clusters keep the usual waves: how many fit at once depends on how the SMs group.)
    if (f.pieces.spread != RowSpread::cluster) kb.waves = 1;
  }
  return kb;
}

void add_row_header(kir::Function& fn, const RowFrame& f, std::string_view kind, bool caches,
                    const RowAccumulators& acc, const RowStages& stages) {
  const RowConfig& cfg = f.cfg;
  const std::string threads =
      f.pieces.spread == RowSpread::cluster
          ? fmt::format("{} x {} thread(s) per row (a cluster of {} blocks, {} elements each)",
                        cfg.cluster, cfg.group, cfg.cluster, cfg.piece)
          : fmt::format("{} thread(s) per row", cfg.group);
  if (cfg.bounded) {
    fn.head.comment(
        "{}, row-style, a register path for rows whose length is given at launch, up to {} "
        "elements: {}, {} vector(s) of {} per thread; {} pass(es) over the row{}",
        kind, cfg.piece, threads, cfg.chunks, cfg.v, element_passes(f.space),
        caches ? ", row cached in registers" : "");
    add_group_index(fn.body, f);
    return;
  }
  add_row_comments(fn.head, f, kind, threads, caches);
  for (const auto& [variance, mean] : f.space.welford) {
    fn.head.comment(
        "mean {} and variance {} in one pass: (count, mean, M2) per thread ({}), then "
        "Chan's update between partials (fj_welford)",
        f.info.named("v", mean), f.info.named("v", variance),
        acc.exact(mean) ? "exact, from the register cache"
                        : "Welford's update, relative to the row's first value");
  }
  if (!stages.empty()) {
    fn.head.comment(
        "{} input(s) staged in shared memory one row ahead (cp.async): the next row's loads are "
        "in flight while this row's passes run",
        stages.count());
  }
  fn.head.comment("{} index arithmetic", f.info.wide_index ? "64-bit" : "32-bit");
  if (f.pieces.spread == RowSpread::split) {
    add_split_scratch(fn.head, f.space.accumulated(), f.split,
                      fmt::format("rows split in {} pieces of {} elements", cfg.split, cfg.piece),
                      "row");
  }
  add_group_index(fn.body, f);
}

void add_row_loop(kir::Block& out, const RowFrame& f, const kir::Block& row_body,
                  const kir::Block& cluster_slots) {
  switch (f.pieces.spread) {
    case RowSpread::cluster:
      return add_cluster_row_loop(out, f, row_body, cluster_slots);
    case RowSpread::split:
      return add_split_row_loop(out, f).splice(row_body);
    case RowSpread::block:
      return add_block_row_loop(out, f).splice(row_body);
  }
}

}  // namespace fusejit::templates
