// templates/row_schedule: see row_schedule.h.
#include "templates/row_schedule.h"

#include <algorithm>
#include <optional>

#include "templates/builders.h"

namespace fusejit::templates {

namespace {

// The row share of a thread, for choosing G: single-pass kernels stream (32 elements in flight
// per thread); multi-pass kernels hold the row in registers, 64 bytes of storage per thread
// (32 bf16 or 16 f32 values), which keeps 64 KiB of rows in flight per SM at 64 registers per
// thread: 16384 bf16 values take two 512-thread blocks per SM, 16384 f32 ones one of 1024
// (before sm_90; from sm_90 on a cluster of two blocks of 512, see cluster_config).
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

// The elements a thread of a multi-pass kernel holds: 64 bytes of storage (see above).
int64_t cached_share(const RegionInfo& info) {
  return std::clamp<int64_t>(kCachedBytesPerThread / info.max_element_size(), 8, kCacheBudget);
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
  if (space.length * info.max_element_size() <= t.l2_bytes_per_sm) return std::nullopt;
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

}  // namespace

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
  const int64_t share = multi_pass ? cached_share(info) : kStreamElementsPerThread;
  int64_t g = pow2_ceil(ceil_div(space.length, share));
  // Narrow rows (at most a warp's worth of vectors): one vector per thread, so that a warp's
  // load covers whole rows, contiguous, instead of one row per thread at a stride.
  if (const int64_t vectors = ceil_div(space.length, v); vectors <= 32) g = pow2_ceil(vectors);
  // The widest block: for a cached row, half the SM's threads, so that each thread may use 64
  // registers; a streaming kernel does better with two such blocks per SM (measured on an
  // H200: sum of squares over rows of 16384, 0.127 ms with 512 threads against 0.145 with 1024).
  const int64_t widest =
      multi_pass ? widest_cached_block(info.target) : paired_block(info.target);
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
    if (std::optional<RowConfig> cluster = cluster_config(info, space, c)) return *cluster;
  }
  return c;
}

}  // namespace fusejit::templates
