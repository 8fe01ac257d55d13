// templates/row_schedule: see row_schedule.h.
#include "templates/schedulers/row_schedule.h"

#include <algorithm>
#include <optional>

#include "ir/shape.h"
#include "templates/builders.h"

namespace fusejit::templates {

namespace {

// The row share of a thread, for choosing G: single-pass kernels stream (32 elements in flight
// per thread); multi-pass kernels hold the row in registers, 64 bytes of storage per thread
// (32 bf16 or 16 f32 values), which keeps 64 KiB of rows in flight per SM at 64 registers per
// thread: 16384 bf16 values take two 512-thread blocks per SM, 16384 f32 ones one of 1024, or
// two of 512 with 32 values per thread where what a thread keeps live fits the registers
// (widest_multi_pass_block).
constexpr int64_t kStreamElementsPerThread = 32;
constexpr int64_t kCachedBytesPerThread = 64;
// Split rows: when a single-pass kernel has too few rows to give the device (about 1024 blocks
// in flight) work, each row is cut into S pieces, one block each.
constexpr int64_t kSplitTargetBlocks = 1024;

// The widest block for a cached row, and the widest of which two fit on an SM by threads:
// half and a quarter of the SM's resident threads, so that each thread may use 64 registers.
int64_t widest_cached_block(const Target& t) {
  return std::clamp<int64_t>(pow2_floor(t.threads_per_sm / 2), 64, 1024);
}
int64_t paired_block(const Target& t) {
  return std::clamp<int64_t>(pow2_floor(t.threads_per_sm / 4), 64, 1024);
}

// Blocks of a quarter of the SM's threads whose threads hold at most 3/4 of the register cache
// ask their launch bounds for three blocks per SM rather than two, falling back to two where
// ptxas would spill (Kernel::relaxed_min_blocks). On an H200, bf16 softmax rows of 10,000 and
// 12,288 in 3 vectors of 8 per thread took 48 (static) and 56 (a register path holding 4)
// registers, so two blocks per SM; asked for three, they fit 40 without spilling, and ran
// 1.22x (static, S=10,000) and 1.19x (the path, S=12,288) faster (bench/RESULTS.md).
constexpr int64_t kThreeBlockValues = kCacheBudget * 3 / 4;
int three_quarter_blocks(const Target& t, const RowConfig& c) {
  const bool quarter = c.block == paired_block(t) && c.pieces() == 1 && c.cached() &&
                       c.chunks * c.v <= kThreeBlockValues;
  return quarter ? static_cast<int>(3 * t.threads_per_sm / 4 / c.block) : 0;
}

// The elements a thread of a multi-pass kernel holds: 64 bytes of storage (see above).
int64_t cached_share(const RegionInfo& info) {
  return std::clamp<int64_t>(kCachedBytesPerThread / info.max_element_size(), 8, kCacheBudget);
}
// The same in vectors of `v`, at most the kMaxUnrolledChunks a register cache unrolls: bf16
// scalars (rows of odd length) would otherwise take 32 per thread, fall out of the cache and
// read the row again in every pass (4,097 took 256 threads of 17; it takes 512 of 9, as an f32
// row of that length does).
int64_t cached_chunks(const RegionInfo& info, int64_t v) {
  return std::min(cached_share(info) / v, kMaxUnrolledChunks);
}

// What a thread of a cached row kernel keeps in 32-bit registers, holding `values` elements
// of the row per array (`v` per vector): its register cache (an f32 array per value the
// passes read again); the vectors along the row that are the same for every row (a weight, a
// bias), which the compiler hoists out of the row loop whole (values elements each, in their
// storage type); the V lanes of each full-size output a pass writes; and kLiveMargin for the
// rest (indices, addresses, accumulators, a reduction's temporaries). Calibrated with ptxas -v
// for sm_90 (test/jit/compile_test.cpp checks every suite kernel for spills): in blocks of 512
// holding 32 f32 values per thread, softmax (cache and output: 36 + margin) fits the 64
// registers two blocks per SM leave, RMS norm (its weight: 68) and layer norm (weight and
// bias: 100) spill.
constexpr int64_t kLiveMargin = 16;

// The blocks per SM a register path asks its launch bounds for (bounded_row_configs), 0 for
// the usual. A path keeps live what a static kernel of its layout does not (the row length given
// at launch, each vector's guard and clamped index): on an H200, 56 registers against the
// static kernel's 48 for 32 bf16 values per thread, so four blocks of 256 per SM against five,
// at 1.10-1.13x the static kernel's time for the scores softmax at S=8,192 (1.04-1.07x asking
// for five, at 48 registers). It asks for the residency that kLiveMargin registers beyond the
// values it holds allow, at least `fewest` registers in all, relaxed where ptxas would spill
// (Kernel::relaxed_min_blocks); a path that needs fewer registers than that is compiled as
// before. At 24 values per thread in blocks of 512 that is three blocks per SM, as
// three_quarter_blocks gives a static row.
int register_path_blocks(const Target& t, const RowConfig& c, int64_t fewest) {
  const int64_t values = c.chunks * c.v;
  const int64_t registers = std::max(fewest, ceil_div(values + kLiveMargin, 8) * 8);
  // Warps go to the SM's four schedulers in turn, each with a quarter of its registers: 21
  // blocks of 64 threads at 48 registers would leave one of them 11 warps, 40 registers each.
  const int64_t warps = t.registers_per_sm / 4 / (32 * registers) * 4;
  const int blocks = static_cast<int>(
      std::min<int64_t>(t.blocks_per_sm(static_cast<int>(c.block)), warps * 32 / c.block));
  return blocks > min_resident_blocks(t, c.block) ? blocks : 0;
}

// A register path's launch bounds: first the residency of 32 registers a thread where its
// values leave room for that, then, should ptxas spill, that of 40 (fallback_blocks), then the
// usual. (The bf16 scores softmax at S=2049, 9 to 16 scalars per thread, took 40 registers
// and six blocks of 256 per SM asking for the residency of 40, at 1.10x the time of the static
// kernel of 9, which takes 28 and eight blocks; the path fits 32 without spilling, and so ran
// at 1.04-1.05x.)
void set_register_path_blocks(const Target& t, RowConfig& c) {
  c.min_blocks = register_path_blocks(t, c, 32);
  const int forty = register_path_blocks(t, c, 40);
  c.fallback_blocks = forty < c.min_blocks ? forty : 0;  // 0 where min_blocks is
}

// True when `shape`, broadcast against the reduced shape (aligned from the right), varies
// along reduced axes only: a vector along the row, the same for every row.
bool along_row_only(const Shape& shape, const ReduceSpace& space) {
  if (shape.size() > space.shape.size()) return false;
  const size_t lead = space.shape.size() - shape.size();
  bool along = false;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == 1) continue;
    if (!is_reduced_axis(space, a + lead)) return false;
    along = true;
  }
  return along;
}

