// templates/column: the column-style kernel of single-pass reductions over leading or middle
// axes (the input seen as [P, L, N]: P kept outer elements, L reduced, N kept inner, N > 1).
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
// Math: accumulators in f32 for float types (i64 for integer sums); the combination order is
// fixed, so results do not depend on timing.
#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/reduction.h"

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

struct ColumnConfig {
  int v = 1;
  int64_t tx = 32, ty = 1;
  int64_t tiles_n = 1, tiles = 1;
  int64_t split = 1;  // S: blocks per tile, each reducing `piece` consecutive rows
  int64_t piece = 1;  // rows per piece (the last one may be shorter): L unless split
};

int64_t accumulator_bytes(const RegionInfo& info, const ReduceSpace& space) {
  int64_t bytes = 0;
  for (ir::NodeId r : space.reduces) bytes += dtype_size(accumulator_dtype(info.node(r)));
  return bytes;
}

// Split columns, from tiles of `tx` vectors down to `narrowest`: the widest tiles whose fold
// stays within kFoldBytes (narrower tiles: more tiles, fewer pieces each). False when L is too
// short to split.
bool choose_split(ColumnConfig& c, const ReduceSpace& space, int64_t columns, int64_t tx,
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

ColumnConfig column_config(const RegionInfo& info, const ReduceSpace& space, int v) {
  ColumnConfig c;
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
  ColumnConfig split = c;
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

class ColumnBuilder {
 public:
  ColumnBuilder(const RegionInfo& info, const ReduceSpace& space, const ColumnConfig& cfg);
  KernelBody build();

 private:
  std::string leaf(ir::NodeId id, const Index& at);
  std::optional<std::string> intercept(ir::NodeId id, const Index& at);
  void collect_reduces();
  void collect_outputs();
  void print_header(Printer& o) const;
  void print_tile_start(Printer& o) const;
  void print_accumulation(Printer& o) const;
  void print_block_combine(Printer& o) const;
  void print_split_combine(Printer& o) const;
  void print_finish(Printer& o) const;
  LegacySplitPartials split_partials() const;

  const RegionInfo& info_;
  const ReduceSpace& space_;
  const ColumnConfig cfg_;
  const std::string_view idx_;
  const int64_t block_, warps_;
  const bool guard_n_;
  BasePtr p_root_, l_root_, n_root_;
  Index x_;
  Digits kept_;
  std::string canonical_, lane_j_;
  ExprEmitter emitter_;
  std::map<ir::NodeId, std::string> finished_;
  bool epilogue_ = false;
  int names_ = 0;
  // The traversal: loads per tile, per row l, the lanes' values, the stores of full outputs.
  Printer tile_prelude_, prelude_, body_, stores_;
  Scope tile_{&tile_prelude_, nullptr, {}};
  Scope outer_{&prelude_, &tile_, {}};
  Scope inner_{&body_, &outer_, {}};
  // Accumulators, their warp combination, the shared arrays of the block combination, the
  // reduced values.
  Printer acc_init_, warp_combine_, shared_, finish_;
  // The epilogue: the outputs with one value per column, per lane.
  Printer epi_prelude_, epi_, epi_stores_;
  Scope epi_scope_{&epi_, nullptr, {}};
};

ColumnBuilder::ColumnBuilder(const RegionInfo& info, const ReduceSpace& space,
                             const ColumnConfig& cfg)
    : info_(info),
      space_(space),
      cfg_(cfg),
      idx_(info.index_type()),
      block_(cfg.tx * cfg.ty),
      warps_(std::max<int64_t>(1, block_ / 32)),
      guard_n_(cfg.tiles_n * cfg.tx * cfg.v != space.suffix),
      emitter_(
          info, [this](ir::NodeId id, const Index& at, Scope&) { return leaf(id, at); },
          [this](ir::NodeId id, const Index& at) { return intercept(id, at); }) {
  p_root_ = make_root("p", space.prefix);
  l_root_ = make_root("l", space.length);
  n_root_ = make_lane_root("n", "n0", space.suffix, cfg.v);
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
  canonical_ = offset(kept_);
  lane_j_ = cfg.v > 1 ? "j" : "0";
}

// Loads that do not depend on l (a weight along the columns) are hoisted out of the l loop.
std::string ColumnBuilder::leaf(ir::NodeId id, const Index& at) {
  const DTypeCode& code = dtype_code(info_.node(id).dtype);
  const std::string key = ExprEmitter::key(id, at);
  const bool per_tile = !uses(at, l_root_);
  Printer& pre = per_tile ? tile_prelude_ : prelude_;
  Scope& pre_scope = per_tile ? tile_ : outer_;
  if (!epilogue_ && cfg_.v > 1 && lane(at) == Lane::unit) {
    std::string array;
    if (auto hit = outer_.find("vec" + key)) {
      array = *hit;
    } else {
      array = fmt::format("r{}", names_++);
      pre.line("{} {}[{}];", code.storage, array, cfg_.v);
      pre.line("fj_load_vec({}, {} + {});", array, info_.input_param(id), offset(at, true));
      pre_scope.memo["vec" + key] = array;
    }
    const std::string var = fmt::format("x{}", names_++);
    body_.line("const {} {} = {};", code.arith, var, wrap(code.load, array + "[j]"));
    return var;
  }
  if (!epilogue_ && lane(at) == Lane::none) {
    if (auto hit = outer_.find(key)) return *hit;
    const std::string var = fmt::format("h{}", names_++);
    pre.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at, true)));
    pre_scope.memo[key] = var;
    return var;
  }
  Printer& out = epilogue_ ? epi_ : body_;
  const std::string var = fmt::format("x{}", names_++);
  out.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at)));
  return var;
}

