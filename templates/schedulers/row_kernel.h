// templates/row_kernel: the pieces a row-style kernel is assembled from, and the assembly.
//
// A row kernel (the layout: row_schedule.h; the math: rowwise.cpp's note) is a composition:
//   the frame     (RowFrame) the row's indices and which pieces the layout selects (RowPieces);
//   a guard       (row_guard.cpp) which rows and vectors need a check: none, the row guard
//                 (`live`), the k guard (a thread's vectors past its piece), the end guard (past
//                 the row), a clamp (the cache fill reads the last vector again) or a predicate
//                 (every vector computed, the updates and stores kept under fj_in);
//   a row walk    (row_walk.cpp) the loop over a thread's vectors: strided (a length given at
//                 launch) or chunked (compile-time trip counts);
//   row storage   (row_cache.cpp) a register-cached row and a row staged in shared memory;
//   accumulate    (row_accumulate.cpp) plain accumulators, or Welford pairs (streamed relative
//                 to a shift, or exact from the register cache);
//   finish        (row_finish.cpp) per pass: the group's reduction (warp shuffles or the
//                 block), then a cluster's exchange or split rows' partials;
//   launch        (row_launch.cpp) the grid, the header and the loop over rows (per block,
//                 per split piece, per cluster);
// assembled by row_kernel.cpp (build_row_kernel). A scheduler picks a RowConfig; the pieces
// follow from it (row_pieces), so a new row schedule is a scheduler of its own that returns
// RowParams and builds with build_row_kernel.
//
// Internal to the row schedulers: nothing outside templates/schedulers includes it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "templates/builders.h"
#include "templates/lower.h"
#include "templates/schedulers/reduction.h"
#include "templates/schedulers/row_schedule.h"

namespace fusejit::templates {

// static_cast<type>(value)
kir::ExprP static_cast_to(std::string_view type, kir::ExprP value);
// `a && b`, or b when there is no a.
kir::ExprP conjoin(kir::ExprP a, kir::ExprP b);

// ---- which pieces a layout selects

// The checks a row's layout needs (row_guard.cpp).
struct RowGuards {
  bool row = false;  // the block's last rows may lie past the end: `live`
  bool k = false;    // a thread's vectors may overrun its piece of the row
  bool end = false;  // vectors may pass the row's length (a short last cluster piece, a path)
  // The passes compute every vector, and only the updates and stores are predicated on fj_in
  // (predicated_update): a register path's rows, a static row its threads' vectors overrun.
  bool predicated = false;
};

// The loop over a thread's vectors of the row (row_walk.cpp).
enum class RowWalk {
  strided,  // a length given at launch: k0 strides over the row up to the runtime length
  chunked,  // `chunks` vectors per thread, a compile-time trip count (unrolled)
};

// How a row is spread over blocks, which decides its row loop and its finish.
enum class RowSpread {
  block,    // a thread group within one block (several rows per block, or the block's row)
  split,    // S blocks per row, combining partials through module-scope scratch
  cluster,  // C blocks of a thread-block cluster, exchanging partials through DSMEM
};

struct RowPieces {
  RowWalk walk = RowWalk::chunked;
  RowSpread spread = RowSpread::block;
  RowGuards guards;
  bool register_cache = false;  // the row's reread values held in registers (RegisterCache)
  bool staged = false;          // the cache fill's inputs staged in shared memory (RowStages)
};
RowPieces row_pieces(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg);

// ---- the frame every piece reads

// The kernel's variables, made by the frame before the pieces that declare them are built (a
// piece reads what another declares: the walk reads the row loop's row and s, the passes the
// walk's k0, j and fj_in): the row loop's row0, u, row and s; the group index g; the walk's c,
// k0, k, j, fj_slot and fj_in; the row guard live; the staging's fj_next and fj_staged; a
// cluster's fj_phase; and each accumulated reduce's accumulator a<r>.
struct RowVars {
  kir::VarP row0, u, row, s, g;
  kir::VarP c, k0, k, j, slot, in, live;
  kir::VarP next, staged, phase;
  std::map<ir::NodeId, kir::VarP> acc;
};

struct RowFrame {
  RowFrame(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg);