int64_t live_registers(const RegionInfo& info, const ReduceSpace& space, int64_t values, int v) {
  const int64_t full = space.rows * space.length;
  int64_t registers = kLiveMargin;
  for (ir::NodeId id : frontier(info, space)) {
    if (ir::numel(info.node(id).shape) == full) registers += values;
  }
  for (ir::NodeId id : info.region.inputs) {
    const ir::Node& n = info.node(id);
    if (along_row_only(n.shape, space)) registers += ceil_div(values * dtype_size(n.dtype), 4);
  }
  for (const ReduceOutput& out : space.outputs) registers += out.full ? v : 0;
  return registers;
}

// The widest block of a multi-pass kernel: a quarter of the SM's threads (two blocks per SM:
// one loads while the other waits on its block reductions) when the row still fits the
// register cache of such a block and what a thread then keeps live fits the registers two of
// them leave it; else half the SM's threads (one block per SM, twice the registers per
// element). Measured on an H200: softmax of f32 rows of 16384, 0.597 ms in one block of 1024
// per SM, 0.552 ms in two of 512; layer and RMS norms that spilled in blocks of 512 ran 1.1-2x
// slower, which the register count now refuses.
int64_t widest_multi_pass_block(const RegionInfo& info, const ReduceSpace& space, int v) {
  const Target& t = info.target;
  const int64_t paired = paired_block(t);
  const int64_t chunks = ceil_div(ceil_div(space.length, v), paired);
  const int64_t values = chunks * v;
  if (chunks > kMaxUnrolledChunks || values > kCacheBudget) return widest_cached_block(t);
  const int64_t registers = live_registers(info, space, values, v);
  const int cap = t.registers_for(static_cast<int>(paired), min_resident_blocks(t, paired));
  return registers <= cap ? paired : widest_cached_block(t);
}

