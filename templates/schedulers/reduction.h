// templates/reduction: what reduction and normalization regions have in common: the shape
// they reduce, the passes their reductions need, where each output is written, and the index
// of an element of the reduced tensor in terms of the kernel's loop variables.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "templates/emit.h"
#include "templates/kir/index.h"
#include "templates/kir/kir.h"

namespace fusejit::templates {

enum class ReduceLayout {
  row,      // the reduced axes are the trailing ones: each output reduces a contiguous run
  column,   // a block of leading or middle axes: coalesced along the kept inner axes
  generic,  // anything else (e.g. axes {0, 2} of a rank-3 tensor)
};

struct ReduceOutput {
  size_t position = 0;  // in region.outputs
  ir::NodeId id = -1;
  bool full = false;  // one value per element of the reduced tensor (else one per output row)
  int pass = 0;       // full outputs: the element pass that writes it (1 .. passes + 1)
};

// What a reduce's accumulator holds: its own statistic, the (max, sum of exp) of an online
// softmax pair (fj_max_sum), or the (count, mean, M2) of a mean/variance pair (fj_welford).
enum class Pairing { none, max_sum, welford };

struct ReduceSpace {
  Shape shape;                // the operand shape of every reduce node
  std::vector<int64_t> axes;  // reduced axes, ascending
  std::vector<ir::NodeId> reduces;
  std::map<ir::NodeId, int> depth;  // 1 + the deepest reduce its operand reads
  std::map<ir::NodeId, int> reach;  // per region node: the deepest reduce it depends on (0: none)
  // Online softmax statistics: sum(exp(X - M)) -> M = max(X). The sum is accumulated in M's
  // pass with M, rescaled as the running maximum grows, instead of in a pass of its own
  // (see online_partner in reduction.cpp).
  std::map<ir::NodeId, ir::NodeId> online;
  // One-pass mean and variance (fusion/welford.h, the region's Region::welford): variance ->
  // mean. The mean accumulates (count, mean, M2) in an fj_welford, and the variance, read from
  // its M2, needs no accumulator and no pass of its own.
  std::map<ir::NodeId, ir::NodeId> welford;
  int passes = 1;      // the deepest reduce
  int64_t rows = 1;    // elements of the result (kept axes)
  int64_t length = 1;  // elements reduced into each
  ReduceLayout layout = ReduceLayout::row;
  int64_t prefix = 1;  // column layout: kept elements before the reduced block
  int64_t suffix = 1;  // column layout: kept elements after it (the coalesced ones)
  std::vector<ReduceOutput> outputs;

  // r is the maximum of an online pair (it accumulates with its sum in an fj_max_sum).
  bool is_paired_max(ir::NodeId r) const;
  // What reduce r's accumulator holds (for the reduces of accumulated()).
  Pairing pairing(ir::NodeId r) const;
  // The reduce nodes that keep an accumulator of their own: all but the sums of online pairs
  // and the variances of Welford pairs.
  std::vector<ir::NodeId> accumulated() const;
};

// With `online`, sums of exp(X - max X) pair with their maximum (ReduceSpace::online).
ReduceSpace analyze_reduction(const RegionInfo& info, bool online = true);

bool is_reduced_axis(const ReduceSpace& space, size_t axis);

// How a kernel accumulates reduce r: the accumulator's C type, its identity (a literal that
// initializes or assigns it) and the functor combining two partial results (or a partial result
// and one element). The maximum of an online pair accumulates (max, sum of exp(x - max)) in an
// fj_max_sum with fj_op_max_sum (device/fj_reduce.cuh), the mean of a Welford pair (count,
// mean, M2) in an fj_welford with fj_op_welford (device/fj_welford.cuh); other reductions
// their accumulator dtype with their op's functor.
struct Accumulator {
  std::string type;
  std::string identity;
  std::string functor;
  int bytes = 0;
};
Accumulator accumulator_of(const RegionInfo& info, ir::NodeId r, Pairing pairing);

// Reduce r's value once the accumulators are fully reduced over `count` elements; `acc(id)` is
// the accumulator of reduce id. An online pair's sum is fj_max_sum_total of its maximum's pair
// and the maximum its field m; a Welford pair's mean is the field m and its variance the
// field m2 (over the count, for a mean); any other reduce its accumulator, finished.
kir::ExprP reduced_value(const RegionInfo& info, const ReduceSpace& space, ir::NodeId r,
                         int64_t count, const std::function<kir::ExprP(ir::NodeId)>& acc);

// The index of an element of the reduced tensor: each axis draws its digits from the root of
// its group (group_of(axis) picks the position in `roots`); each root is split over the
// extents of its group's axes, in order. Axes of extent 1 get no digits.
template <class GroupOf>
Index grouped_index(const Shape& shape, const std::vector<BasePtr>& roots, GroupOf group_of) {
  std::vector<Shape> extents(roots.size());
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] != 1) extents[group_of(a)].push_back(shape[a]);
  }
  std::vector<Index> parts;
  for (size_t r = 0; r < roots.size(); ++r) parts.push_back(index_from_root(roots[r], extents[r]));
  Index out{shape, std::vector<Digits>(shape.size())};
  std::vector<size_t> next(roots.size(), 0);
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == 1) continue;
    const size_t r = group_of(a);
    out.axes[a] = parts[r].axes[next[r]++];
  }
  return out;
}

