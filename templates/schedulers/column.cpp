// templates/column: the column-style kernel of single-pass reductions over leading or middle
// axes (the input seen as [P, L, N]: P kept outer elements, L reduced, N kept inner, N > 1),
// online softmax pairs included.
//
// Structure: a block of TX * TY threads owns a tile of TX * V adjacent columns of one p (the
// blocks loop over tiles with a grid stride). Thread (tx, ty) accumulates V columns over rows
// l = ty, ty + TY, ...: at each l, the TX threads of a row of the block read TX * V adjacent
// elements (16-byte vector loads when V > 1), so every access is coalesced. The TY partial
// sums per column are then combined: a butterfly over the lanes of a warp that share tx, then
// the warps' totals through shared memory. The ty == 0 threads finish: the reduced values,
// the epilogue, the stores.
// Split columns: when the tiles are too few to fill the device (few, long columns), L is cut
// into S pieces and each (tile, piece) is one block's work. Every block combines its piece as
// above and publishes one partial per column to module-scope scratch; the last block of the
// tile to arrive folds the S partials (thread (tx, ty) the pieces ty, ty + TY, ... in order),
// combines those TY values once more, and finishes (reduction.h: the split scheme rowwise.cpp
// uses too). Its fold reads S * TX * V partials per reduce from L2 on one SM, so S is bounded
// and tiles narrow (down to 32 bytes) to keep that read short.
// Online softmax pairs (ReduceSpace::online: a max M = max(X) and the sum of exp(X - M)) are one
// accumulator, an fj_max_sum per column and lane, fed the elements of X: the running maximum and
// the sum of exp(x - max) rescaled as the maximum grows; the warp, block and split combinations
// combine pairs with fj_op_max_sum, and the finish reads M (field m) and the sum
// (fj_max_sum_total). exp(X - M) itself is never evaluated, so X is read once for both.
// Math: accumulators in f32 for float types (i64 for integer sums); the combination order is
// fixed, so results do not depend on timing.
#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/schedulers/reduction.h"
#include "templates/schedulers/registry.h"