std::optional<std::string> ColumnBuilder::intercept(ir::NodeId id, const Index& at) {
  if (space_.depth.count(id) == 0) return std::nullopt;
  const auto it = finished_.find(id);
  if (it == finished_.end() || offset(at) != canonical_) {
    throw InternalError(fmt::format("%{} is read at index {} before or outside its column ({})",
                                    id, offset(at), canonical_));
  }
  return fmt::format("{}[{}]", it->second, lane_j_);
}

void ColumnBuilder::collect_reduces() {
  const int v = cfg_.v;
  for (ir::NodeId r : space_.reduces) {
    const ir::Node& n = info_.node(r);
    const DType acc = accumulator_dtype(n);
    const std::string_view type = dtype_code(acc).arith;
    const std::string_view op = reduce_functor(n.op);
    acc_init_.line("{} a{}[{}];", type, r, v);
    acc_init_.line("#pragma unroll");
    acc_init_.line("for (int j = 0; j < {}; ++j) a{}[j] = {};", v, r, reduce_identity(n.op, acc));
    const ir::Node& operand = info_.node(n.inputs[0]);
    const std::string value = emitter_.value(n.inputs[0], x_, inner_);
    body_.line("a{0}[{1}] = {2}()(a{0}[{1}], {3});", r, lane_j_, op,
               convert(acc, operand.dtype, value));
    if (cfg_.tx < 32 && block_ > cfg_.tx) {
      warp_combine_.line("#pragma unroll");
      warp_combine_.line(
          "for (int j = 0; j < {0}; ++j) a{1}[j] = fj_warp_reduce<{2}, {3}>(a{1}[j], {4}());", v,
          r, cfg_.tx, std::min<int64_t>(32, block_), op);
    }
    if (warps_ > 1) {
      shared_.line("__shared__ {} part{}[{}][{}];", type, r, warps_, cfg_.tx * v);
    }
    finish_.line("{} v{}[{}];", dtype_code(n.dtype).arith, r, v);
    finish_.line("#pragma unroll");
    finish_.line("for (int j = 0; j < {}; ++j) v{}[j] = {};", v, r,
                 reduce_finish(info_, n, fmt::format("a{}[j]", r), space_.length));
    finished_[r] = fmt::format("v{}", r);
  }
}

void ColumnBuilder::collect_outputs() {
  const int v = cfg_.v;
  for (const ReduceOutput& out : space_.outputs) {
    if (!out.full) continue;
    const ir::Node& n = info_.node(out.id);
    const Index at = index_from_digits(flatten(x_), n.shape);
    const std::string value = wrap(dtype_code(n.dtype).store, emitter_.value(out.id, at, inner_));
    if (v > 1 && lane(at) == Lane::unit) {
      prelude_.line("{} s{}[{}];", dtype_code(n.dtype).storage, out.position, v);
      body_.line("s{}[j] = {};", out.position, value);
      stores_.line("fj_store_vec(out{} + {}, s{});", out.position, offset(at, true), out.position);
    } else {
      body_.line("out{}[{}] = {};", out.position, offset(at), value);
    }
  }
  epilogue_ = true;
  for (const ReduceOutput& out : space_.outputs) {
    if (out.full) continue;
    const ir::Node& n = info_.node(out.id);
    const Index at = index_from_digits(kept_, n.shape);
    const std::string value =
        wrap(dtype_code(n.dtype).store, emitter_.value(out.id, at, epi_scope_));
    if (v > 1 && lane(at) == Lane::unit) {
      epi_prelude_.line("{} s{}[{}];", dtype_code(n.dtype).storage, out.position, v);
      epi_.line("s{}[j] = {};", out.position, value);
      epi_stores_.line("fj_store_vec(out{} + {}, s{});", out.position, offset(at, true),
                       out.position);
    } else {
      epi_.line("out{}[{}] = {};", out.position, offset(at), value);
    }
  }
}

