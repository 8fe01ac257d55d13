// templates/transpose: the tiled variant of the pointwise kernel, for regions that read an input
// through a transposition: a permute (or several views) that moves the input's innermost,
// contiguous axis away from the output's innermost axis.
//
// The linear sweep (pointwise.cpp) reads such an input one element per lane at a large stride:
// each lane touches its own 32-byte sector, and most of the DRAM traffic is thrown away. Here the
// output's linear index is cut, from the index analysis (index.h), as
//     i = ((o * R + r) * M + m) * C + c
// c: the output's innermost run (extent C); r: the output digit that the transposed input holds
// innermost (extent R, contiguous in the input); o and m: the rest, one batch root b = o * M + m.
// A block handles one T x T tile of (c, r) for one b at a time (a grid-stride loop over b and the
// tiles), in two phases:
//   load    each transposed input's tile, in its storage dtype, read along r (its contiguous
//           axis) in 16-byte chunks, coalesced, and written to shared memory as they are;
//   output  after __syncthreads, each thread computes V consecutive outputs along c (the
//           output's contiguous axis), reads the transposed values from shared memory and every
//           other input from global memory as the linear sweep does (vector loads when
//           contiguous, hoisted loads when broadcast), and writes one 16-byte vector store.
// Shared memory holds tile[cl][rl] in rows of T elements. Instead of padding, which would break
// the 16-byte alignment of the chunks, the chunks of row cl are swizzled: chunk q is stored at
// q ^ (cl / V % 8). The load phase writes 8 chunks of one row per quarter warp: 8 distinct
// positions. The output phase has 8 threads on 8 consecutive c-vectors (distinct cl / V) and 4
// consecutive rl per warp (one chunk): 8 distinct chunk positions of 128-byte rows, 32 banks.
// Edge tiles (extents that T does not divide) are guarded.
//
// Left to the linear sweep: outputs of several element counts (several sweeps), transpositions
// whose R or C is under kMinExtent (a tile would stay mostly empty), inputs whose index the
// analysis cannot split into digits (opaque bases), and tiles that do not fit in shared memory.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ir/shape.h"
#include "templates/builders.h"

