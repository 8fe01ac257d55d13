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
// Math: accumulators in f32 for float types (i64 for integer sums); every tree is fixed, so
// results do not depend on timing.
#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/reduction.h"

namespace fusejit::templates {

namespace {

// The row share of a thread, for choosing G: single-pass kernels stream (32 elements in flight
// per thread); multi-pass kernels hold the row in registers, 64 bytes of storage per thread
// (32 bf16 or 16 f32 values), which keeps 64 KiB of rows in flight per SM at 64 registers per
// thread: 16384 bf16 values take two 512-thread blocks per SM, 16384 f32 ones one of 1024.
constexpr int64_t kStreamElementsPerThread = 32;
constexpr int64_t kCachedBytesPerThread = 64;
constexpr int64_t kCacheBudget = 32;  // register-cached values per thread
constexpr int64_t kMaxUnrolledChunks = 16;
// Split rows: when a single-pass kernel has too few rows to give the device (about 1024 blocks
// in flight) work, each row is cut into S pieces, one block each.
constexpr int64_t kSplitTargetBlocks = 1024;

struct RowConfig {
  int v = 1;
  int64_t group = 1;
  int64_t block = 256;
  int64_t rows_per_block = 1;
  int64_t split = 1;   // S: blocks per row
  int64_t piece = 1;   // elements of a row per block: length / S
  int64_t chunks = 1;  // vectors per thread per piece
};

// Passes over the row's elements: one per reduction depth, plus one for outputs that need the
// deepest reductions.
int element_passes(const ReduceSpace& space) {
  int passes = space.passes;
  for (const ReduceOutput& out : space.outputs) {
    if (out.full) passes = std::max(passes, out.pass);
  }
  return passes;
}

RowConfig row_config(const RegionInfo& info, const ReduceSpace& space, int v, bool multi_pass) {
  RowConfig c;
  c.v = v;
  const int64_t share =
      multi_pass ? std::clamp<int64_t>(kCachedBytesPerThread / info.max_element_size(), 8,
                                       kCacheBudget)
                 : kStreamElementsPerThread;
  int64_t g = pow2_ceil(ceil_div(space.length, share));
  // Narrow rows (at most a warp's worth of vectors): one vector per thread, so that a warp's
  // load covers whole rows, contiguous, instead of one row per thread at a stride.
  if (const int64_t vectors = ceil_div(space.length, v); vectors <= 32) g = pow2_ceil(vectors);
  // The widest block: for a cached row, half the SM's threads, so that each thread may use 64
  // registers; a streaming kernel does better with two such blocks per SM (measured on an
  // H200: sum of squares over rows of 16384, 0.127 ms with 512 threads against 0.145 with 1024).
  const int64_t widest = std::clamp<int64_t>(
      pow2_floor(info.target.threads_per_sm / (multi_pass ? 2 : 4)), 64, 1024);
  if (g <= 32) {
    c.group = g;
    c.block = 256;
  } else {
    c.group = std::min<int64_t>(g, widest);
    c.block = c.group;
  }
  c.rows_per_block = c.block / c.group;
  // (Split rows combine one partial per reduce; online softmax pairs are not split.)
  if (!multi_pass && c.group == c.block && space.rows < kSplitTargetBlocks &&
      space.online.empty()) {
    // Each piece keeps at least 4 vectors per thread (64 bytes in flight per thread, the block
    // reduction amortized over 16 KiB or more); S divides the row into whole vectors.
    int64_t s = pow2_floor(std::min(kSplitTargetBlocks / space.rows,
                                    std::max<int64_t>(1, space.length / (4 * c.block * v))));
    while (s > 1 && (space.length / v) % s != 0) s /= 2;
    c.split = s;
  }
  c.piece = space.length / c.split;
  c.chunks = ceil_div(c.piece / v, c.group);
  return c;
}

// Values computed before any reduction and read again after one: what a register cache holds.
std::set<ir::NodeId> frontier(const RegionInfo& info, const ReduceSpace& space) {
  std::set<ir::NodeId> out;
  auto reach = [&](ir::NodeId id) {
    const auto it = space.reach.find(id);
    return it == space.reach.end() ? 0 : it->second;
  };
  for (ir::NodeId id : info.region.nodes) {
    if (info.inputs.count(id) != 0 || space.depth.count(id) != 0 || reach(id) == 0) continue;
    for (ir::NodeId op : info.node(id).inputs) {
      if (reach(op) == 0 && info.node(op).op != ir::Op::constant) out.insert(op);
    }
  }
  return out;
}

class RowwiseBuilder {
 public:
  RowwiseBuilder(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                 std::set<ir::NodeId> cacheable)
      : info_(info),
        space_(space),
        cfg_(cfg),
        cacheable_(std::move(cacheable)),
        emitter_(
            info, [this](ir::NodeId id, const Index& at, Scope&) { return leaf(id, at); },
            [this](ir::NodeId id, const Index& at) { return intercept(id, at); }) {
    row_ = make_root("row", space.rows);
    k_ = make_lane_root("k", "k0", space.length, cfg.v);
    x_ = grouped_index(space.shape, {row_, k_},
                       [&](size_t a) { return is_reduced_axis(space, a) ? size_t{1} : size_t{0}; });
    row_digits_ = {Digit{row_, 1, space.rows}};
    canonical_ = offset(row_digits_);
    guard_row_ = space.rows % cfg.rows_per_block != 0;
    guard_k_ = cfg.chunks * cfg.group * cfg.v != cfg.piece;
    slot_ = cfg.v > 1 ? fmt::format("c * {} + j", cfg.v) : "c";
    max_cache_entries_ = cfg.chunks <= kMaxUnrolledChunks ? kCacheBudget / (cfg.chunks * cfg.v) : 0;
    for (const auto& [sum, max] : space.online) max_with_sum_.insert(max);
  }