// The partials of tile t, piece s: one per column of the tile, held by the ty == 0 threads
// (column j * TX + tx, so that a warp's accesses to them are contiguous).
LegacySplitPartials ColumnBuilder::split_partials() const {
  LegacySplitPartials split;
  split.pieces = cfg_.split;
  split.groups = cfg_.tiles;
  split.width = cfg_.tx * cfg_.v;
  split.group = "t";
  split.piece = "s";
  split.value = fmt::format("j * {} + tx", cfg_.tx);
  split.lanes = cfg_.v;
  split.holders = "ty == 0";
  return split;
}

void ColumnBuilder::print_header(Printer& o) const {
  o.line(
      "// {}, column-style: [{}, {}, {}] reduced over the middle; tiles of {} x {} columns, {} "
      "rows of threads",
      fusion::region_kind_name(info_.region.kind), space_.prefix, space_.length, space_.suffix,
      cfg_.tx, cfg_.v, cfg_.ty);
  o.line("// {} index arithmetic", info_.wide_index ? "64-bit" : "32-bit");
  if (cfg_.split > 1) {
    print_split_scratch(
        o, info_, space_.reduces, split_partials(),
        fmt::format("columns split in {} pieces of {} rows", cfg_.split, cfg_.piece), "tile");
  }
}

// The tile's position (p, n0) and, when split, the piece s; then the accumulators.
void ColumnBuilder::print_tile_start(Printer& o) const {
  if (cfg_.split > 1) {
    if (cfg_.tiles > 1) {
      o.line("const {} t = u % {};", idx_, cfg_.tiles);
      o.line("const {} s = u / {};", idx_, cfg_.tiles);
    } else {
      o.line("const {} t = 0;", idx_);
      o.line("const {} s = u;", idx_);
    }
  }
  if (cfg_.tiles_n == 1) {
    if (space_.prefix > 1) o.line("const {} p = t;", idx_);
    o.line("const {} n0 = tx * {};", idx_, cfg_.v);
  } else {
    if (space_.prefix > 1) o.line("const {} p = t / {};", idx_, cfg_.tiles_n);
    o.line("const {} n0 = (t % {} * {} + tx) * {};", idx_, cfg_.tiles_n, cfg_.tx, cfg_.v);
  }
  if (guard_n_) o.line("const bool live = n0 < {};", space_.suffix);
  o.splice(acc_init_);
}

// Thread (tx, ty) over the rows l = ty, ty + TY, ... of the tile (of its piece, when split).
void ColumnBuilder::print_accumulation(Printer& o) const {
  if (guard_n_) o.open("if (live)");
  o.splice(tile_prelude_);
  std::string first = "ty", end = std::to_string(space_.length);
  if (cfg_.split > 1) {
    first = fmt::format("s * {} + ty", cfg_.piece);
    end = "l_end";
    if (cfg_.split * cfg_.piece == space_.length) {
      o.line("const {} l_end = (s + 1) * {};", idx_, cfg_.piece);
    } else {
      o.line("const {0} l_end = s < {1} ? (s + 1) * {2} : {3};", idx_, cfg_.split - 1, cfg_.piece,
             space_.length);
    }
  }
  o.line("#pragma unroll 4");
  o.open("for ({} l = {}; l < {}; l += {})", idx_, first, end, cfg_.ty);
  o.splice(prelude_);
  const bool uses_n = mentions(body_.str(), "n");
  if (cfg_.v > 1) {
    o.line("#pragma unroll");
    o.open("for (int j = 0; j < {}; ++j)", cfg_.v);
    if (uses_n) o.line("const {} n = n0 + j;", idx_);
    o.splice(body_);
    o.close();
  } else {
    if (uses_n) o.line("const {} n = n0;", idx_);
    o.splice(body_);
  }
  o.splice(stores_);
  o.close();
  if (guard_n_) o.close();
}