namespace fusejit::templates {

namespace {

constexpr int kBlock = 256;
// Below this extent of r or c a 32- or 64-wide tile stays mostly empty; the strided reads of
// the linear sweep then cost less than the shared-memory round trip.
constexpr int64_t kMinExtent = 16;
// 64 x 64 tiles while all of a block's tiles fit in 16 KiB (more than 5 blocks of 256 threads
// fit on an SM with 100 KiB of shared memory); 32 x 32 tiles up to the 48 KiB of static shared
// memory.
constexpr int kPreferredTile = 64;
constexpr int kPreferredShared = 16 * 1024;
constexpr int kSmallTile = 32;
constexpr int kMaxShared = 48 * 1024;
// Passes a phase may take over a 64 x 64 tile before 32 x 32 tiles are used instead: each pass
// holds its own indices in registers (the compiler keeps them across the tile loop).
constexpr int kMaxPasses = 4;
// Registers a thread needs besides the load phase's chunks in flight: indices and pointers (the
// output phase, two passes at a time, needs no more than the load phase; ptxas -v agrees for
// the layout suite's shapes).
constexpr int kBaseRegisters = 16;
// Output passes unrolled together: two passes' loads in flight per thread, without spilling
// at 32 registers (full residency); four spilled f32 tiles.
constexpr int kOutputUnroll = 2;
// Shared memory the hardware reserves per resident block (sm_80 and later).
constexpr int kReservedShared = 1024;
// Chunks per swizzle period: 8 chunks of 16 bytes cover the 32 banks once.
constexpr int kSwizzle = 8;

// The cut of the output's linear index: i = ((o * R + r) * M + m) * C + c.
struct Axes {
  int64_t c = 1, r = 1, mid = 1, outer = 1;
};

// One input read through the transposition, at one index: the tile that holds it.
struct TiledRead {
  ir::NodeId id = -1;
  Index at;          // in the roots b, r, c
  std::string key;   // ExprEmitter::key of (id, at)
  int chunk = 1;     // elements per chunk along r: 16 bytes when R allows
  std::string tile;  // the shared array
};

struct TileSchedule {
  Axes axes;
  BasePtr b, r, c;                              // b = o * M + m; c is the lane root when vc > 1
  int vc = 1;                                   // outputs per thread along c
  int tile = kPreferredTile;                    // T: the tile is T (along c) x T (along r)
  int64_t tiles_r = 1, tiles_c = 1, tiles = 1;  // tiles along r, along c, and in all
  std::vector<Index> outputs;                   // each output's index in b, r, c
  std::vector<TiledRead> reads;
  int shared_bytes = 0;
  int blocks_per_sm = 1;
};

std::vector<Index> output_indices(const RegionInfo& info, const Digits& flat) {
  std::vector<Index> out;
  for (ir::NodeId id : info.region.outputs)
    out.push_back(index_from_digits(flat, info.node(id).shape));
  return out;
}

// The (input, index) pairs the region reads when its outputs are computed at `outputs`: the
// expression printer run once into a scratch printer, with a leaf that only records.
std::vector<std::pair<ir::NodeId, Index>> reads_at(const RegionInfo& info,
                                                   const std::vector<Index>& outputs) {
  std::vector<std::pair<ir::NodeId, Index>> reads;
  Printer scratch;
  Scope scope{&scratch, nullptr, {}};
  auto leaf = [&](ir::NodeId id, const Index& at, Scope&) {
    reads.emplace_back(id, at);
    return std::string("0");
  };
  auto none = [](ir::NodeId, const Index&) -> std::optional<std::string> { return std::nullopt; };
  ExprEmitter emitter(info, leaf, none);
  for (size_t k = 0; k < outputs.size(); ++k)
    emitter.value(info.region.outputs[k], outputs[k], scope);
  return reads;
}

// Which output digit each input holds innermost, over the linear index i: an input whose
// innermost digit is (i / d) % R with d > 1, that also reads the output's innermost run i % C,
// is transposed. The first one with both extents at least kMinExtent decides the cut.
std::optional<Axes> transposed_axes(const RegionInfo& info, int64_t count) {
  const BasePtr i = make_root("i", count);
  for (const auto& [id, at] : reads_at(info, output_indices(info, {Digit{i, 1, count}}))) {
    const Digits flat = flatten(at);
    if (flat.empty() || flat.back().base != i || flat.back().div == 1) continue;
    const Digit inner = flat.back();
    for (const Digit& d : flat) {
      if (d.base != i || d.div != 1 || inner.div % d.ext != 0) continue;
      if (d.ext < kMinExtent || inner.ext < kMinExtent) break;
      return Axes{d.ext, inner.ext, inner.div / d.ext, count / (inner.div * inner.ext)};
    }
  }
  return std::nullopt;
}

// An index that the tiles can serve: r innermost (stride 1) and c a whole digit.
bool is_tiled(const Index& at, const TileSchedule& s) {
  const Digits flat = flatten(at);
  if (flat.empty() || flat.back().base != s.r || flat.back().div != 1) return false;
  if (flat.back().ext != s.axes.r) return false;
  return std::any_of(flat.begin(), flat.end(), [&](const Digit& d) {
    return d.base == s.c && d.div == 1 && d.ext == s.axes.c;
  });
}

// Passes of 256 threads over a T x T tile moved `width` elements at a time.
int pass_count(int tile, int width) {
  return static_cast<int>(ceil_div(tile * tile / width, kBlock));
}

// T: 64 x 64 while the tiles fit the preferred shared-memory budget and no phase needs more than
// kMaxPasses passes (narrow chunks or scalar outputs: odd extents, vectorize off), else 32 x 32.
int tile_size(const RegionInfo& info, const TileSchedule& s) {
  for (int t : {kPreferredTile, kSmallTile}) {
    int bytes = 0;
    bool few_passes = pass_count(t, s.vc) <= kMaxPasses;
    for (const TiledRead& read : s.reads) {
      bytes += t * t * dtype_size(info.node(read.id).dtype);
      few_passes = few_passes && pass_count(t, read.chunk) <= kMaxPasses;
    }
    if (t == kSmallTile) return bytes <= kMaxShared ? t : 0;
    if (bytes <= kPreferredShared && few_passes) return t;
  }
  return 0;
}

// Blocks per SM: as many as the target's threads and shared memory allow, and registers for
// the load phase's chunks in flight (all loads of a tile are issued before the first
// shared-memory write) on top of kBaseRegisters for indices and the output phase.
int residency(const RegionInfo& info, const TileSchedule& s) {
  int words = 0;  // 32-bit registers of chunks in flight per thread
  for (const TiledRead& read : s.reads) {
    words += pass_count(s.tile, read.chunk) * read.chunk * dtype_size(info.node(read.id).dtype) / 4;
  }
  const int need = kBaseRegisters + words;
  const int by_shared = info.target.shared_per_sm / (s.shared_bytes + kReservedShared);
  int blocks = std::max(1, std::min(info.target.blocks_per_sm(kBlock), by_shared));
  while (blocks > 1 && info.target.registers_for(kBlock, blocks) < need) --blocks;
  return blocks;
}

bool size_tiles(const RegionInfo& info, TileSchedule& s) {
  s.tile = tile_size(info, s);
  if (s.tile == 0) return false;
  for (const TiledRead& read : s.reads) {
    s.shared_bytes += s.tile * s.tile * dtype_size(info.node(read.id).dtype);
  }
  s.tiles_r = ceil_div(s.axes.r, s.tile);
  s.tiles_c = ceil_div(s.axes.c, s.tile);
  s.tiles = s.axes.outer * s.axes.mid * s.tiles_r * s.tiles_c;
  s.blocks_per_sm = residency(info, s);
  return true;
}

std::optional<TileSchedule> schedule(const RegionInfo& info, const CodegenOptions& options) {
  const int64_t count = ir::numel(info.node(info.region.outputs[0]).shape);
  for (ir::NodeId id : info.region.outputs) {
    if (ir::numel(info.node(id).shape) != count) return std::nullopt;  // several sweeps
  }
  const std::optional<Axes> axes = transposed_axes(info, count);
  if (!axes) return std::nullopt;
  TileSchedule s;
  s.axes = *axes;
  s.vc = vector_width(info, options.vectorize, {axes->c});
  s.b = make_root("b", axes->outer * axes->mid);
  s.r = make_root("r", axes->r);
  s.c = s.vc > 1 ? make_lane_root("c", "c0", axes->c, s.vc) : make_root("c", axes->c);
  s.outputs = output_indices(info, {Digit{s.b, axes->mid, axes->outer}, Digit{s.r, 1, axes->r},
                                    Digit{s.b, 1, axes->mid}, Digit{s.c, 1, axes->c}});
  for (const auto& [id, at] : reads_at(info, s.outputs)) {
    if (!is_tiled(at, s)) continue;
    const int size = dtype_size(info.node(id).dtype);
    s.reads.push_back(TiledRead{id, at, ExprEmitter::key(id, at),
                                vector_width(size, options.vectorize, {axes->r}),
                                fmt::format("tile{}", s.reads.size())});
  }
  if (s.reads.empty() || !size_tiles(info, s)) return std::nullopt;
  return s;
}

// `(cond) && ...` of the conditions that can fail, or "" when none can.
std::string guard(const std::vector<std::pair<bool, std::string>>& conditions) {
  std::string g;
  for (const auto& [needed, cond] : conditions) {
    if (needed) g += (g.empty() ? "" : " && ") + cond;
  }
  return g;
}

void open_guarded(Printer& p, const std::string& g) {
  if (g.empty()) return;
  p.open("if ({})", g);
}

// Tile t of the grid-stride loop: batch b, and the tile's first r (rb) and c (cb).
void print_tile_origin(Printer& p, const TileSchedule& s, std::string_view idx) {
  const BasePtr t = make_root("t", s.tiles);
  const int64_t per_b = s.tiles_r * s.tiles_c;
  if (s.axes.outer * s.axes.mid > 1) {
    p.line("const {} b = {};", idx, offset(Digits{Digit{t, per_b, s.axes.outer * s.axes.mid}}));
  }
  p.line("const {} rb = ({}) * {};", idx, offset(Digits{Digit{t, s.tiles_c, s.tiles_r}}), s.tile);
  p.line("const {} cb = ({}) * {};", idx, offset(Digits{Digit{t, 1, s.tiles_c}}), s.tile);
}

// The load phase of one tile: every thread loads its chunks first (all loads in flight at
// once), then writes them to shared memory at their swizzled position.
void print_load(Printer& p, const RegionInfo& info, const TileSchedule& s, const TiledRead& read,
                std::string_view idx) {
  const DTypeCode& code = dtype_code(info.node(read.id).dtype);
  const int per_row = s.tile / read.chunk;  // chunks per tile row
  const int total = s.tile * per_row;
  const int passes = pass_count(s.tile, read.chunk);
  const std::string g =
      guard({{passes * kBlock > total, fmt::format("u < {}", total)},
             {s.axes.c % s.tile != 0, fmt::format("cb + cl < {}", s.axes.c)},
             {s.axes.r % s.tile != 0, fmt::format("rb + q * {} < {}", read.chunk, s.axes.r)}});
  const std::string w = "w" + read.tile.substr(4);
  p.line("// {}: {} x {} elements, {}-element chunks along its contiguous axis", read.tile, s.tile,
         s.tile, read.chunk);
  p.line("{} {}[{}][{}];", code.storage, w, passes, read.chunk);
  for (bool store : {false, true}) {
    p.line("#pragma unroll");
    p.open("for (int p = 0; p < {}; ++p)", passes);
    p.line("const int u = p * {} + tid;", kBlock);
    p.line("const int cl = u / {}, q = u % {};", per_row, per_row);
    if (!store) p.line("const {} c = cb + cl, r = rb + q * {};", idx, read.chunk);
    open_guarded(p, g);
    if (store) {
      p.line("fj_store_vec({} + cl * {} + (q ^ (cl / {} % {})) * {}, {}[p]);", read.tile, s.tile,
             s.vc, std::min(kSwizzle, per_row), read.chunk, w);
    } else {
      p.line("fj_load_vec({}[p], {} + {});", w, info.input_param(read.id), offset(read.at));
    }
    if (!g.empty()) p.close();
    p.close();
  }
}

// The output phase's loop: pass p covers 256 c-vectors of the tile; 8 consecutive threads take
// 8 consecutive vectors of one row rl (128 bytes of output when V fills 16 bytes), the next 8
// the next rl, so that a warp stores 4 whole rows and reads its shared values without bank
// conflicts (see the swizzle in the header comment).
void print_output_loop(Printer& p, const TileSchedule& s, std::string_view idx,
                       const Printer& prelude, const Printer& body, const Printer& stores) {
  const int v = s.vc;
  const int per_row = s.tile / v;  // c-vectors per tile row
  const int across = std::min(kSwizzle, per_row);
  const int total = s.tile * per_row;
  const int passes = pass_count(s.tile, v);
  const std::string c = v > 1 ? "c0" : "c";
  const std::string g = guard({{passes * kBlock > total, fmt::format("u < {}", total)},
                               {s.axes.r % s.tile != 0, fmt::format("r < {}", s.axes.r)},
                               {s.axes.c % s.tile != 0, fmt::format("{} < {}", c, s.axes.c)}});
  p.line("#pragma unroll {}", kOutputUnroll);
  p.open("for (int p = 0; p < {}; ++p)", passes);
  p.line("const int u = p * {} + tid;", kBlock);
  p.line("const int rl = u / {} % {};", across, s.tile);
  p.line("const int cl = (u / {} * {} + u % {}) * {};", across * s.tile, across, across, v);
  p.line("const {} r = rb + rl, {} = cb + cl;", idx, c);
  open_guarded(p, g);
  p.splice(prelude);
  if (v > 1) {
    p.line("#pragma unroll");
    p.open("for (int j = 0; j < {}; ++j)", v);
    if (mentions(body.str(), "c")) p.line("const {} c = c0 + j;", idx);
    p.splice(body);
    p.close();
  } else {
    p.splice(body);
  }
  p.splice(stores);
  if (!g.empty()) p.close();
  p.close();
}

// "in0 as tile0, ..." for the kernel's header comment.
std::string tile_list(const RegionInfo& info, const TileSchedule& s) {
  std::string list;
  for (const TiledRead& read : s.reads) {
    list +=
        fmt::format("{}{} as {}", list.empty() ? "" : ", ", info.input_param(read.id), read.tile);
  }
  return list;
}

// The output phase: the expression DAG per lane, transposed reads from the tiles, the rest as
// the linear sweep reads it; one vector store per output.
void print_outputs(Printer& p, const RegionInfo& info, const TileSchedule& s,
                   std::string_view idx) {
  const int v = s.vc;
  Printer prelude, body, stores;
  Scope outer{&prelude, nullptr, {}};
  Scope inner{&body, &outer, {}};
  LegacyLaneLoads loads(info, v, prelude, body, outer);
  std::set<int> offsets;  // chunk widths whose shared-memory offset the prelude declares
  int values = 0;
  auto leaf = [&](ir::NodeId id, const Index& at, Scope&) -> std::string {
    const std::string key = ExprEmitter::key(id, at);
    const auto read = std::find_if(s.reads.begin(), s.reads.end(),
                                   [&](const TiledRead& t) { return t.key == key; });
    if (read == s.reads.end()) return loads.load(id, at);
    const int per_row = s.tile / read->chunk;
    if (offsets.insert(read->chunk).second) {
      // Element (cl + j, rl) of the tile: the swizzle is the same for every lane j (cl % V == 0).
      prelude.line("const int so{} = cl * {} + ((rl / {}) ^ (cl / {} % {})) * {} + rl % {};",
                   read->chunk, s.tile, read->chunk, v, std::min(kSwizzle, per_row), read->chunk,
                   read->chunk);
    }
    const DTypeCode& code = dtype_code(info.node(id).dtype);
    const std::string var = fmt::format("y{}", values++);
    const std::string at_lane = v > 1 ? fmt::format("so{} + j * {}", read->chunk, s.tile)
                                      : fmt::format("so{}", read->chunk);
    body.line("const {} {} = {};", code.arith, var,
              wrap(code.load, fmt::format("{}[{}]", read->tile, at_lane)));
    return var;
  };
  auto none = [](ir::NodeId, const Index&) -> std::optional<std::string> { return std::nullopt; };
  ExprEmitter emitter(info, leaf, none);
  for (size_t k = 0; k < s.outputs.size(); ++k) {
    const ir::Node& n = info.node(info.region.outputs[k]);
    const std::string value = emitter.value(info.region.outputs[k], s.outputs[k], inner);
    if (v == 1) {
      body.line("out{}[{}] = {};", k, offset(s.outputs[k]), wrap(dtype_code(n.dtype).store, value));
    } else {
      print_vector_store(prelude, body, stores, n.dtype, fmt::format("s{}", k),
                         fmt::format("out{} + {}", k, offset(s.outputs[k], true)), v, value);
    }
  }
  print_output_loop(p, s, idx, prelude, body, stores);
}

}  // namespace

std::optional<KernelBody> build_tiled_transpose(const RegionInfo& info,
                                                const CodegenOptions& options) {
  const std::optional<TileSchedule> s = schedule(info, options);
  if (!s) return std::nullopt;
  const std::string_view idx = info.index_type();
  KernelBody kb;
  kb.kind = "pointwise";
  kb.block = kBlock;
  kb.blocks_per_sm = s->blocks_per_sm;
  kb.work_blocks = s->tiles;
  Printer& out = kb.code;
  out.line(
      "// tiled transpose: out[((o * {} + r) * {} + m) * {} + c], o < {}; {} x {} tiles of (c, r)",
      s->axes.r, s->axes.mid, s->axes.c, s->axes.outer, s->tile, s->tile);
  out.line("// through {} bytes of shared memory ({}), {} outputs per thread along c",
           s->shared_bytes, tile_list(info, *s), s->vc);
  out.line("// {} index arithmetic", info.wide_index ? "64-bit" : "32-bit");
  print_signature(out, info, kBlock, s->blocks_per_sm);
  for (const TiledRead& read : s->reads) {
    out.line("__shared__ __align__(16) {} {}[{}];", dtype_code(info.node(read.id).dtype).storage,
             read.tile, s->tile * s->tile);
  }
  out.line("const int tid = threadIdx.x;");
  out.open("for ({} t = blockIdx.x; t < {}; t += gridDim.x)", idx, s->tiles);
  print_tile_origin(out, *s, idx);
  for (const TiledRead& read : s->reads) print_load(out, info, *s, read, idx);
  out.line("__syncthreads();");
  print_outputs(out, info, *s, idx);
  out.line("__syncthreads();  // the next tile overwrites shared memory");
  out.close();
  out.close();
  return kb;
}

}  // namespace fusejit::templates