namespace fusejit::templates {

namespace {

// Threads in flight to aim for: kFilledSMs SMs' worth at the target's threads per SM (the
// largest part of an arch has about that many, an H100 SXM 132; a smaller part runs the same
// grid in more waves). The SM count itself stays out of the source (target.h).
constexpr int64_t kFilledSMs = 128;
constexpr int64_t kMaxBlock = 1024;
constexpr int64_t kMaxSharedBytes = 32 * 1024;
// Split columns: blocks of kSplitBlock threads, about kSplitTargetBlocks (tile, piece) pairs
// (as rowwise.cpp's split rows: a few waves on any part), each thread reading at least
// kMinRowsPerThread rows of its piece (the block's combine and publication amortized over
// 64 KiB of 16-byte vectors); the last block of a tile folds at most kFoldBytes of partials
// (one SM reading them from L2: about a microsecond, against tens for the whole kernel; a
// smaller budget would narrow the tiles of 64 bf16 columns below 64 bytes per row).
constexpr int64_t kSplitBlock = 512;
constexpr int64_t kSplitTargetBlocks = 1024;
constexpr int64_t kMinRowsPerThread = 8;
constexpr int64_t kFoldBytes = 64 * 1024;

int64_t accumulator_bytes(const RegionInfo& info, const ReduceSpace& space) {
  int64_t bytes = 0;
  for (ir::NodeId r : space.accumulated()) {
    bytes += accumulator_of(info, r, space.pairing(r)).bytes;
  }
  return bytes;
}

// Split columns, from tiles of `tx` vectors down to `narrowest`: the widest tiles whose fold
// stays within kFoldBytes (narrower tiles: more tiles, fewer pieces each). False when L is too
// short to split.
bool choose_split(ColumnParams& c, const ReduceSpace& space, int64_t columns, int64_t tx,
                  int64_t narrowest, int64_t acc_bytes) {
  int64_t s = 1;
  for (;; tx /= 2) {
    c.tx = tx;
    c.tiles_n = ceil_div(columns, tx);
    c.tiles = space.prefix * c.tiles_n;
    c.ty = kSplitBlock / tx;
    s = std::min(std::max<int64_t>(1, kSplitTargetBlocks / c.tiles),
                 space.length / (kMinRowsPerThread * c.ty));
    if (s * tx * c.v * acc_bytes <= kFoldBytes || tx <= narrowest) break;
  }
  s = std::min(s, kFoldBytes / (c.tx * c.v * acc_bytes));
  if (s < 2) return false;
  // Pieces of whole rows of threads; S follows.
  c.piece = ceil_div(ceil_div(space.length, s), c.ty) * c.ty;
  c.split = ceil_div(space.length, c.piece);
  return c.split >= 2;
}

ColumnParams column_config(const RegionInfo& info, const ReduceSpace& space, int v) {
  ColumnParams c;
  c.v = v;
  c.piece = space.length;
  const int64_t target_threads = kFilledSMs * info.target.threads_per_sm;
  const int64_t columns = space.suffix / v;  // vectors of V columns per p
  const int64_t acc_bytes = accumulator_bytes(info, space);
  // A row of the tile spans TX * V columns: up to 128 bytes (a full line per warp row), down
  // to 32 bytes (one whole sector) when narrower tiles are needed to give every SM a block.
  const int64_t vector_bytes = v * info.min_element_size();
  const int64_t widest = std::max<int64_t>(1, 128 / vector_bytes);
  const int64_t narrowest = std::max<int64_t>(1, 32 / vector_bytes);
  const int64_t full_tx = std::min<int64_t>({32, pow2_ceil(columns), widest});
  auto too_few = [&](int64_t tx) {
    return space.prefix * ceil_div(columns, tx) * kMaxBlock < target_threads;
  };
  c.tx = full_tx;
  while (c.tx > narrowest && too_few(c.tx)) c.tx /= 2;
  c.tiles_n = ceil_div(columns, c.tx);
  c.tiles = space.prefix * c.tiles_n;
  c.ty = pow2_floor(std::max<int64_t>(1, target_threads / (c.tiles * c.tx)));
  c.ty = std::min({c.ty, pow2_ceil(space.length), kMaxBlock / c.tx});
  c.ty = std::max(c.ty, std::max<int64_t>(1, 128 / c.tx));  // at least 128 threads
  c.ty = std::min(c.ty, kMaxBlock / c.tx);
  // Still too few threads: split, if that gives more of them.
  ColumnParams split = c;
  if (too_few(c.tx) && choose_split(split, space, columns, full_tx, narrowest, acc_bytes) &&
      split.tiles * split.split * split.tx * split.ty > c.tiles * c.tx * c.ty) {
    c = split;
  }
  // Halving TY keeps a split's pieces whole rows of threads.
  while (c.ty > 1 && c.tx * c.ty > 32 &&
         (c.tx * c.ty / 32) * c.tx * v * acc_bytes > kMaxSharedBytes) {
    c.ty /= 2;
  }
  return c;
}

// The kernel's variables that the pieces read before build() declares them: the thread's
// coordinates tx and ty, the lanes' j, the tile t, its piece s and their pair u, the roots p,
// l, n (n0 at lane 0), and whether the thread's columns are in range (live).
struct ColumnVars {
  kir::VarP tx, ty, j, t, s, u, p, l, n, n0, live;
};

ColumnVars column_vars(const std::string& idx) {
  const auto index = [&](const char* name) { return kir::variable(idx, name); };
  return ColumnVars{kir::variable("int", "tx"),
                    kir::variable("int", "ty"),
                    kir::variable("int", "j"),
                    index("t"),
                    index("s"),
                    index("u"),
                    index("p"),
                    index("l"),
                    index("n"),
                    index("n0"),
                    kir::variable("bool", "live")};
}

// The statements of the kernel are collected in pieces while the region's values are
// computed (a load goes before the row loop or into it, depending on what its index reads),
// then assembled in order by build().
class ColumnBuilder {
 public:
  ColumnBuilder(const RegionInfo& info, const ReduceSpace& space, const ColumnParams& cfg);
  KernelBody build();