  KernelBody build();
  int vector_accesses() const { return vector_accesses_; }

 private:
  struct Pass {
    Printer prelude, body, stores;
    Scope chunk, lane;
  };
  struct CacheEntry {
    ir::NodeId id;
    Index at;
    std::string array;
  };

  std::unique_ptr<Pass> new_pass() {
    auto p = std::make_unique<Pass>();
    p->chunk = Scope{&p->prelude, &row_scope_, {}};
    p->lane = Scope{&p->body, &p->chunk, {}};
    return p;
  }
  std::string leaf(ir::NodeId id, const Index& at);
  void print_pass(Printer& main, int pass);
  Printer print_row_outputs();
  Printer print_cache_fill();
  void print_header(Printer& out, std::string_view kind) const;
  void print_row_loop(Printer& out, const Printer& row_body) const;
  void print_accumulate(Printer& main, Pass& p, ir::NodeId r);
  std::string functor(ir::NodeId r) const;
  std::string accumulator(ir::NodeId r) const;
  std::optional<std::string> intercept(ir::NodeId id, const Index& at);
  void store_full(Pass& p, const ReduceOutput& out);
  void print_chunk_loop(Printer& out, const Pass& p) const;
  LegacySplitPartials split_partials() const;

  const RegionInfo& info_;
  const ReduceSpace& space_;
  RowConfig cfg_;
  std::set<ir::NodeId> cacheable_;
  ExprEmitter emitter_;
  BasePtr row_, k_;
  Index x_;
  Digits row_digits_;
  std::string canonical_;
  bool guard_row_ = false, guard_k_ = false;
  std::string slot_;
  int64_t max_cache_entries_ = 0;

