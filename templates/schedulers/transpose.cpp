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
#include <map>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/schedulers/registry.h"

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
  ValueKey key;      // the value memo's key of (id, at)
  int chunk = 1;     // elements per chunk along r: 16 bytes when R allows
  kir::VarP tile;    // the shared array tile<k>
};

// The kernel's variables: the tile loop's t, the tile's batch b and first r and c (rb, cb),
// the thread's tid, the phases' pass p, slot u, column cl and chunk q, the output phase's row
// rl and lane j, and the roots r and c (c0 at lane 0).
struct TileVars {
  kir::VarP t, b, rb, cb, tid, p, u, cl, q, rl, j, r, c, c0;
};

TileVars tile_vars(const std::string& idx) {
  const auto index = [&](const char* name) { return kir::variable(idx, name); };
  const auto local = [](const char* name) { return kir::variable("int", name); };
  return TileVars{index("t"), index("b"), index("rb"), index("cb"), local("tid"),
                  local("p"), local("u"), local("cl"), local("q"),  local("rl"),
                  local("j"), index("r"), index("c"),  index("c0")};
}

struct TileSchedule {
  Axes axes;
  TileVars vars;
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
  kir::Block scratch;
  ValueScope scope{&scratch, nullptr, {}};
  Values values(info, [&](ir::NodeId id, const Index& at, ValueScope&) {
    reads.emplace_back(id, at);
    return kir::lit(0);
  });
  for (size_t k = 0; k < outputs.size(); ++k)
    values.value(info.region.outputs[k], outputs[k], scope);
  return reads;
}