// Split reductions (rowwise.cpp's split rows, column.cpp's split columns): when a kernel has too
// few groups of work (rows, tiles of columns) to fill the device, each group's reduced elements
// are cut into S pieces, one block each. Every block publishes its partial results to
// module-scope scratch (fj_partial<r>: per group, per piece, `width` values); the last block of
// the group to arrive (fj_arrivals, counted atomically) folds the S partials in a fixed order,
// so the result does not depend on timing, and resets the count for the next launch (the
// kernel has Kernel::serial_launches).
// Release: each holder stores its partials and fences before the arrival is counted; acquire:
// the last block fences after seeing the count and reads the partials with volatile loads
// (from L2, never a stale L1 line).
struct SplitPartials {
  int64_t pieces = 1;  // S
  int64_t groups = 1;  // one arrival counter each
  int64_t width = 1;   // partial values per block and reduce
  kir::ExprP group;    // this block's group
  kir::ExprP piece;    // this block's piece
  kir::ExprP value;    // the thread's value within `width` (may read j); null: 0
  int lanes = 0;       // 0: each holder has a scalar accumulator a<r>; L: an array a<r>[j], j < L
  kir::ExprP holders;  // the threads that hold the block's partials; null: thread 0 alone
  // The reduces whose partials are pairs (fj_max_sum, fj_welford), loaded field by field.
  std::map<ir::NodeId, Pairing> paired;
  // The kernel variables the split reads, made once per kernel by split_variables: the
  // scratch that add_split_scratch declares, the kernel's `__shared__ bool fj_last`, the lane
  // loops' j (which `value` may read) and each reduce's accumulator a<r>, which the kernel
  // declares.
  kir::VarP arrivals;                             // fj_arrivals
  std::map<ir::NodeId, kir::VarP> partials;       // fj_partial<r>
  kir::VarP last;                                 // fj_last
  kir::VarP lane;                                 // j
  std::map<ir::NodeId, kir::ExprP> accumulators;  // a<r>
};

// Makes the split's scratch variables (fj_arrivals, fj_partial<r> of each reduce), its fj_last
// and, with lanes, its j; the caller adds the accumulators.
void split_variables(SplitPartials& split, const RegionInfo& info,
                     const std::vector<ir::NodeId>& reduces);

// The kernel's header lines on the split (`pieces`: "rows split in 8 pieces of 512 elements",
// `group`: what a group is, "row") and the module-scope scratch: fj_partial<r> per reduce and
// the arrival counters.
void add_split_scratch(kir::Block& head, const std::vector<ir::NodeId>& reduces,
                       const SplitPartials& split, std::string_view pieces, std::string_view group);
// Publishes the block's partials and counts its arrival. Afterwards the shared `fj_last` (the
// kernel declares `__shared__ bool fj_last;`) is set, the same in the whole block: this block
// is its group's last. Every thread of the block must run it. Returns the block where the
// fold goes: with thread 0 the only holder, the body of `if (fj_last && threadIdx.x == 0)`,
// after the acquire fence; else `out` itself.
kir::Block& add_split_arrival(kir::Block& out, const std::vector<ir::NodeId>& reduces,
                              const SplitPartials& split);
// a<r> (a<r>[j]) = the fold, in order, of the partials of pieces q = first, first + step, ...
// (the thread's share of them; all of them for first 0, step 1), starting from the identity.
void add_split_fold(kir::Block& out, const RegionInfo& info, const std::vector<ir::NodeId>& reduces,
                    const SplitPartials& split, kir::ExprP first, int64_t step);
// Resets the group's arrival count (run by one thread of the last block).
void add_split_reset(kir::Block& out, const SplitPartials& split);

// Thread-block clusters (rowwise.cpp, sm_90 on): a row of a multi-pass kernel is cut into C
// pieces, one per block of a cluster; each block holds its piece in registers and, after each
// pass's block reduction, the blocks exchange their partials through distributed shared memory
// (device/fj_cluster.cuh), so that every block holds the row's statistics. Unlike split
// partials nothing goes through global memory and launches may overlap.
struct ClusterPartial {
  kir::ExprP value;     // the block's reduced accumulator, replaced by the cluster's
  std::string type;     // its type: float, or fj_max_sum for an online softmax pair
  std::string functor;  // how two partials combine: fj_op_sum, fj_op_max_sum<false>, ...
  std::string slot;     // the __shared__ variable the block publishes it in
};
// Declares each partial's slot in `decl` (the kernel's top: __shared__ variables live as long
// as the block) and adds the exchange to `out`: thread 0 publishes, fj_cluster_sync, and every
// thread folds the `blocks` slots in rank order. With `phase` (a variable that alternates
// between 0 and 1 from row to row) each slot is a pair used in turns: a kernel with a single
// exchange per row needs that, so that no slot is rewritten before every block has read it.
void add_cluster_exchange(kir::Block& decl, kir::Block& out,
                          const std::vector<ClusterPartial>& partials, int64_t blocks,
                          const kir::ExprP& phase);

}  // namespace fusejit::templates