  Printer row_prelude_;
  Scope row_scope_{&row_prelude_, nullptr, {}};
  Pass* current_ = nullptr;
  std::map<ir::NodeId, std::string> finished_;
  std::vector<CacheEntry> cache_;
  std::map<std::string, std::string> cache_index_;
  bool filling_cache_ = false;
  int vector_accesses_ = 0;
  std::set<ir::NodeId> max_with_sum_;  // maxima accumulated with their sum (ReduceSpace::online)
};

std::string RowwiseBuilder::leaf(ir::NodeId id, const Index& at) {
  const DTypeCode& code = dtype_code(info_.node(id).dtype);
  const std::string key = ExprEmitter::key(id, at);
  if (!uses(at, k_)) {  // the same for the whole row: load it once per row
    if (auto hit = row_scope_.find(key)) return *hit;
    const std::string var = emitter_.fresh("h");
    const std::string load = load_expr(info_, id, offset(at));
    if (guard_row_) {
      row_prelude_.line("const {0} {1} = live ? {2} : static_cast<{0}>(0);", code.arith, var, load);
    } else {
      row_prelude_.line("const {} {} = {};", code.arith, var, load);
    }
    row_scope_.memo[key] = var;
    return var;
  }
  Pass& p = *current_;
  const Lane l = lane(at);
  if (l == Lane::unit && cfg_.v > 1) {
    std::string array;
    if (auto hit = p.chunk.find("vec" + key)) {
      array = *hit;
    } else {
      array = emitter_.fresh("r");
      p.prelude.line("{} {}[{}];", code.storage, array, cfg_.v);
      p.prelude.line("fj_load_vec({}, {} + {});", array, info_.input_param(id), offset(at, true));
      p.chunk.memo["vec" + key] = array;
      ++vector_accesses_;
    }
    const std::string var = emitter_.fresh("x");
    p.body.line("const {} {} = {};", code.arith, var, wrap(code.load, array + "[j]"));
    return var;
  }
  if (l == Lane::none) {  // the same for every lane of the vector
    if (auto hit = p.chunk.find(key)) return *hit;
    const std::string var = emitter_.fresh("h");
    p.prelude.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at, true)));
    p.chunk.memo[key] = var;
    return var;
  }
  const std::string var = emitter_.fresh("x");
  p.body.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at)));
  return var;
}

std::optional<std::string> RowwiseBuilder::intercept(ir::NodeId id, const Index& at) {
  if (space_.depth.count(id) != 0) {
    const auto it = finished_.find(id);
    if (it == finished_.end() || offset(at) != canonical_) {
      throw InternalError(fmt::format("%{} is read at index {} before or outside its row ({})", id,
                                      offset(at), canonical_));
    }
    return it->second;
  }
  if (filling_cache_ || cacheable_.count(id) == 0 || !uses(at, row_) || !uses(at, k_)) {
    return std::nullopt;
  }
  const std::string key = ExprEmitter::key(id, at);
  auto it = cache_index_.find(key);
  if (it == cache_index_.end()) {
    if (static_cast<int64_t>(cache_.size()) >= max_cache_entries_) return std::nullopt;
    const std::string array = emitter_.fresh("cache");
    cache_.push_back({id, at, array});
    it = cache_index_.emplace(key, array).first;
  }
  return fmt::format("{}[{}]", it->second, slot_);
}

// The accumulator of reduce r and, in pass p, the statement adding one element to it. The
// maximum of an online softmax pair (ReduceSpace::online) accumulates (max, sum) together in an
// fj_max_sum; its sum has no accumulator of its own.
void RowwiseBuilder::print_accumulate(Printer& main, Pass& p, ir::NodeId r) {
  if (space_.online.count(r) != 0) return;
  const ir::Node& n = info_.node(r);
  const DType acc = accumulator_dtype(n);
  const ir::Node& x = info_.node(n.inputs[0]);
  const std::string v = convert(acc, x.dtype, emitter_.value(n.inputs[0], x_, p.lane));
  if (max_with_sum_.count(r) != 0) {
    main.line("fj_max_sum a{} = {{{}, 0.0f}};", r, reduce_identity(n.op, acc));
    p.body.line("a{0} = {1}()(a{0}, {2});", r, functor(r), v);
    return;
  }
  main.line("{} a{} = {};", dtype_code(acc).arith, r, reduce_identity(n.op, acc));
  p.body.line("a{0} = {1}()(a{0}, {2});", r, functor(r), v);
}

std::string RowwiseBuilder::functor(ir::NodeId r) const {
  if (max_with_sum_.count(r) != 0) {
    return fmt::format("fj_op_max_sum<{}>", info_.fast != FastMath::none ? "true" : "false");
  }
  return std::string(reduce_functor(info_.node(r).op));
}