  const RegionInfo& info;
  const ReduceSpace& space;
  RowConfig cfg;
  RowPieces pieces;
  std::string idx;  // the index type
  BasePtr row, k;
  Index x;         // the thread's element of the row
  Index first;     // the row's first element
  Index x_next;    // staged rows: the element of the row the block takes next
  IndexKey x_key;  // staged rows: x's key, which a staged input's index has
  Digits row_digits;
  IndexKey row_key;  // the element `row` of a reduce result: where its value may be read
  kir::ExprP slot;   // the element's place in a register cache
  kir::ExprP phase;  // clusters of one exchange per row: which half of the slots a row uses
  RowVars vars;
  SplitPartials split;  // split rows: the partials' scratch and variables (split_partials)

  const RowGuards& guards() const { return pieces.guards; }
  // A read of reduce r's accumulator.
  kir::ExprP acc(ir::NodeId r) const { return kir::var(vars.acc.at(r)); }
  // The bound of the row loop: the rows (per outer unit times fj_outer, or a runtime extent).
  kir::ExprP rows_bound() const;
};

// One walk over the thread's vectors of the row: per vector, the prelude (vector and hoisted
// loads), the body (per lane, inside the j loop when V > 1) and the stores.
struct RowPass {
  kir::Block prelude, body, stores;
  ValueScope chunk, lane;
  bool loads = false;  // it reads a region input along the row (not through the cache)
};
std::unique_ptr<RowPass> new_row_pass(ValueScope* row_scope);

// ---- guard (row_guard.cpp)

// The checks the layout `cfg` needs.
RowGuards row_guards(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg);

// What a walk is for: a pass over the row, or the register cache's fill (and its staging).
enum class WalkUse { pass, fill };

// How one walk guards its vectors, resolved from the row's guards.
struct VectorGuard {
  bool clamp = false;        // a vector past the end reads the row's last vector (a fill)
  bool predicate = false;    // fj_in is declared; updates and stores are predicated on it
  bool k_check = false;      // a branch on the vector lying within the piece
  bool end_check = false;    // a branch on k0 lying within the row
  bool host_live = false;    // the whole walk under `live` (a clamped fill of a dead row skips)
  bool branch_live = false;  // each vector under `live`
  bool declare_k0 = false;   // k0 declared outright: a check reads it
};
// `passes_load`: an earlier pass read a region input along the row (RowPass::loads).
VectorGuard vector_guard(const RowFrame& f, WalkUse use, bool passes_load);

// `fj_in ? update : unchanged` where the passes are predicated, else `update`.
kir::ExprP predicated_update(const RowFrame& f, kir::ExprP update, kir::ExprP unchanged);

// ---- row walk (row_walk.cpp)

// The loop over the thread's vectors of the row (of its piece, when rows are split), around
// the pass's statements.
void add_row_walk(kir::Block& out, const RowPass& p, const RowFrame& f, const VectorGuard& guard);

// ---- row storage (row_cache.cpp)

// The register cache of a multi-pass kernel: the values several passes read, one array each,
// filled before pass 1.
class RegisterCache {
 public:
  struct Entry {
    ir::NodeId id;
    Index at;
    kir::VarP array;
  };
  // `entries`: the most arrays it may hold (by default as many as the cache budget allows).
  RegisterCache(const RowFrame& f, std::set<ir::NodeId> cacheable, int64_t entries);
  // The cache's element of `id` at `at`, taking it in while there is room; null when the cache
  // does not hold it.
  kir::ExprP element(ir::NodeId id, const Index& at, Values& values);
  // Whether it holds `id` at the row's elements (so that reading it again costs nothing).
  bool holds(ir::NodeId id) const;
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  const RowFrame& f_;
  std::set<ir::NodeId> cacheable_;
  int64_t max_entries_ = 0;
  std::vector<Entry> entries_;
  std::map<ValueKey, kir::VarP> index_;
};

// Region inputs staged in shared memory one row ahead (RowConfig::staged): per input, one
// vector per thread and chunk, at `offset` bytes into the kernel's dynamic shared memory.
class RowStages {
 public:
  struct Stage {
    ir::NodeId id;
    kir::VarP buffer;  // fj_stage<i>, a pointer into fj_staged
    std::string storage;
    int64_t offset = 0;
  };
  explicit RowStages(const RowFrame& f) : f_(f) {}
  // The slots of input `id` when the cache fill reads it at the row's elements and it is
  // staged, else null (read from global memory).
  kir::ExprP slots(ir::NodeId id, const Index& at);
  // Per staged input, the copy of the vector at `at` into its slot.
  void add_copies(kir::Block& prelude, const Index& at) const;
  // Around `fill` (the cache fill): this row's copies for a block's first row, the wait, and
  // the next row's copies.
  kir::Block around_fill(kir::Block fill, kir::Block this_row, kir::Block next_row) const;
  // The buffers' declarations at the top of the kernel.
  void declare(kir::Block& body) const;
  bool empty() const { return stages_.empty(); }
  size_t count() const { return stages_.size(); }
  int64_t bytes() const { return bytes_; }

