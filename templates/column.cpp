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
// Math: accumulators in f32 for float types (i64 for integer sums); the combination order is
// fixed, so results do not depend on timing.
#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/reduction.h"

namespace fusejit::templates {

namespace {

// Threads a full device holds (132 SMs x 2048 on an H200): enough tiles and rows per tile to
// fill it, without making the source depend on the device.
constexpr int64_t kTargetThreads = int64_t{1} << 18;
constexpr int64_t kMaxSharedBytes = 32 * 1024;

struct ColumnConfig {
  int v = 1;
  int64_t tx = 32, ty = 1;
  int64_t tiles_n = 1, tiles = 1;
};

ColumnConfig column_config(const RegionInfo& info, const ReduceSpace& space, int v) {
  ColumnConfig c;
  c.v = v;
  const int64_t columns = space.suffix / v;  // vectors of V columns per p
  // A row of the tile spans TX * V columns: up to 128 bytes (a full line per warp row), down
  // to 32 bytes (one whole sector) when narrower tiles are needed to give every SM a block.
  const int64_t vector_bytes = v * info.min_element_size();
  const int64_t widest = std::max<int64_t>(1, 128 / vector_bytes);
  const int64_t narrowest = std::max<int64_t>(1, 32 / vector_bytes);
  c.tx = std::min<int64_t>({32, pow2_ceil(columns), widest});
  while (c.tx > narrowest && space.prefix * ceil_div(columns, c.tx) * 1024 < kTargetThreads)
    c.tx /= 2;
  c.tiles_n = ceil_div(columns, c.tx);
  c.tiles = space.prefix * c.tiles_n;
  c.ty = pow2_floor(std::max<int64_t>(1, kTargetThreads / (c.tiles * c.tx)));
  c.ty = std::min({c.ty, pow2_ceil(space.length), 1024 / c.tx});
  c.ty = std::max(c.ty, std::max<int64_t>(1, 128 / c.tx));  // at least 128 threads
  c.ty = std::min(c.ty, 1024 / c.tx);
  int64_t acc_bytes = 0;
  for (ir::NodeId r : space.reduces) acc_bytes += dtype_size(accumulator_dtype(info.node(r)));
  while (c.ty > 1 && c.tx * c.ty > 32 &&
         (c.tx * c.ty / 32) * c.tx * v * acc_bytes > kMaxSharedBytes) {
    c.ty /= 2;
  }
  return c;
}

}  // namespace

bool column_worthwhile(const RegionInfo& info, const ReduceSpace& space,
                       const CodegenOptions& options) {
  // A column kernel's parallelism is its tiles; with a handful of them and long columns, one
  // block would stream most of the tensor: a row-style kernel (strided, but split over blocks)
  // does better.
  constexpr int64_t kFewTiles = 16;
  constexpr int64_t kLongColumn = 65536;
  const int v = vector_width(info, options.vectorize, {space.suffix});
  const ColumnConfig cfg = column_config(info, space, v);
  return cfg.tiles >= kFewTiles || space.length < kLongColumn;
}

KernelBody build_column(const RegionInfo& info, const ReduceSpace& space,
                        const CodegenOptions& options) {
  const int v = vector_width(info, options.vectorize, {space.suffix});
  const ColumnConfig cfg = column_config(info, space, v);
  const std::string_view idx = info.index_type();
  const int64_t block = cfg.tx * cfg.ty;
  const int64_t warps = std::max<int64_t>(1, block / 32);
  const bool guard_n = cfg.tiles_n * cfg.tx * v != space.suffix;

  const BasePtr p_root = make_root("p", space.prefix);
  const BasePtr l_root = make_root("l", space.length);
  const BasePtr n_root = make_lane_root("n", "n0", space.suffix, v);
  // Axes before the first reduced one are the prefix, after it the suffix (extent-1 axes
  // carry no digits, so their group does not matter).
  size_t first_reduced = space.shape.size();
  for (size_t a = 0; a < space.shape.size(); ++a) {
    if (space.shape[a] != 1 && is_reduced_axis(space, a)) {
      first_reduced = a;
      break;
    }
  }
  const Index x = grouped_index(space.shape, {p_root, l_root, n_root}, [&](size_t a) {
    if (is_reduced_axis(space, a)) return size_t{1};
    return a < first_reduced ? size_t{0} : size_t{2};
  });
  const Digits kept = {Digit{p_root, 1, space.prefix}, Digit{n_root, 1, space.suffix}};
  const std::string canonical = offset(kept);
  const std::string lane_j = v > 1 ? "j" : "0";

  // Traversal: the reduce operands (and outputs with one value per element) at (p, l, n).
  // Loads that do not depend on l (a weight along the columns) are hoisted out of the l loop.
  Printer tile_prelude, prelude, body, stores;
  Scope tile{&tile_prelude, nullptr, {}};
  Scope outer{&prelude, &tile, {}};
  Scope inner{&body, &outer, {}};
  std::map<ir::NodeId, std::string> finished;
  bool epilogue = false;
  Printer* epi_body = nullptr;
  int names = 0;
  auto leaf = [&](ir::NodeId id, const Index& at, Scope&) -> std::string {
    const DTypeCode& code = dtype_code(info.node(id).dtype);
    const std::string key = ExprEmitter::key(id, at);
    const bool per_tile = !uses(at, l_root);
    Printer& pre = per_tile ? tile_prelude : prelude;
    Scope& pre_scope = per_tile ? tile : outer;
    if (!epilogue && v > 1 && lane(at) == Lane::unit) {
      std::string array;
      if (auto hit = outer.find("vec" + key)) {
        array = *hit;
      } else {
        array = fmt::format("r{}", names++);
        pre.line("{} {}[{}];", code.storage, array, v);
        pre.line("fj_load_vec({}, {} + {});", array, info.input_param(id), offset(at, true));
        pre_scope.memo["vec" + key] = array;
      }
      const std::string var = fmt::format("x{}", names++);
      body.line("const {} {} = {};", code.arith, var, wrap(code.load, array + "[j]"));
      return var;
    }
    if (!epilogue && lane(at) == Lane::none) {
      if (auto hit = outer.find(key)) return *hit;
      const std::string var = fmt::format("h{}", names++);
      pre.line("const {} {} = {};", code.arith, var, load_expr(info, id, offset(at, true)));
      pre_scope.memo[key] = var;
      return var;
    }
    Printer& out = epilogue ? *epi_body : body;
    const std::string var = fmt::format("x{}", names++);
    out.line("const {} {} = {};", code.arith, var, load_expr(info, id, offset(at)));
    return var;
  };
  auto intercept = [&](ir::NodeId id, const Index& at) -> std::optional<std::string> {
    if (space.depth.count(id) == 0) return std::nullopt;
    const auto it = finished.find(id);
    if (it == finished.end() || offset(at) != canonical) {
      throw InternalError(fmt::format("%{} is read at index {} before or outside its column ({})",
                                      id, offset(at), canonical));
    }
    return fmt::format("{}[{}]", it->second, lane_j);
  };
  ExprEmitter emitter(info, leaf, intercept);

  Printer acc_init, combine, finish, shared;
  for (ir::NodeId r : space.reduces) {
    const ir::Node& n = info.node(r);
    const DType acc = accumulator_dtype(n);
    const std::string_view type = dtype_code(acc).arith;
    const std::string_view op = reduce_functor(n.op);
    acc_init.line("{} a{}[{}];", type, r, v);
    acc_init.line("#pragma unroll");
    acc_init.line("for (int j = 0; j < {}; ++j) a{}[j] = {};", v, r, reduce_identity(n.op, acc));
    const ir::Node& operand = info.node(n.inputs[0]);
    const std::string value = emitter.value(n.inputs[0], x, inner);
    body.line("a{0}[{1}] = {2}()(a{0}[{1}], {3});", r, lane_j, op,
              convert(acc, operand.dtype, value));
    if (cfg.tx < 32 && block > cfg.tx) {
      combine.line("#pragma unroll");
      combine.line(
          "for (int j = 0; j < {0}; ++j) a{1}[j] = fj_warp_reduce<{2}, {3}>(a{1}[j], {4}());", v, r,
          cfg.tx, std::min<int64_t>(32, block), op);
    }
    if (warps > 1) {
      shared.line("__shared__ {} part{}[{}][{}];", type, r, warps, cfg.tx * v);
    }
    finish.line("{} v{}[{}];", dtype_code(n.dtype).arith, r, v);
    finish.line("#pragma unroll");
    finish.line("for (int j = 0; j < {}; ++j) v{}[j] = {};", v, r,
                reduce_finish(info, n, fmt::format("a{}[j]", r), space.length));
    finished[r] = fmt::format("v{}", r);
  }
  for (const ReduceOutput& out : space.outputs) {
    if (!out.full) continue;
    const ir::Node& n = info.node(out.id);
    const Index at = index_from_digits(flatten(x), n.shape);
    const std::string value = wrap(dtype_code(n.dtype).store, emitter.value(out.id, at, inner));
    if (v > 1 && lane(at) == Lane::unit) {
      prelude.line("{} s{}[{}];", dtype_code(n.dtype).storage, out.position, v);
      body.line("s{}[j] = {};", out.position, value);
      stores.line("fj_store_vec(out{} + {}, s{});", out.position, offset(at, true), out.position);
    } else {
      body.line("out{}[{}] = {};", out.position, offset(at), value);
    }
  }
  // Epilogue: the outputs with one value per column, per lane.
  epilogue = true;
  Printer epi_prelude, epi, epi_stores;
  epi_body = &epi;
  Scope epi_scope{&epi, nullptr, {}};
  for (const ReduceOutput& out : space.outputs) {
    if (out.full) continue;
    const ir::Node& n = info.node(out.id);
    const Index at = index_from_digits(kept, n.shape);
    const std::string value = wrap(dtype_code(n.dtype).store, emitter.value(out.id, at, epi_scope));
    if (v > 1 && lane(at) == Lane::unit) {
      epi_prelude.line("{} s{}[{}];", dtype_code(n.dtype).storage, out.position, v);
      epi.line("s{}[j] = {};", out.position, value);
      epi_stores.line("fj_store_vec(out{} + {}, s{});", out.position, offset(at, true),
                      out.position);
    } else {
      epi.line("out{}[{}] = {};", out.position, offset(at), value);
    }
  }

  KernelBody kb;
  kb.kind = std::string(fusion::region_kind_name(info.region.kind));
  kb.reduces = true;
  kb.block = static_cast<int>(block);
  kb.blocks_per_sm = std::max(1, info.target.blocks_per_sm(static_cast<int>(block)));
  kb.work_blocks = cfg.tiles;
  Printer& o = kb.code;
  o.line(
      "// {}, column-style: [{}, {}, {}] reduced over the middle; tiles of {} x {} columns, {} "
      "rows of threads",
      kb.kind, space.prefix, space.length, space.suffix, cfg.tx, v, cfg.ty);
  o.line("// {} index arithmetic", info.wide_index ? "64-bit" : "32-bit");
  print_signature(o, info, kb.block);
  o.splice(shared);
  o.line("const int tx = threadIdx.x % {};", cfg.tx);
  o.line("const int ty = threadIdx.x / {};", cfg.tx);
  o.open("for ({0} t = blockIdx.x; t < {1}; t += gridDim.x)", idx, cfg.tiles);
  if (cfg.tiles_n == 1) {
    if (space.prefix > 1) o.line("const {} p = t;", idx);
    o.line("const {} n0 = tx * {};", idx, v);
  } else {
    if (space.prefix > 1) o.line("const {} p = t / {};", idx, cfg.tiles_n);
    o.line("const {} n0 = (t % {} * {} + tx) * {};", idx, cfg.tiles_n, cfg.tx, v);
  }
  if (guard_n) o.line("const bool live = n0 < {};", space.suffix);
  o.splice(acc_init);
  if (guard_n) o.open("if (live)");
  o.splice(tile_prelude);
  o.line("#pragma unroll 4");
  o.open("for ({} l = ty; l < {}; l += {})", idx, space.length, cfg.ty);
  o.splice(prelude);
  const bool uses_n = mentions(body.str(), "n");
  if (v > 1) {
    o.line("#pragma unroll");
    o.open("for (int j = 0; j < {}; ++j)", v);
    if (uses_n) o.line("const {} n = n0 + j;", idx);
    o.splice(body);
    o.close();
  } else {
    if (uses_n) o.line("const {} n = n0;", idx);
    o.splice(body);
  }
  o.splice(stores);
  o.close();
  if (guard_n) o.close();
  o.line("// combine the {} partial results of each column", cfg.ty);
  o.splice(combine);
  if (warps > 1) {
    o.open("if ((threadIdx.x & 31) < {})", cfg.tx);
    for (ir::NodeId r : space.reduces) {
      o.line("#pragma unroll");
      o.line("for (int j = 0; j < {0}; ++j) part{1}[threadIdx.x >> 5][tx * {0} + j] = a{1}[j];", v,
             r);
    }
    o.close();
    o.line("__syncthreads();");
    o.open("if (ty == 0)");
    for (ir::NodeId r : space.reduces) {
      o.line("#pragma unroll");
      o.open("for (int w = 1; w < {}; ++w)", warps);
      o.line("#pragma unroll");
      o.line("for (int j = 0; j < {0}; ++j) a{1}[j] = {2}()(a{1}[j], part{1}[w][tx * {0} + j]);", v,
             r, reduce_functor(info.node(r).op));
      o.close();
    }
    o.close();
    o.line("__syncthreads();");
  }
  if (guard_n) {
    o.open("if (ty == 0 && live)");
  } else {
    o.open("if (ty == 0)");
  }
  o.splice(finish);
  o.splice(epi_prelude);
  const bool epi_uses_n = mentions(epi.str(), "n");
  if (v > 1) {
    o.line("#pragma unroll");
    o.open("for (int j = 0; j < {}; ++j)", v);
    if (epi_uses_n) o.line("const {} n = n0 + j;", idx);
    o.splice(epi);
    o.close();
  } else {
    if (epi_uses_n) o.line("const {} n = n0;", idx);
    o.splice(epi);
  }
  o.splice(epi_stores);
  o.close();
  o.close();
  o.close();
  return kb;
}

}  // namespace fusejit::templates