// The expression holding reduce r's value once its group has reduced it.
std::string RowwiseBuilder::accumulator(ir::NodeId r) const {
  if (const auto it = space_.online.find(r); it != space_.online.end()) {
    return fmt::format("fj_max_sum_total(a{})", it->second);
  }
  return max_with_sum_.count(r) != 0 ? fmt::format("a{}.m", r) : fmt::format("a{}", r);
}

void RowwiseBuilder::store_full(Pass& p, const ReduceOutput& out) {
  const ir::Node& n = info_.node(out.id);
  const DTypeCode& code = dtype_code(n.dtype);
  const Index at = index_from_digits(flatten(x_), n.shape);
  const std::string value = emitter_.value(out.id, at, p.lane);
  if (cfg_.v > 1 && lane(at) == Lane::unit) {
    print_vector_store(p.prelude, p.body, p.stores, n.dtype, fmt::format("s{}", out.position),
                       fmt::format("out{} + {}", out.position, offset(at, true)), cfg_.v, value);
    ++vector_accesses_;
  } else {
    p.body.line("out{}[{}] = {};", out.position, offset(at), wrap(code.store, value));
  }
}

void RowwiseBuilder::print_chunk_loop(Printer& out, const Pass& p) const {
  const std::string_view idx = info_.index_type();
  out.raw(cfg_.chunks <= kMaxUnrolledChunks ? "#pragma unroll" : "#pragma unroll 4");
  out.open("for (int c = 0; c < {}; ++c)", cfg_.chunks);
  const bool uses_k = mentions(p.body.str(), "k");
  // The position in the row's piece (the whole row unless rows are split).
  const std::string within =
      cfg_.group > 1 ? fmt::format("(static_cast<{}>(c) * {} + g) * {}", idx, cfg_.group, cfg_.v)
                     : fmt::format("static_cast<{}>(c) * {}", idx, cfg_.v);
  if (guard_k_ || uses_k || mentions(p.prelude.str() + p.stores.str(), "k0")) {
    if (cfg_.split > 1) {
      out.line("const {} k0 = s * {} + {};", idx, cfg_.piece, within);
    } else {
      out.line("const {} k0 = {};", idx, within);
    }
  }
  std::string cond;
  if (guard_row_) cond = "live";
  if (guard_k_) {
    cond += cond.empty() ? "" : " && ";
    cond += cfg_.split > 1 ? fmt::format("{} < {}", within, cfg_.piece)
                           : fmt::format("k0 < {}", cfg_.piece);
  }
  if (!cond.empty()) out.open("if ({})", cond);
  out.splice(p.prelude);
  if (cfg_.v > 1) {
    out.line("#pragma unroll");
    out.open("for (int j = 0; j < {}; ++j)", cfg_.v);
    if (uses_k) out.line("const {} k = k0 + j;", idx);
    out.splice(p.body);
    out.close();
  } else {
    if (uses_k) out.line("const {} k = k0;", idx);
    out.splice(p.body);
  }
  out.splice(p.stores);
  if (!cond.empty()) out.close();
  out.close();
}

// Split rows (reduction.h): the partials of row `row`, piece `s`, one value per block; thread 0
// publishes them, and in the last block folds all S of them in order.
LegacySplitPartials RowwiseBuilder::split_partials() const {
  LegacySplitPartials split;
  split.pieces = cfg_.split;
  split.groups = space_.rows;
  split.group = "row";
  split.piece = "s";
  return split;
}

