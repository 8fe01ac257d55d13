// templates/gemv: see gemv.h. The parameters (gemv_params) and the kernel, built as kernel IR:
// the signature and storage, the work loop with its stages (weights loaded first, so that their
// latency overlaps the staging of A: the whole piece once, by cp.async, or a stage at a time as
// f32; the products), the warp's butterfly, and the store with the epilogue, directly or
// through the split's partials.
#include "templates/schedulers/gemv.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/emit.h"
#include "templates/schedulers/gemv_epilogue.h"
#include "templates/schedulers/gemv_prologue.h"

namespace fusejit::templates {

namespace {

using kir::ExprP;
using kir::lit;

// Work items a kernel fills before it splits K: a wave of a 132-SM part at the blocks an SM holds
// (the grid is sized at launch; a smaller part loops longer over the same items).
constexpr int64_t kSplitSMs = 132;
// A's stage in shared memory, at most this many f32 values (32 KiB).
constexpr int64_t kStageFloats = 8192;
// Weight vectors each lane holds in flight per stage (rows times unroll): 128 bytes.
constexpr int64_t kVectorsInFlight = 8;

using kir::add;
using kir::mul;
ExprP sub(ExprP a, ExprP b) { return kir::subscript(std::move(a), std::move(b)); }
ExprP sub(ExprP a, ExprP b, ExprP c) { return sub(sub(std::move(a), std::move(b)), std::move(c)); }
ExprP both(ExprP a, ExprP b) { return kir::infix(std::move(a), "&&", std::move(b)); }
ExprP less(ExprP a, int64_t b) { return kir::infix(std::move(a), "<", lit(b)); }

// An element of `dtype` as f32, and an f32 value rounded into `dtype`.
ExprP widen(DType dtype, ExprP x) {
  if (dtype == DType::bf16) return kir::call("fj_bf16_to_f32", {std::move(x)});
  if (dtype == DType::f16) return kir::call("fj_f16_to_f32", {std::move(x)});
  if (dtype == DType::i8) return kir::call("fj_gemv_i8_to_f32", {std::move(x)});  // exact
  return x;
}
ExprP narrow(DType dtype, ExprP x) {
  if (dtype == DType::bf16) return kir::call("fj_f32_to_bf16", {std::move(x)});
  if (dtype == DType::f16) return kir::call("fj_f32_to_f16", {std::move(x)});
  return x;
}

// The kernel's variables.
struct Vars {
  ExprP a, b, scale, bias, c, d;  // parameters
  ExprP xs, last;                // __shared__: A's stage (f32), the split's verdict
  ExprP ws, head;                // the weights' ring (GemvParams::ring), its item's first slot
  ExprP partials, arrivals;      // module scope (split > 1)
  ExprP lane, warp;              // per thread
  ExprP item;                    // the work item (w)
  ExprP tile, piece, row0, acc;  // per work item: row0 is the warp's first weight row
  GemvPrologueBuilder* prologue = nullptr;  // A computed, not loaded (GemvSpec::prologue)
  GemvEpilogueBuilder* epilogue = nullptr;  // D read at the store (GemvSpec::epilogue)
  // Programmatic dependent launch with the ring: the block's first stages of weights are issued
  // before it waits for the grid ahead (ring_stages), A after.
  bool wait_in_ring = false;
};

int64_t blocks_per_sm(const GemvParams& p);

void build_signature(kir::Function& f, const GemvSpec& s, const GemvParams& p, Vars& v) {
  const std::string t(dtype_code(s.dtype).storage);
  f.name = std::string(kKernelNameToken);
  f.block = p.block;
  f.min_blocks = 1;
  if (p.mma) {
    // Two stages of weights in registers, as few as one stage took before (half the unroll):
    // 4 blocks with one 8-row tile of A, 3 with two (blocks_per_sm).
    f.min_blocks = static_cast<int>(blocks_per_sm(p));
    for (int fewer = f.min_blocks - 1; fewer >= 1; --fewer) f.relaxed_min_blocks.push_back(fewer);
  } else if (p.prefetch) {
    // Two stages of weights in registers: ask ptxas for 3 resident blocks (the int8 kernel of
    // llama8b_down fits them in 159 registers, no spill, for sm_90), fewer where it would spill.
    f.min_blocks = 3;
    f.relaxed_min_blocks = {2, 1};
  }
  if (v.prologue)
    v.prologue->add_params(f);  // A's producer's inputs
  else
    v.a = f.param(t, "a", true, "A: [M, K] (or [K, M] stored)");
  v.b = f.param(std::string(dtype_code(gemv_weight_dtype(s)).storage), "b", true,
                s.int8_weights ? "the weights: [N, K], int8" : "the weights: [N, K]");
  if (s.scale) v.scale = f.param(t, "scale", true, "[N]: the int8 weights' scale per row");
  if (s.bias) v.bias = f.param(t, "bias", true, "[N]");
  if (s.residual) v.c = f.param(t, "c", true, "C: [M, N]");
  if (v.epilogue) {
    v.d = f.param(std::string(dtype_code(v.epilogue->output_dtype()).storage), "d", false,
                  "the epilogue region's output: [M, N / groups]");
  } else {
    v.d = f.param(t, "d", false, "D: [M, N]");
  }
}

// Weight rows a warp takes in each of the epilogue region's runs (GemvParams::groups), and the
// runs' length.
int64_t run_rows(const GemvParams& p) { return p.rows / p.groups; }
int64_t run_length(const GemvSpec& s, const GemvParams& p) { return s.n / p.groups; }

// The weight row of the warp's row r (row0: the warp's first): row0 + r, or with runs
// (GemvParams::groups) row r % h of run r / h, h = rows / groups.
ExprP weight_row(const GemvSpec& s, const GemvParams& p, ExprP row0, ExprP r) {
  if (p.groups == 1) return add(std::move(row0), std::move(r));
  const int64_t h = run_rows(p);
  return add(std::move(row0),
             add(kir::group(kir::infix(r, "%", lit(h))),
                 mul(kir::group(kir::infix(r, "/", lit(h))), lit(run_length(s, p)))));
}

// Whether the warp's row r (weight row n) is inside N: with runs, inside its run.
ExprP row_inside(const GemvSpec& s, const GemvParams& p, ExprP row0, ExprP r, ExprP n) {
  if (p.groups == 1) return less(std::move(n), s.n);
  return less(add(std::move(row0), kir::group(kir::infix(r, "%", lit(run_rows(p))))),
              run_length(s, p));
}

// Split K (split > 1): the block's verdict, the partials and the count of pieces arrived; then
// the thread's lane and warp.
void declare_split_and_lanes(kir::Function& f, const GemvSpec& s, const GemvParams& p, Vars& v) {
  if (p.split > 1) {
    v.last = f.body.declare("__shared__ bool", {{"last", {}, nullptr, nullptr}},
                            "this block is its tile's last piece to arrive")[0];
    f.head.comment(
        "Per tile and piece, the f32 partials of its outputs; per tile, the pieces arrived.");
    v.partials = f.head.array(kir::variable("__device__ float", "fj_gemv_partials"),
                              {p.split * p.tiles * p.warps * p.rows * s.m});
    v.arrivals =
        f.head.array(kir::variable("__device__ unsigned int", "fj_gemv_arrivals"), {p.tiles});
  }
  v.lane = f.body.let("int", "lane", kir::infix(kir::thread_index(), "%", lit(32)));
  v.warp = f.body.let("int", "warp", kir::infix(kir::thread_index(), "/", lit(32)));
}

void declare_storage(kir::Function& f, const GemvSpec& s, const GemvParams& p, Vars& v) {
  if (p.resident) {
    v.xs = f.body.declare(fmt::format("__shared__ __align__(16) {}", dtype_code(s.dtype).storage),
                          {{"xs", {lit(s.m), lit(p.piece)}, nullptr, nullptr}},
                          "A's rows over the work item's piece of K, in A's dtype")[0];
  } else {
    v.xs = f.body.declare("__shared__ __align__(16) float",
                          {{"xs", {lit(s.m), lit(p.chunk)}, nullptr, nullptr}},
                          "A's rows over one stage of K, as f32")[0];
  }
  if (p.ring) {
    const kir::VarP raw = kir::variable("unsigned char*", "fj_shared");
    f.head.declare("extern __shared__ __align__(16) unsigned char",
                   {{"fj_shared", {nullptr}, nullptr, raw}},
                   "The weights' ring: the launch's dynamic shared memory (Kernel::shared_bytes)");
    const std::string t(dtype_code(gemv_weight_dtype(s)).storage);
    f.body.comment("The ring: [ring][rows][unroll][block] vectors, each lane's own.");
    v.ws =
        f.body.let_mut(t + "*", "ws", kir::call("reinterpret_cast<" + t + "*>", {kir::var(raw)}));
    v.head = f.body.let_mut("int", "ring_head", lit(0));
  }
  declare_split_and_lanes(f, s, p, v);
}

// The grid-stride loop over work items, and each item's tile, piece and the warp's first weight
// row.
kir::Block& work_items(kir::Function& f, const GemvParams& p, Vars& v) {
  const auto [work, w] =
      f.body.loop("long long", "w", kir::block_index(), lit(p.work), kir::grid_blocks());
  v.item = w;
  v.tile = work.let("long long", "tile", kir::infix(w, "/", lit(p.split)));
  v.piece = work.let("long long", "piece", kir::infix(w, "%", lit(p.split)));
  v.row0 = work.let("long long", "row0",
                    add(mul(v.tile, lit(p.warps * run_rows(p))), mul(v.warp, lit(run_rows(p)))));
  return work;
}

// Registers for one stage's weights: [rows][unroll][vector_width] of the weights' storage type.
ExprP weight_array(kir::Block& b, const GemvSpec& s, const GemvParams& p, const std::string& name) {
  return b.array(std::string(dtype_code(gemv_weight_dtype(s)).storage), name,
                 {p.rows, p.unroll, p.vector_width});
}

// The weights of the stage from k0 into wv: wv[r][u] = the u-th vector of the lane in weight row
// row0 + r; zero past N or K (K is a multiple of the vector width, so a vector is wholly inside
// or outside).
void load_weights(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP wv,
                  ExprP k0) {
  const int64_t V = p.vector_width;
  const auto [rows, r] = b.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const auto [units, u] = rows.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const auto [zero, e] = units.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
  zero.assign(sub(sub(wv, r, u), e), lit(0));
  const ExprP n = units.let("long long", "n", weight_row(s, p, v.row0, r));
  const ExprP k =
      units.let("long long", "k", add(k0, mul(kir::group(add(mul(u, lit(32)), v.lane)), lit(V))));
  kir::Block& in = units.branch(both(row_inside(s, p, v.row0, r, n), less(k, s.k)));
  in.eval(kir::load_vec(sub(wv, r, u), add(v.b, add(mul(n, lit(s.k)), k))));
}

// A's rows over the stage from k0, as f32 in xs (zero past K): every thread a share of the
// vectors, each read once from global memory.
void stage_a(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP k0) {
  const int64_t V = p.vector_width, per_row = p.chunk / V;
  const auto [each, i] = b.loop("int", "i", kir::thread_index(), lit(s.m * per_row), lit(p.block));
  const ExprP m = each.let("int", "m", kir::infix(i, "/", lit(per_row)));
  const ExprP j = each.let("int", "j", kir::infix(i, "%", lit(per_row)));
  const ExprP k = each.let("long long", "k", add(k0, mul(j, lit(V))));
  const ExprP xf = each.array("float", "xf", {V});
  const auto [zero, z] = each.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
  zero.assign(sub(xf, z), lit("0.0f"));
  kir::Block& in = each.branch(less(k, s.k));
  if (v.prologue) {  // A's elements computed from its producer's inputs
    v.prologue->elements(in, add(mul(m, lit(s.k)), k), static_cast<int>(V), xf);
  } else if (s.transpose_a) {
    const auto [lanes, e] = in.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
    lanes.assign(sub(xf, e),
                 widen(s.dtype, sub(v.a, add(mul(kir::group(add(k, e)), lit(s.m)), m))));
  } else {
    const ExprP xv = in.array(std::string(dtype_code(s.dtype).storage), "xv", {V});
    in.eval(kir::load_vec(xv, add(v.a, add(mul(m, lit(s.k)), k))));
    const auto [lanes, e] = in.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
    lanes.assign(sub(xf, e), widen(s.dtype, sub(xv, e)));
  }
  each.eval(kir::store_vec(kir::prefix("&", sub(v.xs, m, mul(j, lit(V)))), xf));
}

// The elements of A a resident stage copies at a time: a weight load's K, at most 16 bytes of A
// (V is a power of two dividing K, so this one divides K too).
int64_t resident_width(const GemvSpec& s, const GemvParams& p) {
  return std::min<int64_t>(p.vector_width, 16 / static_cast<int64_t>(dtype_size(s.dtype)));
}

// Whether stage_piece copies A by cp.async (A read as it is stored, in words of 4 to 16 bytes).
bool stages_a_async(const GemvSpec& s, const GemvParams& p, const Vars& v) {
  return !v.prologue && !s.transpose_a &&
         resident_width(s, p) * static_cast<int64_t>(dtype_size(s.dtype)) >= 4;
}

// A's rows over the work item's piece of K, from kp, into xs in A's dtype (zero past K), each
// element read (or computed) once: by cp.async where a copy is a word of 4 to 16 bytes (all of a
// thread's copies in flight together, through no register), else element by element, or from
// the prologue. The caller waits at a barrier before the stages read it.
void stage_piece(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP kp,
                 bool wait = true) {
  const int64_t VA = resident_width(s, p), per_row = p.piece / VA;
  const bool async = stages_a_async(s, p, v);
  const std::string t(dtype_code(s.dtype).storage);
  const auto [each, i] =
      b.loop("int", "i", kir::thread_index(), lit(s.m * per_row), lit(p.block), 4);
  const ExprP m = each.let("int", "m", kir::infix(i, "/", lit(per_row)));
  const ExprP j = each.let("int", "j", kir::infix(i, "%", lit(per_row)));
  const ExprP k = each.let("long long", "k", add(kp, mul(j, lit(VA))));
  const ExprP to = sub(v.xs, m, mul(j, lit(VA)));
  kir::Block& in = each.branch(less(k, s.k));
  if (v.prologue) {  // A's elements computed from its producer's inputs, rounded to its dtype
    const ExprP xf = in.array("float", "xf", {VA});
    v.prologue->elements(in, add(mul(m, lit(s.k)), k), static_cast<int>(VA), xf);
    const auto [lanes, e] = in.loop_line("int", "e", lit(0), lit(VA), nullptr, 1);
    lanes.assign(sub(v.xs, m, add(mul(j, lit(VA)), e)), narrow(s.dtype, sub(xf, e)));
  } else if (async) {
    in.eval(kir::call(fmt::format("fj_stage_vec<{}, {}>", t, VA),
                      {kir::prefix("&", to), add(v.a, add(mul(m, lit(s.k)), k))}));
  } else {
    const auto [lanes, e] = in.loop_line("int", "e", lit(0), lit(VA), nullptr, 1);
    const ExprP at = s.transpose_a ? add(mul(kir::group(add(k, e)), lit(s.m)), m)
                                   : add(mul(m, lit(s.k)), add(k, e));
    lanes.assign(sub(v.xs, m, add(mul(j, lit(VA)), e)), sub(v.a, at));
  }
  kir::Block& past = each.branch(kir::infix(k, ">=", lit(s.k)));
  const auto [zero, e] = past.loop_line("int", "e", lit(0), lit(VA), nullptr, 1);
  zero.assign(sub(v.xs, m, add(mul(j, lit(VA)), e)), lit(0));
  if (async && wait) b.eval(kir::call("fj_stage_wait", {}));
}

// acc[m][r] += A[m, k] * W[row0 + r, k] over the lane's vectors of the stage: each weight
// vector widened once (wf), each of A's vectors read once from shared memory per row set.
// Resident (GemvParams::resident): A's vectors of the stage `stage` of the piece, in A's dtype,
// widened as they are read.
void multiply(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP wv,
              ExprP stage = nullptr) {
  const int64_t V = p.vector_width;
  const auto [units, u] = b.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const ExprP wf = units.array("float", "wf", {p.rows, V});
  {
    const auto [rows, r] = units.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
    if (gemv_weight_dtype(s) == DType::i8 && V % 4 == 0) {
      // A word of four weights at a time (fj_gemv_i8x4_to_f32).
      const auto [words, q] = rows.loop_line("int", "q", lit(0), lit(V / 4), nullptr, 1);
      const ExprP first = mul(q, lit(4));
      words.eval(kir::call("fj_gemv_i8x4_to_f32", {kir::prefix("&", sub(wf, r, first)),
                                                   kir::prefix("&", sub(sub(wv, r, u), first))}));
    } else {
      const auto [lanes, e] = rows.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
      lanes.assign(sub(wf, r, e), widen(gemv_weight_dtype(s), sub(sub(wv, r, u), e)));
    }
  }
  const auto [each, m] = units.loop("int", "m", lit(0), lit(s.m), nullptr, 1);
  ExprP at = mul(kir::group(add(mul(u, lit(32)), v.lane)), lit(V));
  ExprP xr;
  if (p.resident) {
    at = add(mul(stage, lit(p.chunk)), at);
    const ExprP xv = each.array(std::string(dtype_code(s.dtype).storage), "xv", {V});
    each.eval(kir::load_vec(xv, kir::prefix("&", sub(v.xs, m, at))));
    xr = each.array("float", "xr", {V});
    const auto [lanes, e] = each.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
    lanes.assign(sub(xr, e), widen(s.dtype, sub(xv, e)));
  } else {
    xr = each.array("float", "xr", {V});
    each.eval(kir::load_vec(xr, kir::prefix("&", sub(v.xs, m, at))));
  }
  const auto [rows, r] = each.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const auto [lanes, e] = rows.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
  lanes.assign(sub(v.acc, m, r), mul(sub(xr, e), sub(wf, r, e)), "+=");
}

// Stages of weights a block with a prologue prefetches into L2 before it computes A (after its
// first stage's loads): the weight stream from DRAM goes on while A is computed, and those
// stages' loads then hit L2. 3 stages of 16 rows: 48 KiB of bf16 a block, 19 MB for a wave of
// 396 blocks.
constexpr int64_t kPrologueAhead = 3;

// `count` elements of K from k0 of each of the warp's weight rows (from row0) prefetched into
// L2, each lane a share of the rows' 128-byte lines. Reads nothing.
void prefetch_rows(kir::Block& b, const GemvSpec& s, const GemvParams& p, ExprP weights, ExprP row0,
                   ExprP lane, ExprP k0, int64_t count) {
  const int64_t per_line = 128 / static_cast<int64_t>(dtype_size(gemv_weight_dtype(s)));
  const auto [rows, r] = b.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const ExprP n = rows.let("long long", "n", weight_row(s, p, row0, r));
  kir::Block& in = rows.branch(row_inside(s, p, row0, r, n));
  const auto [lines, line] = in.loop("int", "line", lane, lit(ceil_div(count, per_line)), lit(32));
  const ExprP k = lines.let("long long", "k", add(k0, mul(line, lit(per_line))));
  lines.branch_line(less(k, s.k))
      .eval(kir::call("fj_prefetch_l2", {add(weights, add(mul(n, lit(s.k)), k))}));
}

// Stages 1 .. kPrologueAhead of the work item's piece of weights prefetched into L2.
void prefetch_ahead(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v) {
  const int64_t ahead = std::min(kPrologueAhead, p.piece / p.chunk - 1);
  if (ahead < 1) return;
  b.comment("The next {} stages of weights into L2 while A is computed.", ahead);
  prefetch_rows(b, s, p, v.b, v.row0, v.lane, add(mul(v.piece, lit(p.piece)), lit(p.chunk)),
                ahead * p.chunk);
}

// A resident piece staged, while the first stage's weights load: by the block's first work
// item only where every item has the same piece (no split), else by each, once the last one's
// stages are done with it.
void stage_resident(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v,
                    ExprP first) {
  kir::Block& stage = p.split > 1 ? b : b.branch(first);
  if (p.split > 1) {
    b.branch(kir::infix(v.item, "!=", kir::block_index()))
        .eval(kir::sync_block(), "the last item's stages have read xs");
  }
  stage_piece(stage, s, p, v, mul(v.piece, lit(p.piece)));
  stage.eval(kir::sync_block());
}

// The stages of one work item's piece of K with two stages of weights in registers: in the
// loop, the next stage's (into wn) load before this one's products, then move into wv for the
// next iteration.
void register_stages(kir::Block& b, const GemvSpec& s, const GemvParams& p, Vars& v) {
  const int64_t count = p.piece / p.chunk;
  const ExprP wv = weight_array(b, s, p, "wv");
  load_weights(b, s, p, v, wv, mul(v.piece, lit(p.piece)));
  const ExprP first = kir::infix(v.item, "==", kir::block_index());
  if (v.prologue && p.resident) prefetch_ahead(b, s, p, v);
  if (v.prologue) {
    // A normalization's row statistics, once per block, while its first weights load: in
    // its first work item (the same for all the block's threads).
    v.prologue->reduce_row(b.branch(first), static_cast<int>(p.block));
  }
  if (p.resident) stage_resident(b, s, p, v, first);
  const auto [stages, stage] = b.loop("int", "stage", lit(0), lit(count));
  const ExprP k0 =
      stages.let("long long", "k0", add(mul(v.piece, lit(p.piece)), mul(stage, lit(p.chunk))));
  const ExprP wn = weight_array(stages, s, p, "wn");
  kir::Block& ahead = stages.branch(kir::infix(add(stage, lit(1)), "<", lit(count)));
  load_weights(ahead, s, p, v, wn, add(k0, lit(p.chunk)));
  if (p.resident) {
    multiply(stages, s, p, v, wv, stage);
  } else {
    stage_a(stages, s, p, v, k0);
    stages.eval(kir::sync_block());
    multiply(stages, s, p, v, wv);
    stages.eval(kir::sync_block(), "xs is written again by the next stage");
  }
  const auto [rows, r] = stages.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const auto [units, u] = rows.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const auto [moves, e] = units.loop_line("int", "e", lit(0), lit(p.vector_width), nullptr, 1);
  moves.assign(sub(sub(wv, r, u), e), sub(sub(wn, r, u), e));
}

// The lane's vector u of weight row r in the ring's slot `slot`.
ExprP ring_vector(const GemvParams& p, const Vars& v, ExprP slot, ExprP r, ExprP u) {
  const ExprP row = kir::group(add(mul(slot, lit(p.rows)), r));
  const ExprP unit = kir::group(add(mul(row, lit(p.unroll)), u));
  const ExprP at = kir::group(add(mul(unit, lit(p.block)), kir::thread_index()));
  return add(v.ws, mul(at, lit(p.vector_width)));
}

// One stage of weights, of the warp's rows from row0 and of K from kq, copied by cp.async into
// the ring's slot `slot`, zero past N or K.
void copy_stage(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP row0,
                ExprP kq, ExprP slot) {
  const int64_t V = p.vector_width;
  const std::string t(dtype_code(gemv_weight_dtype(s)).storage);
  const auto [rows, r] = b.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const auto [units, u] = rows.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const ExprP n = units.let("long long", "n", weight_row(s, p, row0, r));
  const ExprP k =
      units.let("long long", "k", add(kq, mul(kir::group(add(mul(u, lit(32)), v.lane)), lit(V))));
  const ExprP dst = units.let_mut(t + "*", "dst", ring_vector(p, v, slot, r, u));
  const ExprP inside = both(row_inside(s, p, row0, r, n), less(k, s.k));
  units.branch(inside).eval(kir::call(fmt::format("fj_stage_vec<{}, {}>", t, V),
                                      {dst, add(v.b, add(mul(n, lit(s.k)), k))}));
  kir::Block& outside = units.branch(kir::prefix("!", kir::group(inside)));
  const auto [zero, e] = outside.loop_line("int", "e", lit(0), lit(V), nullptr, 1);
  zero.assign(sub(dst, e), lit(0));
}

// Stage q of the block's stream of stages, counted from this work item's first, issued into the
// ring's slot (head + q) % ring and committed as one group of copies. Where K is not split (every
// item the same piece, from K = 0), the stream runs on through the block's next items: stage q
// is stage q % count of the item q / count after this one, if there is one, so that the ring does
// not drain between items. Else only this item's stages. The group is committed either way (an
// empty one), so that each stage is one group and the waits count alike.
void issue_stage(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP q) {
  const int64_t count = p.piece / p.chunk;
  const ExprP slot = b.let("int", "fill", kir::infix(kir::group(add(v.head, q)), "%", lit(p.ring)));
  if (p.split > 1) {
    kir::Block& in = b.branch(less(q, count));
    const ExprP kq =
        in.let("long long", "kq", add(mul(v.piece, lit(p.piece)), mul(q, lit(p.chunk))));
    copy_stage(in, s, p, v, v.row0, kq, slot);
  } else {
    const ExprP hop = b.let("long long", "hop",
                            mul(kir::group(kir::infix(q, "/", lit(count))),
                                kir::cast("long long", kir::grid_blocks())));
    kir::Block& in = b.branch(kir::infix(add(v.item, hop), "<", lit(p.work)));
    const ExprP row0 =
        in.let("long long", "rows_at", add(v.row0, mul(hop, lit(p.warps * run_rows(p)))));
    const ExprP kq =
        in.let("long long", "kq", mul(kir::group(kir::infix(q, "%", lit(count))), lit(p.chunk)));
    copy_stage(in, s, p, v, row0, kq, slot);
  }
  b.eval(kir::call("fj_stage_commit", {}));
}

// The stages of one work item's piece of K through the ring (GemvParams::ring). A's piece, where
// this item stages it, is copied first as a group of its own; then the first ring - 1 stages of
// weights are issued, and a prologue computes A while they load. Each stage then issues the one
// ring - 1 ahead into the slot the stage before it read, waits for its own group, and multiplies
// from its slot: a lane reads only the vectors it copied itself, so no barrier.
// With programmatic dependent launch (Vars::wait_in_ring) the first stages come before A: they
// read only weights, so the block issues them, then waits for the grid ahead, then copies or
// computes A, and waits for all its groups (A's is the last).
void ring_stages(kir::Block& b, const GemvSpec& s, const GemvParams& p, Vars& v) {
  const int64_t count = p.piece / p.chunk, ahead = p.ring - 1;
  const ExprP first = kir::infix(v.item, "==", kir::block_index());
  const bool async_a = stages_a_async(s, p, v);
  if (p.split > 1) {
    b.branch(kir::infix(v.item, "!=", kir::block_index()))
        .eval(kir::sync_block(), "the last item's stages have read xs");
  }
  // Whether this item stages A: each item where K is split, else the block's first.
  auto own = [&]() -> kir::Block& { return p.split > 1 ? b : b.branch(first); };
  const ExprP kp = mul(v.piece, lit(p.piece));
  auto copy_a = [&] {
    kir::Block& copy = own();
    stage_piece(copy, s, p, v, kp, /*wait=*/false);
    copy.eval(kir::call("fj_stage_commit", {}));
  };
  if (async_a && !v.wait_in_ring) copy_a();
  {  // the item's first stages: issued by the item before it in the block where K is not split
    kir::Block& start = p.split == 1 ? b.branch(first) : b;
    const auto [issue, q] = start.loop("int", "q", lit(0), lit(ahead), nullptr, 1);
    issue_stage(issue, s, p, v, q);
  }
  if (v.wait_in_ring) {
    b.branch(first).eval(kir::call("fj_grid_dependency_wait", {}),
                         "the grid ahead in the stream has finished: A may be read");
    if (async_a) copy_a();
  }
  if (v.prologue) v.prologue->reduce_row(b.branch(first), static_cast<int>(p.block));
  kir::Block& landed = own();
  if (async_a) {
    landed.eval(kir::call(fmt::format("fj_stage_wait_group<{}>", v.wait_in_ring ? 0 : ahead), {}),
                "A's group has landed");
  } else {
    stage_piece(landed, s, p, v, kp);
  }
  landed.eval(kir::sync_block());
  const auto [stages, stage] = b.loop("int", "stage", lit(0), lit(count));
  issue_stage(stages, s, p, v, kir::group(add(stage, lit(ahead))));
  stages.eval(kir::call(fmt::format("fj_stage_wait_group<{}>", ahead), {}),
              "this stage's group has landed");
  const ExprP slot =
      stages.let("int", "slot", kir::infix(kir::group(add(v.head, stage)), "%", lit(p.ring)));
  const ExprP wv = weight_array(stages, s, p, "wv");
  {
    const auto [rows, r] = stages.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
    const auto [units, u] = rows.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
    units.eval(kir::load_vec(sub(wv, r, u), ring_vector(p, v, slot, r, u)));
  }
  multiply(stages, s, p, v, wv, stage);
  b.assign(v.head, lit(count), "+=");
}

// The stages of one work item's piece of K, then the warp's butterfly: every lane ends with
// every sum of the warp's rows.
void accumulate(kir::Block& b, const GemvSpec& s, const GemvParams& p, Vars& v) {
  v.acc = b.array("float", "acc", {s.m, p.rows});
  {
    const auto [each, m] = b.loop("int", "m", lit(0), lit(s.m), nullptr, 1);
    const auto [rows, r] = each.loop_line("int", "r", lit(0), lit(p.rows), nullptr, 1);
    rows.assign(sub(v.acc, m, r), lit("0.0f"));
  }
  if (p.ring)
    ring_stages(b, s, p, v);
  else
    register_stages(b, s, p, v);
  const auto [each, m] = b.loop("int", "m", lit(0), lit(s.m), nullptr, 1);
  const auto [rows, r] = each.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  for (int o = 16; o >= 1; o /= 2)
    rows.assign(sub(v.acc, m, r), kir::call("fj_gemv_shfl_xor", {sub(v.acc, m, r), lit(o)}), "+=");
}

// act(alpha * sum * scale[n] + beta * C[m, n] + bias[n]), as f32.
ExprP epilogue_value(const GemvSpec& s, const Vars& v, ExprP sum, ExprP m, ExprP n) {
  ExprP value = s.alpha == 1.0 ? sum : mul(lit(literal(DType::f32, s.alpha)), sum);
  if (s.scale) value = mul(kir::group(value), widen(s.dtype, sub(v.scale, n)));
  const ExprP at = add(mul(m, lit(s.n)), n);
  if (s.residual)
    value = add(value, mul(lit(literal(DType::f32, s.beta)), widen(s.dtype, sub(v.c, at))));
  if (s.bias) value = add(value, widen(s.dtype, sub(v.bias, n)));
  using Act = fusion::GemmEpilogue::Activation;
  if (s.activation == Act::relu) value = kir::call("fj_gemv_relu", {value});
  if (s.activation == Act::gelu_tanh) value = kir::call("fj_gemv_gelu_tanh", {value});
  return value;
}

// D[m, n] = epilogue_value, rounded into D's dtype.
void store(kir::Block& b, const GemvSpec& s, const Vars& v, ExprP sum, ExprP m, ExprP n) {
  b.assign(sub(v.d, add(mul(m, lit(s.n)), n)), narrow(s.dtype, epilogue_value(s, v, sum, m, n)));
}

// With an epilogue region: `f`(block, m, j, rows, sums) for each of its output elements (m, j) a
// lane of the CUDA-core variant owns: the warp's h = rows / groups rows j = row0 + i of a run,
// each by lane (m * h + i) % 32, in bounds; rows[c] is the warp row holding run c's sum (weight
// row j + c * N / groups: i + c * h), sums[c] that sum (every lane holds every sum of the warp's
// rows after the butterfly).
template <class F>
void epilogue_elements(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, F f) {
  const int64_t h = run_rows(p);
  const auto [each, m] = b.loop("int", "m", lit(0), lit(s.m), nullptr, 1);
  const auto [rows, i] = each.loop("int", "i", lit(0), lit(h), nullptr, 1);
  const ExprP j = rows.let("long long", "j", add(v.row0, i));
  const ExprP owner = kir::infix(kir::group(add(mul(m, lit(h)), i)), "%", lit(32));
  kir::Block& mine = rows.branch(both(kir::infix(v.lane, "==", owner), less(j, run_length(s, p))));
  std::vector<ExprP> at, sums;
  for (int64_t c = 0; c < p.groups; ++c) {
    at.push_back(kir::group(add(i, lit(c * h))));
    sums.push_back(sub(v.acc, m, at.back()));
  }
  f(mine, m, j, at, sums);
}

// The epilogue region's element (m, j) from its runs' sums (f32), each through the GEMM's own
// epilogue first.
void store_element(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP m,
                   ExprP j, const std::vector<ExprP>& sums) {
  std::vector<ExprP> values;
  for (size_t c = 0; c < sums.size(); ++c) {
    const ExprP n = add(j, lit(static_cast<int64_t>(c) * run_length(s, p)));
    values.push_back(b.let("float", fmt::format("es{}", c), epilogue_value(s, v, sums[c], m, n)));
  }
  v.epilogue->store(b, v.d, m, j, values);
}

// Each (m, r) sum is stored by one lane (lane (m * rows + r) % 32), in its row's bounds. `body`
// gets the block of that lane, m, r and the weight row n.
template <class Body>
void per_output(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, Body body) {
  const auto [each, m] = b.loop("int", "m", lit(0), lit(s.m), nullptr, 1);
  const auto [rows, r] = each.loop("int", "r", lit(0), lit(p.rows), nullptr, 1);
  const ExprP n = rows.let("long long", "n", weight_row(s, p, v.row0, r));
  const ExprP owner = kir::infix(kir::group(add(mul(m, lit(p.rows)), r)), "%", lit(32));
  kir::Block& mine =
      rows.branch(both(kir::infix(v.lane, "==", owner), row_inside(s, p, v.row0, r, n)));
  body(mine, m, r, n);
}

// The partial of (piece q, the warp's row r, m) in the scratch.
ExprP partial_slot(const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP q, ExprP m,
                   ExprP r) {
  ExprP at = add(mul(q, lit(p.tiles)), v.tile);
  at = add(mul(kir::group(at), lit(p.warps * p.rows)), add(mul(v.warp, lit(p.rows)), r));
  return sub(v.partials, add(mul(kir::group(at), lit(s.m)), m));
}

// Split pieces: each writes its partials; the tile's last block to arrive (counted after a
// fence, last_block_to_arrive) adds the tile's pieces in order and stores. `each`(block, f)
// calls f(block', m, r, n, sum) for each output the thread owns: A's row m, the warp's weight
// row r (n = row0 + r) and the thread's sum for it; the two variants own them differently.
template <class Each>
void finish_split(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, Each each) {
  each(b, [&](kir::Block& mine, ExprP m, ExprP r, ExprP, ExprP sum) {
    mine.assign(partial_slot(s, p, v, v.piece, m, r), sum);
  });
  const ExprP count = sub(v.arrivals, v.tile);
  kir::Block& last = last_block_to_arrive(b, count, v.last, p.split);
  each(last, [&](kir::Block& mine, ExprP m, ExprP r, ExprP n, ExprP) {
    const ExprP sum = mine.let_mut("float", "sum", lit("0.0f"));
    const auto [fold, q] = mine.loop("int", "q", lit(0), lit(p.split));
    fold.assign(sum,
                kir::call("fj_gemv_partial", {kir::prefix("&", partial_slot(s, p, v, q, m, r))}),
                "+=");
    store(mine, s, v, sum, m, n);
  });
  reset_split_count(last, count);
}

// The same with an epilogue region: each piece writes its partials as above (`each`); the tile's
// last block adds, for each element its lanes own (`elements`, as epilogue_elements calls f),
// each run's sum from its pieces in order, and stores the element.
template <class Each, class Elements>
void finish_split_epilogue(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v,
                           Each each, Elements elements) {
  each(b, [&](kir::Block& mine, ExprP m, ExprP r, ExprP, ExprP sum) {
    mine.assign(partial_slot(s, p, v, v.piece, m, r), sum);
  });
  const ExprP count = sub(v.arrivals, v.tile);
  kir::Block& last = last_block_to_arrive(b, count, v.last, p.split);
  elements(last, [&](kir::Block& mine, ExprP m, ExprP j, const std::vector<ExprP>& rows,
                     const std::vector<ExprP>&) {
    std::vector<ExprP> sums;
    for (size_t c = 0; c < rows.size(); ++c) {
      sums.push_back(mine.let_mut("float", fmt::format("sum{}", c), lit("0.0f")));
      const auto [fold, q] = mine.loop("int", fmt::format("q{}", c), lit(0), lit(p.split));
      fold.assign(
          sums.back(),
          kir::call("fj_gemv_partial", {kir::prefix("&", partial_slot(s, p, v, q, m, rows[c]))}),
          "+=");
    }
    store_element(mine, s, p, v, m, j, sums);
  });
  reset_split_count(last, count);
}

// ---- the tensor-core variant (GemvParams::mma: 2..16 rows of bf16/f16 A) ----------------------
//
// One mma.m16n8k16 multiplies 16 weight rows (its A: rows n, columns k) by 8 rows of A (its B:
// k by m) over 16 of K. The dot products do not care in which order K is summed, so K is
// permuted within each 32 of it: lane (g, t) loads 8 consecutive K (16 bytes) of weight rows g
// and g + 8 and of A's row g, at K offset 8t, and those 8 are the fragments' columns 2t, 2t + 1,
// 2t + 8, 2t + 9 of two mma steps, for the weights and A alike (fj_gemv.cuh's layout notes).
// Every load is whole 16-byte vectors; the accumulators hold whole dot products, owned by one
// lane each: (weight row g or g + 8, A row 2t or 2t + 1 of each 8-row tile).

// Four 32-bit words (pairs of K) of the 8 elements `v`: 16-bit ones joined, int8 ones
// (`int8`) widened to the spec's dtype, exactly, by bit patterns (fj_gemv_i8.cuh), not by the
// conversion unit, a word of four at a time.
std::vector<ExprP> words(kir::Block& b, const GemvSpec& s, ExprP v, const std::string& name,
                         bool int8) {
  const ExprP w = b.array("unsigned", name, {4});
  if (int8) {
    // Four weights (a 32-bit word of int8) into two words at a time.
    const std::string quad =
        s.dtype == DType::bf16 ? "fj_gemv_i8x4_to_bf16x2" : "fj_gemv_i8x4_to_f16x2";
    const auto [quads, q] = b.loop("int", "q", lit(0), lit(2), nullptr, 1);
    quads.eval(kir::call(quad, {kir::prefix("&", sub(w, mul(q, lit(2)))),
                                kir::prefix("&", sub(v, mul(q, lit(4))))}));
  } else {
    const auto [pairs, i] = b.loop("int", "i", lit(0), lit(4), nullptr, 1);
    const ExprP lo = sub(v, mul(i, lit(2))), hi = sub(v, add(mul(i, lit(2)), lit(1)));
    pairs.assign(sub(w, i), kir::call("fj_gemv_join", {lo, hi}));
  }
  return {sub(w, lit(0)), sub(w, lit(1)), sub(w, lit(2)), sub(w, lit(3))};
}

// One stage's weights of the lane, from K offset k0, into wv[unroll][rows / 16][2][8]: 8
// consecutive K of weight rows g and g + 8 of each 16, zero past N and K. The loads of a stage
// are in flight together.
void load_mma_weights(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP g,
                      ExprP t, ExprP wv, ExprP k0) {
  const auto [us, u] = b.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const ExprP k = us.let("long long", "k", add(k0, add(mul(u, lit(32)), mul(t, lit(8)))));
  const auto [rs, r] = us.loop("int", "r", lit(0), lit(p.rows / 16), nullptr, 1);
  const auto [hs, h] = rs.loop("int", "h", lit(0), lit(2), nullptr, 1);
  const ExprP n =
      hs.let("long long", "n", add(v.row0, add(mul(r, lit(16)), add(g, mul(h, lit(8))))));
  const ExprP dst = sub(sub(sub(wv, u), r), h);
  const auto [zero, e] = hs.loop_line("int", "e", lit(0), lit(8), nullptr, 1);
  zero.assign(sub(dst, e), lit(0));
  hs.branch(both(less(n, s.n), less(k, s.k)))
      .eval(kir::load_vec(dst, add(v.b, add(mul(n, lit(s.k)), k))));
}

// acc[r][mt] += the stage's weights (wv, from K offset k0) times A's rows: A's 16-byte vectors
// read from memory (L1 and L2 keep them: every warp of the block reads the same), each weight
// word paired with each 8-row tile of A in one mma.
void multiply_mma(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP g,
                  ExprP t, ExprP wv, ExprP k0, ExprP acc) {
  const std::string at(dtype_code(s.dtype).storage);
  const std::string mma = s.dtype == DType::bf16 ? "fj_gemv_mma_bf16" : "fj_gemv_mma_f16";
  const auto [us, u] = b.loop("int", "u", lit(0), lit(p.unroll), nullptr, 1);
  const ExprP k = us.let("long long", "k", add(k0, add(mul(u, lit(32)), mul(t, lit(8)))));
  std::vector<std::vector<ExprP>> x;  // A's words, per 8-row tile
  for (int64_t mt = 0; mt < p.m_tiles; ++mt) {
    const ExprP xv = us.array(at, fmt::format("xv{}", mt), {8});
    const ExprP m = us.let("int", fmt::format("m{}", mt), add(g, lit(8 * mt)));
    const auto [zero, e] = us.loop_line("int", "e", lit(0), lit(8), nullptr, 1);
    zero.assign(sub(xv, e), lit(0));
    us.branch(both(less(m, s.m), less(k, s.k)))
        .eval(kir::load_vec(xv, add(v.a, add(mul(m, lit(s.k)), k))));
    x.push_back(words(us, s, xv, fmt::format("x{}", mt), false));
  }
  const auto [rs, r] = us.loop("int", "r", lit(0), lit(p.rows / 16), nullptr, 1);
  const std::vector<ExprP> lo =
      words(rs, s, sub(sub(sub(wv, u), r), lit(0)), "wlo", s.int8_weights);
  const std::vector<ExprP> hi =
      words(rs, s, sub(sub(sub(wv, u), r), lit(1)), "whi", s.int8_weights);
  for (int step = 0; step < 2; ++step) {
    const ExprP a = rs.declare(
        "const unsigned",
        {{fmt::format("a{}", step),
          {lit(4)},
          kir::braces({lo[2 * step], hi[2 * step], lo[2 * step + 1], hi[2 * step + 1]})}})[0];
    for (int64_t mt = 0; mt < p.m_tiles; ++mt) {
      const ExprP bf =
          rs.declare("const unsigned", {{fmt::format("b{}{}", step, mt),
                                         {lit(2)},
                                         kir::braces({x[mt][2 * step], x[mt][2 * step + 1]})}})[0];
      rs.eval(kir::call(mma, {sub(sub(acc, r), lit(mt)), a, bf}));
    }
  }
}

// The lane's sums: acc[r][mt][e] for weight row row0 + 16 r + g + 8 (e >> 1) and A's row
// 8 mt + 2 t + (e & 1), over the work item's piece of K. Two stages of weights in registers
// (GemvParams::prefetch): the next stage's (wn) load before this one's products, so that a
// warp's loads stay in flight while its tensor cores work.
ExprP accumulate_mma(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP g,
                     ExprP t) {
  const int64_t R = p.rows / 16, U = p.unroll, MT = p.m_tiles, count = p.piece / p.chunk;
  const ExprP acc = b.array("float", "acc", {R, MT, 4});
  {
    const auto [rs, r] = b.loop("int", "r", lit(0), lit(R), nullptr, 1);
    const auto [ms, mt] = rs.loop("int", "mt", lit(0), lit(MT), nullptr, 1);
    const auto [es, e] = ms.loop_line("int", "e", lit(0), lit(4), nullptr, 1);
    es.assign(sub(sub(sub(acc, r), mt), e), lit("0.0f"));
  }
  const std::string wt(dtype_code(gemv_weight_dtype(s)).storage);
  const ExprP wv = b.array(wt, "wv", {U, R, 2, 8});
  load_mma_weights(b, s, p, v, g, t, wv, mul(v.piece, lit(p.piece)));
  const auto [stages, stage] = b.loop("int", "stage", lit(0), lit(count));
  const ExprP k0 =
      stages.let("long long", "k0", add(mul(v.piece, lit(p.piece)), mul(stage, lit(p.chunk))));
  const ExprP wn = stages.array(wt, "wn", {U, R, 2, 8});
  load_mma_weights(stages.branch(kir::infix(add(stage, lit(1)), "<", lit(count))), s, p, v, g, t,
                   wn, add(k0, lit(p.chunk)));
  multiply_mma(stages, s, p, v, g, t, wv, k0, acc);
  const auto [us, u] = stages.loop("int", "u", lit(0), lit(U), nullptr, 1);
  const auto [rs, r] = us.loop("int", "r", lit(0), lit(R), nullptr, 1);
  const auto [hs, h] = rs.loop("int", "h", lit(0), lit(2), nullptr, 1);
  const auto [moves, e] = hs.loop_line("int", "e", lit(0), lit(8), nullptr, 1);
  moves.assign(sub(sub(sub(sub(wv, u), r), h), e), sub(sub(sub(sub(wn, u), r), h), e));
  return acc;
}

// Each of the lane's sums: `body`(block, m, n, value) where the output is inside M and N.
template <class Body>
void each_mma_output(kir::Block& b, const GemvSpec& s, const GemvParams& p, const Vars& v, ExprP g,
                     ExprP t, ExprP acc, Body body) {
  const auto [rs, r] = b.loop("int", "r", lit(0), lit(p.rows / 16), nullptr, 1);
  const auto [ms, mt] = rs.loop("int", "mt", lit(0), lit(p.m_tiles), nullptr, 1);
  const auto [es, e] = ms.loop("int", "e", lit(0), lit(4), nullptr, 1);
  const ExprP n = es.let(
      "long long", "n",
      add(v.row0,
          add(mul(r, lit(16)), add(g, mul(kir::group(kir::infix(e, ">>", lit(1))), lit(8))))));
  const ExprP m =
      es.let("int", "m",
             add(mul(mt, lit(8)), add(mul(t, lit(2)), kir::group(kir::infix(e, "&", lit(1))))));
  kir::Block& in = es.branch(both(less(n, s.n), less(m, s.m)));
  body(in, m, n, sub(sub(sub(acc, r), mt), e));
}

// The tensor-core kernel: a grid-stride loop over (tile, piece) work items as the other; each
// warp takes `rows` weight rows of the tile over the piece; pieces combine as the other's do.
kir::Function build_gemv_mma_kernel(const GemvSpec& s, const GemvParams& p) {
  kir::Function f;
  Vars v;
  build_signature(f, s, p, v);
  declare_split_and_lanes(f, s, p, v);
  const ExprP g = f.body.let("int", "g", kir::infix(v.lane, ">>", lit(2)));
  const ExprP t = f.body.let("int", "t", kir::infix(v.lane, "&", lit(3)));
  kir::Block& work = work_items(f, p, v);
  const ExprP acc = accumulate_mma(work, s, p, v, g, t);
  if (p.split == 1) {
    each_mma_output(work, s, p, v, g, t, acc, [&](kir::Block& in, ExprP m, ExprP n, ExprP value) {
      store(in, s, v, value, m, n);
    });
    return f;
  }
  finish_split(work, s, p, v, [&](kir::Block& b, auto&& body) {
    each_mma_output(b, s, p, v, g, t, acc, [&](kir::Block& in, ExprP m, ExprP n, ExprP value) {
      body(in, m, kir::group(kir::infix(n, "-", v.row0)), n, value);
    });
  });
  return f;
}

// Before the grid dependency's wait (wait_for_grid): the first stage of the block's first work
// item's weights prefetched into L2, every lane a share of each of its warp's rows' 128-byte
// lines, so that the stream of weights starts while the kernel ahead finishes. Reads nothing.
// One stage, not the whole piece: every block's piece together can exceed L2 (gate/up of an 8B
// model: 69 MB), and then the lines prefetched first are evicted before they are read.
kir::Block prefetch_weights(const GemvSpec& s, const GemvParams& p, ExprP b) {
  kir::Block before;
  kir::Block& mine = before.branch(kir::infix(kir::block_index(), "<", lit(p.work)));
  const ExprP w = mine.let("long long", "w0", kir::block_index());
  const ExprP warp = mine.let("int", "w0_warp", kir::infix(kir::thread_index(), "/", lit(32)));
  const ExprP lane = mine.let("int", "w0_lane", kir::infix(kir::thread_index(), "%", lit(32)));
  const ExprP tile = kir::group(kir::infix(w, "/", lit(p.split)));
  const ExprP k0 = mine.let("long long", "w0_k",
                            mul(kir::group(kir::infix(w, "%", lit(p.split))), lit(p.piece)));
  const ExprP row0 =
      mine.let("long long", "w0_row",
               add(mul(tile, lit(p.warps * run_rows(p))), mul(warp, lit(run_rows(p)))));
  prefetch_rows(mine, s, p, b, row0, lane, k0, p.chunk);
  return before;
}

// The tiles of `warps * rows` weight rows, and K cut into pieces of whole stages (`chunk`) where
// the tiles alone are fewer than a wave of work items (blocks_per_sm); no piece empty.
// Blocks an SM holds (build_signature asks ptxas for them): the ring's count; for the
// tensor-core kernel 4 with one 8-row tile of A, 3 with two (more accumulators and A's words);
// else 3, with two stages of weights in registers.
int64_t blocks_per_sm(const GemvParams& p) {
  if (p.ring) return p.ring_blocks;
  if (p.mma) return p.m_tiles == 1 ? 4 : 3;
  return 3;
}

// The most bytes of A a resident piece takes: what the blocks an SM holds leave each (1 KiB
// kept for the rest), and at most 40 KiB, so that a block's static shared memory stays under
// the 48 KiB every arch allows. 28 KiB for an 8B model's down projection (14336 of bf16).
int64_t resident_budget(const GemvParams& p, const Target& target) {
  return std::min<int64_t>(40 * 1024, target.shared_per_sm / blocks_per_sm(p) - 1024);
}

// The most stages of the weights' ring (GemvParams::ring), and the fewest worth it (two are what
// registers already hold).
constexpr int64_t kRingMaxStages = 6;
constexpr int64_t kRingMinStages = 3;

// Bytes of one stage of the ring: every lane's vectors of the warp's rows.
int64_t ring_stage_bytes(const GemvParams& p) { return p.rows * p.unroll * p.block * 16; }

// The ring, where A is resident and the weights load in 16-byte vectors: 2 blocks an SM where the
// work items fit a wave of 2 (each block then has twice the shared memory), else 3; as many stages
// as the shared memory left after A's piece holds, if that is kRingMinStages or more.
void choose_ring(const GemvSpec& s, const Target& target, GemvParams& p) {
  if (!p.resident || p.vector_width * dtype_size(gemv_weight_dtype(s)) != 16) return;
  const int64_t blocks = p.work <= 2 * kSplitSMs ? 2 : 3;
  const int64_t budget = target.shared_per_sm / blocks - 1024 - p.shared_bytes;
  const int64_t stages = std::min(kRingMaxStages, budget / ring_stage_bytes(p));
  if (stages < kRingMinStages) return;
  p.ring = stages;
  p.ring_blocks = blocks;
}

void split_k(const GemvSpec& s, GemvParams& p) {
  p.tiles = ceil_div(s.n, p.warps * p.rows);
  const int64_t stages = ceil_div(s.k, p.chunk);
  // As many pieces as fill the wave without passing it: a second, partial wave would cost a
  // whole piece's time (llama8b's q/k/v, 384 tiles, ran as 768 items in 1.45 waves).
  const int64_t wave = kSplitSMs * blocks_per_sm(p);
  const int64_t want = std::max<int64_t>(1, wave / p.tiles);
  p.piece = ceil_div(stages, std::min(want, stages)) * p.chunk;
  p.split = ceil_div(s.k, p.piece);
  p.work = p.tiles * p.split;
}

}  // namespace

std::string refuse_gemv(const GemvSpec& s) {
  if (s.dtype != DType::bf16 && s.dtype != DType::f16 && s.dtype != DType::f32)
    return fmt::format("dtype {} (takes bf16, f16, f32)", dtype_name(s.dtype));
  if (s.m < 1 || s.m > kGemvMaxRows)
    return fmt::format("M = {} rows (takes 1..{})", s.m, kGemvMaxRows);
  if (s.n < 1 || s.k < 1) return fmt::format("empty extent (N = {}, K = {})", s.n, s.k);
  if (!s.transpose_b)
    return "weights stored [K, N]: the kernel reads rows of [N, K] weights (linear's layout)";
  return "";
}

GemvParams gemv_params(const GemvSpec& s, const Target& target) {
  GemvParams p;
  if (s.m >= 2 && (s.dtype == DType::bf16 || s.dtype == DType::f16) && !s.transpose_a &&
      s.k % 8 == 0 && !s.prologue) {
    p.mma = true;
    p.vector_width = 8;  // K per lane and step: 16 bytes of A, 16 (or 8 of int8) of weights
    p.block = 32 * p.warps;
    p.rows = 32;  // two mma tiles of 16 weight rows a warp
    // Two stages in registers (prefetch): 64 registers of weights a lane, 2 steps of 16-bit
    // weights a stage or 4 of int8.
    p.unroll = s.int8_weights ? 4 : 2;
    p.chunk = 4 * p.unroll * p.vector_width;  // 32 of K a step
    p.m_tiles = ceil_div(s.m, 8);
    p.prefetch = true;
    split_k(s, p);
    p.shared_bytes = 0;
    return p;
  }
  // 16 bytes of weights a load: 16 int8, 8 bf16.
  p.vector_width = 16 / static_cast<int>(dtype_size(gemv_weight_dtype(s)));
  while (p.vector_width > 1 && s.k % p.vector_width != 0) p.vector_width /= 2;
  p.block = 32 * p.warps;
  p.rows = s.m <= 4 ? 4 : 2;
  if (s.epilogue) p.groups = epilogue_reads(*s.epilogue->graph, *s.epilogue->region).groups;
  p.unroll = pow2_floor(std::clamp<int64_t>(kStageFloats / (s.m * 32 * p.vector_width), 1,
                                            kVectorsInFlight / p.rows));
  p.chunk = 32 * p.unroll * p.vector_width;
  // The next stage's weights load while this one's multiply (two stages in registers), for
  // every dtype: without it each stage waited for its loads with nothing else in flight.
  p.prefetch = true;
  split_k(s, p);
  const int64_t piece_bytes = s.m * p.piece * static_cast<int64_t>(dtype_size(s.dtype));
  p.resident = target.cc >= 80 && piece_bytes <= resident_budget(p, target);
  p.shared_bytes = p.resident ? piece_bytes : 4 * s.m * p.chunk;
  if (s.ring) choose_ring(s, target, p);
  return p;
}

kir::Function build_gemv_kernel(const GemvSpec& s, const GemvParams& p, bool wait_in_ring) {
  const int64_t lanes_along_k = p.mma ? 4 : 32;
  if (p.block != 32 * p.warps || p.chunk != lanes_along_k * p.unroll * p.vector_width ||
      p.piece % p.chunk || (p.mma && (p.rows % 16 || p.vector_width != 8 || p.m_tiles * 8 < s.m)) ||
      !p.prefetch ||
      (p.resident && (p.mma || p.shared_bytes != s.m * p.piece * int64_t(dtype_size(s.dtype)))) ||
      (p.ring && (!p.resident || p.ring < 2 || p.ring_blocks < 1 ||
                  p.vector_width * int64_t(dtype_size(gemv_weight_dtype(s))) != 16)))
    throw InternalError(fmt::format("gemv: params disagree: {}", params_text("gemv", p)));
  if (p.mma) {
    if (s.prologue || s.epilogue)
      throw InternalError("gemv: a prologue or epilogue region for the tensor-core variant");
    return build_gemv_mma_kernel(s, p);
  }
  kir::Function f;
  Vars v;
  v.wait_in_ring = wait_in_ring && p.ring;
  std::optional<GemvPrologueBuilder> prologue;
  if (s.prologue) v.prologue = &prologue.emplace(*s.prologue);
  std::optional<GemvEpilogueBuilder> epilogue;
  if (s.epilogue) {
    v.epilogue = &epilogue.emplace(*s.epilogue);
    if (p.groups != v.epilogue->groups() || p.rows % p.groups)
      throw InternalError(fmt::format("gemv: an epilogue region under {}", params_text("gemv", p)));
  }
  build_signature(f, s, p, v);
  declare_storage(f, s, p, v);
  if (v.prologue) v.prologue->declare_row(f.body);
  kir::Block& work = work_items(f, p, v);
  accumulate(work, s, p, v);
  const auto partials = [&](kir::Block& b, auto&& body) {
    per_output(b, s, p, v, [&](kir::Block& mine, ExprP m, ExprP r, ExprP n) {
      body(mine, m, r, n, sub(v.acc, m, r));
    });
  };
  const auto elements = [&](kir::Block& b, auto&& fn) { epilogue_elements(b, s, p, v, fn); };
  if (p.split > 1 && v.epilogue) {
    finish_split_epilogue(work, s, p, v, partials, elements);
  } else if (p.split > 1) {
    finish_split(work, s, p, v, partials);
  } else if (v.epilogue) {
    elements(work,
             [&](kir::Block& mine, ExprP m, ExprP j, const std::vector<ExprP>&,
                 const std::vector<ExprP>& sums) { store_element(mine, s, p, v, m, j, sums); });
  } else {
    per_output(work, s, p, v, [&](kir::Block& mine, ExprP m, ExprP r, ExprP n) {
      store(mine, s, v, sub(v.acc, m, r), m, n);
    });
  }
  return f;
}

KernelBody gemv_body(const GemvSpec& s, const GemvParams& p, bool grid_dependency) {
  KernelBody body;
  body.kind = "gemv";
  body.schedule = params_text("gemv", p);
  body.fn = build_gemv_kernel(s, p, grid_dependency);
  if (grid_dependency && p.ring) {
    launch_dependents_first(body);  // the ring's first stages, then the wait (ring_stages)
  } else if (grid_dependency) {
    // The weights' parameter: the second, or after a prologue's inputs.
    const auto weights = std::find_if(body.fn.params.begin(), body.fn.params.end(),
                                      [](const kir::Param& q) { return q.var->name == "b"; });
    if (weights == body.fn.params.end()) throw InternalError("gemv: no weights parameter");
    wait_for_grid(body, prefetch_weights(s, p, kir::var(weights->var)));
  }
  body.helpers = {"fj_core.cuh", "fj_memory.cuh", "fj_gemv.cuh"};
  if (s.int8_weights) body.helpers.push_back("fj_gemv_i8.cuh");
  if (p.resident) body.helpers.push_back("fj_stage.cuh");  // cp.async
  if (s.prologue) {  // the producer's ops, a normalization's block reduction, L2 prefetches
    body.helpers.push_back("fj_math.cuh");
    body.helpers.push_back("fj_reduce.cuh");
    if (p.resident) body.helpers.push_back("fj_pdl.cuh");
  }
  if (s.epilogue && !s.prologue) body.helpers.push_back("fj_math.cuh");  // the region's ops
  body.shared_bytes = static_cast<int>(p.ring * ring_stage_bytes(p));
  body.block = p.block;
  body.work_blocks = p.work;
  body.blocks_per_sm = static_cast<int>(blocks_per_sm(p));
  body.serial_launches = p.split > 1;
  return body;
}

Kernel generate_gemv(const GemvSpec& s, const Target& target, bool grid_dependency) {
  if (const std::string why = refuse_gemv(s); !why.empty())
    throw InternalError("generate_gemv: " + why);
  if (s.prologue) {
    if (const std::string why = refuse_prologue(s, *s.prologue->graph, *s.prologue->region);
        !why.empty())
      throw InternalError("generate_gemv: prologue: " + why);
  }
  if (s.epilogue) {
    if (const std::string why = refuse_epilogue(s, *s.epilogue->graph, *s.epilogue->region, target);
        !why.empty())
      throw InternalError("generate_gemv: epilogue: " + why);
  }
  KernelBody body = gemv_body(s, gemv_params(s, target), grid_dependency);
  kir::lower_indices(body.fn);  // a prologue's or epilogue region's index arithmetic
  kir::place_declarations(body.fn);
  kir::verify(body.fn);
  Kernel k = assemble_kernel(body, body.helpers, "");
  k.schedule = body.schedule;
  return k;
}

}  // namespace fusejit::templates