// Multi-pass rows on a GPU with clusters, when `today` (one block per row) leaves the row out
// of the register cache, so that it reads the row twice, and the second read would come from
// DRAM: the row is larger than the SM's share of L2 (measured on the H200, 388 KiB of L2 per
// SM: f32 rows of 128256, 513 KB, ran 13-27% faster as clusters of 8 for softmax and layer
// norm; bf16 ones, 256 KB, re-read from L2, ran 12-15% slower for softmax). A row one block
// holds stays in one block: clusters of 2 x 512 were 7-32% slower than one 1024-thread block
// per row for rows of 16384 and 32000, whose reductions the other block on the SM hides. A
// region without full-size outputs (logsumexp) reads the row once anyway. Blocks of
// the paired size if that can be (two per SM), else the widest; per thread, the usual 64 bytes
// if that can be, else the whole cache budget (32 f32 values use up to 60 of the 64 registers,
// and spill where nothing guards the accesses, as in f32 layer norms of 16384); C the fewest
// blocks that then hold the row, a power of two from 2 to the Target's cluster size, and the
// blocks no wider than that needs. Nothing when no C fits, or a statistic is not f32 (the
// exchange moves 32-bit words).
std::optional<RowConfig> cluster_config(const RegionInfo& info, const ReduceSpace& space,
                                        const RowConfig& today) {
  const Target& t = info.target;
  if (t.cluster_blocks < 2 || today.group != today.block) return std::nullopt;
  if (today.cached()) return std::nullopt;  // one read already
  if (std::none_of(space.outputs.begin(), space.outputs.end(),
                   [](const ReduceOutput& o) { return o.full; })) {
    return std::nullopt;  // the statistics alone: one read already
  }
  // (Staged pieces keep their loads in flight while the blocks reduce: whether that makes up
  // for the exchanges where the row would be re-read from L2 is to be timed, hence the option.)
  if (!info.stage_rows && space.length * info.max_element_size() <= t.l2_bytes_per_sm) {
    return std::nullopt;
  }
  for (ir::NodeId r : space.reduces) {
    if (accumulator_dtype(info.node(r)) != DType::f32) return std::nullopt;
  }
  const int64_t v = today.v;
  const int64_t vectors = space.length / v;
  for (const int64_t widest : {paired_block(t), widest_cached_block(t)}) {
    for (const int64_t share : {cached_share(info), kCacheBudget}) {
      const int64_t per_thread = std::min(std::max<int64_t>(1, share / v), kMaxUnrolledChunks);
      const int64_t threads = ceil_div(vectors, per_thread);
      const int64_t c = std::max<int64_t>(2, pow2_ceil(ceil_div(threads, widest)));
      if (c > t.cluster_blocks) continue;
      RowConfig cl = today;
      cl.group = cl.block = std::clamp<int64_t>(pow2_ceil(ceil_div(threads, c)), 64, widest);
      cl.rows_per_block = 1;
      cl.split = 1;
      cl.cluster = c;
      cl.piece = ceil_div(vectors, c) * v;
      cl.chunks = ceil_div(cl.piece / v, cl.block);
      return cl;
    }
  }
  return std::nullopt;
}

