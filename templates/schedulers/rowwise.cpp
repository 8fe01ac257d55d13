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
// The kernel is kernel IR (templates/kir/kir.h), built piece by piece (row prelude, cache, passes,
// row outputs) and then assembled; a loop variable (row, s, k) is offered with let_if_read and
// kept by the declaration pass (kir::place_declarations) only where the statements inside read
// it.
#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/schedulers/reduction.h"
#include "templates/schedulers/registry.h"
#include "templates/schedulers/row_schedule.h"

namespace fusejit::templates {

namespace {

// static_cast<type>(value)
kir::ExprP static_cast_to(std::string_view type, kir::ExprP value) {
  return kir::call(fmt::format("static_cast<{}>", type), {std::move(value)});
}

// `a && b`, or b when there is no a.
kir::ExprP conjoin(kir::ExprP a, kir::ExprP b) {
  return a ? kir::infix(std::move(a), "&&", std::move(b)) : b;
}

class RowwiseBuilder {
 public:
  // `cache_entries`: the most arrays the register cache may hold (by default as many as the
  // cache budget allows at cfg's vectors per thread).
  RowwiseBuilder(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                 std::set<ir::NodeId> cacheable, int64_t cache_entries = -1)
      : info_(info),
        space_(space),
        cfg_(cfg),
        cacheable_(std::move(cacheable)),
        values_(
            info, [this](ir::NodeId id, const Index& at, ValueScope&) { return leaf(id, at); },
            [this](ir::NodeId id, const Index& at) { return intercept(id, at); }) {
    row_ = make_root("row", space.rows);
    k_ = make_lane_root("k", "k0", space.length, cfg.v);
    const auto group_of = [&](size_t a) { return is_reduced_axis(space, a) ? size_t{1} : size_t{0}; };
    x_ = grouped_index(space.shape, {row_, k_}, group_of);
    first_ = grouped_index(space.shape, {row_, make_zero(space.length)}, group_of);
    row_digits_ = {Digit{row_, 1, space.rows}};
    if (cfg.staged) {  // the row the block takes next, whose inputs the cache fill stages
      x_next_ = grouped_index(space.shape, {make_root("fj_next", space.rows), k_}, group_of);
      x_key_ = index_key(x_);
    }
    row_key_ = index_key(Index{{space.rows}, {row_digits_}});
    if (cfg.looped) {
      // The rows are a static coefficient times the symbols' values here (odd primes, or for
      // an aligned kernel the alignment times odd primes), so divisibility by the block's rows
      // holds at every size the kernel serves when it holds here. The row loop bounds k0.
      guard_row_ = space.rows % cfg.rows_per_block != 0;
      // A register path holds at most `piece` elements: each vector is checked against the
      // length given at launch.
      guard_end_ = cfg.bounded;
    } else {
      // (A dynamic kernel's rows are rows_per_outer * outer: the guard holds for every outer.)
      guard_row_ = info.per_outer(space.rows, "the reduction's rows") % cfg.rows_per_block != 0;
      guard_k_ = cfg.chunks * cfg.group * cfg.v != cfg.piece;
      guard_end_ = cfg.pieces() * cfg.piece != space.length;  // the last cluster piece is short
    }
    // Rows whose last vectors some threads do not have: a register path's at every length
    // short of its bound, a static row's where its threads' vectors overrun it.
    predicated_ = cfg.bounded || (guard_k_ && cfg.pieces() == 1);
    // One exchange per row: its slots alternate by row (reduction.h, add_cluster_exchange).
    if (cfg.cluster > 1 && space.passes == 1) phase_ = kir::var("fj_phase");
    slot_ = cfg.v > 1 ? kir::add(kir::mul(kir::var("c"), kir::lit(cfg.v)), kir::var("j"))
                      : kir::var("c");
    max_cache_entries_ =
        cfg.cached() && cfg.chunks > 0 ? kCacheBudget / (cfg.chunks * cfg.v) : 0;
    if (cache_entries >= 0) max_cache_entries_ = std::min(max_cache_entries_, cache_entries);
  }

  KernelBody build();
  int vector_accesses() const { return vector_accesses_; }
  // Whether the register cache holds anything (after build).
  bool caches() const { return !cache_.empty(); }

 private:
  // One loop over the thread's vectors of the row: per vector, the prelude (vector and hoisted
  // loads), the body (per lane, inside the j loop when V > 1) and the stores.
  struct Pass {
    kir::Block prelude, body, stores;
    ValueScope chunk, lane;
    bool loads = false;  // it reads a region input along the row (not through the cache)
  };
  struct CacheEntry {
    ir::NodeId id;
    Index at;
    std::string array;
  };
  // A region input staged in shared memory one row ahead (RowConfig::staged): its slots, one
  // vector per thread and chunk, at `offset` bytes into the kernel's dynamic shared memory.
  struct Stage {
    ir::NodeId id;
    std::string buffer;
    std::string storage;
    int64_t offset = 0;
  };

