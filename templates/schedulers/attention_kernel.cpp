// templates/schedulers/attention_kernel: the attention kernel on the kernel IR, from its spec and
// the schedule attention.cpp decided (see the overview there). What it reads and writes, where,
// and in which order is built here as a kir::Function; kir::print writes it, and
// assemble_kernel (generate.cpp) pastes the device helpers it calls (device/fj_attention.cuh)
// and names it. The text is kept as it was when this kernel was printed by hand (pragmas at
// column 0, one-line loops), so that its kernels and their names did not change.
#include "templates/schedulers/attention_kernel.h"

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/emit.h"

namespace fusejit::templates {

namespace {

constexpr double kLog2e = 1.4426950408889634;

using kir::ExprP;

ExprP num(int64_t v) { return kir::lit(v); }
ExprP text(std::string t) { return kir::lit(std::move(t)); }  // 0.0f, 0u, true
ExprP wide(int64_t v) { return kir::lit(fmt::format("{}LL", v)); }
ExprP f32(double v) { return kir::lit(literal(DType::f32, v)); }
ExprP op(ExprP a, std::string o, ExprP b) {
  return kir::infix(std::move(a), std::move(o), std::move(b));
}
ExprP paren(ExprP e) { return kir::group(std::move(e)); }
ExprP at(ExprP a, ExprP i) { return kir::subscript(std::move(a), std::move(i)); }
ExprP at(ExprP a, ExprP i, ExprP j) { return at(at(std::move(a), std::move(i)), std::move(j)); }
ExprP at(ExprP a, ExprP i, int64_t j) { return at(std::move(a), std::move(i), num(j)); }
ExprP sum(std::vector<ExprP> terms) {
  ExprP s = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) s = kir::add(s, terms[i]);
  return s;
}
kir::Declarator scalar(std::string name, ExprP value) {
  return {std::move(name), {}, std::move(value)};
}
// A declarator of a variable made ahead, which a later declarator of its statement reads.
kir::Declarator scalar(const kir::VarP& v, ExprP value) {
  return {v->name, {}, std::move(value), v};
}

// `#pragma unroll` (at column 0, as the kernel has always printed it) and the loop
// `for (int name = init; name < bound; name += step)` (++name without a step).
kir::Loop unrolled(kir::Block& b, std::string name, ExprP init, ExprP bound, ExprP step = nullptr) {
  b.pragma("unroll");
  return b.loop("int", std::move(name), std::move(init), std::move(bound), std::move(step));
}
kir::Loop unrolled_line(kir::Block& b, std::string name, ExprP init, ExprP bound) {
  b.pragma("unroll");
  return b.loop_line("int", std::move(name), std::move(init), std::move(bound));
}

// The variables the builders below share: the kernel's parameters, constants and thread
// indices, the work item's, and the key tile's; each set where the kernel declares it.
struct Vars {
  ExprP q, k, v, mask, o;
  ExprP heads, seq_q, seq_kv, d, dv, block_n, k_pitch, v_pitch, q_tiles, kv_tiles, work;
  std::array<ExprP, 3> q_strides, k_strides, v_strides;  // batch, head, sequence
  std::array<ExprP, 3> o_strides;  // with AttentionSpec::o only (else o is dense)
  ExprP k_group, v_group;
  std::array<ExprP, 4> mask_strides;  // batch, head, query, key
  ExprP scale_log2, mask_log2, fill_log2, neg_inf;
  ExprP ks, vs, tid, warp, lane, g, t;
  // Key split (AttentionParams::key_split): the launch's dynamic shared memory, as bytes and as
  // the stages of tiles (reused as f32 by the warps' combine); the warp's first key in a tile
  // (else nullptr).
  ExprP shared, kv, warp_key;
  ExprP s_tiles, pv_chunks;  // the warp's 8-key tiles of S and 16-key steps of P V, per tile
  ExprP w, qt, bh, b, h, row0, qp, kp, vp, mp, op, qf, o_acc, m, l, tiles;  // work item
  ExprP splits, split_tiles, partials, stats, arrivals, last;           // split-KV (kv_splits > 1)
  ExprP item, piece, first;  // the work item's (b, h, query tile), its piece, its first key tile
  int threads = 0;                                                      // AttentionParams::block
  ExprP kt, key0, s;                                                    // key tile
};

std::string mask_element(DType d) {
  return d == DType::boolean ? "unsigned char" : std::string(dtype_code(d).storage);
}

// Output row i of the work item, plus `extra`: dense [b, h, seq_q, dv] rows, or through the
// spec's view of o (n.op: the item's row 0, from build_item_setup).
ExprP o_row(const Vars& n, const ExprP& i, const ExprP& extra) {
  if (!n.op) return sum({n.o, kir::mul(paren(kir::add(kir::mul(n.bh, n.seq_q), i)), n.dv), extra});
  return sum({n.op, kir::mul(i, n.o_strides[2]), extra});
}

void build_signature(kir::Function& f, const AttentionSpec& s, const AttentionParams& p, Vars& n) {
  f.name = std::string(kKernelNameToken);
  f.block = p.block;
  n.threads = p.block;
  f.min_blocks = 1;
  f.params_inline = true;
  n.q = f.param("unsigned short", "q");
  n.k = f.param("unsigned short", "k");
  n.v = f.param("unsigned short", "v");
  if (has_mask_tensor(s)) n.mask = f.param(mask_element(s.mask_dtype), "mask");
  n.o = f.param("unsigned short", "o", false);
}

// constexpr long long k<name>b = .., k<name>h = .., k<name>s = ..;
std::array<ExprP, 3> build_strides(kir::Block& b, std::string_view name, const AttentionView& v) {
  const std::vector<ExprP> x =
      b.declare("constexpr long long", {scalar(fmt::format("k{}b", name), wide(v.strides[0])),
                                        scalar(fmt::format("k{}h", name), wide(v.strides[1])),
                                        scalar(fmt::format("k{}s", name), wide(v.strides[2]))});
  return {x[0], x[1], x[2]};
}

void build_constants(kir::Block& b, const AttentionSpec& s, const AttentionParams& p, Vars& n) {
  std::vector<ExprP> x =
      b.declare("constexpr int", {scalar("kHeads", num(s.heads)), scalar("kSeqQ", num(s.seq_q)),
                                  scalar("kSeqKv", num(s.seq_kv)), scalar("kD", num(s.head_dim)),
                                  scalar("kDv", num(s.value_dim))});
  n.heads = x[0], n.seq_q = x[1], n.seq_kv = x[2], n.d = x[3], n.dv = x[4];
  x = b.declare("constexpr int",
                {scalar("kBlockN", num(p.block_n)), scalar("kKPitch", num(p.k_pitch)),
                 scalar("kVPitch", num(p.v_pitch))});
  n.block_n = x[0], n.k_pitch = x[1], n.v_pitch = x[2];
  x = b.declare("constexpr int",
                {scalar("kQTiles", num(p.q_tiles)), scalar("kKvTiles", num(p.kv_tiles))});
  n.q_tiles = x[0], n.kv_tiles = x[1];
  if (p.key_split) {
    const ExprP keys = b.declare("constexpr int", {scalar("kWarpKeys", num(p.block_n / p.warps))},
                                 "keys of each tile a warp takes (the warps share the rows)")[0];
    n.s_tiles = op(keys, "/", num(8));
    n.pv_chunks = op(keys, "/", num(16));
  } else {
    n.s_tiles = op(n.block_n, "/", num(8));
    n.pv_chunks = op(n.block_n, "/", num(16));
  }
  n.work = b.declare("constexpr long long", {scalar("kWork", wide(p.work))})[0];
  if (p.kv_splits > 1) {
    x = b.declare("constexpr int",
                  {scalar("kSplits", num(p.kv_splits)), scalar("kSplitTiles", num(p.split_tiles))});
    n.splits = x[0], n.split_tiles = x[1];
  }
  n.q_strides = build_strides(b, "Q", s.q);
  if (s.o) n.o_strides = build_strides(b, "O", *s.o);
  n.k_strides = build_strides(b, "K", s.k);
  n.v_strides = build_strides(b, "V", s.v);
  x = b.declare("constexpr int",
                {scalar("kKGroup", num(s.k.head_group)), scalar("kVGroup", num(s.v.head_group))});
  n.k_group = x[0], n.v_group = x[1];
  if (has_mask_tensor(s)) {
    const auto& m = s.mask_view.strides;
    x = b.declare("constexpr long long", {scalar("kMb", wide(m[0])), scalar("kMh", wide(m[1])),
                                          scalar("kMi", wide(m[2])), scalar("kMj", wide(m[3]))});
    n.mask_strides = {x[0], x[1], x[2], x[3]};
  }
  n.scale_log2 = b.let("float", "kScaleLog2", f32(s.scale * kLog2e), "scale * log2(e)");
  if (s.mask == AttentionMaskKind::additive)
    n.mask_log2 = b.let("float", "kMaskLog2", f32(s.mask_scale * kLog2e), "mask_scale * log2(e)");
  if (s.mask == AttentionMaskKind::causal || s.mask == AttentionMaskKind::boolean)
    n.fill_log2 = b.let("float", "kFillLog2", f32(s.fill * kLog2e), "fill * log2(e)");
  n.neg_inf = b.let("float", "kNegInf", f32(-INFINITY));
}

// K and V tiles in shared memory; the thread's warp, lane, and its group g and place t in the
// quad of lanes that shares an mma row.
void build_block_layout(kir::Block& b, const AttentionParams& p, Vars& n) {
  const std::string shared = "__shared__ __align__(16) unsigned short";
  if (p.key_split) {
    // The launch's dynamic shared memory (KernelBody::shared_bytes): the stages of a tile's K
    // and V; after the last tile, the warps' combine's f32 values.
    n.kv = b.declare("unsigned short* const",
                     {scalar("kv", kir::call("reinterpret_cast<unsigned short*>", {n.shared}))})[0];
  } else {
    n.ks = b.declare(shared, {{"ks", {kir::mul(n.block_n, n.k_pitch)}, nullptr}})[0];
    n.vs = b.declare(shared, {{"vs", {kir::mul(n.block_n, n.v_pitch)}, nullptr}})[0];
  }
  const kir::VarP tid = kir::variable("const int", "tid"),
                  lane = kir::variable("const int", "lane");
  n.tid = kir::var(tid);
  n.lane = kir::var(lane);
  const std::vector<ExprP> x = b.declare(
      "const int", {scalar(tid, kir::thread_index()), scalar("warp", op(n.tid, ">>", num(5))),
                    scalar(lane, op(n.tid, "&", num(31))), scalar("g", op(n.lane, ">>", num(2))),
                    scalar("t", op(n.lane, "&", num(3)))});
  n.warp = x[1], n.g = x[3], n.t = x[4];
  if (p.key_split)
    n.warp_key = b.let("int", "wk", kir::mul(n.warp, op(n.block_n, "/", num(p.warps))),
                       "the warp's first key in a tile");
}

// Q's A fragments for the lane's rows row0 and row0 + 8 (zero past seq_q).
void build_q_fragments(kir::Block& b, const AttentionParams& p, Vars& n) {
  const ExprP chunks = op(n.d, "/", num(16));
  n.qf = b.declare("unsigned", {{"qf", {chunks, num(4)}, nullptr}})[0];
  const auto [chunk, c] = unrolled(b, "c", num(0), chunks);
  const auto [part, e] = unrolled(chunk, "e", num(0), num(4));
  const ExprP i =
      part.let("int", "i", kir::add(n.row0, kir::mul(paren(op(e, "&", num(1))), num(8))));
  const ExprP x =
      part.let("unsigned short*", "x",
               sum({n.qp, kir::mul(i, n.q_strides[2]), kir::mul(c, num(16)),
                    kir::mul(paren(op(e, ">>", num(1))), num(8)), kir::mul(num(2), n.t)}));
  const ExprP pair = p.q_pairs ? kir::call("fj_att_load2", {x})
                               : kir::call("fj_att_join", {at(x, num(0)), at(x, num(1))});
  part.assign(at(n.qf, c, e), kir::select(kir::lt(i, n.seq_q), pair, text("0u")));
}

// for (int n = 0; n < tiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
void build_zero(kir::Block& b, const ExprP& acc, const ExprP& tiles) {
  const auto [tile, t] = unrolled_line(b, "n", num(0), tiles);
  tile.assign(at(acc, t, 0),
              op(at(acc, t, 1), "=", op(at(acc, t, 2), "=", op(at(acc, t, 3), "=", text("0.0f")))));
}

// K or V as staged in shared memory.
struct Staged {
  ExprP smem, global, dim, pitch, stride;
  int vec;  // elements per global load: 8 (by cp.async), 2 or 1
};

// Keys `first` .. first + kBlockN - 1 of `t` into shared memory (rows past seq_kv zeroed). The
// caller commits a group after each stage, also where the copies are not cp.async or there are
// none (the last tile): the waits count groups, the same way whatever was copied how.
void build_stage(kir::Block& b, const Vars& n, const Staged& t, const ExprP& first) {
  const ExprP per_row = paren(op(t.dim, "/", num(t.vec)));
  const auto [copy, e] = b.loop("int", "e", n.tid, kir::mul(n.block_n, per_row), num(n.threads));
  const kir::VarP row = kir::variable("const int", "r");
  const ExprP r = kir::var(row);
  const std::vector<ExprP> x =
      copy.declare("const int", {scalar(row, op(e, "/", per_row)),
                                 scalar("c", kir::mul(op(e, "%", per_row), num(t.vec))),
                                 scalar("key", kir::add(first, r))});
  const ExprP c = x[1], key = x[2];
  const ExprP to = copy.let_mut("unsigned short*", "to", sum({t.smem, kir::mul(r, t.pitch), c}));
  const ExprP in = copy.let("bool", "in", kir::lt(key, n.seq_kv));
  const ExprP from = sum({t.global, kir::mul(key, t.stride), c});
  if (t.vec == 8) {
    copy.eval(kir::call("fj_att_copy16_async",
                        {to, kir::select(in, from, t.global), kir::select(in, num(16), num(0))}));
  } else if (t.vec == 2) {
    copy.eval(kir::call("fj_att_store2",
                        {to, kir::select(in, kir::call("fj_att_load2", {from}), text("0u"))}));
  } else {
    copy.assign(at(to, num(0)), kir::select(in, at(t.global, kir::add(kir::mul(key, t.stride), c)),
                                            kir::call("static_cast<unsigned short>", {num(0)})));
  }
}

// ldmatrix.x4's addressing: lane l gives row l % 8 of 8x8 matrix l / 8; matrices 0 and 1 are
// the k halves (0..7, 8..15) of 8-wide tile n, 2 and 3 those of tile n + 1.
struct LdmatrixLane {
  ExprP lane;
  ExprP row = paren(op(lane, "&", num(7)));  // (lane & 7): the row in its matrix
  // ((lane >> 3) & 1) * 8: the first column of its k half
  ExprP half = kir::mul(paren(op(paren(op(lane, ">>", num(3))), "&", num(1))), num(8));
  // (n + (lane >> 4)) * 8: the first row of its tile, n or n + 1
  ExprP tile(const ExprP& n) const {
    return kir::mul(paren(kir::add(n, paren(op(lane, ">>", num(4))))), num(8));
  }
};

// A key's row in the staged tile: base + row, past the warp's first key under a key split.
ExprP key_row(const Vars& n, ExprP base, ExprP row) {
  if (n.warp_key) return sum({std::move(base), std::move(row), n.warp_key});
  return kir::add(std::move(base), std::move(row));
}

// acc[n] += a b_n and acc[n + 1] += a b_(n + 1) for every other n below `tiles`, both B
// fragments from one ldmatrix.x4 of `load`(bf, n) (see LdmatrixLane).
void build_product_pair(kir::Block& b, const std::string& mma, const ExprP& tiles, const ExprP& acc,
                        const ExprP& a,
                        const std::function<ExprP(const ExprP& bf, const ExprP& n)>& load,
                        std::string load_comment) {
  const auto [pair, t] = unrolled(b, "n", num(0), tiles, num(2));
  const ExprP bf = pair.array("unsigned", "bf", 4);
  pair.eval(load(bf, t), std::move(load_comment));
  const std::vector<ExprP> x = pair.declare(
      "const unsigned", {{"b0", {num(2)}, kir::braces({at(bf, num(0)), at(bf, num(1))})},
                         {"b1", {num(2)}, kir::braces({at(bf, num(2)), at(bf, num(3))})}});
  pair.eval(kir::call(mma, {at(acc, t), a, x[0]}));
  pair.eval(kir::call(mma, {at(acc, kir::add(t, num(1))), a, x[1]}));
}

// S = Q Kᵀ for the tile, in s.
void build_scores(kir::Block& b, const std::string& mma, Vars& n) {
  const ExprP tiles = n.s_tiles;
  n.s = b.declare("float", {{"s", {tiles, num(4)}, nullptr}})[0];
  build_zero(b, n.s, tiles);
  const kir::Loop chunk = unrolled(b, "c", num(0), op(n.d, "/", num(16)));
  const ExprP c = chunk.index;
  const LdmatrixLane ln{n.lane};
  build_product_pair(
      chunk, mma, tiles, n.s, at(n.qf, c),
      [&](const ExprP& bf, const ExprP& t) {
        return kir::call("fj_att_ldmatrix_x4",
                         {bf, sum({n.ks, kir::mul(paren(key_row(n, ln.tile(t), ln.row)), n.k_pitch),
                                   kir::mul(c, num(16)), ln.half})});
      },
      "keys x features");
}

// Scores to log2 units, then the mask; keys past seq_kv get -inf.
void build_mask(kir::Block& b, const AttentionSpec& s, const AttentionParams& p, const Vars& n) {
  ExprP diagonal;
  if (s.mask == AttentionMaskKind::causal)
    diagonal =
        b.let("bool", "diagonal",
              op(op(kir::add(n.key0, n.block_n), "-", num(1)), ">", kir::mul(n.qt, num(p.rows))),
              "some key j > some row i");
  const kir::Loop tile = unrolled(b, "n", num(0), n.s_tiles);
  const kir::Loop lanes = unrolled(tile, "e", num(0), num(4));
  kir::Block& lane = lanes.body;
  const ExprP t = tile.index, e = lanes.index;
  const ExprP i =
      lane.let_if_read("int", "i", kir::add(n.row0, kir::mul(paren(op(e, ">>", num(1))), num(8))));
  std::vector<ExprP> key = {n.key0, kir::mul(t, num(8)), kir::mul(num(2), n.t),
                            paren(op(e, "&", num(1)))};
  if (n.warp_key) key.insert(key.begin() + 1, n.warp_key);
  const ExprP j = lane.let_if_read("int", "j", sum(std::move(key)));
  const ExprP x = lane.let_mut("float", "x", kir::mul(at(n.s, t, e), n.scale_log2));
  // The mask tensor's element (i, j), where both are inside.
  const auto element = [&] {
    return at(n.mp,
              kir::add(kir::mul(kir::call("static_cast<long long>", {i}), n.mask_strides[2]),
                       kir::mul(kir::call("static_cast<long long>", {j}), n.mask_strides[3])));
  };
  const auto inside = [&] { return op(kir::lt(i, n.seq_q), "&&", kir::lt(j, n.seq_kv)); };
  switch (s.mask) {
    case AttentionMaskKind::additive:
      lane.branch_line(inside()).assign(
          x,
          kir::mul(n.mask_log2, kir::call(fmt::format("fj_att_widen_{}", dtype_name(s.mask_dtype)),
                                          {element()})),
          "+=");
      break;
    case AttentionMaskKind::boolean:
      lane.branch_line(op(inside(), "&&",
                          op(paren(op(element(), "!=", num(0))),
                             "==", text(s.fill_where_true ? "true" : "false"))))
          .assign(x, n.fill_log2);
      break;
    case AttentionMaskKind::causal:
      lane.branch_line(op(diagonal, "&&", op(j, ">", i))).assign(x, n.fill_log2);
      break;
    case AttentionMaskKind::none:
      break;
  }
  if (s.seq_kv % p.block_n != 0) lane.branch_line(op(j, ">=", n.seq_kv)).assign(x, n.neg_inf);
  lane.assign(at(n.s, t, e), x);
  // i and j are declared only where read (NVRTC warns of unused variables): let_if_read.
}

// m, l, O rescaled by the tile's new row maxima; s becomes P = 2^(x - m).
void build_online_softmax(kir::Block& b, const Vars& n) {
  const auto [row, r] = unrolled(b, "r", num(0), num(2));
  const ExprP even = kir::mul(num(2), r), odd = kir::add(kir::mul(num(2), r), num(1));
  const ExprP mx = row.let_mut("float", "mx", at(n.m, r));
  {
    const auto [tile, t] = unrolled_line(row, "n", num(0), n.s_tiles);
    tile.assign(mx,
                kir::call("fmaxf", {mx, kir::call("fmaxf", {at(n.s, t, even), at(n.s, t, odd)})}));
  }
  for (int lanes : {1, 2})
    row.assign(mx, kir::call("fmaxf", {mx, kir::call("fj_att_shfl_xor", {mx, num(lanes)})}));
  row.comment("no finite score yet: subtract 0 instead, so that -inf - -inf never makes a NaN");
  const ExprP base =
      row.let("float", "base", kir::select(op(mx, "==", n.neg_inf), text("0.0f"), mx));
  const ExprP alpha =
      row.let("float", "alpha", kir::call("fj_att_exp2", {op(at(n.m, r), "-", base)}));
  row.assign(at(n.m, r), mx);
  row.assign(at(n.l, r), alpha, "*=");
  {
    const auto [tile, t] = unrolled(row, "n", num(0), op(n.dv, "/", num(8)));
    tile.assign(at(n.o_acc, t, even), alpha, "*=");
    tile.assign(at(n.o_acc, t, odd), alpha, "*=");
  }
  const auto [tile, t] = unrolled(row, "n", num(0), n.s_tiles);
  for (const ExprP& col : {even, odd})
    tile.assign(at(n.s, t, col), kir::call("fj_att_exp2", {op(at(n.s, t, col), "-", base)}));
  tile.assign(at(n.l, r), kir::add(at(n.s, t, even), at(n.s, t, odd)), "+=");
}

// O += P V: the accumulators of S tiles 2c and 2c + 1 are the A fragment of keys 16c..16c+15.
void build_pv(kir::Block& b, const std::string& mma, const std::string& pack, const Vars& n) {
  const kir::Loop chunk = unrolled(b, "c", num(0), n.pv_chunks);
  const ExprP c = chunk.index;
  std::vector<ExprP> parts;
  for (const ExprP& tile : {kir::mul(num(2), c), kir::add(kir::mul(num(2), c), num(1))}) {
    for (int e : {0, 2}) parts.push_back(kir::call(pack, {at(n.s, tile, e), at(n.s, tile, e + 1)}));
  }
  const ExprP pf =
      chunk.body.declare("const unsigned", {{"pf", {num(4)}, kir::braces(std::move(parts), 2)}})[0];
  const LdmatrixLane ln{n.lane};
  build_product_pair(
      chunk, mma, op(n.dv, "/", num(8)), n.o_acc, pf,
      [&](const ExprP& bf, const ExprP& t) {
        return kir::call(
            "fj_att_ldmatrix_x4_trans",
            {bf, sum({n.vs,
                      kir::mul(paren(key_row(n, kir::add(kir::mul(c, num(16)), ln.half), ln.row)),
                               n.v_pitch),
                      ln.tile(t)})});
      },
      "keys x features, transposed");
}

// l summed over the quad of lanes that shares each of the lane's two rows.
void build_row_sums(kir::Block& b, const Vars& n) {
  const auto [row, r] = unrolled(b, "r", num(0), num(2));
  const ExprP l = at(n.l, r);
  for (int lanes : {1, 2}) row.assign(l, kir::call("fj_att_shfl_xor", {l, num(lanes)}), "+=");
}

// out = O / l for rows below seq_q; a row with no finite score has l = 0 and gives
// 0 * inf = NaN, as the reference's 0 / 0.
void build_store(kir::Block& b, const std::string& pack, const Vars& n) {
  build_row_sums(b, n);
  const auto [row, r] = unrolled(b, "r", num(0), num(2));
  const ExprP i = row.let("int", "i", kir::add(n.row0, kir::mul(num(8), r)));
  row.branch_line(op(i, ">=", n.seq_q)).jump("continue");
  const ExprP inv = row.let("float", "inv", op(text("1.0f"), "/", at(n.l, r)));
  const ExprP x = row.let_mut("unsigned short*", "x", o_row(n, i, kir::mul(num(2), n.t)));
  const auto [tile, t] = unrolled_line(row, "n", num(0), op(n.dv, "/", num(8)));
  tile.eval(kir::call(
      "fj_att_store2",
      {kir::add(x, kir::mul(t, num(8))),
       kir::call(pack, {kir::mul(at(n.o_acc, t, kir::mul(num(2), r)), inv),
                        kir::mul(at(n.o_acc, t, kir::add(kir::mul(num(2), r), num(1))), inv)})}));
}

// Split-KV's module-scope scratch and the block's verdict: per item, piece and query row, O's
// f32 row (unscaled: relative to 2^m) and its (m, l); per item, the pieces arrived.
void declare_split_storage(kir::Function& f, const AttentionSpec& s, const AttentionParams& p,
                           Vars& n) {
  n.last = f.body.declare("__shared__ bool", {{"last", {}, nullptr, nullptr}},
                          "this block is its item's last piece to arrive")[0];
  f.head.comment(
      "Per item, piece and query row: O's f32 row relative to 2^m, then (m, l); per item, the "
      "pieces arrived.");
  const int64_t rows = p.items * p.kv_splits * s.seq_q;
  n.partials =
      f.head.array(kir::variable("__device__ __align__(16) float", "fj_attention_partials"),
                   {rows * s.value_dim});
  n.stats = f.head.array(kir::variable("__device__ __align__(16) float", "fj_attention_stats"),
                         {rows * 2});
  n.arrivals =
      f.head.array(kir::variable("__device__ unsigned int", "fj_attention_arrivals"), {p.items});
}

// The scratch slot of (item, piece, query row i).
ExprP split_slot(const Vars& n, const ExprP& piece, const ExprP& i) {
  return paren(kir::add(kir::mul(paren(kir::add(kir::mul(n.item, n.splits), piece)), n.seq_q), i));
}

// A loop of the block's threads over (query row i, pair of O's columns c, c + 1) of an item.
struct RowPairs {
  kir::Block& each;
  ExprP i, c;
};
RowPairs row_pairs(kir::Block& b, const Vars& n) {
  const ExprP pairs = paren(op(n.dv, "/", num(2)));
  const auto [each, e] = b.loop("int", "e", n.tid, kir::mul(n.seq_q, pairs), num(n.threads));
  const std::vector<ExprP> x = each.declare(
      "const int",
      {scalar("i", op(e, "/", pairs)), scalar("c", kir::mul(op(e, "%", pairs), num(2)))});
  return {each, x[0], x[1]};
}

// The lane's part of O's row row0 + 8 r as f32 at x (the lane's first column): x[8 n], x[8 n + 1].
void store_fragment_row(kir::Block& row, const ExprP& x, const ExprP& r, const Vars& n) {
  const auto [tile, t] = unrolled(row, "n", num(0), op(n.dv, "/", num(8)));
  tile.assign(at(x, kir::mul(t, num(8))), at(n.o_acc, t, kir::mul(num(2), r)));
  tile.assign(at(x, kir::add(kir::mul(t, num(8)), num(1))),
              at(n.o_acc, t, kir::add(kir::mul(num(2), r), num(1))));
}

// The pieces a thread of the last block reads ahead of merging them: each piece's (m, l) and
// four columns of its O row, kMergeBatch pieces' loads in flight at once.
constexpr int kMergeBatch = 8;

// Every thread four columns of a row of the item: the pieces' O rows merged in piece order, a
// batch at a time (kMergeBatch pieces' (m, l) and O loaded, then added), the running sum and
// row rescaled to each batch's largest m as flash-decoding merges them; times 1 / l, into the
// output. A row no key reached: every m is -inf, every weight 2^-inf = 0, l = 0 and 0 * inf =
// NaN, as unsplit.
void build_split_merge(kir::Block& last, const std::string& pack, const Vars& n) {
  const ExprP quads = paren(op(n.dv, "/", num(4)));
  const auto [each, e] = last.loop("int", "e", n.tid, kir::mul(n.seq_q, quads), num(n.threads));
  const std::vector<ExprP> x = each.declare(
      "const int",
      {scalar("i", op(e, "/", quads)), scalar("c", kir::mul(op(e, "%", quads), num(4)))});
  const ExprP i = x[0], c = x[1];
  const ExprP mx = each.let_mut("float", "mx", n.neg_inf);
  const ExprP lsum = each.let_mut("float", "lsum", text("0.0f"));
  const ExprP acc = each.array("float", "acc", 4);
  {
    const auto [zero, u] = unrolled_line(each, "u", num(0), num(4));
    zero.assign(at(acc, u), text("0.0f"));
  }
  each.pragma("unroll");
  const auto [batch, q0] = each.loop("int", "q0", num(0), n.splits, num(kMergeBatch));
  const ExprP st =
      batch.declare("float", {{"st", {num(kMergeBatch), num(2)}, nullptr}}, "per piece: m, l")[0];
  const ExprP y = batch.declare("float", {{"y", {num(kMergeBatch), num(4)}, nullptr}})[0];
  const ExprP top = batch.let_mut("float", "top", mx);
  {
    // Other blocks wrote the scratch: read past L1 (fj_partial.cuh), whose lines of it this SM
    // may hold from an earlier item's combine. Pieces past the last read as m = -inf, l = 0.
    const auto [load, u] = unrolled(batch, "u", num(0), num(kMergeBatch));
    load.assign(at(st, u, 0), n.neg_inf);
    load.assign(at(st, u, 1), text("0.0f"));
    {
      const auto [zero, v] = unrolled_line(load, "v", num(0), num(4));
      zero.assign(at(y, u, v), text("0.0f"));
    }
    const ExprP q = load.let("int", "q", kir::add(q0, u));
    kir::Block& in = load.branch(kir::lt(q, n.splits));
    const ExprP at_row = in.let("long long", "at_row", split_slot(n, q, i));
    in.eval(kir::call("fj_partial2", {kir::add(n.stats, kir::mul(num(2), at_row)), at(st, u)}));
    in.eval(kir::call("fj_partial4", {sum({n.partials, kir::mul(at_row, n.dv), c}), at(y, u)}));
  }
  {
    const auto [fold, u] = unrolled_line(batch, "u", num(0), num(kMergeBatch));
    fold.assign(top, kir::call("fmaxf", {top, at(st, u, 0)}));
  }
  batch.comment("no finite m yet: subtract 0 instead, so that -inf - -inf never makes a NaN");
  const ExprP base =
      batch.let("float", "base", kir::select(op(top, "==", n.neg_inf), text("0.0f"), top));
  const ExprP old = batch.let("float", "old", kir::call("fj_att_exp2", {op(mx, "-", base)}));
  batch.assign(mx, top);
  batch.assign(lsum, old, "*=");
  {
    const auto [scale, v] = unrolled_line(batch, "v", num(0), num(4));
    scale.assign(at(acc, v), old, "*=");
  }
  const auto [add, u] = unrolled(batch, "u", num(0), num(kMergeBatch));
  const ExprP wgt =
      add.let("float", "wgt", kir::call("fj_att_exp2", {op(at(st, u, 0), "-", base)}));
  add.assign(lsum, kir::mul(wgt, at(st, u, 1)), "+=");
  {
    const auto [cols, v] = unrolled_line(add, "v", num(0), num(4));
    cols.assign(at(acc, v), kir::mul(wgt, at(y, u, v)), "+=");
  }
  const ExprP inv = each.let("float", "inv", op(text("1.0f"), "/", lsum));
  const ExprP out = each.let_mut("unsigned short*", "out", o_row(n, i, c));
  for (int h : {0, 2}) {
    each.eval(kir::call("fj_att_store2", {kir::add(out, num(h)),
                                          kir::call(pack, {kir::mul(at(acc, num(h)), inv),
                                                           kir::mul(at(acc, num(h + 1)), inv)})}));
  }
}

// The item's last piece to arrive (last_block_to_arrive) merges the pieces (build_split_merge;
// the result does not depend on which block came last), reading the scratch only.
void build_split_combine(kir::Block& b, const AttentionParams& p, const std::string& pack,
                         const Vars& n) {
  const ExprP count = at(n.arrivals, n.item);
  kir::Block& last = last_block_to_arrive(b, count, n.last, p.kv_splits);
  build_split_merge(last, pack, n);
  reset_split_count(last, count);
}

// The end of a key-split item: each warp's rows (O relative to 2^m, m, l) into shared memory,
// over the tiles' memory (every warp passed the last tile's barrier); then every thread a pair
// of O's columns of a row, the warps rescaled to their largest m and added in warp order: the
// output (O / l) or, split, the piece's O, m and l for the item's combine. A barrier closes it,
// so that the next item's first tiles may overwrite the memory.
void build_warp_combine(kir::Block& b, const AttentionParams& p, const std::string& pack,
                        const Vars& n) {
  build_row_sums(b, n);
  b.comment("per warp: O [seq_q][dv]; after all warps' O, m [16] and l [16] per warp");
  const ExprP red = b.let_mut("float*", "red", kir::call("reinterpret_cast<float*>", {n.kv}));
  const ExprP stats = kir::mul(num(p.warps), kir::mul(n.seq_q, n.dv));  // m of warp w, row i
  const auto m_at = [&](const ExprP& w, const ExprP& i) {
    return at(red, sum({stats, kir::mul(w, num(16)), i}));
  };
  const auto l_at = [&](const ExprP& w, const ExprP& i) {
    return at(red, sum({stats, num(p.warps * 16), kir::mul(w, num(16)), i}));
  };
  {
    const auto [row, r] = unrolled(b, "r", num(0), num(2));
    const ExprP i = row.let("int", "i", kir::add(n.row0, kir::mul(num(8), r)));
    row.branch_line(op(i, ">=", n.seq_q)).jump("continue");
    kir::Block& mine = row.branch(op(n.t, "==", num(0)));
    mine.assign(m_at(n.warp, i), at(n.m, r));
    mine.assign(l_at(n.warp, i), at(n.l, r));
    const ExprP x =
        row.let_mut("float*", "x",
                    sum({red, kir::mul(paren(kir::add(kir::mul(n.warp, n.seq_q), i)), n.dv),
                         kir::mul(num(2), n.t)}));
    store_fragment_row(row, x, r, n);
  }
  b.eval(kir::sync_block(), "every warp's rows are in");
  {
    const auto [each, i, c] = row_pairs(b, n);
    const ExprP mx = each.let_mut("float", "mx", n.neg_inf);
    {
      const auto [fold, w] = unrolled_line(each, "w", num(0), num(p.warps));
      fold.assign(mx, kir::call("fmaxf", {mx, m_at(w, i)}));
    }
    const ExprP base =
        each.let("float", "base", kir::select(op(mx, "==", n.neg_inf), text("0.0f"), mx));
    const ExprP lsum = each.let_mut("float", "lsum", text("0.0f"));
    const ExprP o0 = each.let_mut("float", "o0", text("0.0f"));
    const ExprP o1 = each.let_mut("float", "o1", text("0.0f"));
    {
      const auto [fold, w] = unrolled(each, "w", num(0), num(p.warps));
      const ExprP wgt =
          fold.let("float", "wgt", kir::call("fj_att_exp2", {op(m_at(w, i), "-", base)}));
      fold.assign(lsum, kir::mul(wgt, l_at(w, i)), "+=");
      const ExprP y = fold.let(
          "float*", "y", sum({red, kir::mul(paren(kir::add(kir::mul(w, n.seq_q), i)), n.dv), c}));
      fold.assign(o0, kir::mul(wgt, at(y, num(0))), "+=");
      fold.assign(o1, kir::mul(wgt, at(y, num(1))), "+=");
    }
    if (p.kv_splits > 1) {
      const ExprP at_row = each.let("long long", "at_row", split_slot(n, n.piece, i));
      kir::Block& first = each.branch(op(c, "==", num(0)));
      first.assign(at(n.stats, kir::mul(num(2), at_row)), mx);
      first.assign(at(n.stats, kir::add(kir::mul(num(2), at_row), num(1))), lsum);
      const ExprP y = each.let_mut("float*", "y", sum({n.partials, kir::mul(at_row, n.dv), c}));
      each.assign(at(y, num(0)), o0);
      each.assign(at(y, num(1)), o1);
    } else {
      const ExprP inv = each.let("float", "inv", op(text("1.0f"), "/", lsum));
      each.eval(kir::call("fj_att_store2", {o_row(n, i, c), kir::call(pack, {kir::mul(o0, inv),
                                                                             kir::mul(o1, inv)})}));
    }
  }
  if (p.kv_splits > 1) {
    build_split_combine(b, p, pack, n);  // its first barrier closes the shared memory's use
  } else {
    b.eval(kir::sync_block(), "the next item's tiles may overwrite the memory");
  }
}

// The work item's rows, heads and pointers; Q's fragments and the accumulators.
void build_item_setup(kir::Block& b, const AttentionSpec& s, const AttentionParams& p, Vars& n) {
  n.item = n.w;
  if (p.kv_splits > 1) {
    const std::vector<ExprP> x =
        b.declare("const long long",
                  {scalar("item", op(n.w, "/", n.splits)), scalar("piece", op(n.w, "%", n.splits))},
                  "the (batch, head, query tile) item and its piece of the key tiles");
    n.item = x[0], n.piece = x[1];
  }
  n.qt = b.let("int", "qt",
               op(op(n.q_tiles, "-", num(1)), "-",
                  kir::call("static_cast<int>", {op(n.item, "%", n.q_tiles)})),
               "longest rows first");
  const kir::VarP bh = kir::variable("const long long", "bh");
  n.bh = kir::var(bh);
  const std::vector<ExprP> x = b.declare("const long long", {scalar(bh, op(n.item, "/", n.q_tiles)),
                                                             scalar("b", op(n.bh, "/", n.heads))});
  n.b = x[1];
  n.h = b.let("int", "h", kir::call("static_cast<int>", {op(n.bh, "%", n.heads)}));
  n.row0 = b.let("int", "row0",
                 p.key_split ? kir::add(kir::mul(n.qt, num(p.rows)), n.g)
                             : sum({kir::mul(n.qt, num(p.rows)), kir::mul(n.warp, num(16)), n.g}),
                 p.key_split ? "this lane's rows: row0, row0 + 8 (every warp the same)"
                             : "this lane's rows: row0, row0 + 8");
  const auto head = [&](const ExprP& group) { return paren(op(n.h, "/", group)); };
  // A view's first element: its buffer, moved on by the view's offset (a slice) where it has one.
  const auto start = [](const ExprP& buffer, const AttentionView& v) {
    return v.offset == 0 ? buffer : kir::add(buffer, wide(v.offset));
  };
  n.qp =
      b.let("unsigned short*", "qp",
            sum({start(n.q, s.q), kir::mul(n.b, n.q_strides[0]), kir::mul(n.h, n.q_strides[1])}));
  n.kp = b.let("unsigned short*", "kp",
               sum({start(n.k, s.k), kir::mul(n.b, n.k_strides[0]),
                    kir::mul(head(n.k_group), n.k_strides[1])}));
  n.vp = b.let("unsigned short*", "vp",
               sum({start(n.v, s.v), kir::mul(n.b, n.v_strides[0]),
                    kir::mul(head(n.v_group), n.v_strides[1])}));
  if (s.o) {
    n.op = b.let_mut("unsigned short*", "out0",
                     sum({n.o, kir::mul(n.b, n.o_strides[0]), kir::mul(n.h, n.o_strides[1])}));
  }
  if (has_mask_tensor(s))
    n.mp = b.let_mut("const " + mask_element(s.mask_dtype) + "*", "mp",
                     sum({start(n.mask, s.mask_view), kir::mul(n.b, n.mask_strides[0]),
                          kir::mul(n.h, n.mask_strides[1])}));
  build_q_fragments(b, p, n);
  const ExprP tiles = op(n.dv, "/", num(8));
  n.o_acc = b.declare("float", {{"o_acc", {tiles, num(4)}, nullptr}})[0];
  build_zero(b, n.o_acc, tiles);
  const std::vector<ExprP> ml =
      b.declare("float",
                {{"m", {num(2)}, kir::braces({n.neg_inf, n.neg_inf})},
                 {"l", {num(2)}, kir::braces({text("0.0f"), text("0.0f")})}},
                "running max (log2 units), sum");
  n.m = ml[0], n.l = ml[1];
}

// The key tiles the work item reads: all of them, or with a causal -inf fill those up to the
// block's last row.
void build_tile_count(kir::Block& b, const AttentionParams& p, Vars& n) {
  n.first = num(0);
  if (p.kv_splits > 1) {  // never with the causal skip (attention_params)
    n.first =
        b.let("int", "first", kir::mul(kir::call("static_cast<int>", {n.piece}), n.split_tiles),
              "the piece's key tiles: first .. tiles - 1, never none");
    const ExprP end = kir::add(n.first, n.split_tiles);
    n.tiles = b.let("int", "tiles", kir::select(kir::lt(end, n.kv_tiles), end, n.kv_tiles));
    return;
  }
  if (!p.skip_above_diagonal) {
    n.tiles = b.let("int", "tiles", n.kv_tiles);
    return;
  }
  b.comment("causal: tiles whose first key is past the block's last row add nothing");
  const ExprP last =
      b.let("int", "last",
            op(paren(kir::add(kir::mul(n.qt, num(p.rows)), num(p.rows - 1))), "/", n.block_n));
  const ExprP more = kir::add(last, num(1));
  n.tiles = b.let("int", "tiles", kir::select(kir::lt(more, n.kv_tiles), more, n.kv_tiles));
}

// The pipeline: K of the next tile loads during this tile's softmax and P V, V of the next
// during its Q Kᵀ; groups complete in commit order, so "all but the latest" is the one needed.
// Shared memory is free here: the last readers of the previous work item passed the barriers
// after its last Q Kᵀ and P V.
// A key split's tiles: p.stages stages (two unless the schedule says more), each a tile's K then
// V in one commit group; tile kt in stage (kt - first) % stages. The tile `stages` ahead loads
// into a stage as soon as the last reader of its tile passes the barrier, so that up to `stages`
// tiles are in flight while one is computed.
void build_key_split_tiles(kir::Block& b, const AttentionSpec& s, const AttentionParams& p, Vars& n,
                           const std::string& mma, const std::string& pack) {
  const ExprP stage = paren(kir::mul(n.block_n, paren(kir::add(n.k_pitch, n.v_pitch))));
  const auto k_of = [&](const ExprP& slot) {
    return Staged{
        kir::add(n.kv, kir::mul(slot, stage)), n.kp, n.d, n.k_pitch, n.k_strides[2], p.k_vec};
  };
  const auto v_of = [&](const ExprP& slot) {
    return Staged{sum({n.kv, kir::mul(slot, stage), kir::mul(n.block_n, n.k_pitch)}),
                  n.vp,
                  n.dv,
                  n.v_pitch,
                  n.v_strides[2],
                  p.v_vec};
  };
  const auto commit = [](kir::Block& to, std::string comment = {}) {
    to.eval(kir::call("fj_att_async_commit", {}), std::move(comment));
  };
  const ExprP first_key = p.kv_splits > 1 ? kir::mul(n.first, n.block_n) : num(0);
  build_stage(b, n, k_of(num(0)), first_key);
  build_stage(b, n, v_of(num(0)), first_key);
  commit(b);
  for (int st = 1; st < p.stages; ++st) {
    kir::Block& next = b.branch(kir::lt(kir::add(n.first, num(st)), n.tiles));
    const ExprP key = kir::add(first_key, st == 1 ? n.block_n : kir::mul(num(st), n.block_n));
    build_stage(next, n, k_of(num(st)), key);
    build_stage(next, n, v_of(num(st)), key);
    commit(b, st == 1 ? "empty where there is one tile: keeps the count"
                      : "empty where the piece has fewer tiles: keeps the count");
  }
  const kir::Loop tiles = b.loop("int", "kt", n.first, n.tiles);
  kir::Block& tile = tiles.body;
  n.kt = tiles.index;
  n.key0 = tile.let("int", "key0", kir::mul(n.kt, n.block_n));
  const bool pow2 = (p.stages & (p.stages - 1)) == 0;
  const ExprP slot = tile.let(
      "int", "slot",
      op(paren(op(n.kt, "-", n.first)), pow2 ? "&" : "%", num(pow2 ? p.stages - 1 : p.stages)));
  n.ks = tile.let("unsigned short*", "ks", kir::add(n.kv, kir::mul(slot, stage)));
  n.vs = tile.let("unsigned short*", "vs", kir::add(n.ks, kir::mul(n.block_n, n.k_pitch)));
  tile.eval(kir::call(fmt::format("fj_att_async_wait<{}>", p.stages - 1), {}),
            p.stages == 2 ? "this tile's K and V (the next tile's may still be in flight)"
                          : "this tile's K and V (the next tiles' may still be in flight)");
  tile.eval(kir::sync_block());
  build_scores(tile, mma, n);
  build_mask(tile, s, p, n);
  build_online_softmax(tile, n);
  build_pv(tile, mma, pack, n);
  tile.eval(kir::sync_block(), "every warp is done with this stage");
  {
    kir::Block& after = tile.branch(kir::lt(kir::add(n.kt, num(p.stages)), n.tiles));
    const ExprP key = kir::add(n.key0, kir::mul(num(p.stages), n.block_n));
    build_stage(after, n, k_of(slot), key);
    build_stage(after, n, v_of(slot), key);
  }
  commit(tile, "empty near the end: keeps the count");
  build_warp_combine(b, p, pack, n);
}

void build_work_item(kir::Block& b, const AttentionSpec& s, const AttentionParams& p, Vars& n) {
  const std::string dt(dtype_name(s.dtype));
  const std::string mma = "fj_att_mma_" + dt, pack = "fj_att_pack_" + dt;
  build_item_setup(b, s, p, n);
  build_tile_count(b, p, n);
  if (p.key_split) {
    build_key_split_tiles(b, s, p, n, mma, pack);
    return;
  }
  const Staged k{n.ks, n.kp, n.d, n.k_pitch, n.k_strides[2], p.k_vec};
  const Staged v{n.vs, n.vp, n.dv, n.v_pitch, n.v_strides[2], p.v_vec};
  const auto commit = [](kir::Block& to, std::string comment = {}) {
    to.eval(kir::call("fj_att_async_commit", {}), std::move(comment));
  };
  build_stage(b, n, k, num(0));
  commit(b);
  build_stage(b, n, v, num(0));
  commit(b);
  const kir::Loop tiles = b.loop("int", "kt", num(0), n.tiles);
  kir::Block& tile = tiles.body;
  n.kt = tiles.index;
  n.key0 = tile.let("int", "key0", kir::mul(n.kt, n.block_n));
  const ExprP next = kir::lt(kir::add(n.kt, num(1)), n.tiles);
  tile.eval(kir::call("fj_att_async_wait<1>", {}),
            "K of this tile (V's group may still be in flight)");
  tile.eval(kir::sync_block());
  build_scores(tile, mma, n);
  tile.eval(kir::sync_block(), "every warp is done with ks");
  build_stage(tile.branch(next), n, k, kir::add(n.key0, n.block_n));
  commit(tile, "empty after the last tile: keeps the count");
  build_mask(tile, s, p, n);
  build_online_softmax(tile, n);
  tile.eval(kir::call("fj_att_async_wait<1>", {}), "V of this tile");
  tile.eval(kir::sync_block());
  build_pv(tile, mma, pack, n);
  tile.eval(kir::sync_block(), "every warp is done with vs");
  build_stage(tile.branch(next), n, v, kir::add(n.key0, n.block_n));
  commit(tile);
  build_store(b, pack, n);
}

}  // namespace