// Whether a cached row stages its inputs one row ahead (RowConfig::staged), where
// CodegenOptions::stage_rows asks for it: a static row of one block per SM (no other block
// there loads while it reduces), or a cluster's piece, on sm_80 on (cp.async). On an
// H200, a bf16 softmax over rows of 32,000 in such blocks kept DRAM 53% busy (Nsight Compute:
// each block loads, then reduces twice and stores, with nothing in flight in between).
bool stages_rows(const RegionInfo& info, const RowConfig& c) {
  const Target& t = info.target;
  if (!info.stage_rows || t.cc < 80 || c.looped || !c.cached() || c.split > 1) return false;
  if (c.group != c.block) return false;
  return c.cluster > 1 || 2 * c.block >= t.threads_per_sm;
}

// The last register paths of bounded_row_configs, after `out`'s: blocks wider than the looped
// kernel's (`c` its last path), up to half the SM's threads, as row_config gives rows too long
// for 256 threads (a bf16 row of 12,288 takes 512; an f32 RMS norm of
// 16,384, 1,024): without them such rows looped, at 1.36-1.45x the static kernel's time on
// an H200. Their launch bounds keep half the SM's threads resident, as the paths above do
// (64 registers per thread on an H200). Each holds as many vectors per thread as keep what
// it has live within them (live_registers, which row_config counts too), and is kept only
// where that serves longer rows than the path before it. Blocks of a quarter of the SM's
// threads hold three quarters of the cache, so as to keep three blocks per SM
// (register_path_blocks): with the whole cache, the scores softmax at S=12,288 took 56
// registers, two blocks per SM and 61% of DRAM bandwidth on an H200, where the static
// kernel (24 values per thread) took 40, three blocks and 80%.
void add_wide_paths(const RegionInfo& info, const ReduceSpace& space, const RowConfig& looped,
                    int64_t budget, RowConfig c, std::vector<RowConfig>& out) {
  const Target& t = info.target;
  for (int64_t g = looped.block * 2; g <= widest_cached_block(t); g *= 2) {
    const int cap = t.registers_for(static_cast<int>(g), min_resident_blocks(t, g));
    int64_t chunks = g == paired_block(t) ? budget * 3 / 4 : budget;
    while (chunks > 1 && live_registers(info, space, chunks * c.v, c.v) > cap) chunks /= 2;
    if (chunks * g * c.v <= out.back().piece) continue;
    c.group = c.block = g;
    c.rows_per_block = 1;
    c.chunks = chunks;
    c.piece = chunks * g * c.v;
    set_register_path_blocks(t, c);
    out.push_back(c);
  }
}

}  // namespace

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

int min_resident_blocks(const Target& t, int64_t block) {
  return std::max<int>(1, t.threads_per_sm / 2 / static_cast<int>(block));
}

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
  const int64_t share = multi_pass ? cached_chunks(info, v) * v : kStreamElementsPerThread;
  int64_t g = pow2_ceil(ceil_div(space.length, share));
  // Narrow rows (at most a warp's worth of vectors): one vector per thread, so that a warp's
  // load covers whole rows, contiguous, instead of one row per thread at a stride.
  if (const int64_t vectors = ceil_div(space.length, v); vectors <= 32) g = pow2_ceil(vectors);
  // The widest block: for a cached row, half the SM's threads, so that each thread may use 64
  // registers; a streaming kernel does better with two such blocks per SM (measured on an
  // H200: sum of squares over rows of 16384, 0.127 ms with 512 threads against 0.145 with 1024).
  const int64_t widest =
      multi_pass ? widest_multi_pass_block(info, space, v) : paired_block(info.target);
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
  if (multi_pass) {
    if (std::optional<RowConfig> cluster = cluster_config(info, space, c)) {
      cluster->staged = stages_rows(info, *cluster);
      return *cluster;
    }
    c.min_blocks = three_quarter_blocks(info.target, c);
    c.staged = stages_rows(info, c);
  }
  return c;
}