  std::unique_ptr<Pass> new_pass() {
    auto p = std::make_unique<Pass>();
    p->chunk = ValueScope{&p->prelude, &row_scope_, {}};
    p->lane = ValueScope{&p->body, &p->chunk, {}};
    return p;
  }
  kir::ExprP leaf(ir::NodeId id, const Index& at);
  kir::ExprP row_load(ir::NodeId id, const Index& at);
  kir::ExprP stage_of(ir::NodeId id, const Index& at);
  kir::Block stage_copies(const Index& at);
  kir::ExprP intercept(ir::NodeId id, const Index& at);
  kir::Block& add_pass(kir::Block& main, int pass);
  void add_group_reduce(kir::Block& main, const std::vector<ir::NodeId>& here) const;
  kir::Block row_outputs();
  kir::Block cache_fill();
  KernelBody kernel_body() const;
  void add_header(kir::Function& fn, std::string_view kind) const;
  void add_group_index(kir::Block& body) const;
  void add_row_loop(kir::Block& out, const kir::Block& row_body) const;
  void add_cluster_row_loop(kir::Block& out, const kir::Block& row_body) const;
  std::vector<ClusterPartial> cluster_partials(const std::vector<ir::NodeId>& here) const;
  void add_accumulate(kir::Block& main, Pass& p, ir::NodeId r);
  void add_deviations(kir::Block& main, const std::vector<ir::NodeId>& means);
  Accumulator accumulator(ir::NodeId r) const;
  kir::ExprP welford_shift(ir::NodeId r);
  kir::ExprP predicated(kir::ExprP update, kir::ExprP unchanged) const;
  bool cached(ir::NodeId id) const;
  void store_full(Pass& p, const ReduceOutput& out);
  void add_chunk_loop(kir::Block& out, const Pass& p) const;
  void add_strided_loop(kir::Block& out, const Pass& p) const;
  // The bound of the row loop: the rows (per outer unit times fj_outer, or a runtime extent).
  kir::ExprP rows_bound() const;
  SplitPartials split_partials() const;

  const RegionInfo& info_;
  const ReduceSpace& space_;
  RowConfig cfg_;
  std::set<ir::NodeId> cacheable_;
  Values values_;
  BasePtr row_, k_;
  Index x_;
  Index first_;  // the row's first element
  Index x_next_;    // staged rows: the element of the row the block takes next
  IndexKey x_key_;  // staged rows: x_'s key, which a staged input's index has
  Digits row_digits_;
  IndexKey row_key_;  // the element `row` of a reduce result: where its value may be read
  bool guard_row_ = false, guard_k_ = false, guard_end_ = false;
  bool predicated_ = false;   // the passes predicate their updates and stores (see predicated)
  bool passes_load_ = false;  // a pass reads a region input along the row (Pass::loads)
  kir::ExprP slot_;  // the element's place in a register cache
  int64_t max_cache_entries_ = 0;