// Pass `pass` over the row's elements, printed into `main`: the reductions of that depth
// accumulated and reduced over the thread group, and the full-size outputs that need exactly
// the reductions before it.
void RowwiseBuilder::print_pass(Printer& main, int pass) {
  auto p = new_pass();
  current_ = p.get();
  std::vector<ir::NodeId> here;
  for (ir::NodeId r : space_.reduces) {
    if (space_.depth.at(r) == pass) here.push_back(r);
  }
  bool writes = false;
  for (const ReduceOutput& out : space_.outputs) writes = writes || (out.full && out.pass == pass);
  if (here.empty() && !writes) return;
  for (ir::NodeId r : here) print_accumulate(main, *p, r);
  for (const ReduceOutput& out : space_.outputs) {
    if (out.full && out.pass == pass) store_full(*p, out);
  }
  main.line("// pass {}", pass);
  print_chunk_loop(main, *p);
  for (ir::NodeId r : here) {
    if (space_.online.count(r) != 0) continue;  // reduced with its maximum
    if (cfg_.group > 32) {
      main.line("a{0} = fj_block_reduce<{1}>(a{0}, {2}());", r, cfg_.block, functor(r));
    } else if (cfg_.group > 1) {
      main.line("a{0} = fj_warp_reduce<1, {1}>(a{0}, {2}());", r, cfg_.group, functor(r));
    }
  }
  if (cfg_.split > 1) {
    // Leaves the last block's `if` open: the row is finished inside it.
    print_split_arrival(main, here, split_partials());
    print_split_fold(main, info_, here, split_partials(), "0", 1);
    main.raw(split_reset(split_partials()));
  }
  for (ir::NodeId r : here) {
    const ir::Node& n = info_.node(r);
    const std::string var = emitter_.fresh(fmt::format("v{}", r));
    main.line("const {} {} = {};  // {}", dtype_code(n.dtype).arith, var,
              reduce_finish(info_, n, accumulator(r), space_.length), ir::op_name(n.op));
    finished_[r] = var;
  }
}

// The outputs with one value per row (the reductions and their epilogue).
Printer RowwiseBuilder::print_row_outputs() {
  Printer row_outputs;
  Scope row_out_scope{&row_outputs, &row_scope_, {}};
  for (const ReduceOutput& out : space_.outputs) {
    if (out.full) continue;
    const ir::Node& n = info_.node(out.id);
    const Index at = index_from_digits(row_digits_, n.shape);
    const std::string value = emitter_.value(out.id, at, row_out_scope);
    row_outputs.line("out{}[{}] = {};", out.position, offset(at),
                     wrap(dtype_code(n.dtype).store, value));
  }
  return row_outputs;
}

// The register cache, filled before pass 1 with what the passes asked for.
Printer RowwiseBuilder::print_cache_fill() {
  Printer cache;
  if (cache_.empty()) return cache;
  auto p = new_pass();
  current_ = p.get();
  filling_cache_ = true;
  cache.line("// register cache: the row's values that several passes read");
  for (const CacheEntry& e : cache_) {
    cache.line("{} {}[{}];", dtype_code(info_.node(e.id).dtype).arith, e.array,
               cfg_.chunks * cfg_.v);
    p->body.line("{}[{}] = {};", e.array, slot_, emitter_.value(e.id, e.at, p->lane));
  }
  print_chunk_loop(cache, *p);
  filling_cache_ = false;
  return cache;
}

// The comment lines, module-scope scratch, signature and thread-group index.
void RowwiseBuilder::print_header(Printer& out, std::string_view kind) const {
  out.line(
      "// {}, row-style: {} rows of {} elements; {} thread(s) per row, {} vector(s) of {} per "
      "thread; {} pass(es) over the row{}",
      kind, space_.rows, space_.length, cfg_.group, cfg_.chunks, cfg_.v, element_passes(space_),
      cache_.empty() ? "" : ", row cached in registers");
  out.line("// {} index arithmetic", info_.wide_index ? "64-bit" : "32-bit");
  if (cfg_.split > 1) {
    print_split_scratch(
        out, info_, space_.reduces, split_partials(),
        fmt::format("rows split in {} pieces of {} elements", cfg_.split, cfg_.piece), "row");
  }
  // Half the SM's threads resident: with 2048 threads per SM that caps registers at 64 per
  // thread (the cache budget fits), and blocks of 512 or fewer threads get two or more per SM.
  const int min_blocks =
      std::max(1, info_.target.threads_per_sm / 2 / static_cast<int>(cfg_.block));
  print_signature(out, info_, static_cast<int>(cfg_.block), min_blocks);
  if (cfg_.group > 1) {
    if (cfg_.group == cfg_.block) {
      out.line("const int g = threadIdx.x;");
    } else {
      out.line("const int g = threadIdx.x % {};", cfg_.group);
    }
  }
}