 private:
  const RowFrame& f_;
  std::vector<Stage> stages_;
  int64_t bytes_ = 0;
};

// ---- accumulate (row_accumulate.cpp)

// A pass's accumulators: plain ones, online (max, sum) pairs, and Welford means, streamed
// relative to the row's first value or, where the register cache holds the operand, exact.
class RowAccumulators {
 public:
  // `cache`: where a Welford mean's operand may be held (read as the passes fill it).
  RowAccumulators(const RowFrame& f, Values& values, ValueScope& row_scope,
                  const RegisterCache& cache)
      : f_(f), values_(values), row_scope_(row_scope), cache_(cache) {}
  // Reduce r's accumulator, declared in `main`, and its update per element in pass p.
  void add(kir::Block& main, RowPass& p, ir::NodeId r);
  // The exact Welford means among `here`.
  std::vector<ir::NodeId> exact_among(const std::vector<ir::NodeId>& here) const;
  // Their sums turned into means in `main`, and the squared deviations added in walk p.
  void add_deviations(kir::Block& main, RowPass& p, const std::vector<ir::NodeId>& means);
  // Reduce r's value once reduced: with the shift added back for a streamed Welford mean.
  kir::ExprP unshifted(ir::NodeId r, kir::ExprP value) const;
  bool exact(ir::NodeId mean) const;

 private:
  kir::ExprP welford_shift(ir::NodeId r);

  const RowFrame& f_;
  Values& values_;
  ValueScope& row_scope_;
  const RegisterCache& cache_;
  std::vector<ir::NodeId> exact_;
  std::map<ir::NodeId, kir::ExprP> shift_;
};
Accumulator row_accumulator(const RowFrame& f, ir::NodeId r);

// ---- finish (row_finish.cpp)

// After pass `pass` (reducing `here`): the group's reduction, then the cluster's exchange or
// the split partials' combination. Returns the block where the row goes on: `main`, or with
// split rows the last block's combination. `cluster_slots` collects the exchange's slots.
kir::Block& add_row_finish(const RowFrame& f, kir::Block& main, int pass,
                           const std::vector<ir::NodeId>& here, kir::Block& cluster_slots);
// Split rows' partials, with their variables: made once per kernel, by the frame (RowFrame::split).
SplitPartials split_partials(const RowFrame& f);

// ---- launch (row_launch.cpp)

// The launch: block, grid, residency, cluster and shared memory.
KernelBody row_kernel_body(const RowFrame& f, const RowStages& stages);
// The comment lines, the module-scope scratch and the thread-group index.
void add_row_header(kir::Function& fn, const RowFrame& f, std::string_view kind, bool caches,
                    const RowAccumulators& acc, const RowStages& stages);
// The loop over rows (per block, per split piece or per cluster) around `row_body`.
void add_row_loop(kir::Block& out, const RowFrame& f, const kir::Block& row_body,
                  const kir::Block& cluster_slots);

// ---- the assembly (row_kernel.cpp)

struct RowKernel {
  KernelBody body;
  int vector_accesses = 0;
  bool caches = false;  // the register cache holds something
};
// `cache_entries`: the most arrays the register cache may hold (-1: as many as its budget
// allows at cfg's vectors per thread).
RowKernel build_row_kernel(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                           std::set<ir::NodeId> cacheable, int64_t cache_entries = -1);

}  // namespace fusejit::templates