  kir::Block row_prelude_;
  ValueScope row_scope_{&row_prelude_, nullptr, {}};
  Pass* current_ = nullptr;
  std::map<ir::NodeId, kir::ExprP> finished_;
  std::vector<CacheEntry> cache_;
  std::vector<Stage> stages_;
  int64_t stage_bytes_ = 0;
  // The means of Welford pairs whose operand the register cache holds: their pass counts and
  // sums, and a second sweep over the cache adds the squared deviations (add_deviations).
  std::vector<ir::NodeId> exact_;
  // Per streamed Welford mean: the row's first value of its operand, which every value is
  // taken relative to (welford_shift).
  std::map<ir::NodeId, kir::ExprP> shift_;
  std::map<ValueKey, std::string> cache_index_;
  bool filling_cache_ = false;
  int vector_accesses_ = 0;
  kir::Block cluster_slots_;  // the __shared__ slots of the cluster exchanges
  kir::ExprP phase_;          // which of a slot's two halves a row uses (one exchange per row)
};

// A region input at `at`: loaded once per row when the same for the whole row; else per
// vector, one 16-byte load when it moves by one element per lane, one scalar when it is the
// same for every lane, a load per lane otherwise.
kir::ExprP RowwiseBuilder::leaf(ir::NodeId id, const Index& at) {
  if (!uses(at, k_)) return row_load(id, at);
  const DTypeCode& code = dtype_code(info_.node(id).dtype);
  const std::string arith(code.arith);
  Pass& p = *current_;
  const Lane l = lane(at);
  if (l == Lane::unit && cfg_.v > 1) {
    const ValueKey key = value_key(id, at, Held::vector);
    kir::ExprP array = p.chunk.find(key);
    if (!array) {
      array = p.prelude.array(std::string(code.storage), values_.fresh("r"), cfg_.v);
      const kir::ExprP stage = filling_cache_ ? stage_of(id, at) : nullptr;
      const kir::ExprP src =
          stage ? kir::add(stage, kir::var("fj_slot"))
                : kir::add(kir::var(info_.input_param(id)), kir::offset(at, true));
      p.prelude.eval(kir::load_vec(array, src));
      p.loads = true;
      p.chunk.memo[key] = array;
      ++vector_accesses_;
    }
    return p.body.let(arith, values_.fresh("x"),
                      apply(code.load, kir::subscript(array, kir::var("j"))));
  }
  if (l == Lane::none) {  // the same for every lane of the vector
    const ValueKey key = value_key(id, at);
    if (kir::ExprP hit = p.chunk.find(key)) return hit;
    kir::ExprP var =
        p.prelude.let(arith, values_.fresh("h"), load(info_, id, kir::offset(at, true)));
    p.loads = true;
    p.chunk.memo[key] = var;
    return var;
  }
  p.loads = true;
  return p.body.let(arith, values_.fresh("x"), load(info_, id, kir::offset(at)));
}

// A leaf that is the same for the whole row: loaded once per row (0 on a row past the end).
kir::ExprP RowwiseBuilder::row_load(ir::NodeId id, const Index& at) {
  const ValueKey key = value_key(id, at);
  if (kir::ExprP hit = row_scope_.find(key)) return hit;
  const std::string arith(dtype_code(info_.node(id).dtype).arith);
  kir::ExprP value = load(info_, id, kir::offset(at));
  if (guard_row_) {  // live ? value : 0
    const kir::ExprP zero = static_cast_to(arith, kir::lit(0));
    value = kir::select(kir::var("live"), value, zero);
  }
  kir::ExprP var = row_prelude_.let(arith, values_.fresh("h"), value);
  row_scope_.memo[key] = var;
  return var;
}

// The shared-memory slots of input `id` when the cache fill reads it at the row's elements and
// its rows are staged (RowConfig::staged), else nothing (it is read from global memory). An
// input is staged while the stages fit the shared memory that one block per SM leaves.
kir::ExprP RowwiseBuilder::stage_of(ir::NodeId id, const Index& at) {
  if (!cfg_.staged || !(index_key(at) == x_key_)) return nullptr;
  for (const Stage& s : stages_) {
    if (s.id == id) return kir::var(s.buffer);
  }
  const ir::Node& n = info_.node(id);
  const int64_t bytes = cfg_.chunks * cfg_.group * cfg_.v * dtype_size(n.dtype);
  constexpr int64_t kKeptShared = 16 * 1024;  // the block's reductions, the system's reserve
  if (stage_bytes_ + bytes > info_.target.shared_per_sm - kKeptShared) return nullptr;
  stages_.push_back({id, fmt::format("fj_stage{}", stages_.size()),
                     std::string(dtype_code(n.dtype).storage), stage_bytes_});
  stage_bytes_ += bytes;
  return kir::var(stages_.back().buffer);
}

// The copies that stage the row at `at` (this row, or the next one the block takes): per staged
// input, each vector of the cache fill into its slot, under the fill's own loop and guards.
kir::Block RowwiseBuilder::stage_copies(const Index& at) {
  auto p = new_pass();
  for (const Stage& s : stages_) {
    const kir::ExprP src = kir::add(kir::var(info_.input_param(s.id)), kir::offset(at, true));
    p->prelude.eval(kir::call(fmt::format("fj_stage_vec<{}, {}>", s.storage, cfg_.v),
                              {kir::add(kir::var(s.buffer), kir::var("fj_slot")), src}));
  }
  kir::Block out;
  filling_cache_ = true;
  add_chunk_loop(out, *p);
  filling_cache_ = false;
  return out;
}

kir::ExprP RowwiseBuilder::intercept(ir::NodeId id, const Index& at) {
  if (space_.depth.count(id) != 0) {
    const auto it = finished_.find(id);
    if (it == finished_.end() || !(index_key(at) == row_key_)) {
      throw InternalError(fmt::format("%{} is read at index {} before or outside its row ({})", id,
                                      offset(at), offset(row_digits_)));
    }
    return it->second;
  }
  if (filling_cache_ || cacheable_.count(id) == 0 || !uses(at, row_) || !uses(at, k_)) {
    return nullptr;
  }
  const ValueKey key = value_key(id, at);
  auto it = cache_index_.find(key);
  if (it == cache_index_.end()) {
    if (static_cast<int64_t>(cache_.size()) >= max_cache_entries_) return nullptr;
    const std::string array = values_.fresh("cache");
    cache_.push_back({id, at, array});
    it = cache_index_.emplace(key, array).first;
  }
  return kir::subscript(kir::var(it->second), slot_);
}

// The accumulator of reduce r and, in pass p, the statement adding one element to it. The
// maximum of an online softmax pair (ReduceSpace::online) accumulates (max, sum) together in an
// fj_max_sum, the mean of a Welford pair (ReduceSpace::welford) (count, mean, M2) in an
// fj_welford; the sum and the variance have no accumulator of their own. A Welford mean whose
// operand is in the register cache is accumulated exactly instead of by Welford's update:
// this pass counts and adds up the values, add_deviations then adds their squared deviations.
void RowwiseBuilder::add_accumulate(kir::Block& main, Pass& p, ir::NodeId r) {
  if (space_.online.count(r) != 0 || space_.welford.count(r) != 0) return;
  const ir::Node& n = info_.node(r);
  const ir::Node& x = info_.node(n.inputs[0]);
  kir::ExprP v =
      convert_to(accumulator_dtype(n), x.dtype, values_.value(n.inputs[0], x_, p.lane));
  const Accumulator acc = accumulator(r);
  const kir::ExprP a = main.let_mut(acc.type, info_.named("a", r), kir::lit(acc.identity));
  std::string functor = acc.functor;
  if (space_.pairing(r) == Pairing::welford) {
    if (cached(n.inputs[0])) {
      functor = "fj_op_count_sum";
      exact_.push_back(r);
    } else {
      v = kir::infix(v, "-", welford_shift(r));
    }
  }
  if (predicated_ && space_.pairing(r) == Pairing::none) {
    // (A vector past the end adds the identity: see predicated.)
    p.body.assign(a, kir::call(functor + "()",
                               {a, kir::select(kir::var("fj_in"), v, kir::lit(acc.identity))}));
    return;
  }
  p.body.assign(a, predicated(kir::call(functor + "()", {a, v}), a));
}

// Rows whose last vectors some threads do not have (predicated_: a register path, or a static
// row its threads' vectors overrun) compute every vector in their passes, and only the updates
// and stores are predicated on fj_in (add_chunk_loop): with the passes free of branches, the
// compiler keeps what one pass computed for the next. A plain reduction adds its identity for a
// vector past the end rather than keeping its accumulator: the compiler turns a select between
// the updated and the old accumulator back into a branch around the element's computation.
// (The exponentials of a softmax: guarding whole passes, kernels computed them twice, and a
// path ran 1.10x the static kernel's time at S=12,288 on an H200, with the same layout,
// registers and residency; the static kernel at S=10,000, 3 vectors of 8 on 512 threads, ran
// 1.3x the path that serves it.)
kir::ExprP RowwiseBuilder::predicated(kir::ExprP update, kir::ExprP unchanged) const {
  return predicated_ ? kir::select(kir::var("fj_in"), std::move(update), std::move(unchanged))
                     : update;
}

// The shift of a streamed Welford mean r: its operand at the row's first element, loaded once
// per row. Partial means of the values less the shift stay near 0 when the row's mean is large
// against its spread, where f32 would round partial means of the values themselves to the
// mean's precision (x = 1e4 + N(0, 1): 2^-10), and Chan's update would carry that error into M2
// (a relative 1e-5 to 1e-4 there). Rows held in registers go without: the shift's register is
// the one their kernels do not have (ptxas spills f32 layer norms of 4096 and 16384 with it).
kir::ExprP RowwiseBuilder::welford_shift(ir::NodeId r) {
  if (const auto it = shift_.find(r); it != shift_.end()) return it->second;
  const ir::NodeId x = info_.node(r).inputs[0];
  const kir::ExprP k = values_.value(x, first_, row_scope_);
  shift_[r] = k;
  return k;
}

// The Welford means of this pass held exactly (exact_): their sums turned into means, and one
// more sweep over the register cache adding each value's squared deviation from its mean.
void RowwiseBuilder::add_deviations(kir::Block& main, const std::vector<ir::NodeId>& means) {
  if (means.empty()) return;
  auto p = new_pass();
  current_ = p.get();
  for (ir::NodeId r : means) {
    const kir::ExprP a = kir::var(info_.named("a", r));
    main.assign(a, kir::call("fj_welford_center", {a}));
    const ir::NodeId x = info_.node(r).inputs[0];
    p->body.assign(
        a, predicated(kir::call("fj_op_deviation()", {a, values_.value(x, x_, p->lane)}), a));
  }
  main.comment("squared deviations from the thread's mean");
  add_chunk_loop(main, *p);
}

Accumulator RowwiseBuilder::accumulator(ir::NodeId r) const {
  return accumulator_of(info_, r, space_.pairing(r));
}

// True when the register cache holds `id` at the row's elements (so that reading it again
// costs no memory access).
bool RowwiseBuilder::cached(ir::NodeId id) const {
  return cache_index_.count(value_key(id, x_)) != 0;
}

void RowwiseBuilder::store_full(Pass& p, const ReduceOutput& out) {
  const ir::Node& n = info_.node(out.id);
  const DTypeCode& code = dtype_code(n.dtype);
  const Index at = index_from_digits(flatten(x_), n.shape);
  const kir::ExprP value = values_.value(out.id, at, p.lane);
  const kir::ExprP dst = kir::var(fmt::format("out{}", out.position));
  if (cfg_.v > 1 && lane(at) == Lane::unit) {
    vector_store(p.prelude, p.body, p.stores, n.dtype, fmt::format("s{}", out.position),
                 kir::add(dst, kir::offset(at, true)), cfg_.v, value);
    ++vector_accesses_;
  } else {
    kir::Block& body = predicated_ ? p.body.branch(kir::var("fj_in")) : p.body;
    body.assign(kir::subscript(dst, kir::offset(at)), apply(code.store, value));
  }
}

// The loop over the thread's C vectors of the row (of its piece, when rows are split), around
// the pass's statements; k0 and k are declared where the statements read them (or the bound
// check needs k0).
void RowwiseBuilder::add_chunk_loop(kir::Block& out, const Pass& p) const {
  const std::string idx(info_.index_type());
  if (cfg_.looped && !cfg_.bounded) {
    add_strided_loop(out, p);
    return;
  }
  // Rows whose passes are predicated (see predicated): in the fill of the register cache, a
  // vector past the end loads the row's last vector instead, so that no branch separates one
  // vector's load from the next, and the passes compute every vector. A pass that reads a
  // region input along the row besides the cache (a norm's weight) keeps a branch around each
  // vector instead: computed without one, on clamped addresses, RMS norm paths over rows of 256
  // to 8,192 ran 1.3-1.6x slower on an H200 (ptxas spilled them under the paths' launch
  // bounds). A static row whose passes load keeps the branch in its fill too (the clamped fill
  // took an f32 RMS norm over rows of 1,000 from 38 to 54 registers). A dead row's thread
  // group (uniform) skips the whole fill.
  const bool clamp = filling_cache_ && (cfg_.bounded || (predicated_ && !passes_load_));
  const bool predicate = predicated_ && !filling_cache_;
  kir::Block& host = clamp && guard_row_ ? out.branch(kir::var("live")) : out;
  kir::Block& chunk = host.loop("int", "c", kir::lit(0), kir::lit(cfg_.chunks), nullptr,
                                cfg_.chunks <= kMaxUnrolledChunks ? 1 : 4);
  // The position in the row's piece (the whole row unless rows are split).
  const kir::ExprP c = static_cast_to(idx, kir::var("c"));
  const kir::ExprP within =
      cfg_.group > 1
          ? kir::mul(kir::group(kir::add(kir::mul(c, kir::lit(cfg_.group)), kir::var("g"))),
                     kir::lit(cfg_.v))
          : kir::mul(c, kir::lit(cfg_.v));
  const kir::ExprP k0 = kir::var("k0");
  // (A vector within every row the code sees: the unrolled loop folds this.)
  const kir::ExprP whole = kir::lt(kir::var("c"), kir::lit(cfg_.full_chunks));
  const bool pieces = cfg_.pieces() > 1;
  // k0, the thread's vector start: declared for the guards below (split rows for the guard on
  // `within` too, cluster rows only where it is read), elsewhere kept where read.
  const bool end_check = guard_end_ && !cfg_.bounded;
  const bool k_check = guard_k_ && !clamp && !predicate;
  kir::ExprP at =
      pieces ? kir::add(kir::mul(kir::var("s"), kir::lit(cfg_.piece)), within) : within;
  if (clamp) {
    // (The vector width divides the length at every size the kernel serves.)
    const kir::ExprP last =
        cfg_.bounded
            ? static_cast_to(idx, kir::infix(kir::extent(space_.length), "-", kir::lit(cfg_.v)))
            : kir::lit(space_.length - cfg_.v);
    at = kir::call("min", {at, last});
    if (cfg_.full_chunks > 0) at = kir::select(whole, within, at);
  }
  const bool guarded = (k_check && cfg_.cluster == 1) || end_check;
  if (guarded) {
    chunk.let(idx, "k0", at);
  } else {
    chunk.let_if_read(idx, "k0", at);
  }
  // A staged input's slot: the thread's vector of the row, never clamped, so that no two
  // threads share a slot (RowConfig::staged).
  chunk.let_if_read(idx, "fj_slot", within);
  kir::ExprP cond;  // (none in a clamped fill)
  if (predicate) {
    // (A dead row's thread group is uniform: its values are computed, never kept.)
    kir::ExprP in =
        kir::lt(within, cfg_.bounded ? kir::extent(space_.length) : kir::lit(cfg_.piece));
    if (cfg_.full_chunks > 0) in = kir::group(kir::infix(whole, "||", in));
    if (guard_row_) in = conjoin(kir::var("live"), in);
    chunk.let("bool", "fj_in", in);
    if (p.loads) cond = kir::var("fj_in");
  } else if (guard_row_ && !clamp) {
    cond = kir::var("live");
  }
  if (k_check) cond = conjoin(cond, kir::lt(pieces ? within : k0, kir::lit(cfg_.piece)));
  if (end_check) cond = conjoin(cond, kir::lt(k0, kir::lit(space_.length)));
  kir::Block& live = cond ? chunk.branch(cond) : chunk;
  live.splice(p.prelude);
  // (No lane loop around nothing: the copies that stage a row have no per-lane statements.)
  kir::Block& lanes = cfg_.v > 1 && !p.body.empty()
                          ? live.loop("int", "j", kir::lit(0), kir::lit(cfg_.v), nullptr, 1)
                          : live;
  lanes.let_if_read(idx, "k", cfg_.v > 1 ? kir::add(k0, kir::var("j")) : k0);
  lanes.splice(p.body);
  (predicate && !p.loads && !p.stores.empty() ? live.branch(kir::var("fj_in")) : live)
      .splice(p.stores);
}

// A row length given at launch: thread g's vectors start at k0 = (g + G * c) * V, for every
// c that keeps k0 below the length (the loop unrolled by 4 so that loads overlap).
void RowwiseBuilder::add_strided_loop(kir::Block& out, const Pass& p) const {
  const std::string idx(info_.index_type());
  kir::ExprP first = kir::lit(0);
  if (cfg_.group > 1) {
    first = cfg_.v > 1 ? kir::mul(kir::var("g"), kir::lit(cfg_.v)) : kir::var("g");
  }
  kir::Block& chunk = out.loop(idx, "k0", first, kir::extent(space_.length),
                               kir::lit(cfg_.group * cfg_.v), 4);
  kir::Block& live = guard_row_ ? chunk.branch(kir::var("live")) : chunk;
  live.splice(p.prelude);
  kir::Block& lanes =
      cfg_.v > 1 ? live.loop("int", "j", kir::lit(0), kir::lit(cfg_.v), nullptr, 1) : live;
  lanes.let_if_read(idx, "k",
                    cfg_.v > 1 ? kir::add(kir::var("k0"), kir::var("j")) : kir::var("k0"));
  lanes.splice(p.body);
  live.splice(p.stores);
}

// Split rows (reduction.h): the partials of row `row`, piece `s`, one value per block; thread 0
// publishes them, and in the last block folds all S of them in order.
SplitPartials RowwiseBuilder::split_partials() const {
  SplitPartials split;
  split.pieces = cfg_.split;
  split.groups = space_.rows;
  split.group = kir::var("row");
  split.piece = kir::var("s");
  for (ir::NodeId r : space_.accumulated()) {
    if (space_.pairing(r) != Pairing::none) split.paired[r] = space_.pairing(r);
  }
  return split;
}

// Pass `pass` over the row's elements, added to `main`: the reductions of that depth
// accumulated and reduced over the thread group, and the full-size outputs that need exactly
// the reductions before it. Returns the block where the row goes on: `main`, or with split
// rows the last block's combination, where the row is finished.
kir::Block& RowwiseBuilder::add_pass(kir::Block& main, int pass) {
  auto p = new_pass();
  current_ = p.get();
  std::vector<ir::NodeId> here;
  for (ir::NodeId r : space_.reduces) {
    if (space_.depth.at(r) == pass) here.push_back(r);
  }
  bool writes = false;
  for (const ReduceOutput& out : space_.outputs) writes = writes || (out.full && out.pass == pass);
  if (here.empty() && !writes) return main;
  for (ir::NodeId r : here) add_accumulate(main, *p, r);
  for (const ReduceOutput& out : space_.outputs) {
    if (out.full && out.pass == pass) store_full(*p, out);
  }
  main.comment("pass {}", pass);
  add_chunk_loop(main, *p);
  passes_load_ = passes_load_ || p->loads;
  std::vector<ir::NodeId> exact;
  for (ir::NodeId r : here) {
    if (std::find(exact_.begin(), exact_.end(), r) != exact_.end()) exact.push_back(r);
  }
  add_deviations(main, exact);
  add_group_reduce(main, here);
  if (cfg_.cluster > 1 && !here.empty()) {
    add_cluster_exchange(cluster_slots_, main, cluster_partials(here), cfg_.cluster, phase_);
  }
  kir::Block* row = &main;
  if (cfg_.split > 1) {
    const SplitPartials split = split_partials();
    std::vector<ir::NodeId> kept;  // the reductions with accumulators of their own
    for (ir::NodeId r : space_.accumulated()) {
      if (space_.depth.at(r) == pass) kept.push_back(r);
    }
    row = &add_split_arrival(main, info_, kept, split);
    add_split_fold(*row, info_, kept, split, kir::lit(0), 1);
    add_split_reset(*row, split);
  }
  const auto acc = [&](ir::NodeId id) { return kir::var(info_.named("a", id)); };
  for (ir::NodeId r : here) {
    const ir::Node& n = info_.node(r);
    kir::ExprP value = reduced_value(info_, space_, r, space_.length, acc);
    if (const auto shift = shift_.find(r); shift != shift_.end()) {
      value = kir::add(shift->second, value);
    }
    // A Welford mean that only its variance read (var) is declared only where read.
    const bool mean = std::any_of(space_.welford.begin(), space_.welford.end(),
                                  [&](const auto& pair) { return pair.second == r; });
    const std::string type(dtype_code(n.dtype).arith), name = values_.fresh(info_.named("v", r));
    const std::string op(ir::op_name(n.op));
    finished_[r] = mean ? row->let_if_read(type, name, value, op) : row->let(type, name, value, op);
  }
  return *row;
}

// Reduces the thread's accumulators over its group: warp shuffles, or through shared memory
// when the group is the block.
void RowwiseBuilder::add_group_reduce(kir::Block& main, const std::vector<ir::NodeId>& here) const {
  for (ir::NodeId r : here) {
    // (An online sum is reduced with its maximum, a Welford variance with its mean.)
    if (space_.online.count(r) != 0 || space_.welford.count(r) != 0) continue;
    const kir::ExprP a = kir::var(info_.named("a", r));
    const kir::ExprP op = kir::call(accumulator(r).functor, {});
    if (cfg_.group > 32) {
      main.assign(a, kir::block_reduce(a, op, cfg_.block));
    } else if (cfg_.group > 1) {
      main.assign(a, kir::warp_reduce(a, op, 1, cfg_.group));
    }
  }
}

// What the blocks of a cluster exchange after a pass: each reduction's block total (an online
// softmax pair as one value, under its maximum; a Welford pair under its mean).
std::vector<ClusterPartial> RowwiseBuilder::cluster_partials(
    const std::vector<ir::NodeId>& here) const {
  std::vector<ClusterPartial> out;
  for (ir::NodeId r : here) {
    if (space_.online.count(r) != 0 || space_.welford.count(r) != 0) continue;
    const Accumulator acc = accumulator(r);
    out.push_back(
        {kir::var(info_.named("a", r)), acc.type, acc.functor, info_.named("fj_exchange", r)});
  }
  return out;
}

// The outputs with one value per row (the reductions and their epilogue).
kir::Block RowwiseBuilder::row_outputs() {
  kir::Block out;
  ValueScope scope{&out, &row_scope_, {}};
  for (const ReduceOutput& o : space_.outputs) {
    if (o.full) continue;
    const ir::Node& n = info_.node(o.id);
    const Index at = index_from_digits(row_digits_, n.shape);
    const kir::ExprP value = values_.value(o.id, at, scope);
    out.assign(kir::subscript(kir::var(fmt::format("out{}", o.position)), kir::offset(at)),
               apply(dtype_code(n.dtype).store, value));
  }
  return out;
}

// The register cache, filled before pass 1 with what the passes asked for.
kir::Block RowwiseBuilder::cache_fill() {
  kir::Block cache;
  if (cache_.empty()) return cache;
  auto p = new_pass();
  current_ = p.get();
  filling_cache_ = true;
  cache.comment("register cache: the row's values that several passes read");
  for (const CacheEntry& e : cache_) {
    const kir::ExprP array = cache.array(std::string(dtype_code(info_.node(e.id).dtype).arith),
                                         e.array, cfg_.chunks * cfg_.v);
    p->body.assign(kir::subscript(array, slot_), values_.value(e.id, e.at, p->lane));
  }
  add_chunk_loop(cache, *p);
  filling_cache_ = false;
  if (stages_.empty()) return cache;
  // Staged rows: the fill reads this row's inputs from shared memory, where the previous row's
  // fill had them copied (a block's first row copies its own), and then has the next row's
  // copied, which land while this row's passes run.
  const std::string idx(info_.index_type());
  // (Clusters take rows by cluster: every block of one takes the same rows.)
  const kir::ExprP first =
      static_cast_to(idx, cfg_.cluster > 1 ? kir::call("fj_cluster_id", {}) : kir::block_index());
  const kir::ExprP stride = static_cast_to(
      idx, cfg_.cluster > 1 ? kir::call("fj_cluster_count", {}) : kir::grid_blocks());
  kir::Block out;
  out.comment("the row's inputs, staged in shared memory by the block's previous row");
  out.branch(kir::infix(kir::var("row"), "==", first)).splice(stage_copies(x_));
  out.eval(kir::call("fj_stage_wait", {}));
  out.splice(cache);
  out.comment("the next row's inputs, copied while this row's passes run");
  out.let(idx, "fj_next", kir::add(kir::var("row"), stride));
  out.branch(kir::lt(kir::var("fj_next"), rows_bound())).splice(stage_copies(x_next_));
  return out;
}

KernelBody RowwiseBuilder::kernel_body() const {
  KernelBody kb;
  kb.kind = std::string(fusion::region_kind_name(info_.region.kind));
  kb.reduces = true;
  kb.welford = !space_.welford.empty();
  kb.block = static_cast<int>(cfg_.block);
  kb.blocks_per_sm = std::max(1, info_.target.blocks_per_sm(static_cast<int>(cfg_.block)));
  kb.work_blocks = ceil_div(space_.rows, cfg_.rows_per_block) * cfg_.pieces();
  if (cfg_.looped) {
    // The grid follows the rows when they are a fixed number per outer unit, else the
    // elements: a block per vector of each thread, so that short rows (attention scores at a
    // sequence of 128, a warp's row in one step) still get a warp each and fill the device;
    // Kernel::waves caps the grid of long rows, and blocks past the rows exit at once. (At 8
    // vectors per block's thread, the scores softmax at B=64 S=128 ran 256 blocks, 0.39 waves
    // of an H200, and took 3.2x the static kernel's time.)
    const auto per_outer = [&](int64_t count) {
      return count % info_.outer == 0 && !info_.symbolic(count / info_.outer);
    };
    const int64_t elements = space_.rows * space_.length;
    if (per_outer(space_.rows)) {
      kb.items_per_outer = space_.rows / info_.outer;
      kb.items_per_block = cfg_.rows_per_block;
    } else if (per_outer(elements)) {
      kb.items_per_outer = elements / info_.outer;
      kb.items_per_block = cfg_.block * cfg_.v;
      // A register path's blocks each take rows_per_block rows of at least `shortest`
      // elements: no more blocks than rows, at its shortest rows. (A block per vector of each
      // thread gave the 16-thread path at S=512 four times the blocks that had rows.)
      // The launcher, given the row length, sizes it by rows (Kernel::rows_per_block).
      if (cfg_.bounded) {
        kb.items_per_block = std::max(kb.items_per_block, cfg_.rows_per_block * cfg_.shortest);
        kb.rows_per_block = cfg_.rows_per_block;
      }
    } else {
      throw NotSizeIndependent(fmt::format(
          "neither the reduction's rows ({}) nor its elements ({}) are a fixed number per outer "
          "unit ({})",
          space_.rows, elements, info_.outer));
    }
  } else if (cfg_.pieces() == 1) {
    kb.items_per_outer = info_.per_outer(space_.rows, "the reduction's rows");
    kb.items_per_block = cfg_.rows_per_block;
  }
  kb.serial_launches = cfg_.split > 1;
  // A schedule that asks for more resident blocks than usual falls back to the usual where
  // ptxas would spill (jit::compile).
  const int usual = min_resident_blocks(info_.target, cfg_.block);
  kb.fn = kernel_function(info_, static_cast<int>(cfg_.block),
                          cfg_.min_blocks > usual ? cfg_.min_blocks : usual);
  if (cfg_.min_blocks > usual) {
    if (cfg_.fallback_blocks > usual) kb.fn.relaxed_min_blocks.push_back(cfg_.fallback_blocks);
    kb.fn.relaxed_min_blocks.push_back(usual);
  }
  kb.fn.cluster = static_cast<int>(cfg_.cluster);
  if (!stages_.empty()) {
    // One wave of the blocks that stay resident, each taking many rows: a block's first row is
    // the only one whose loads nothing overlaps.
    kb.stages = true;
    kb.shared_bytes = static_cast<int>(stage_bytes_);
    kb.blocks_per_sm = usual;
    // (Clusters keep the usual waves: how many fit at once depends on how the SMs group.)
    if (cfg_.cluster == 1) kb.waves = 1;
  }
  return kb;
}

// The comment lines, the module-scope scratch and the thread-group index.
void RowwiseBuilder::add_header(kir::Function& fn, std::string_view kind) const {
  const std::string threads =
      cfg_.cluster > 1
          ? fmt::format("{} x {} thread(s) per row (a cluster of {} blocks, {} elements each)",
                        cfg_.cluster, cfg_.group, cfg_.cluster, cfg_.piece)
          : fmt::format("{} thread(s) per row", cfg_.group);
  if (cfg_.bounded) {
    fn.head.comment(
        "{}, row-style, a register path for rows whose length is given at launch, up to {} "
        "elements: {}, {} vector(s) of {} per thread; {} pass(es) over the row{}",
        kind, cfg_.piece, threads, cfg_.chunks, cfg_.v, element_passes(space_),
        cache_.empty() ? "" : ", row cached in registers");
    add_group_index(fn.body);
    return;
  }
  if (cfg_.looped) {
    fn.head.comment(
        "{}, row-style over rows whose length is given at launch: {}, striding over the row in "
        "vectors of {}; {} pass(es) over the row, each reading it from memory",
        kind, threads, cfg_.v, element_passes(space_));
  } else {
    fn.head.comment(
        "{}, row-style: {} rows{} of {} elements; {}, {} vector(s) of {} per thread; {} pass(es) "
        "over the row{}",
        kind, info_.per_outer(space_.rows, "the reduction's rows"),
        info_.dynamic() ? " per outer unit" : "", space_.length, threads, cfg_.chunks, cfg_.v,
        element_passes(space_), cache_.empty() ? "" : ", row cached in registers");
  }
  if (cfg_.cluster > 1) {
    fn.head.comment(
        "the blocks of a cluster exchange their partial statistics through distributed shared "
        "memory");
  }
  for (const auto& [variance, mean] : space_.welford) {
    const bool exact = std::find(exact_.begin(), exact_.end(), mean) != exact_.end();
    fn.head.comment(
        "mean {} and variance {} in one pass: (count, mean, M2) per thread ({}), then "
        "Chan's update between partials (fj_welford)",
        info_.named("v", mean), info_.named("v", variance),
        exact ? "exact, from the register cache"
              : "Welford's update, relative to the row's first value");
  }
  if (!stages_.empty()) {
    fn.head.comment(
        "{} input(s) staged in shared memory one row ahead (cp.async): the next row's loads are "
        "in flight while this row's passes run",
        stages_.size());
  }
  fn.head.comment("{} index arithmetic", info_.wide_index ? "64-bit" : "32-bit");
  if (cfg_.split > 1) {
    add_split_scratch(fn.head, info_, space_.accumulated(), split_partials(),
                      fmt::format("rows split in {} pieces of {} elements", cfg_.split, cfg_.piece),
                      "row");
  }
  add_group_index(fn.body);
}

// g, the thread's place in its row's group.
void RowwiseBuilder::add_group_index(kir::Block& body) const {
  if (cfg_.group > 1) {
    const kir::ExprP thread = kir::thread_index();
    body.let("int", "g",
             cfg_.group == cfg_.block ? thread : kir::infix(thread, "%", kir::lit(cfg_.group)));
  }
}

// The grid-stride loop over rows (or, split, over row pieces) around `row_body`, with the row
// index (and piece) its body reads.
void RowwiseBuilder::add_row_loop(kir::Block& out, const kir::Block& row_body) const {
  if (cfg_.cluster > 1) {
    add_cluster_row_loop(out, row_body);
    return;
  }
  const std::string idx(info_.index_type());
  kir::Block* loop = nullptr;
  if (cfg_.split > 1) {
    const kir::ExprP rows = kir::lit(space_.rows);
    out.let_mut("__shared__ bool", "fj_last");
    loop = &out.loop(idx, "u", kir::block_index(), kir::lit(space_.rows * cfg_.split),
                     kir::grid_blocks())
                .body;
    // Piece-major: the blocks running together read the same piece of every row (one region
    // of memory when the reduced axes are not the inner ones).
    const kir::ExprP u = kir::var("u");
    loop->let_if_read(idx, "row", kir::infix(u, "%", rows));
    loop->let_if_read(idx, "s", kir::infix(u, "/", rows));
  } else {
    const kir::ExprP rows = rows_bound();
    const kir::ExprP row0 = kir::var("row0");
    if (cfg_.rows_per_block > 1) {
      const kir::ExprP per_block = kir::lit(cfg_.rows_per_block);
      const kir::ExprP first = kir::mul(static_cast_to(idx, kir::block_index()), per_block);
      const kir::ExprP stride = kir::mul(static_cast_to(idx, kir::grid_blocks()), per_block);
      loop = &out.loop(idx, "row0", first, rows, stride).body;
    } else {
      loop = &out.loop(idx, "row0", kir::block_index(), rows, kir::grid_blocks()).body;
    }
    loop->let_if_read(idx, "row",
                      cfg_.rows_per_block > 1 ? kir::add(row0, kir::infix(kir::thread_index(), "/",
                                                                          kir::lit(cfg_.group)))
                                              : row0);
  }
  loop->splice(row_body);
}

kir::ExprP RowwiseBuilder::rows_bound() const {
  if (cfg_.looped) return kir::extent(space_.rows);
  return outer_extent(info_, space_.rows, "the reduction's rows");
}

// Clusters: the grid-stride loop over rows runs per cluster (every block of a cluster takes the
// same rows, the piece of rank s of each), after the exchange slots and the phase that
// alternates them; a last cluster barrier follows it, so that no block exits while another
// may still read its shared memory.
void RowwiseBuilder::add_cluster_row_loop(kir::Block& out, const kir::Block& row_body) const {
  const std::string idx(info_.index_type());
  out.let_if_read(idx, "s", static_cast_to(idx, kir::call("fj_cluster_rank", {})));
  out.splice(cluster_slots_);
  if (phase_) out.let_mut("int", "fj_phase", kir::lit(0));
  kir::Block& loop =
      out.loop(idx, "row", static_cast_to(idx, kir::call("fj_cluster_id", {})),
               kir::lit(space_.rows), static_cast_to(idx, kir::call("fj_cluster_count", {})));
  loop.splice(row_body);
  if (phase_) loop.assign(phase_, kir::lit(1), "^=");
  out.eval(kir::sync_cluster(), "before exit: other blocks may still read this block's slots");
}

KernelBody RowwiseBuilder::build() {
  kir::Block main;  // the row loop's body after the prelude and the cache
  kir::Block* row_end = &main;
  for (int pass = 1; pass <= space_.passes + 1; ++pass) row_end = &add_pass(*row_end, pass);
  const kir::Block outputs = row_outputs();
  // Split rows: written inside the last block's combination, where the passes left the row.
  if (cfg_.split > 1) row_end->splice(outputs);
  const kir::Block cache = cache_fill();

  KernelBody kb = kernel_body();
  add_header(kb.fn, kb.kind);
  kir::Block row_body;
  if (guard_row_) {
    row_body.let("bool", "live", kir::lt(kir::var("row"), rows_bound()));
  }
  row_body.splice(row_prelude_);
  row_body.splice(cache);
  row_body.splice(main);
  if (cfg_.split == 1 && !outputs.empty()) {  // one value per row, by the group's first
    kir::ExprP cond;
    if (guard_row_) cond = kir::var("live");
    if (cfg_.cluster > 1) cond = conjoin(cond, kir::infix(kir::var("s"), "==", kir::lit(0)));
    if (cfg_.group > 1) cond = conjoin(cond, kir::infix(kir::var("g"), "==", kir::lit(0)));
    (cond ? row_body.branch(cond) : row_body).splice(outputs);
  }
  if (!stages_.empty()) {
    kb.fn.body.array("extern __shared__ __align__(16) unsigned char", "fj_staged",
                     std::vector<int64_t>{});
    for (const Stage& s : stages_) {
      kb.fn.body.let_mut(s.storage + "*", s.buffer,
                         kir::call(fmt::format("reinterpret_cast<{}*>", s.storage),
                                   {kir::add(kir::var("fj_staged"), kir::lit(s.offset))}));
    }
  }
  add_row_loop(kb.fn.body, row_body);
  return kb;
}

}  // namespace

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
    RowwiseBuilder builder(info, plain, at, cacheable, entries);
    KernelBody body = builder.build();
    if (!builder.caches()) {
      throw NotSizeIndependent("no pass of the row kernel reads a value again: no register path");
    }
    return body;
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
  RowwiseBuilder builder(info, space, cfg, cacheable);
  builder.build();
  return builder.vector_accesses() > 0;
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
      if (cfg->v == 1) RowwiseBuilder(info, online_space, *cfg, {}).build();
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
  return RowwiseBuilder(info, space, p.config, cacheable).build();
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