// The grid-stride loop over rows (or, split, over row pieces) around `row_body`, with the row
// index its body uses; closes the function.
void RowwiseBuilder::print_row_loop(Printer& out, const Printer& row_body) const {
  const std::string_view idx = info_.index_type();
  if (cfg_.split > 1) {
    out.line("__shared__ bool fj_last;");
    out.open("for ({0} u = blockIdx.x; u < {1}; u += gridDim.x)", idx, space_.rows * cfg_.split);
  } else if (cfg_.rows_per_block > 1) {
    out.open(
        "for ({0} row0 = static_cast<{0}>(blockIdx.x) * {1}; row0 < {2}; row0 += "
        "static_cast<{0}>(gridDim.x) * {1})",
        idx, cfg_.rows_per_block, space_.rows);
  } else {
    out.open("for ({0} row0 = blockIdx.x; row0 < {1}; row0 += gridDim.x)", idx, space_.rows);
  }
  if (cfg_.split > 1) {
    // Piece-major: the blocks running together read the same piece of every row (one region
    // of memory when the reduced axes are not the inner ones).
    if (mentions(row_body.str(), "row")) out.line("const {} row = u % {};", idx, space_.rows);
    if (mentions(row_body.str(), "s")) out.line("const {} s = u / {};", idx, space_.rows);
  } else if (mentions(row_body.str(), "row")) {
    if (cfg_.rows_per_block > 1) {
      out.line("const {} row = row0 + threadIdx.x / {};", idx, cfg_.group);
    } else {
      out.line("const {} row = row0;", idx);
    }
  }
  out.splice(row_body);
  out.close();
  out.close();
}

KernelBody RowwiseBuilder::build() {
  Printer main;  // the row loop's body after the prelude and the cache
  for (int pass = 1; pass <= space_.passes + 1; ++pass) print_pass(main, pass);
  const Printer row_outputs = print_row_outputs();
  if (cfg_.split > 1) {  // written inside the last block's combination, left open by the pass
    main.splice(row_outputs);
    main.close();
  }
  const Printer cache = print_cache_fill();

  KernelBody kb;
  kb.kind = std::string(fusion::region_kind_name(info_.region.kind));
  kb.reduces = true;
  kb.block = static_cast<int>(cfg_.block);
  kb.blocks_per_sm = std::max(1, info_.target.blocks_per_sm(static_cast<int>(cfg_.block)));
  kb.work_blocks = ceil_div(space_.rows, cfg_.rows_per_block) * cfg_.split;
  kb.serial_launches = cfg_.split > 1;
  print_header(kb.code, kb.kind);

  Printer row_body;
  if (guard_row_) row_body.line("const bool live = row < {};", space_.rows);
  row_body.splice(row_prelude_);
  row_body.splice(cache);
  row_body.splice(main);
  if (cfg_.split == 1 && !row_outputs.empty()) {  // one value per row, by the group's first
    std::string cond = guard_row_ ? "live" : "";
    if (cfg_.group > 1) cond += cond.empty() ? "g == 0" : " && g == 0";
    if (!cond.empty()) row_body.open("if ({})", cond);
    row_body.splice(row_outputs);
    if (!cond.empty()) row_body.close();
  }
  print_row_loop(kb.code, row_body);
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
  const bool cached = cfg.chunks <= kMaxUnrolledChunks && cfg.chunks * cfg.v <= kCacheBudget;
  return cached ? plain : space;
}

KernelBody build_rowwise(const RegionInfo& info, const ReduceSpace& online_space,
                         const CodegenOptions& options) {
  int v = vector_width(info, options.vectorize, {online_space.length});
  ReduceSpace plain;
  for (;;) {
    const ReduceSpace& space = choose_online(info, online_space, v, plain);
    const bool multi_pass = element_passes(space) > 1;
    const RowConfig cfg = row_config(info, space, v, multi_pass);
    std::set<ir::NodeId> cacheable;
    if (multi_pass) cacheable = frontier(info, space);
    RowwiseBuilder builder(info, space, cfg, cacheable);
    KernelBody kb = builder.build();
    // Vectors only pay when some access is contiguous (not so for most generic axis sets).
    if (v > 1 && builder.vector_accesses() == 0) {
      v = 1;
      continue;
    }
    return kb;
  }
}

}  // namespace fusejit::templates