 private:
  kir::ExprP leaf(ir::NodeId id, const Index& at);
  kir::ExprP intercept(ir::NodeId id, const Index& at);
  Accumulator accumulator(ir::NodeId r) const;
  void add_accumulator(ir::NodeId r);
  void add_reduced_value(ir::NodeId r);
  void collect_reduces();
  void collect_outputs();
  void add_output(const ReduceOutput& out, const Index& at, ValueScope& scope, kir::Block& decl,
                  kir::Block& body, kir::Block& stores);
  void add_header(kir::Block& head) const;
  void add_tile_start(kir::Block& out) const;
  void add_accumulation(kir::Block& out) const;
  void add_lane_loop(kir::Block& out, const kir::Block& body) const;
  void add_block_combine(kir::Block& out) const;
  void add_split_combine(kir::Block& out) const;
  void add_finish(kir::Block& out) const;
  SplitPartials split_partials() const;
  void make_split();
  // for (int j = 0; j < V; ++j), unrolled: a statement per accumulator lane.
  kir::Block& per_lane(kir::Block& out) const;
  // a<r>[j] and part<r>[row][tx * V + j].
  kir::ExprP acc(ir::NodeId r, kir::ExprP lane) const;
  kir::ExprP shared_part(ir::NodeId r, kir::ExprP row) const;

