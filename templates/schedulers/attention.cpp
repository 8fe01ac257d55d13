// templates/attention: AttentionSpec -> the FlashAttention-2 forward kernel (see attention.h).
//
// Schedule (decided in attention_params, from the spec and the target, before any text; the
// AttentionParams of registry.h):
//   - a block of 4 warps takes 64 query rows of one (batch, head), 16 rows per warp (16 rows
//     shared by the 4, for at most 16 query rows: below); the work items (b, h, query tile) are
//     walked with a grid stride, the longest causal tiles first;
//   - per key tile of block_n keys, K and V are staged in shared memory (rows padded by 8
//     elements, so that the fragment reads of a warp hit distinct banks), by 16-byte cp.async
//     copies where the view keeps 16-byte alignment (else 4- or 2-byte loads); keys past seq_kv
//     are zero-filled; the next tile's K loads during this tile's softmax and P V, its V
//     during the next Q Kᵀ;
//   - Q stays in registers as A fragments; K and V reach B fragments by ldmatrix (V transposed
//     on the way); S = Q Kᵀ and O += P V on mma.m16n8k16 with f32
//     accumulators; scores are kept in log2 units (scale * log2 e folded in) so that softmax's
//     exponentials are ex2; P goes from the S accumulators straight into A fragments (the
//     accumulator layout of two 8-key tiles is the A layout of one 16-key step);
//   - online softmax per row (running max m, running sum l over the quad of lanes that shares
//     the row); O / l at the end;
//   - decode (at most 16 query rows): the query heads of a KV group folded into rows first
//     (fold_query_groups), then a key split: the four warps share the 16 rows and each takes 16
//     keys of every 64-key tile; the warps' O, m and l meet in the tiles' shared memory at the
//     end of an item;
//   - split-KV where a problem of at most 16 query rows has fewer (b, h) items than SMs
//     (decode): each item's key tiles in pieces, one work item each, up to one block an SM; a
//     piece leaves O, m and l in the module's scratch, and the item's last piece to arrive
//     merges them.
// attention_kernel.cpp builds the kernel from those parameters on the kernel IR (templates/kir),
// attention_body hands it on as a KernelBody, and generate.cpp's assemble_kernel, which
// assembles every kernel kind, pastes the device helpers it calls (device/fj_attention.cuh) and
// names it: for an attention region, through the registry (attention_region.cpp), as for every
// other region; for a bare spec, through generate_attention.
#include "templates/schedulers/attention.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/builders.h"
#include "templates/emit.h"
#include "templates/schedulers/attention_kernel.h"