kir::Function build_attention_kernel(const AttentionSpec& s, const AttentionParams& p) {
  // Each warp owns 16 query rows (its m16n8k16 fragments; under a key split, the block's 16):
  // the block, its warps and the rows of a work item must agree.
  const int64_t reduce = 4 * (p.warps * s.seq_q * s.value_dim + 2 * p.warps * 16);
  if (p.block != 32 * p.warps || p.rows != (p.key_split ? 16 : 16 * p.warps) ||
      (p.key_split && (p.block_n % (16 * p.warps) != 0 || p.q_tiles != 1 || s.seq_q > 16 ||
                       p.stages < 2 || p.shared_bytes < reduce ||
                       p.shared_bytes < 2 * p.stages * p.block_n * (p.k_pitch + p.v_pitch)))) {
    throw InternalError(fmt::format(
        "attention: block {}, {} warps and {} rows per work item disagree (a warp takes 32 "
        "threads and 16 rows; under a key split every warp the same 16, a whole number of 16-key "
        "steps of each {}-key tile, and shared memory for its {} stages (at least two) and {} "
        "bytes for the combine: {} given)",
        p.block, p.warps, p.rows, p.block_n, p.stages, reduce, p.shared_bytes));
  }
  if (p.kv_splits < 1 || p.split_tiles * p.kv_splits < p.kv_tiles ||
      p.split_tiles * (p.kv_splits - 1) >= p.kv_tiles || p.work != p.items * p.kv_splits ||
      (p.kv_splits > 1 && (p.q_tiles != 1 || p.skip_above_diagonal || !p.key_split))) {
    throw InternalError(fmt::format(
        "attention: {} key tiles in {} pieces of {} (none may be empty), {} items and {} work "
        "items disagree, or a split of {} query tiles (a split needs the key split)",
        p.kv_tiles, p.kv_splits, p.split_tiles, p.items, p.work, p.q_tiles));
  }
  kir::Function f;
  f.head.comment(
      "attention forward (FlashAttention-2): {} q[{},{},{},{}], k, v [{},{},{},{}] "
      "(head group {}, {}), mask {}",
      dtype_name(s.dtype), s.batch, s.heads, s.seq_q, s.head_dim, s.batch, s.heads / s.k.head_group,
      s.seq_kv, s.value_dim, s.k.head_group, s.v.head_group, attention_mask_name(s.mask));
  f.head.comment(
      "  out[b,h,i,:] = sum_j softmax_j(S[b,h,i,j]) v[b,h,j,:], S = scale * "
      "q[b,h,i,:] . k[b,h,j,:]");
  f.head.comment("  block {}: {} warps x 16 query rows; key tiles of {}; {} work items", p.block,
                 p.warps, p.block_n, p.work);
  if (p.kv_splits > 1)
    f.head.comment("  split-KV: each item's {} key tiles in {} pieces of {}, combined by the last",
                   p.kv_tiles, p.kv_splits, p.split_tiles);
  Vars n;
  build_signature(f, s, p, n);
  build_constants(f.body, s, p, n);
  if (p.key_split) {
    f.head.comment("The launch's dynamic shared memory (its size: the Kernel's shared_bytes).");
    const kir::VarP raw = kir::variable("unsigned char*", "fj_shared");
    f.head.declare("extern __shared__ __align__(16) unsigned char",
                   {{"fj_shared", {nullptr}, nullptr, raw}});
    n.shared = kir::var(raw);
  }
  build_block_layout(f.body, p, n);
  if (p.kv_splits > 1) declare_split_storage(f, s, p, n);
  const kir::Loop item =
      f.body.loop("long long", "w", kir::block_index(), n.work, kir::grid_blocks());
  n.w = item.index;
  build_work_item(item, s, p, n);
  return f;
}

}  // namespace fusejit::templates