// Which output digit each input holds innermost, over the linear index i: an input whose
// innermost digit is (i / d) % R with d > 1, that also reads the output's innermost run i % C,
// is transposed. The first one with both extents at least kMinExtent decides the cut.
std::optional<Axes> transposed_axes(const RegionInfo& info, int64_t count) {
  const BasePtr i = make_root(kir::variable("int", "i"), count);
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

// `tile`: T as the parameters give it; 0: tile_size's.
bool size_tiles(const RegionInfo& info, TileSchedule& s, int tile) {
  s.tile = tile != 0 ? tile : tile_size(info, s);
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

// The tiles of the region (of `tile` x `tile`; 0: the size tile_size picks), or why it gets
// none: the reason, in `why`.
std::optional<TileSchedule> schedule(const RegionInfo& info, const CodegenOptions& options,
                                     std::string& why, int tile = 0) {
  const int64_t count = ir::numel(info.node(info.region.outputs[0]).shape);
  for (ir::NodeId id : info.region.outputs) {
    if (ir::numel(info.node(id).shape) != count) {
      why = "its outputs have different element counts (one sweep each)";
      return std::nullopt;
    }
  }
  const std::optional<Axes> axes = transposed_axes(info, count);
  if (!axes) {
    why = fmt::format("it reads no input through a transposition of extents of at least {}",
                      kMinExtent);
    return std::nullopt;
  }
  TileSchedule s;
  s.axes = *axes;
  s.vc = vector_width(info, options.vectorize, {axes->c});
  s.vars = tile_vars(std::string(info.index_type()));
  s.b = make_root(s.vars.b, axes->outer * axes->mid);
  s.r = make_root(s.vars.r, axes->r);
  s.c =
      s.vc > 1 ? make_lane_root(s.vars.c, s.vars.c0, axes->c, s.vc) : make_root(s.vars.c, axes->c);
  s.outputs = output_indices(info, {Digit{s.b, axes->mid, axes->outer}, Digit{s.r, 1, axes->r},
                                    Digit{s.b, 1, axes->mid}, Digit{s.c, 1, axes->c}});
  for (const auto& [id, at] : reads_at(info, s.outputs)) {
    if (!is_tiled(at, s)) continue;
    const int size = dtype_size(info.node(id).dtype);
    const std::string type =
        fmt::format("__shared__ __align__(16) {}", dtype_code(info.node(id).dtype).storage);
    s.reads.push_back(TiledRead{id, at, value_key(id, at),
                                vector_width(size, options.vectorize, {axes->r}),
                                kir::variable(type, fmt::format("tile{}", s.reads.size()))});
  }
  if (s.reads.empty()) {
    why = "no transposed read is one a tile serves (its input's contiguous axis innermost)";
    return std::nullopt;
  }
  if (!size_tiles(info, s, tile)) {
    why = fmt::format("its tiles do not fit in {} bytes of shared memory", kMaxShared);
    return std::nullopt;
  }
  return s;
}

// `cond && ...` of the conditions that can fail, or null when none can.
kir::ExprP guard(const std::vector<std::pair<bool, kir::ExprP>>& conditions) {
  kir::ExprP g;
  for (const auto& [needed, cond] : conditions) {
    if (needed) g = g ? kir::infix(g, "&&", cond) : cond;
  }
  return g;
}

// The block inside `if (g)`, or `b` itself when nothing needs guarding.
kir::Block& guarded(kir::Block& b, const kir::ExprP& g) { return g ? b.branch(g) : b; }

kir::ExprP offset_of(const Digits& digits) {
  int64_t total = 1;
  for (const Digit& d : digits) total *= d.ext;
  return kir::offset(Index{Shape{total}, {digits}});
}

kir::ExprP v(const kir::VarP& var) { return kir::var(var); }
kir::ExprP n(int64_t value) { return kir::lit(value); }

// Tile t of the grid-stride loop: batch b, and the tile's first r (rb) and c (cb).
void add_tile_origin(kir::Block& p, const TileSchedule& s) {
  const BasePtr t = make_root(s.vars.t, s.tiles);
  const int64_t per_b = s.tiles_r * s.tiles_c;
  if (s.axes.outer * s.axes.mid > 1) {
    p.let(s.vars.b, offset_of(Digits{Digit{t, per_b, s.axes.outer * s.axes.mid}}));
  }
  p.let(s.vars.rb,
        kir::mul(kir::group(offset_of(Digits{Digit{t, s.tiles_c, s.tiles_r}})), n(s.tile)));
  p.let(s.vars.cb, kir::mul(kir::group(offset_of(Digits{Digit{t, 1, s.tiles_c}})), n(s.tile)));
}

// The load phase of one tile: every thread loads its chunks first (all loads in flight at
// once), then writes them to shared memory at their swizzled position.
void add_load(kir::Block& p, const RegionInfo& info, const TileSchedule& s, const TiledRead& read) {
  const TileVars& x = s.vars;
  const DTypeCode& code = dtype_code(info.node(read.id).dtype);
  const int per_row = s.tile / read.chunk;  // chunks per tile row
  const int total = s.tile * per_row;
  const int passes = pass_count(s.tile, read.chunk);
  const kir::ExprP g =
      guard({{passes * kBlock > total, kir::lt(v(x.u), n(total))},
             {s.axes.c % s.tile != 0, kir::lt(kir::add(v(x.cb), v(x.cl)), n(s.axes.c))},
             {s.axes.r % s.tile != 0,
              kir::lt(kir::add(v(x.rb), kir::mul(v(x.q), n(read.chunk))), n(s.axes.r))}});
  p.comment("{}: {} x {} elements, {}-element chunks along its contiguous axis", read.tile->name,
            s.tile, s.tile, read.chunk);
  // w<k>[p][e]: the thread's chunks of tile<k>, between the global load and the shared store.
  const kir::ExprP w = p.array(std::string(code.storage), "w" + read.tile->name.substr(4),
                               std::vector<int64_t>{passes, read.chunk});
  const kir::ExprP tile = kir::var(read.tile);
  for (bool store : {false, true}) {
    kir::Block& pass = p.loop(x.p, n(0), n(passes), nullptr, 1);
    pass.let(x.u, kir::add(kir::mul(v(x.p), n(kBlock)), v(x.tid)));
    pass.let(x.cl, kir::infix(v(x.u), "/", n(per_row)));
    pass.let(x.q, kir::infix(v(x.u), "%", n(per_row)));
    if (!store) {
      pass.let(x.c, kir::add(v(x.cb), v(x.cl)));
      pass.let(x.r, kir::add(v(x.rb), kir::mul(v(x.q), n(read.chunk))));
    }
    kir::Block& body = guarded(pass, g);
    const kir::ExprP chunk = kir::subscript(w, v(x.p));
    if (store) {
      // tile + cl * T + (q ^ (cl / V % swizzle)) * chunk
      const kir::ExprP swizzle =
          kir::group(kir::infix(v(x.q), "^",
                                kir::group(kir::infix(kir::infix(v(x.cl), "/", n(s.vc)), "%",
                                                      n(std::min(kSwizzle, per_row))))));
      body.eval(kir::store_vec(
          kir::add(kir::add(tile, kir::mul(v(x.cl), n(s.tile))), kir::mul(swizzle, n(read.chunk))),
          chunk));
    } else {
      body.eval(
          kir::load_vec(chunk, kir::add(kir::var(info.input_var(read.id)), kir::offset(read.at))));
    }
  }
}

// The output phase's loop: pass p covers 256 c-vectors of the tile; 8 consecutive threads take
// 8 consecutive vectors of one row rl (128 bytes of output when V fills 16 bytes), the next 8
// the next rl, so that a warp stores 4 whole rows and reads its shared values without bank
// conflicts (see the swizzle in the header comment).
void add_output_loop(kir::Block& p, const TileSchedule& s, const kir::Block& prelude,
                     const kir::Block& body, const kir::Block& stores) {
  const int vc = s.vc;
  const int per_row = s.tile / vc;  // c-vectors per tile row
  const int across = std::min(kSwizzle, per_row);
  const int total = s.tile * per_row;
  const int passes = pass_count(s.tile, vc);
  const TileVars& x = s.vars;
  const kir::VarP& c = vc > 1 ? x.c0 : x.c;
  const kir::ExprP g = guard({{passes * kBlock > total, kir::lt(v(x.u), n(total))},
                              {s.axes.r % s.tile != 0, kir::lt(v(x.r), n(s.axes.r))},
                              {s.axes.c % s.tile != 0, kir::lt(kir::var(c), n(s.axes.c))}});
  kir::Block& pass = p.loop(x.p, n(0), n(passes), nullptr, kOutputUnroll);
  pass.let(x.u, kir::add(kir::mul(v(x.p), n(kBlock)), v(x.tid)));
  pass.let(x.rl, kir::infix(kir::infix(v(x.u), "/", n(across)), "%", n(s.tile)));
  // cl = (u / (across * T) * across + u % across) * V
  pass.let(
      x.cl,
      kir::mul(kir::group(kir::add(kir::mul(kir::infix(v(x.u), "/", n(across * s.tile)), n(across)),
                                   kir::infix(v(x.u), "%", n(across)))),
               n(vc)));
  pass.let(x.r, kir::add(v(x.rb), v(x.rl)));
  pass.let(c, kir::add(v(x.cb), v(x.cl)));
  kir::Block& inside = guarded(pass, g);
  inside.splice(prelude);
  if (vc > 1) {
    kir::Block& lanes = inside.loop(x.j, n(0), n(vc), nullptr, 1);
    lanes.let_if_read(x.c, kir::add(v(x.c0), v(x.j)));
    lanes.splice(body);
  } else {
    inside.splice(body);
  }
  inside.splice(stores);
}

// "in0 as tile0, ..." for the kernel's header comment.
std::string tile_list(const RegionInfo& info, const TileSchedule& s) {
  std::string list;
  for (const TiledRead& read : s.reads) {
    list += fmt::format("{}{} as {}", list.empty() ? "" : ", ", info.input_var(read.id)->name,
                        read.tile->name);
  }
  return list;
}

// Transposed reads come from the tiles: element (cl + j, rl) of the tile, whose swizzle is
// the same for every lane j (cl % V == 0), so the prelude declares its offset so<chunk> once.
class TileReads {
 public:
  TileReads(const RegionInfo& info, const TileSchedule& s, kir::Block& prelude, kir::Block& body)
      : info_(info), s_(s), prelude_(prelude), body_(body) {}

  // The value, or null when the read is not a tiled one.
  kir::ExprP load(ir::NodeId id, const Index& at) {
    const ValueKey key = value_key(id, at);
    const auto read = std::find_if(s_.reads.begin(), s_.reads.end(),
                                   [&](const TiledRead& t) { return t.key == key; });
    if (read == s_.reads.end()) return nullptr;
    kir::ExprP& so = offsets_[read->chunk];
    if (!so) so = declare_offset(read->chunk);
    const kir::ExprP at_lane = s_.vc > 1 ? kir::add(so, kir::mul(v(s_.vars.j), n(s_.tile))) : so;
    const DTypeCode& code = dtype_code(info_.node(id).dtype);
    return body_.let(std::string(code.arith), fmt::format("y{}", values_++),
                     apply(code.load, kir::subscript(kir::var(read->tile), at_lane)));
  }

 private:
  // so<chunk> = cl * T + ((rl / chunk) ^ (cl / V % swizzle)) * chunk + rl % chunk
  kir::ExprP declare_offset(int chunk) {
    const TileVars& x = s_.vars;
    const int per_row = s_.tile / chunk;
    const kir::ExprP swizzle =
        kir::group(kir::infix(kir::group(kir::infix(v(x.rl), "/", n(chunk))), "^",
                              kir::group(kir::infix(kir::infix(v(x.cl), "/", n(s_.vc)), "%",
                                                    n(std::min(kSwizzle, per_row))))));
    return prelude_.let(
        "int", fmt::format("so{}", chunk),
        kir::add(kir::add(kir::mul(v(x.cl), n(s_.tile)), kir::mul(swizzle, n(chunk))),
                 kir::infix(v(x.rl), "%", n(chunk))));
  }

  const RegionInfo& info_;
  const TileSchedule& s_;
  kir::Block& prelude_;
  kir::Block& body_;
  std::map<int, kir::ExprP> offsets_;  // per chunk width, the offset the prelude declares
  int values_ = 0;
};

// The output phase: the expression DAG per lane, transposed reads from the tiles, the rest as
// the linear sweep reads it; one vector store per output.
void add_outputs(kir::Block& p, const RegionInfo& info, const TileSchedule& s) {
  kir::Block prelude, body, stores;
  ValueScope outer{&prelude, nullptr, {}};
  ValueScope inner{&body, &outer, {}};
  const kir::ExprP j = kir::var(s.vars.j);
  LaneLoads loads(info, s.vc, j, prelude, body, outer);
  TileReads tiles(info, s, prelude, body);
  Values values(info, [&](ir::NodeId id, const Index& at, ValueScope&) {
    kir::ExprP tiled = tiles.load(id, at);
    return tiled ? tiled : loads.load(id, at);
  });
  for (size_t k = 0; k < s.outputs.size(); ++k) {
    const ir::Node& out = info.node(info.region.outputs[k]);
    const kir::ExprP value = values.value(info.region.outputs[k], s.outputs[k], inner);
    const kir::ExprP dst = kir::var(info.output_var(k));
    if (s.vc == 1) {
      body.assign(kir::subscript(dst, kir::offset(s.outputs[k])),
                  apply(dtype_code(out.dtype).store, value));
    } else {
      vector_store(prelude, body, stores, out.dtype, fmt::format("s{}", k),
                   kir::add(dst, kir::offset(s.outputs[k], true)), s.vc, value, j);
    }
  }
  add_output_loop(p, s, prelude, body, stores);
}

}  // namespace

namespace {

KernelBody build_tiles(const RegionInfo& info, const CodegenOptions& options,
                       const TransposeParams& params) {
  std::string why;
  const std::optional<TileSchedule> s = schedule(info, options, why, static_cast<int>(params.tile));
  if (!s) throw InternalError("the tiled transpose was asked to build a region it refuses: " + why);
  KernelBody kb;
  kb.kind = "pointwise";
  kb.block = kBlock;
  kb.blocks_per_sm = s->blocks_per_sm;
  kb.work_blocks = s->tiles;
  kb.fn = kernel_function(info, kBlock, s->blocks_per_sm);
  kir::Block& head = kb.fn.head;
  head.comment(
      "tiled transpose: out[((o * {} + r) * {} + m) * {} + c], o < {}; {} x {} tiles of (c, r)",
      s->axes.r, s->axes.mid, s->axes.c, s->axes.outer, s->tile, s->tile);
  head.comment("through {} bytes of shared memory ({}), {} outputs per thread along c",
               s->shared_bytes, tile_list(info, *s), s->vc);
  head.comment("{} index arithmetic", info.wide_index ? "64-bit" : "32-bit");
  kir::Block& body = kb.fn.body;
  for (const TiledRead& read : s->reads) {
    body.array(read.tile, {s->tile * s->tile});
  }
  body.let(s->vars.tid, kir::thread_index());
  kir::Block& tile = body.loop(s->vars.t, kir::block_index(), n(s->tiles), kir::grid_blocks());
  add_tile_origin(tile, *s);
  for (const TiledRead& read : s->reads) add_load(tile, info, *s, read);
  tile.eval(kir::sync_block());
  add_outputs(tile, info, *s);
  tile.eval(kir::sync_block(), "the next tile overwrites shared memory");
  return kb;
}

TransposeParams tile_params(const TileSchedule& s) {
  return TransposeParams{.tile = s.tile,
                         .outputs_per_thread = s.vc,
                         .tiled_inputs = static_cast<int64_t>(s.reads.size()),
                         .c = s.axes.c,
                         .r = s.axes.r,
                         .mid = s.axes.mid,
                         .outer = s.axes.outer,
                         .tiles = s.tiles,
                         .shared_bytes = s.shared_bytes,
                         .blocks_per_sm = s.blocks_per_sm,
                         .block = kBlock};
}

// Pointwise regions that read an input through a transposition big enough to pay for tiles.
class TiledTransposeScheduler final : public Scheduler {
 public:
  std::string_view name() const override { return "tiled_transpose"; }
  std::optional<std::string> refusal(const RegionInfo& info,
                                     const CodegenOptions& options) const override {
    if (info.region.kind != fusion::RegionKind::pointwise) return "not a pointwise region";
    for (ir::NodeId out : info.region.outputs) {
      if (info.node(out).op == ir::Op::update_slice) {
        return "it writes an update_slice, at a position loaded at run time";
      }
    }
    std::string why;
    if (!schedule(info, options, why)) return why;
    return std::nullopt;
  }
  ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const override {
    if (info.dynamic()) throw NotSizeIndependent("the region reads through a tiled transpose");
    std::string why;
    const std::optional<TileSchedule> s = schedule(info, options, why);
    if (!s) throw InternalError("the tiled transpose refuses a region it took: " + why);
    return tile_params(*s);
  }
  KernelBody build(const RegionInfo& info, const CodegenOptions& options,
                   const ScheduleParams& params) const override {
    return build_tiles(info, options, std::get<TransposeParams>(params));
  }
};

}  // namespace

const Scheduler& tiled_transpose_scheduler() {
  static const TiledTransposeScheduler scheduler;
  return scheduler;
}

}  // namespace fusejit::templates