namespace fusejit::templates {

namespace {

constexpr int kMaxDim = 128;      // Q and O fragments held in registers: 32 + 64 per lane at 128
constexpr int kSharedLimit = 48 * 1024;  // static shared memory
constexpr int kPad = 8;                  // elements added to each shared row
// Problems of at most kSplitMaxRows query rows (decode: a token per sequence, or the query heads
// of a KV group folded into rows) split each key tile over the block's warps, and the keys
// across blocks: where the items are fewer than the SMs of a 132-SM part, enough pieces of each
// for one block an SM (the grid is sized at launch); the scratch of partials stays under
// kSplitScratch bytes.
constexpr int64_t kSplitSMs = 132;
constexpr int64_t kSplitMaxRows = 16;
constexpr int64_t kSplitScratch = 4 << 20;
// The key-split kernel (AttentionParams::key_split) is built for this many resident blocks of 128
// threads (__launch_bounds__), and its last block combines at most kMaxSplits pieces of an item.
constexpr int kKeySplitBlocks = 3;
constexpr int64_t kMaxSplits = 64;
// The stages of K and V tiles a split piece streams through (AttentionParams::stages). One block
// an SM would have room for six; three and four ran no faster than two on an H100 (one sequence at
// 8k, 32k and 128k keys, and batch 8 at 8k), so the kernel keeps two.
constexpr int kSplitStages = 2;

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

// The widest load (in elements: 8, 2 or 1) whose alignment every row start of `view` keeps,
// buffers being 16-byte aligned and 2-byte elements.
int vector_elements(const AttentionView& view, int64_t dim) {
  auto keeps = [&](int64_t n) {
    return dim % n == 0 && view.offset % n == 0 && view.strides[0] % n == 0 &&
           view.strides[1] % n == 0 && view.strides[2] % n == 0;
  };
  return keeps(8) ? 8 : keeps(2) ? 2 : 1;
}

std::string refuse_view(std::string_view name, const AttentionView& v, int64_t heads) {
  if (v.strides[3] != 1)
    return fmt::format("{}'s feature axis has stride {} (the kernel reads it contiguously: needs 1)",
                       name, v.strides[3]);
  for (int a = 0; a < 3; ++a) {
    if (v.strides[a] < 0)
      return fmt::format("{} has a negative stride {} on axis {}", name, v.strides[a], a);
  }
  if (v.offset < 0) return fmt::format("{} has a negative offset {}", name, v.offset);
  if (v.head_group < 1 || heads % v.head_group != 0)
    return fmt::format("{}'s head_group {} does not divide heads {}", name, v.head_group, heads);
  return "";
}

}  // namespace

std::string refuse_attention_kernel(const AttentionSpec& s) {
  if (!is_half(s.dtype))
    return fmt::format("dtype {} (the kernel takes f16 or bf16)", dtype_name(s.dtype));
  if (s.batch < 1 || s.heads < 1 || s.seq_q < 1 || s.seq_kv < 1)
    return fmt::format("an empty extent (batch {}, heads {}, seq_q {}, seq_kv {})", s.batch,
                       s.heads, s.seq_q, s.seq_kv);
  for (auto [name, dim] : {std::pair{"head_dim", s.head_dim}, std::pair{"value_dim", s.value_dim}}) {
    if (dim < 16 || dim % 16 != 0 || dim > kMaxDim)
      return fmt::format("{} {} (needs a multiple of 16 from 16 to {})", name, dim, kMaxDim);
  }
  for (auto [name, view] : {std::pair{"q", &s.q}, std::pair{"k", &s.k}, std::pair{"v", &s.v}}) {
    const std::string why = refuse_view(name, *view, s.heads);
    if (!why.empty()) return why;
  }
  if (s.q.head_group != 1) return fmt::format("q's head_group {} (q has every head: needs 1)", s.q.head_group);
  if (s.o) {
    if (std::string why = refuse_view("o", *s.o, s.heads); !why.empty()) return why;
    if (s.o->head_group != 1 || s.o->offset != 0)
      return fmt::format(
          "o's head_group {} and offset {} (o is written at every head from its "
          "buffer's start: needs 1 and 0)",
          s.o->head_group, s.o->offset);
    for (int a = 0; a < 3; ++a) {
      if (s.o->strides[a] % 2 != 0)
        return fmt::format("o's stride {} on axis {} is odd (the kernel stores pairs)",
                           s.o->strides[a], a);
    }
  }
  if (has_mask_tensor(s)) {
    if (s.mask == AttentionMaskKind::additive && !is_floating(s.mask_dtype))
      return fmt::format("additive mask of dtype {} (needs f16, bf16 or f32)", dtype_name(s.mask_dtype));
    if (s.mask == AttentionMaskKind::boolean && s.mask_dtype != DType::boolean)
      return fmt::format("boolean mask of dtype {} (needs bool)", dtype_name(s.mask_dtype));
    for (int a = 0; a < 4; ++a) {
      if (s.mask_view.strides[a] < 0)
        return fmt::format("the mask has a negative stride {} on axis {}", s.mask_view.strides[a], a);
    }
    if (s.mask_view.offset < 0)
      return fmt::format("the mask has a negative offset {}", s.mask_view.offset);
  }
  if ((s.mask == AttentionMaskKind::causal || s.mask == AttentionMaskKind::boolean) &&
      std::isnan(s.fill))
    return "a NaN fill";
  if (!std::isfinite(s.scale) || !std::isfinite(s.mask_scale))
    return fmt::format("a non-finite scale {} or mask_scale {}", s.scale, s.mask_scale);
  return "";
}

AttentionSpec fold_query_groups(const AttentionSpec& s) {
  const int64_t group = s.k.head_group, n = s.seq_q;
  if (group < 2 || s.v.head_group != group || n > kSplitMaxRows || s.heads % group != 0 ||
      s.mask == AttentionMaskKind::causal)
    return s;
  int64_t g = 1;  // the query heads folded: the largest divisor of the group that fits 16 rows
  for (int64_t d = 2; d <= group; ++d) {
    if (group % d == 0 && d * n <= kSplitMaxRows) g = d;
  }
  if (g < 2) return s;
  const bool masked = has_mask_tensor(s);
  // Row j * n + i reads q at j * (head stride) + i * (query stride): one stride for all rows
  // only where a head's queries follow one another, or there is one query.
  if (n > 1 && (s.q.strides[1] != n * s.q.strides[2] ||
                (masked && s.mask_view.strides[1] != n * s.mask_view.strides[2]) ||
                (s.o && s.o->strides[1] != n * s.o->strides[2])))
    return s;
  AttentionSpec f = s;
  f.heads = s.heads / g;
  f.seq_q = g * n;
  const auto rows = [&](const std::array<int64_t, 4>& x) {
    return std::array<int64_t, 4>{x[0], g * x[1], n > 1 ? x[2] : x[1], x[3]};
  };
  f.q.strides = rows(s.q.strides);
  if (s.o) f.o->strides = rows(s.o->strides);
  f.k.head_group = f.v.head_group = group / g;
  if (masked) f.mask_view.strides = rows(s.mask_view.strides);
  return f;
}

std::string_view attention_mask_name(AttentionMaskKind m) {
  switch (m) {
    case AttentionMaskKind::none:
      return "none";
    case AttentionMaskKind::causal:
      return "causal";
    case AttentionMaskKind::additive:
      return "additive";
    case AttentionMaskKind::boolean:
      return "boolean";
  }
  return "?";
}

std::string refuse_attention_target(const Target& target) {
  if (target.cc >= 80) return "";
  return fmt::format("sm_{} has no m16n8k16 bf16/f16 mma (needs sm_80 or later)", target.cc);
}

AttentionParams attention_params(const AttentionSpec& s, const Target& target) {
  AttentionParams p;
  p.head_dim = s.head_dim;
  p.value_dim = s.value_dim;
  p.k_pitch = static_cast<int>(s.head_dim) + kPad;
  p.v_pitch = static_cast<int>(s.value_dim) + kPad;
  // A row pitch of (dim + 8) 2-byte elements is 4 words past a multiple of 32 banks for dim a
  // multiple of 64, 4 or 12 words otherwise: the 8 rows x 4 pairs a fragment read touches land
  // in distinct banks either way.
  while (2 * p.block_n * (p.k_pitch + p.v_pitch) > kSharedLimit) p.block_n /= 2;
  // A warp holds 16 query rows. Four warps take 64 rows of a work item. A problem of at most 16
  // rows (decode) has one warp's rows: its four warps share them and each takes a quarter of
  // every key tile (16 keys of 64), so that a tile's loads and products are spread over the
  // block.
  p.key_split = s.seq_q <= kSplitMaxRows;  // block_n is 64 for every dim the kernel takes
  p.warps = kAttentionThreads / 32;
  p.block = 32 * p.warps;
  p.rows = p.key_split ? 16 : 16 * p.warps;
  p.k_vec = vector_elements(s.k, s.head_dim);
  p.v_vec = vector_elements(s.v, s.value_dim);
  p.q_pairs = s.q.offset % 2 == 0 && s.q.strides[0] % 2 == 0 && s.q.strides[1] % 2 == 0 &&
              s.q.strides[2] % 2 == 0;
  p.k_head_group = s.k.head_group;
  p.v_head_group = s.v.head_group;
  p.mask = s.mask;
  p.skip_above_diagonal = s.mask == AttentionMaskKind::causal && std::isinf(s.fill) && s.fill < 0;
  p.q_tiles = ceil_div(s.seq_q, p.rows);
  p.kv_tiles = ceil_div(s.seq_kv, p.block_n);
  p.items = s.batch * s.heads * p.q_tiles;
  p.split_tiles = p.kv_tiles;
  if (p.key_split && !p.skip_above_diagonal && p.items < kSplitSMs && p.kv_tiles > 1) {
    // Pieces of whole key tiles, none empty, as many as bring the work items up to one block an
    // SM and not past it: the blocks an SM holds (blocks_per_sm) stay for items that fill the
    // GPU alone. On an H100 the 8 items of one sequence ran faster as 16 pieces (128 blocks)
    // than as 32 or as 43 to 49 (a wave of three blocks an SM) at 8k, 32k and 128k keys: each
    // block streams longer, fewer streams compete for the memory, and the last block merges fewer
    // pieces. Fewer where the scratch would pass its cap, or where the last block would merge
    // more than kMaxSplits pieces.
    int64_t want = std::min({std::max<int64_t>(1, kSplitSMs / p.items), p.kv_tiles, kMaxSplits});
    const int64_t row_bytes = 4 * (s.value_dim + 2);  // O's f32 row, its max and sum
    want = std::min(want, std::max<int64_t>(1, kSplitScratch / (p.items * s.seq_q * row_bytes)));
    p.split_tiles = ceil_div(p.kv_tiles, want);
  }
  p.shared_bytes = 2 * p.block_n * (p.k_pitch + p.v_pitch);  // a K tile and a V tile
  if (p.key_split) {
    // Dynamic shared memory: the stages of K and V (kSplitStages where the keys are split, two
    // otherwise); after the last tile the same memory holds each warp's O rows, m and l, as f32.
    p.stages = p.split_tiles < p.kv_tiles ? kSplitStages : 2;
    const int64_t reduce = 4 * (p.warps * s.seq_q * s.value_dim + 2 * p.warps * 16);
    p.shared_bytes = static_cast<int>(std::max<int64_t>(p.stages * p.shared_bytes, reduce));
  }
  // Residency: registers decide it (about 130 to 250 a thread, by ptxas -v on sm_90: two blocks
  // of 128 threads, eight of 32, in 64K registers; the key-split kernel is built for three of
  // 128, kKeySplitBlocks), unless shared memory allows fewer.
  const int per_thread = p.key_split ? 65536 / (kKeySplitBlocks * kAttentionThreads) : 256;
  p.blocks_per_sm = std::max(1, std::min(target.registers_per_sm / (per_thread * p.block),
                                         target.shared_per_sm / std::max(1, p.shared_bytes)));
  p.kv_splits = ceil_div(p.kv_tiles, p.split_tiles);
  p.work = p.items * p.kv_splits;
  return p;
}

KernelBody attention_body(const AttentionSpec& spec, const AttentionParams& params) {
  KernelBody body;
  body.kind = "attention";
  body.fn = build_attention_kernel(spec, params);
  body.helpers = {"fj_core.cuh", "fj_attention.cuh"};
  if (params.kv_splits > 1) body.helpers.push_back("fj_partial.cuh");
  body.block = params.block;
  body.work_blocks = params.work;
  if (params.key_split) body.fn.min_blocks = kKeySplitBlocks;
  body.blocks_per_sm = params.blocks_per_sm;
  body.serial_launches = params.kv_splits > 1;  // the split's scratch is the module's
  // The key split's stages are dynamic shared memory (more than the 48 KiB a static array may
  // take); the other kernel's tiles are static.
  body.shared_bytes = params.key_split ? params.shared_bytes : 0;
  return body;
}

Kernel generate_attention(const AttentionSpec& spec, const Target& target) {
  if (const std::string why = refuse_attention_kernel(spec); !why.empty())
    throw InternalError("generate_attention: " + why);
  if (const std::string why = refuse_attention_target(target); !why.empty())
    throw InternalError("generate_attention: " + why);
  const AttentionSpec folded = fold_query_groups(spec);
  KernelBody body = attention_body(folded, attention_params(folded, target));
  kir::place_declarations(body.fn);
  kir::verify(body.fn);
  return assemble_kernel(body, body.helpers, "");
}

}  // namespace fusejit::templates