std::optional<RowConfig> looped_row_config(const RegionInfo& info, const ReduceSpace& space,
                                           int v) {
  RowConfig c;
  c.v = v;
  c.looped = true;
  const Target& t = info.target;
  // Rows enough for a warp each on every resident warp slot of a large GPU (an H200: 132 SMs
  // of 64 warps), or rows that change with the symbols.
  constexpr int64_t kManyRows = 8192;
  const bool many_rows = info.symbolic(space.rows) || space.rows >= kManyRows;
  if (many_rows) {
    c.group = 32;
    c.block = 256;
  } else if (space.rows >= kSplitTargetBlocks) {
    c.group = c.block = paired_block(t);
  } else {
    return std::nullopt;
  }
  c.rows_per_block = c.block / c.group;
  c.piece = space.length;
  c.chunks = 0;  // set by the length at run time
  return c;
}

std::vector<RowConfig> bounded_row_configs(const RegionInfo& info, const ReduceSpace& space,
                                           const RowConfig& looped) {
  RowConfig c = looped;
  c.bounded = true;
  // The vectors a thread of a group path holds: a static row's share (cached_chunks: 64 bytes,
  // 32 bf16 or 16 f32 values), so that a row takes the layout row_config gives it; then the
  // looped kernel's block holds the whole cache budget, for rows longer than its share serves.
  // (f32 paths that held the budget at every group gave an RMS norm of 512 rows of 2,048 half
  // the static kernel's threads, 64 x 32 values against 128 x 16, at 1.18-1.22x its time on
  // an H200.)
  const int64_t budget = std::min(kMaxUnrolledChunks, kCacheBudget / c.v);
  const int64_t share = cached_chunks(info, c.v);
  std::vector<RowConfig> out;
  // Short rows first, as row_config lays them out: one vector per thread, 16 threads per row
  // (a block of 256 taking 16 rows), then 32. (The warp path below gives a row of 16 vectors
  // half its lanes: the scores softmax at S=128 ran 1.9x the static kernel's time on an H200,
  // 1.2-1.3x with these.) Not for scalars: rows of 16 and 32 elements.
  if (looped.group == 32 && c.v > 1) {
    for (const int64_t g : {16, 32}) {
      RowConfig narrow = c;
      narrow.group = g;
      narrow.chunks = 1;
      narrow.rows_per_block = narrow.block / g;
      narrow.piece = g * narrow.v;
      set_register_path_blocks(info.target, narrow);
      out.push_back(narrow);
    }
  }
  // Groups of a warp, then twice as many threads up to the looped kernel's block, each its own
  // block (as row_config lays out rows of that length): each thread holds its share at the
  // longest row a group serves, so the next group takes over where a thread would hold fewer
  // than half its vectors. (Jumping from the warp to the 256-thread block left the bf16 scores
  // softmax at S=2048 one real vector in four per thread, at 2.1x the static kernel's time on
  // an H200.)
  const auto add_group = [&](int64_t g, int64_t chunks) {
    c.group = g;
    c.block = g <= looped.group ? looped.block : g;
    c.rows_per_block = c.block / c.group;
    c.chunks = chunks;
    c.piece = c.chunks * c.group * c.v;
    set_register_path_blocks(info.target, c);
    out.push_back(c);
  };
  // Below the warp, groups of 4, 8 and 16 threads (a block of 256 taking 64, 32 and 16 rows)
  // holding their share, as row_config lays out rows shorter than a warp's share, each kept
  // where it holds longer rows than the path before it. (With the warp as the narrowest group
  // at its share, the bf16 scores softmax at S=512 gave each thread 2 real vectors of 4, at
  // 1.22x the static kernel's time on an H200; at S=127, 4 real scalars of 16, at 1.48x.)
  if (looped.group == 32) {
    for (const int64_t g : {4, 8, 16}) {
      if (!out.empty() && g * share * c.v <= out.back().piece) continue;
      add_group(g, share);
    }
  }
  for (int64_t g = looped.group; g <= looped.block; g *= 2) add_group(g, share);
  if (share < budget) add_group(looped.block, budget);
  add_wide_paths(info, space, looped, budget, c, out);
  return out;
}

}  // namespace fusejit::templates
