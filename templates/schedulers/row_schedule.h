// templates/row_schedule: how a row-style kernel (rowwise.cpp) lays its rows over threads,
// blocks and thread-block clusters: the thread group per row, the vectors per thread, whether
// the row is held in registers, and whether rows are split over several blocks (through
// module-scope scratch, or over a cluster).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "templates/schedulers/reduction.h"

namespace fusejit::templates {

// The register cache of a multi-pass kernel: at most kCacheBudget values per thread, in at most
// kMaxUnrolledChunks vectors (loops past that are not unrolled, so an array could not stay in
// registers).
inline constexpr int64_t kCacheBudget = 32;
inline constexpr int64_t kMaxUnrolledChunks = 16;

// A group of `group` threads per row (several rows per block when the group is narrower than
// the block), each with `chunks` vectors of `v` elements of the row's piece.
struct RowConfig {
  int v = 1;
  int64_t group = 1;
  int64_t block = 256;
  int64_t rows_per_block = 1;
  int64_t split = 1;    // S: blocks per row, through module-scope scratch
  int64_t cluster = 1;  // C: blocks per row, a thread-block cluster
  int64_t piece = 1;    // elements of a row per block: length / S, or ceil(length / C) in whole vectors
  int64_t chunks = 1;   // vectors per thread per piece
  // A row length given at launch (a dynamic kernel whose reduced axes change with the symbols):
  // each thread strides over the row with a loop bounded at run time, and multi-pass kernels
  // read the row again in each pass instead of holding it in registers (looped_row_config).
  bool looped = false;
  // With `looped`: the register path of such a kernel, for rows of at most `piece` = chunks *
  // group * v elements, which it holds in registers as a static row does (bounded_row_configs).
  bool bounded = false;
  // With `bounded`: the vectors per thread that lie within every row the code sees (a copy of
  // a register path's row loop for one count of vectors, which rows short enough for fewer
  // never reach: build_register_path), so that they need no predicate and no clamp.
  int64_t full_chunks = 0;
  // With `bounded`: the shortest row a launch gives the path (one element more than the path
  // before it holds), which sizes its grid (row_kernel_body, row_launch.cpp).
  int64_t shortest = 1;
  // The blocks per SM its launch bounds ask to keep resident where that spills nothing (more
  // than min_resident_blocks; the kernel falls back to that otherwise); 0: min_resident_blocks.
  int min_blocks = 0;
  // Between min_blocks and min_resident_blocks: the residency a register path tries first
  // where min_blocks would spill (register_path_blocks); 0: none.
  int fallback_blocks = 0;
  // A cached row in a block that has its SM to itself (half the SM's threads): the inputs that
  // fill the register cache are staged in shared memory one row ahead (cp.async), so that the
  // next row's loads are in flight while this row's passes and reductions run, where nothing
  // else on the SM would keep DRAM busy (row_config, RowStages in row_cache.cpp).
  bool staged = false;

  int64_t pieces() const { return std::max(split, cluster); }
  bool cached() const {
    return (!looped || bounded) && chunks <= kMaxUnrolledChunks && chunks * v <= kCacheBudget;
  }
};

// Passes over the row's elements: one per reduction depth, plus one for outputs that need the
// deepest reductions.
int element_passes(const ReduceSpace& space);

RowConfig row_config(const RegionInfo& info, const ReduceSpace& space, int v, bool multi_pass);

// The schedule of a row whose length the kernel takes at launch: nothing may depend on the
// length, so a warp per row (8 rows per block of 256) when the rows are many or change with
// the symbols (the rows of attention scores, whose length is the sequence), else a block of
// half an SM's threads per row when the rows alone fill the device. Nothing when they do not
// (a full reduction): such rows are split over blocks, by their length.
std::optional<RowConfig> looped_row_config(const RegionInfo& info, const ReduceSpace& space,
                                           int v);

// The register paths of a looped multi-pass kernel (`looped`, from looped_row_config), each a
// kernel of its own: for a warp per row and vectors, one vector per thread on 16 then 32
// threads per row; groups of 4, 8 and 16 threads at a static row's share, where they hold
// longer rows than those; then its thread group, and groups twice as large up to its block,
// each thread holding the register cache's budget of vectors (a row of at most `piece`
// elements is read from memory once); then wider blocks, up to half the SM's threads, with as
// many vectors as the registers hold. A launch takes the first path whose `piece` holds the length, and
// the looped kernel for longer rows.
std::vector<RowConfig> bounded_row_configs(const RegionInfo& info, const ReduceSpace& space,
                                           const RowConfig& looped);

// The blocks a row kernel of `block` threads asks to keep resident per SM (the minimum of its
// launch bounds): half the SM's threads in all, which with 2048 threads and 64 K registers per
// SM leaves each thread 64 registers; blocks of a quarter of the SM's threads or fewer get two
// or more per SM.
int min_resident_blocks(const Target& t, int64_t block);

// Values computed before any reduction and read again after one: what the register cache of a
// multi-pass kernel holds (one array each).
std::set<ir::NodeId> frontier(const RegionInfo& info, const ReduceSpace& space);

}  // namespace fusejit::templates
