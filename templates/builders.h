// templates/builders: the kernel templates, one per region shape, what they hand back to
// generate(), and assemble_kernel, which pastes the device helpers, names every kernel (the
// attention kernel's too) and fills in Kernel.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "templates/emit.h"
#include "templates/kernel.h"
#include "templates/kir/kir.h"
#include "templates/lower.h"

namespace fusejit::templates {

struct KernelBody {
  std::string kind;      // "pointwise", "reduction", "normalization", "attention"
  std::string schedule;  // the scheduler and its parameters (schedule_text), never in the source
  kir::Function fn;  // the kernel (name: kKernelNameToken)
  int block = 256;
  int64_t work_blocks = 1;
  int blocks_per_sm = 8;
  int waves = 4;  // grid cap in full waves; 0: none (Kernel::waves)
  int shared_bytes = 0;  // dynamic shared memory (the templates use static shared memory only)
  bool reduces = false;  // needs device/fj_reduce.cuh
  bool welford = false;  // needs device/fj_welford.cuh (one-pass mean and variance)
  bool stages = false;   // needs device/fj_stage.cuh (rows staged one row ahead)
  bool serial_launches = false;  // uses module-scope scratch (see Kernel::serial_launches)
  // Templates that can make a dynamic kernel (RegionInfo::dynamic) set these: the work items
  // (vectors, rows) per outer unit and per block (Kernel::items_per_outer); 0: they cannot.
  int64_t items_per_outer = 0;
  int64_t items_per_block = 1;
  // A register path of a looped row kernel (RegionInfo::row_path): the row length (a count that
  // changes with the symbols) and the most elements the path holds; 0: no bound.
  int64_t row_length = 0;
  int64_t max_row_length = 0;
  int64_t min_row_length = 0;  // the shortest row it takes (Kernel::min_row_length)
  // A register path whose grid follows the elements: the rows each block takes
  // (Kernel::rows_per_block); 0: not such a path.
  int64_t rows_per_block = 0;
  // A kernel that brings its own device helpers and comment (attention: fj_core.cuh and
  // fj_attention.cuh): its source's helpers, in order, instead of those the flags above and
  // the region choose, and no region summary. Empty: a region template's kernel.
  std::vector<std::string_view> helpers;
  // Begins with fj_grid_dependents_launch(), and waits with fj_grid_dependency_wait() before it
  // touches memory the grid ahead may write (wait_for_grid, launch_dependents_first):
  // assemble_kernel pastes device/fj_pdl.cuh after the helpers and marks the Kernel programmatic.
  bool grid_dependency = false;
  // Begins with fj_grid_dependents_launch() and waits for no grid (trigger_dependents).
  bool triggers_dependents = false;
};

// Makes `body` a kernel of programmatic dependent launch (CodegenOptions::grid_dependency): its
// first statement lets the grid after it be scheduled (fj_grid_dependents_launch), then come
// `before` (which must read and write no memory: L2 prefetches only), then
// fj_grid_dependency_wait(), then the body as it was.
void wait_for_grid(KernelBody& body, const kir::Block& before = {});
// The same, for a body that calls fj_grid_dependency_wait() itself, where only what it does
// before may run beside the grid ahead: reads of memory no kernel writes (weights), its own
// shared memory. Only the first statement, fj_grid_dependents_launch(), is added.
void launch_dependents_first(KernelBody& body);
// Only the first statement, fj_grid_dependents_launch(), for a kernel launched as before
// (CodegenOptions::gemv_grid_dependency): the skinny GEMM after it may be scheduled beside it.
void trigger_dependents(KernelBody& body);

// The end of a piece of a kernel split over blocks (the skinny GEMM's K, attention's keys),
// after every thread has written its partials to module-scope scratch: a fence, then thread 0
// counts the piece in `count` (an unsigned counter of the scratch) and `last` (a __shared__
// bool) says whether it brought the last of `pieces`. Returns the block that only that last
// block runs, after a fence; the caller combines the pieces in it, then resets the count
// (reset_split_count) for the next launch.
kir::Block& last_block_to_arrive(kir::Block& b, const kir::ExprP& count, const kir::ExprP& last,
                                 int64_t pieces);
// count = 0, by thread 0, in the block last_block_to_arrive returned.
void reset_split_count(kir::Block& last, const kir::ExprP& count);

// The schedulers that build a KernelBody for each kind of region: schedulers/registry.h.

// Every kernel, whatever its kind: its source is the header line naming the generator, the
// device helpers `helpers` (device/*.cuh, by name, in that order), kKernelMarker, `preamble`
// (comment lines, each ending in '\n'), then `body.fn` printed, its kKernelNameToken replaced by
// the kernel's name, fj_<kind>_<16 hex digits of FNV-1a of the source before naming>. Fills in
// the Kernel's name, source, what `body.fn` fixes (cluster, relaxed_min_blocks) and the launch
// shape `body` gives (block, work blocks, residency, shared memory, waves, serial launches);
// the caller, its parameters and what a dynamic kernel adds. `body.fn` is lowered already
// (kir::lower_indices): printing decides nothing.
Kernel assemble_kernel(const KernelBody& body, const std::vector<std::string_view>& helpers,
                       std::string_view preamble);

// Region inputs read inside a V-lane vector loop (pointwise sweeps, the output phase of the
// tiled transpose): one 16-byte vector load in `prelude` for an input whose offset moves by one
// per lane, one hoisted scalar load for an input the same for every lane, and a load per lane
// in `body` for anything else (a transposed read); with V = 1 every load goes to `body`.
// `load` is a Values leaf; `outer` is the scope of the prelude; `lane` reads the lane loop's
// variable (built after the body: see kir::variable).
class LaneLoads {
 public:
  LaneLoads(const RegionInfo& info, int v, kir::ExprP lane, kir::Block& prelude, kir::Block& body,
            ValueScope& outer)
      : info_(info), v_(v), lane_(std::move(lane)), prelude_(prelude), body_(body), outer_(outer) {}
  kir::ExprP load(ir::NodeId id, const Index& at);

 private:
  const RegionInfo& info_;
  int v_;
  kir::ExprP lane_;
  kir::Block& prelude_;
  kir::Block& body_;
  ValueScope& outer_;
  int arrays_ = 0;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}
inline int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

}  // namespace fusejit::templates