  const RegionInfo& info_;
  const ReduceSpace& space_;
  const ColumnParams cfg_;
  const std::string idx_;
  const int64_t block_, warps_;
  const bool guard_n_;
  const ColumnVars vars_;
  const kir::ExprP thread_ = kir::thread_index();
  const kir::ExprP tx_ = kir::var(vars_.tx), ty_ = kir::var(vars_.ty), j_ = kir::var(vars_.j);
  // The ty == 0 threads: they hold the block's combined values.
  const kir::ExprP holders_ = kir::infix(ty_, "==", kir::lit(0));
  BasePtr p_root_, l_root_, n_root_;
  Index x_;
  Digits kept_;
  IndexKey canonical_;  // a reduced value is read at its own column only
  kir::ExprP lane_j_;
  std::map<ir::NodeId, kir::ExprP> accs_, parts_;  // a<r>, part<r>
  SplitPartials split_;                            // but the accumulators (split_partials)
  Values values_;
  std::map<ir::NodeId, kir::ExprP> finished_;
  bool epilogue_ = false;
  int names_ = 0;
  // The traversal: loads per tile, per row l, the lanes' values, the stores of full outputs.
  kir::Block tile_prelude_, prelude_, body_, stores_;
  ValueScope tile_{&tile_prelude_, nullptr, {}};
  ValueScope outer_{&prelude_, &tile_, {}};
  ValueScope inner_{&body_, &outer_, {}};
  // Accumulators, their warp combination, the shared arrays of the block combination, the
  // reduced values.
  kir::Block acc_init_, warp_combine_, shared_, finish_;
  // The epilogue: the outputs with one value per column, per lane.
  kir::Block epi_prelude_, epi_, epi_stores_;
  ValueScope epi_scope_{&epi_, nullptr, {}};
};

ColumnBuilder::ColumnBuilder(const RegionInfo& info, const ReduceSpace& space,
                             const ColumnParams& cfg)
    : info_(info),
      space_(space),
      cfg_(cfg),
      idx_(info.index_type()),
      block_(cfg.tx * cfg.ty),
      warps_(std::max<int64_t>(1, block_ / 32)),
      guard_n_(cfg.tiles_n * cfg.tx * cfg.v != space.suffix),
      vars_(column_vars(idx_)),
      values_(
          info, [this](ir::NodeId id, const Index& at, ValueScope&) { return leaf(id, at); },
          [this](ir::NodeId id, const Index& at) { return intercept(id, at); }) {
  p_root_ = make_root(vars_.p, space.prefix);
  l_root_ = make_root(vars_.l, space.length);
  n_root_ = make_lane_root(vars_.n, vars_.n0, space.suffix, cfg.v);
  // Axes before the first reduced one are the prefix, after it the suffix (extent-1 axes
  // carry no digits, so their group does not matter).
  size_t first_reduced = space.shape.size();
  for (size_t a = 0; a < space.shape.size(); ++a) {
    if (space.shape[a] != 1 && is_reduced_axis(space, a)) {
      first_reduced = a;
      break;
    }
  }
  x_ = grouped_index(space.shape, {p_root_, l_root_, n_root_}, [&](size_t a) {
    if (is_reduced_axis(space, a)) return size_t{1};
    return a < first_reduced ? size_t{0} : size_t{2};
  });
  kept_ = {Digit{p_root_, 1, space.prefix}, Digit{n_root_, 1, space.suffix}};
  canonical_ = index_key(Index{Shape{space.rows}, {kept_}});
  lane_j_ = cfg.v > 1 ? j_ : kir::lit(0);
  if (cfg.split > 1) make_split();
}

kir::Block& ColumnBuilder::per_lane(kir::Block& out) const {
  return out.loop(vars_.j, kir::lit(0), kir::lit(cfg_.v), nullptr, 1);
}

kir::ExprP ColumnBuilder::acc(ir::NodeId r, kir::ExprP lane) const {
  return kir::subscript(accs_.at(r), std::move(lane));
}

kir::ExprP ColumnBuilder::shared_part(ir::NodeId r, kir::ExprP row) const {
  return kir::subscript(kir::subscript(parts_.at(r), std::move(row)),
                        kir::add(kir::mul(tx_, kir::lit(cfg_.v)), j_));
}

// Loads that do not depend on l (a weight along the columns) are hoisted out of the l loop.
kir::ExprP ColumnBuilder::leaf(ir::NodeId id, const Index& at) {
  const DTypeCode& code = dtype_code(info_.node(id).dtype);
  const bool per_tile = !uses(at, l_root_);
  kir::Block& pre = per_tile ? tile_prelude_ : prelude_;
  ValueScope& pre_scope = per_tile ? tile_ : outer_;
  if (!epilogue_ && cfg_.v > 1 && lane(at) == Lane::unit) {
    const ValueKey key = value_key(id, at, Held::vector);
    kir::ExprP array = outer_.find(key);
    if (!array) {
      array = pre.array(std::string(code.storage), fmt::format("r{}", names_++), cfg_.v);
      pre.eval(
          kir::load_vec(array, kir::add(kir::var(info_.input_var(id)), kir::offset(at, true))));
      pre_scope.memo[key] = array;
    }
    return body_.let(std::string(code.arith), fmt::format("x{}", names_++),
                     apply(code.load, kir::subscript(array, j_)));
  }
  if (!epilogue_ && lane(at) == Lane::none) {
    const ValueKey key = value_key(id, at);
    if (kir::ExprP hit = outer_.find(key)) return hit;
    kir::ExprP var = pre.let(std::string(code.arith), fmt::format("h{}", names_++),
                             load(info_, id, kir::offset(at, true)));
    pre_scope.memo[key] = var;
    return var;
  }
  kir::Block& out = epilogue_ ? epi_ : body_;
  return out.let(std::string(code.arith), fmt::format("x{}", names_++),
                 load(info_, id, kir::offset(at)));
}

kir::ExprP ColumnBuilder::intercept(ir::NodeId id, const Index& at) {
  if (space_.depth.count(id) == 0) return nullptr;
  const auto it = finished_.find(id);
  if (it == finished_.end() || !(index_key(at) == canonical_)) {
    throw InternalError(fmt::format("%{} is read at index {} before or outside its column ({})", id,
                                    offset(at), offset(kept_)));
  }
  return kir::subscript(it->second, lane_j_);
}

Accumulator ColumnBuilder::accumulator(ir::NodeId r) const {
  return accumulator_of(info_, r, space_.pairing(r));
}

// Reduce r's accumulators a<r>[V], what each element adds to them, their combination over the
// warp's lanes and the shared array of the block's combination. The maximum of an online pair
// takes the elements of X and accumulates (max, sum of exp(x - max)); its sum has no
// accumulator (its operand, exp(X - M), is never evaluated here).
void ColumnBuilder::add_accumulator(ir::NodeId r) {
  const ir::Node& n = info_.node(r);
  const Accumulator a = accumulator(r);
  accs_[r] = acc_init_.array(a.type, info_.named("a", r), cfg_.v);
  per_lane(acc_init_).assign(acc(r, j_), kir::lit(a.identity));
  const ir::Node& operand = info_.node(n.inputs[0]);
  const kir::ExprP value = values_.value(n.inputs[0], x_, inner_);
  body_.assign(acc(r, lane_j_),
               kir::call(a.functor + "()", {acc(r, lane_j_), convert_to(accumulator_dtype(n),
                                                                       operand.dtype, value)}));
  if (cfg_.tx < 32 && block_ > cfg_.tx) {
    per_lane(warp_combine_)
        .assign(acc(r, j_), kir::warp_reduce(acc(r, j_), kir::call(a.functor, {}), cfg_.tx,
                                             std::min<int64_t>(32, block_)));
  }
  if (warps_ > 1) {
    parts_[r] =
        shared_.array("__shared__ " + a.type, info_.named("part", r), {warps_, cfg_.tx * cfg_.v});
  }
}

// v<r>[j], reduce r's value per lane once the block (or the tile's last block) has combined the
// accumulators: a pair's maximum is its field m, its sum fj_max_sum_total of the pair.
void ColumnBuilder::add_reduced_value(ir::NodeId r) {
  const ir::Node& n = info_.node(r);
  const kir::ExprP value = reduced_value(info_, space_, r, space_.length,
                                         [&](ir::NodeId id) { return acc(id, j_); });
  const kir::ExprP reduced =
      finish_.array(std::string(dtype_code(n.dtype).arith), info_.named("v", r), cfg_.v);
  per_lane(finish_).assign(kir::subscript(reduced, j_), value);
  finished_[r] = reduced;
}

void ColumnBuilder::collect_reduces() {
  for (ir::NodeId r : space_.accumulated()) add_accumulator(r);
  for (ir::NodeId r : space_.reduces) add_reduced_value(r);
}

// One output: `out<k>[offset] = value` per element, or with V lanes a vector store after the
// lane loop when the lanes' elements are adjacent.
void ColumnBuilder::add_output(const ReduceOutput& out, const Index& at, ValueScope& scope,
                               kir::Block& decl, kir::Block& body, kir::Block& stores) {
  const DTypeCode& code = dtype_code(info_.node(out.id).dtype);
  const kir::ExprP value = apply(code.store, values_.value(out.id, at, scope));
  const kir::ExprP dst = kir::var(info_.output_var(out.position));
  if (cfg_.v > 1 && lane(at) == Lane::unit) {
    const kir::ExprP lanes =
        decl.array(std::string(code.storage), fmt::format("s{}", out.position), cfg_.v);
    body.assign(kir::subscript(lanes, j_), value);
    stores.eval(kir::store_vec(kir::add(dst, kir::offset(at, true)), lanes));
  } else {
    body.assign(kir::subscript(dst, kir::offset(at)), value);
  }
}

void ColumnBuilder::collect_outputs() {
  for (const ReduceOutput& out : space_.outputs) {
    if (!out.full) continue;
    const Index at = index_from_digits(flatten(x_), info_.node(out.id).shape);
    add_output(out, at, inner_, prelude_, body_, stores_);
  }
  epilogue_ = true;
  for (const ReduceOutput& out : space_.outputs) {
    if (out.full) continue;
    const Index at = index_from_digits(kept_, info_.node(out.id).shape);
    add_output(out, at, epi_scope_, epi_prelude_, epi_, epi_stores_);
  }
}

// The partials of tile t, piece s: one per column of the tile, held by the ty == 0 threads
// (column j * TX + tx, so that a warp's accesses to them are contiguous). Made once, with its
// variables.
void ColumnBuilder::make_split() {
  split_.pieces = cfg_.split;
  split_.groups = cfg_.tiles;
  split_.width = cfg_.tx * cfg_.v;
  split_.group = kir::var(vars_.t);
  split_.piece = kir::var(vars_.s);
  split_.value = kir::add(kir::mul(j_, kir::lit(cfg_.tx)), tx_);
  split_.lanes = static_cast<int>(cfg_.v);
  split_.holders = holders_;
  for (const auto& [sum, max] : space_.online) split_.paired[max] = Pairing::max_sum;
  split_variables(split_, info_, space_.accumulated());
  split_.lane = vars_.j;
}

// The split with the accumulators (declared by collect_reduces).
SplitPartials ColumnBuilder::split_partials() const {
  SplitPartials split = split_;
  split.accumulators = accs_;
  return split;
}

void ColumnBuilder::add_header(kir::Block& head) const {
  head.comment(
      "{}, column-style: [{}, {}, {}] reduced over the middle; tiles of {} x {} columns, {} "
      "rows of threads",
      fusion::region_kind_name(info_.region.kind), space_.prefix, space_.length, space_.suffix,
      cfg_.tx, cfg_.v, cfg_.ty);
  for (const auto& [sum, max] : space_.online) {
    head.comment("online softmax pair: max {} and sum {} of exp(x - max) in one pass (fj_max_sum)",
                 info_.named("v", max), info_.named("v", sum));
  }
  head.comment("{} index arithmetic", info_.wide_index ? "64-bit" : "32-bit");
  if (cfg_.split > 1) {
    add_split_scratch(head, space_.accumulated(), split_partials(),
                      fmt::format("columns split in {} pieces of {} rows", cfg_.split, cfg_.piece),
                      "tile");
  }
}

// The tile's position (p, n0) and, when split, the piece s; then the accumulators.
void ColumnBuilder::add_tile_start(kir::Block& out) const {
  const kir::ExprP t = kir::var(vars_.t);
  if (cfg_.split > 1) {
    const kir::ExprP u = kir::var(vars_.u);
    if (cfg_.tiles > 1) {
      out.let(vars_.t, kir::infix(u, "%", kir::lit(cfg_.tiles)));
      out.let(vars_.s, kir::infix(u, "/", kir::lit(cfg_.tiles)));
    } else {
      out.let(vars_.t, kir::lit(0));
      out.let(vars_.s, u);
    }
  }
  kir::ExprP n0;
  if (cfg_.tiles_n == 1) {
    if (space_.prefix > 1) out.let(vars_.p, t);
    n0 = out.let(vars_.n0, kir::mul(tx_, kir::lit(cfg_.v)));
  } else {
    if (space_.prefix > 1) out.let(vars_.p, kir::infix(t, "/", kir::lit(cfg_.tiles_n)));
    const kir::ExprP column =
        kir::add(kir::mul(kir::infix(t, "%", kir::lit(cfg_.tiles_n)), kir::lit(cfg_.tx)), tx_);
    n0 = out.let(vars_.n0, kir::mul(kir::group(column), kir::lit(cfg_.v)));
  }
  if (guard_n_) out.let(vars_.live, kir::lt(n0, kir::lit(space_.suffix)));
  out.splice(acc_init_);
}

// The lanes' statements: inside an unrolled loop over j with V lanes, with n declared when
// they read it.
void ColumnBuilder::add_lane_loop(kir::Block& out, const kir::Block& body) const {
  const kir::ExprP n0 = kir::var(vars_.n0);
  if (cfg_.v > 1) {
    kir::Block& lanes = per_lane(out);
    lanes.let_if_read(vars_.n, kir::add(n0, j_));
    lanes.splice(body);
  } else {
    out.let_if_read(vars_.n, n0);
    out.splice(body);
  }
}

// Thread (tx, ty) over the rows l = ty, ty + TY, ... of the tile (of its piece, when split).
void ColumnBuilder::add_accumulation(kir::Block& out) const {
  kir::Block& live = guard_n_ ? out.branch(kir::var(vars_.live)) : out;
  live.splice(tile_prelude_);
  kir::ExprP first = ty_;
  kir::ExprP end = kir::lit(space_.length);
  if (cfg_.split > 1) {
    const kir::ExprP s = kir::var(vars_.s);
    first = kir::add(kir::mul(s, kir::lit(cfg_.piece)), ty_);
    const kir::ExprP next = kir::mul(kir::group(kir::add(s, kir::lit(1))), kir::lit(cfg_.piece));
    if (cfg_.split * cfg_.piece == space_.length) {
      end = live.let(idx_, "l_end", next);
    } else {
      // The last piece is shorter: s < S - 1 ? (s + 1) * piece : L.
      end = live.let(
          idx_, "l_end",
          kir::select(kir::lt(s, kir::lit(cfg_.split - 1)), next, kir::lit(space_.length)));
    }
  }
  kir::Block& rows = live.loop(vars_.l, first, end, kir::lit(cfg_.ty), 4);
  rows.splice(prelude_);
  add_lane_loop(rows, body_);
  rows.splice(stores_);
}

// The TY values per column: a butterfly over the lanes of a warp that share tx, then the
// warps' totals through shared memory; the ty == 0 threads hold the result.
void ColumnBuilder::add_block_combine(kir::Block& out) const {
  out.splice(warp_combine_);
  if (warps_ <= 1) return;
  const kir::ExprP sync = kir::sync_block();
  const kir::ExprP lane = kir::group(kir::infix(thread_, "&", kir::lit(31)));
  kir::Block& writers = out.branch(kir::lt(lane, kir::lit(cfg_.tx)));
  const std::vector<ir::NodeId> accumulated = space_.accumulated();
  for (ir::NodeId r : accumulated) {
    per_lane(writers).assign(shared_part(r, kir::infix(thread_, ">>", kir::lit(5))), acc(r, j_));
  }
  out.eval(sync);
  kir::Block& holders = out.branch(holders_);
  for (ir::NodeId r : accumulated) {
    const auto [warps, w] = holders.loop("int", "w", kir::lit(1), kir::lit(warps_), nullptr, 1);
    const std::string op = accumulator(r).functor;
    per_lane(warps).assign(acc(r, j_), kir::call(op + "()", {acc(r, j_), shared_part(r, w)}));
  }
  out.eval(sync);
}

// Split columns: every block publishes its partials; the tile's last block folds them (thread
// (tx, ty) the pieces ty, ty + TY, ..., in order) and combines the TY results as before.
void ColumnBuilder::add_split_combine(kir::Block& out) const {
  const SplitPartials split = split_partials();
  // With the ty == 0 threads as holders, the fold goes on in `out` itself.
  const std::vector<ir::NodeId> accumulated = space_.accumulated();
  add_split_arrival(out, accumulated, split);
  out.branch(kir::prefix("!", kir::var(split.last))).jump("continue");
  out.comment("the tile's last block: the {} partials of each column, in order", cfg_.split);
  out.eval(kir::fence());
  add_split_fold(out, info_, accumulated, split, ty_, cfg_.ty);
  add_block_combine(out);
  add_split_reset(out.branch(kir::infix(thread_, "==", kir::lit(0))), split);
}

// The ty == 0 threads: the reduced values, the epilogue, the stores.
void ColumnBuilder::add_finish(kir::Block& out) const {
  kir::Block& finishers =
      out.branch(guard_n_ ? kir::infix(holders_, "&&", kir::var(vars_.live)) : holders_);
  finishers.splice(finish_);
  finishers.splice(epi_prelude_);
  add_lane_loop(finishers, epi_);
  finishers.splice(epi_stores_);
}

KernelBody ColumnBuilder::build() {
  collect_reduces();
  collect_outputs();
  KernelBody kb;
  kb.kind = std::string(fusion::region_kind_name(info_.region.kind));
  kb.reduces = true;
  kb.block = static_cast<int>(block_);
  kb.blocks_per_sm = std::max(1, info_.target.blocks_per_sm(static_cast<int>(block_)));
  kb.work_blocks = cfg_.tiles * cfg_.split;
  kb.serial_launches = cfg_.split > 1;
  // Split: the whole SM's threads resident (4 blocks of 512 threads), so that the (tile, piece)
  // blocks run in whole waves.
  kb.fn = kernel_function(info_, kb.block, cfg_.split > 1 ? kb.blocks_per_sm : 0);
  add_header(kb.fn.head);
  kir::Block& o = kb.fn.body;
  o.splice(shared_);
  if (cfg_.split > 1) o.let_mut(split_.last);
  o.let(vars_.tx, kir::infix(thread_, "%", kir::lit(cfg_.tx)));
  o.let(vars_.ty, kir::infix(thread_, "/", kir::lit(cfg_.tx)));
  // The blocks' grid-stride loop over tiles t, or over (tile, piece) pairs u when split.
  kir::Block& tile = o.loop(cfg_.split > 1 ? vars_.u : vars_.t, kir::block_index(),
                            kir::lit(cfg_.tiles * cfg_.split), kir::grid_blocks());
  add_tile_start(tile);
  add_accumulation(tile);
  tile.comment("combine the {} partial results of each column", cfg_.ty);
  add_block_combine(tile);
  if (cfg_.split > 1) add_split_combine(tile);
  add_finish(tile);
  return kb;
}

// Columns per thread and access: 16 bytes of the narrowest buffer, as everywhere, except for
// online softmax pairs, whose every element costs a precise exp and a rescale: 4 columns at most,
// so that a 2-byte input spreads its exps over twice the threads (measured on the H200: bf16
// column softmax statistics over [8192, 8192], 0.193 ms with 8 columns per thread, 0.081 ms
// with 4; f32 unchanged at 0.093 ms).
int column_vector(const RegionInfo& info, const ReduceSpace& space, const CodegenOptions& options) {
  const int v = vector_width(info, options.vectorize, {space.suffix});
  return space.online.empty() ? v : std::min(v, 4);
}

// Why a reduction gets no column kernel, or nothing when it does.
std::optional<std::string> column_refusal(const RegionInfo& info, const CodegenOptions& options) {
  const fusion::RegionKind kind = info.region.kind;
  if (kind != fusion::RegionKind::reduction && kind != fusion::RegionKind::normalization) {
    return "not a reduction or normalization region";
  }
  const ReduceSpace space = analyze_reduction(info);
  if (space.layout != ReduceLayout::column) {
    return space.layout == ReduceLayout::row
               ? "the reduced axes are the trailing ones"
               : "the reduced axes are not one block of leading or middle axes";
  }
  if (space.passes > 1) return fmt::format("its reductions take {} passes", space.passes);
  if (std::any_of(space.outputs.begin(), space.outputs.end(),
                  [](const ReduceOutput& o) { return o.full && o.pass != 1; })) {
    return "an output of every element reads a reduced value (a second pass)";
  }
  if (!space.welford.empty()) return "it accumulates a mean and a variance together";
  // A column kernel's parallelism is its tiles, or its tiles times the pieces of split
  // columns. With a handful of tiles and long columns that cannot be split, one block would
  // stream most of the tensor: a row-style kernel (strided, but split over blocks) does better.
  constexpr int64_t kFewTiles = 16;
  constexpr int64_t kLongColumn = 65536;
  const ColumnParams cfg = column_config(info, space, column_vector(info, space, options));
  if (cfg.split == 1 && cfg.tiles < kFewTiles && space.length >= kLongColumn) {
    return fmt::format(
        "{} tile(s) of columns of {} elements, which do not split: a row-style "
        "kernel splits them over blocks",
        cfg.tiles, space.length);
  }
  return std::nullopt;
}

// Single-pass reductions over leading or middle axes.
class ColumnScheduler final : public Scheduler {
 public:
  std::string_view name() const override { return "column"; }
  std::optional<std::string> refusal(const RegionInfo& info,
                                     const CodegenOptions& options) const override {
    return column_refusal(info, options);
  }
  ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const override {
    // Dynamic kernels: reductions over trailing axes only (the row kernel's).
    if (info.dynamic()) throw NotSizeIndependent("the reduced axes are not the trailing ones");
    const ReduceSpace space = analyze_reduction(info);
    return column_config(info, space, column_vector(info, space, options));
  }
  KernelBody build(const RegionInfo& info, const CodegenOptions&,
                   const ScheduleParams& params) const override {
    return ColumnBuilder(info, analyze_reduction(info), std::get<ColumnParams>(params)).build();
  }
};

}  // namespace

const Scheduler& column_scheduler() {
  static const ColumnScheduler scheduler;
  return scheduler;
}

}  // namespace fusejit::templates