// The TY values per column: a butterfly over the lanes of a warp that share tx, then the
// warps' totals through shared memory; the ty == 0 threads hold the result.
void ColumnBuilder::print_block_combine(Printer& o) const {
  o.splice(warp_combine_);
  if (warps_ <= 1) return;
  const int v = cfg_.v;
  o.open("if ((threadIdx.x & 31) < {})", cfg_.tx);
  for (ir::NodeId r : space_.reduces) {
    o.line("#pragma unroll");
    o.line("for (int j = 0; j < {0}; ++j) part{1}[threadIdx.x >> 5][tx * {0} + j] = a{1}[j];", v,
           r);
  }
  o.close();
  o.line("__syncthreads();");
  o.open("if (ty == 0)");
  for (ir::NodeId r : space_.reduces) {
    o.line("#pragma unroll");
    o.open("for (int w = 1; w < {}; ++w)", warps_);
    o.line("#pragma unroll");
    o.line("for (int j = 0; j < {0}; ++j) a{1}[j] = {2}()(a{1}[j], part{1}[w][tx * {0} + j]);", v,
           r, reduce_functor(info_.node(r).op));
    o.close();
  }
  o.close();
  o.line("__syncthreads();");
}

// Split columns: every block publishes its partials; the tile's last block folds them (thread
// (tx, ty) the pieces ty, ty + TY, ..., in order) and combines the TY results as before.
void ColumnBuilder::print_split_combine(Printer& o) const {
  const LegacySplitPartials split = split_partials();
  print_split_arrival(o, space_.reduces, split);
  o.line("if (!fj_last) continue;");
  o.line("// the tile's last block: the {} partials of each column, in order", cfg_.split);
  o.line("__threadfence();");
  print_split_fold(o, info_, space_.reduces, split, "ty", cfg_.ty);
  print_block_combine(o);
  o.line("if (threadIdx.x == 0) {}", split_reset(split));
}

// The ty == 0 threads: the reduced values, the epilogue, the stores.
void ColumnBuilder::print_finish(Printer& o) const {
  if (guard_n_) {
    o.open("if (ty == 0 && live)");
  } else {
    o.open("if (ty == 0)");
  }
  o.splice(finish_);
  o.splice(epi_prelude_);
  const bool epi_uses_n = mentions(epi_.str(), "n");
  if (cfg_.v > 1) {
    o.line("#pragma unroll");
    o.open("for (int j = 0; j < {}; ++j)", cfg_.v);
    if (epi_uses_n) o.line("const {} n = n0 + j;", idx_);
    o.splice(epi_);
    o.close();
  } else {
    if (epi_uses_n) o.line("const {} n = n0;", idx_);
    o.splice(epi_);
  }
  o.splice(epi_stores_);
  o.close();
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
  Printer& o = kb.code;
  print_header(o);
  // Split: the whole SM's threads resident (4 blocks of 512 threads), so that the (tile, piece)
  // blocks run in whole waves.
  print_signature(o, info_, kb.block, cfg_.split > 1 ? kb.blocks_per_sm : 0);
  o.splice(shared_);
  if (cfg_.split > 1) o.line("__shared__ bool fj_last;");
  o.line("const int tx = threadIdx.x % {};", cfg_.tx);
  o.line("const int ty = threadIdx.x / {};", cfg_.tx);
  if (cfg_.split > 1) {
    o.open("for ({0} u = blockIdx.x; u < {1}; u += gridDim.x)", idx_, cfg_.tiles * cfg_.split);
  } else {
    o.open("for ({0} t = blockIdx.x; t < {1}; t += gridDim.x)", idx_, cfg_.tiles);
  }
  print_tile_start(o);
  print_accumulation(o);
  o.line("// combine the {} partial results of each column", cfg_.ty);
  print_block_combine(o);
  if (cfg_.split > 1) print_split_combine(o);
  print_finish(o);
  o.close();
  o.close();
  return kb;
}

}  // namespace

bool column_worthwhile(const RegionInfo& info, const ReduceSpace& space,
                       const CodegenOptions& options) {
  // A column kernel's parallelism is its tiles, or its tiles times the pieces of split
  // columns. With a handful of tiles and long columns that cannot be split, one block would
  // stream most of the tensor: a row-style kernel (strided, but split over blocks) does better.
  constexpr int64_t kFewTiles = 16;
  constexpr int64_t kLongColumn = 65536;
  const int v = vector_width(info, options.vectorize, {space.suffix});
  const ColumnConfig cfg = column_config(info, space, v);
  return cfg.split > 1 || cfg.tiles >= kFewTiles || space.length < kLongColumn;
}

KernelBody build_column(const RegionInfo& info, const ReduceSpace& space,
                        const CodegenOptions& options) {
  const int v = vector_width(info, options.vectorize, {space.suffix});
  return ColumnBuilder(info, space, column_config(info, space, v)).build();
}

}  // namespace fusejit::templates
