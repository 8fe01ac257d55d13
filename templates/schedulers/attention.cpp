// templates/attention: AttentionSpec -> the FlashAttention-2 forward kernel (see attention.h).
//
// Schedule (decided in plan_attention, from the spec and the target, before any text):
//   - a block of 4 warps takes 64 query rows of one (batch, head), 16 rows per warp; the work
//     items (b, h, query tile) are walked with a grid stride, the longest causal tiles first;
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
//     the row); O / l at the end.
// The printer below writes the kernel from that schedule; the device helpers it calls are
// device/fj_attention.cuh.
#include "templates/schedulers/attention.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/digest.h"
#include "templates/device_sources.h"
#include "templates/emit.h"

namespace fusejit::templates {

namespace {

constexpr int kThreads = 128;     // 4 warps
constexpr int kBlockM = 64;       // query rows per block, 16 per warp
constexpr int kMaxDim = 128;      // Q and O fragments held in registers: 32 + 64 per lane at 128
constexpr int kSharedLimit = 48 * 1024;  // static shared memory
constexpr int kPad = 8;           // elements added to each shared row
constexpr double kLog2e = 1.4426950408889634;

struct Schedule {
  int block_n = 64;              // keys per tile
  int k_pitch = 0, v_pitch = 0;  // shared row pitch, elements
  int k_vec = 1, v_vec = 1;      // elements per global load when staging (8, 2 or 1)
  bool q_pairs = false;          // q's feature pairs are 4-byte aligned
  int64_t q_tiles = 0, kv_tiles = 0, work = 0;
  bool skip_above_diagonal = false;  // causal with fill -inf: key tiles past the diagonal add 0
  int shared_bytes = 0;
};

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

bool has_mask_tensor(const AttentionSpec& s) {
  return s.mask == AttentionMaskKind::additive || s.mask == AttentionMaskKind::boolean;
}

// The widest load (in elements: 8, 2 or 1) whose alignment every row start of `view` keeps,
// buffers being 16-byte aligned and 2-byte elements.
int vector_elements(const AttentionView& view, int64_t dim) {
  auto keeps = [&](int64_t n) {
    return dim % n == 0 && view.strides[0] % n == 0 && view.strides[1] % n == 0 &&
           view.strides[2] % n == 0;
  };
  return keeps(8) ? 8 : keeps(2) ? 2 : 1;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Schedule plan_attention(const AttentionSpec& s) {
  Schedule p;
  p.k_pitch = static_cast<int>(s.head_dim) + kPad;
  p.v_pitch = static_cast<int>(s.value_dim) + kPad;
  // A row pitch of (dim + 8) 2-byte elements is 4 words past a multiple of 32 banks for dim a
  // multiple of 64, 4 or 12 words otherwise: the 8 rows x 4 pairs a fragment read touches land
  // in distinct banks either way.
  while (2 * p.block_n * (p.k_pitch + p.v_pitch) > kSharedLimit) p.block_n /= 2;
  p.shared_bytes = 2 * p.block_n * (p.k_pitch + p.v_pitch);
  p.k_vec = vector_elements(s.k, s.head_dim);
  p.v_vec = vector_elements(s.v, s.value_dim);
  p.q_pairs = s.q.strides[0] % 2 == 0 && s.q.strides[1] % 2 == 0 && s.q.strides[2] % 2 == 0;
  p.q_tiles = ceil_div(s.seq_q, kBlockM);
  p.kv_tiles = ceil_div(s.seq_kv, p.block_n);
  p.work = s.batch * s.heads * p.q_tiles;
  p.skip_above_diagonal = s.mask == AttentionMaskKind::causal && std::isinf(s.fill) && s.fill < 0;
  return p;
}

// ---- the printer ----------------------------------------------------------------------------

class Writer {
 public:
  void line(std::string_view text) {
    out_.append(2 * depth_, ' ');
    out_ += text;
    out_ += '\n';
  }
  void open(std::string_view text) {
    line(text);
    ++depth_;
  }
  void close(std::string_view text = "}") {
    --depth_;
    line(text);
  }
  void unroll() { out_ += "#pragma unroll\n"; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  int depth_ = 0;
};

std::string f32(double v) { return literal(DType::f32, v); }

std::string mask_pointer_type(DType d) {
  return d == DType::boolean ? "const unsigned char*" : fmt::format("const {}*", dtype_code(d).storage);
}

void print_signature(Writer& w, const AttentionSpec& s) {
  std::string params =
      "const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, "
      "const unsigned short* __restrict__ v, ";
  if (has_mask_tensor(s))
    params += fmt::format("{} __restrict__ mask, ", mask_pointer_type(s.mask_dtype));
  params += "unsigned short* __restrict__ o";
  w.open(fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1) {}({}) {{", kThreads,
                     kKernelNameToken, params));
}

void print_constants(Writer& w, const AttentionSpec& s, const Schedule& p) {
  w.line(fmt::format("constexpr int kHeads = {}, kSeqQ = {}, kSeqKv = {}, kD = {}, kDv = {};",
                     s.heads, s.seq_q, s.seq_kv, s.head_dim, s.value_dim));
  w.line(fmt::format("constexpr int kBlockN = {}, kKPitch = {}, kVPitch = {};", p.block_n,
                     p.k_pitch, p.v_pitch));
  w.line(fmt::format("constexpr int kQTiles = {}, kKvTiles = {};", p.q_tiles, p.kv_tiles));
  w.line(fmt::format("constexpr long long kWork = {}LL;", p.work));
  auto strides = [&](std::string_view name, const AttentionView& v) {
    w.line(fmt::format("constexpr long long k{0}b = {1}LL, k{0}h = {2}LL, k{0}s = {3}LL;", name,
                       v.strides[0], v.strides[1], v.strides[2]));
  };
  strides("Q", s.q);
  strides("K", s.k);
  strides("V", s.v);
  w.line(fmt::format("constexpr int kKGroup = {}, kVGroup = {};", s.k.head_group,
                     s.v.head_group));
  if (has_mask_tensor(s)) {
    const auto& m = s.mask_view.strides;
    w.line(fmt::format("constexpr long long kMb = {}LL, kMh = {}LL, kMi = {}LL, kMj = {}LL;",
                       m[0], m[1], m[2], m[3]));
  }
  w.line(fmt::format("const float kScaleLog2 = {};  // scale * log2(e)", f32(s.scale * kLog2e)));
  if (s.mask == AttentionMaskKind::additive)
    w.line(fmt::format("const float kMaskLog2 = {};  // mask_scale * log2(e)",
                       f32(s.mask_scale * kLog2e)));
  if (s.mask == AttentionMaskKind::causal || s.mask == AttentionMaskKind::boolean)
    w.line(fmt::format("const float kFillLog2 = {};  // fill * log2(e)", f32(s.fill * kLog2e)));
  w.line(fmt::format("const float kNegInf = {};", f32(-INFINITY)));
}

// Q's A fragments for the lane's rows row0 and row0 + 8 (zero past seq_q).
void print_q_fragments(Writer& w, const Schedule& p) {
  const std::string pair = p.q_pairs ? "fj_att_load2(x)" : "fj_att_join(x[0], x[1])";
  w.line("unsigned qf[kD / 16][4];");
  w.unroll();
  w.open("for (int c = 0; c < kD / 16; ++c) {");
  w.unroll();
  w.open("for (int e = 0; e < 4; ++e) {");
  w.line("const int i = row0 + (e & 1) * 8;");
  w.line("const unsigned short* x = qp + i * kQs + c * 16 + (e >> 1) * 8 + 2 * t;");
  w.line(fmt::format("qf[c][e] = i < kSeqQ ? {} : 0u;", pair));
  w.close();
  w.close();
}

// K or V as staged in shared memory.
struct Staged {
  std::string_view smem, global, dim, pitch, stride;
  int vec;  // elements per global load: 8 (by cp.async), 2 or 1
};

// Keys `first` .. first + kBlockN - 1 of `t` into shared memory (rows past seq_kv zeroed). The
// caller commits a group after each stage, also where the copies are not cp.async or there are
// none (the last tile): the waits count groups, the same way whatever was copied how.
void print_stage(Writer& w, const Staged& t, std::string_view first) {
  w.open(fmt::format("for (int e = tid; e < kBlockN * ({} / {}); e += {}) {{", t.dim, t.vec,
                     kThreads));
  w.line(fmt::format("const int r = e / ({0} / {1}), c = e % ({0} / {1}) * {1}, key = {2} + r;",
                     t.dim, t.vec, first));
  w.line(fmt::format("unsigned short* to = {} + r * {} + c;", t.smem, t.pitch));
  w.line("const bool in = key < kSeqKv;");
  const std::string from = fmt::format("{} + key * {} + c", t.global, t.stride);
  if (t.vec == 8) {
    w.line(fmt::format("fj_att_copy16_async(to, in ? {} : {}, in ? 16 : 0);", from, t.global));
  } else if (t.vec == 2) {
    w.line(fmt::format("fj_att_store2(to, in ? fj_att_load2({}) : 0u);", from));
  } else {
    w.line(fmt::format("to[0] = in ? {}[key * {} + c] : static_cast<unsigned short>(0);",
                       t.global, t.stride));
  }
  w.close();
}

// acc[n] += a b_n and acc[n + 1] += a b_(n + 1) for every other n below `tiles`, both B
// fragments from one ldmatrix.x4 (`load`, into bf): lane l addresses row l % 8 of 8x8 matrix
// l / 8; matrices 0 and 1 are the k halves (0..7, 8..15) of tile n, 2 and 3 those of tile n + 1.
void print_product_pair(Writer& w, std::string_view mma, std::string_view tiles,
                        std::string_view acc, std::string_view a, std::string_view load) {
  w.unroll();
  w.open(fmt::format("for (int n = 0; n < {}; n += 2) {{", tiles));
  w.line("unsigned bf[4];");
  w.line(load);
  w.line("const unsigned b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};");
  w.line(fmt::format("{}({}[n], {}, b0);", mma, acc, a));
  w.line(fmt::format("{}({}[n + 1], {}, b1);", mma, acc, a));
  w.close();
}

void print_scores(Writer& w, std::string_view mma) {
  w.line("float s[kBlockN / 8][4];");
  w.unroll();
  w.line("for (int n = 0; n < kBlockN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;");
  w.unroll();
  w.open("for (int c = 0; c < kD / 16; ++c) {");
  print_product_pair(w, mma, "kBlockN / 8", "s", "qf[c]",
                     "fj_att_ldmatrix_x4(bf, ks + ((n + (lane >> 4)) * 8 + (lane & 7)) * kKPitch "
                     "+ c * 16 + ((lane >> 3) & 1) * 8);  // keys x features");
  w.close();
}

// Scores to log2 units, then the mask; keys past seq_kv get -inf.
void print_mask(Writer& w, const AttentionSpec& s, const Schedule& p) {
  if (s.mask == AttentionMaskKind::causal)
    w.line("const bool diagonal = key0 + kBlockN - 1 > qt * 64;  // some key j > some row i");
  w.unroll();
  w.open("for (int n = 0; n < kBlockN / 8; ++n) {");
  w.unroll();
  w.open("for (int e = 0; e < 4; ++e) {");
  // Declared only where read (NVRTC warns of unused variables).
  const bool tail = s.seq_kv % p.block_n != 0;
  if (s.mask != AttentionMaskKind::none) w.line("const int i = row0 + (e >> 1) * 8;");
  if (s.mask != AttentionMaskKind::none || tail)
    w.line("const int j = key0 + n * 8 + 2 * t + (e & 1);");
  w.line("float x = s[n][e] * kScaleLog2;");
  const std::string load = "mp[static_cast<long long>(i) * kMi + static_cast<long long>(j) * kMj]";
  switch (s.mask) {
    case AttentionMaskKind::additive:
      w.line(fmt::format("if (i < kSeqQ && j < kSeqKv) x += kMaskLog2 * fj_att_widen_{}({});",
                         dtype_name(s.mask_dtype), load));
      break;
    case AttentionMaskKind::boolean:
      w.line(fmt::format("if (i < kSeqQ && j < kSeqKv && ({} != 0) == {}) x = kFillLog2;", load,
                         s.fill_where_true ? "true" : "false"));
      break;
    case AttentionMaskKind::causal:
      w.line("if (diagonal && j > i) x = kFillLog2;");
      break;
    case AttentionMaskKind::none:
      break;
  }
  if (tail) w.line("if (j >= kSeqKv) x = kNegInf;");
  w.line("s[n][e] = x;");
  w.close();
  w.close();
}

// m, l, O rescaled by the tile's new row maxima; s becomes P = 2^(x - m).
void print_online_softmax(Writer& w) {
  w.unroll();
  w.open("for (int r = 0; r < 2; ++r) {");
  w.line("float mx = m[r];");
  w.unroll();
  w.line("for (int n = 0; n < kBlockN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));");
  w.line("mx = fmaxf(mx, fj_att_shfl_xor(mx, 1));");
  w.line("mx = fmaxf(mx, fj_att_shfl_xor(mx, 2));");
  w.line("// no finite score yet: subtract 0 instead, so that -inf - -inf never makes a NaN");
  w.line("const float base = mx == kNegInf ? 0.0f : mx;");
  w.line("const float alpha = fj_att_exp2(m[r] - base);");
  w.line("m[r] = mx;");
  w.line("l[r] *= alpha;");
  w.unroll();
  w.open("for (int n = 0; n < kDv / 8; ++n) {");
  w.line("o_acc[n][2 * r] *= alpha;");
  w.line("o_acc[n][2 * r + 1] *= alpha;");
  w.close();
  w.unroll();
  w.open("for (int n = 0; n < kBlockN / 8; ++n) {");
  w.line("s[n][2 * r] = fj_att_exp2(s[n][2 * r] - base);");
  w.line("s[n][2 * r + 1] = fj_att_exp2(s[n][2 * r + 1] - base);");
  w.line("l[r] += s[n][2 * r] + s[n][2 * r + 1];");
  w.close();
  w.close();
}

// O += P V: the accumulators of S tiles 2c and 2c + 1 are the A fragment of keys 16c..16c+15.
void print_pv(Writer& w, std::string_view mma, std::string_view pack) {
  w.unroll();
  w.open("for (int c = 0; c < kBlockN / 16; ++c) {");
  w.line(fmt::format("const unsigned pf[4] = {{{0}(s[2 * c][0], s[2 * c][1]), "
                     "{0}(s[2 * c][2], s[2 * c][3]),",
                     pack));
  w.line(fmt::format("                        {0}(s[2 * c + 1][0], s[2 * c + 1][1]), "
                     "{0}(s[2 * c + 1][2], s[2 * c + 1][3])}};",
                     pack));
  print_product_pair(w, mma, "kDv / 8", "o_acc", "pf",
                     "fj_att_ldmatrix_x4_trans(bf, vs + (c * 16 + ((lane >> 3) & 1) * 8 + (lane & "
                     "7)) * kVPitch + (n + (lane >> 4)) * 8);  // keys x features, transposed");
  w.close();
}

// out = O / l for rows below seq_q; a row with no finite score has l = 0 and gives
// 0 * inf = NaN, as the reference's 0 / 0.
void print_store(Writer& w, std::string_view pack) {
  w.unroll();
  w.open("for (int r = 0; r < 2; ++r) {");
  w.line("l[r] += fj_att_shfl_xor(l[r], 1);");
  w.line("l[r] += fj_att_shfl_xor(l[r], 2);");
  w.close();
  w.unroll();
  w.open("for (int r = 0; r < 2; ++r) {");
  w.line("const int i = row0 + 8 * r;");
  w.line("if (i >= kSeqQ) continue;");
  w.line("const float inv = 1.0f / l[r];");
  w.line("unsigned short* x = o + (bh * kSeqQ + i) * kDv + 2 * t;");
  w.unroll();
  w.line(fmt::format(
      "for (int n = 0; n < kDv / 8; ++n) fj_att_store2(x + n * 8, {}(o_acc[n][2 * r] * inv, "
      "o_acc[n][2 * r + 1] * inv));",
      pack));
  w.close();
}

void print_work_item(Writer& w, const AttentionSpec& s, const Schedule& p) {
  const std::string dt(dtype_name(s.dtype));
  const std::string mma = "fj_att_mma_" + dt, pack = "fj_att_pack_" + dt;
  w.line("const int qt = kQTiles - 1 - static_cast<int>(w % kQTiles);  // longest rows first");
  w.line("const long long bh = w / kQTiles, b = bh / kHeads;");
  w.line("const int h = static_cast<int>(bh % kHeads);");
  w.line("const int row0 = qt * 64 + warp * 16 + g;  // this lane's rows: row0, row0 + 8");
  w.line("const unsigned short* qp = q + b * kQb + h * kQh;");
  w.line("const unsigned short* kp = k + b * kKb + (h / kKGroup) * kKh;");
  w.line("const unsigned short* vp = v + b * kVb + (h / kVGroup) * kVh;");
  if (has_mask_tensor(s))
    w.line(fmt::format("{} mp = mask + b * kMb + h * kMh;", mask_pointer_type(s.mask_dtype)));
  print_q_fragments(w, p);
  w.line("float o_acc[kDv / 8][4];");
  w.unroll();
  w.line("for (int n = 0; n < kDv / 8; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;");
  w.line("float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // running max (log2 units), sum");
  if (p.skip_above_diagonal) {
    w.line("// causal: tiles whose first key is past the block's last row add nothing");
    w.line("const int last = (qt * 64 + 63) / kBlockN;");
    w.line("const int tiles = last + 1 < kKvTiles ? last + 1 : kKvTiles;");
  } else {
    w.line("const int tiles = kKvTiles;");
  }
  // The pipeline: K of the next tile loads during this tile's softmax and P V, V of the next
  // during its Q Kᵀ; groups complete in commit order, so "all but the latest" is the one needed.
  // Shared memory is free here: the last readers of the previous work item passed the barriers
  // after its last Q Kᵀ and P V.
  const Staged k{"ks", "kp", "kD", "kKPitch", "kKs", p.k_vec};
  const Staged v{"vs", "vp", "kDv", "kVPitch", "kVs", p.v_vec};
  print_stage(w, k, "0");
  w.line("fj_att_async_commit();");
  print_stage(w, v, "0");
  w.line("fj_att_async_commit();");
  w.open("for (int kt = 0; kt < tiles; ++kt) {");
  w.line("const int key0 = kt * kBlockN;");
  w.line("fj_att_async_wait<1>();  // K of this tile (V's group may still be in flight)");
  w.line("__syncthreads();");
  print_scores(w, mma);
  w.line("__syncthreads();  // every warp is done with ks");
  w.open("if (kt + 1 < tiles) {");
  print_stage(w, k, "key0 + kBlockN");
  w.close();
  w.line("fj_att_async_commit();  // empty after the last tile: keeps the count");
  print_mask(w, s, p);
  print_online_softmax(w);
  w.line("fj_att_async_wait<1>();  // V of this tile");
  w.line("__syncthreads();");
  print_pv(w, mma, pack);
  w.line("__syncthreads();  // every warp is done with vs");
  w.open("if (kt + 1 < tiles) {");
  print_stage(w, v, "key0 + kBlockN");
  w.close();
  w.line("fj_att_async_commit();");
  w.close();
  print_store(w, pack);
}

std::string_view mask_name(AttentionMaskKind m) {
  switch (m) {
    case AttentionMaskKind::none: return "none";
    case AttentionMaskKind::causal: return "causal";
    case AttentionMaskKind::additive: return "additive";
    case AttentionMaskKind::boolean: return "boolean";
  }
  return "?";
}

std::string print_kernel(const AttentionSpec& s, const Schedule& p) {
  Writer w;
  w.line(fmt::format("// attention forward (FlashAttention-2): {} q[{},{},{},{}], k, v [{},{},{},{}]"
                     " (head group {}, {}), mask {}",
                     dtype_name(s.dtype), s.batch, s.heads, s.seq_q, s.head_dim, s.batch,
                     s.heads / s.k.head_group, s.seq_kv, s.value_dim, s.k.head_group,
                     s.v.head_group, mask_name(s.mask)));
  w.line("//   out[b,h,i,:] = sum_j softmax_j(S[b,h,i,j]) v[b,h,j,:], S = scale * q[b,h,i,:] . k[b,h,j,:]");
  w.line(fmt::format("//   block {}: 4 warps x 16 query rows; key tiles of {}; {} work items",
                     kThreads, p.block_n, p.work));
  print_signature(w, s);
  print_constants(w, s, p);
  w.line("__shared__ __align__(16) unsigned short ks[kBlockN * kKPitch];");
  w.line("__shared__ __align__(16) unsigned short vs[kBlockN * kVPitch];");
  w.line("const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;");
  w.open("for (long long w = blockIdx.x; w < kWork; w += gridDim.x) {");
  print_work_item(w, s, p);
  w.close();
  w.close();
  return w.take();
}

std::string refuse_view(std::string_view name, const AttentionView& v, int64_t heads) {
  if (v.strides[3] != 1)
    return fmt::format("{}'s feature axis has stride {} (the kernel reads it contiguously: needs 1)",
                       name, v.strides[3]);
  for (int a = 0; a < 3; ++a) {
    if (v.strides[a] < 0)
      return fmt::format("{} has a negative stride {} on axis {}", name, v.strides[a], a);
  }
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
  if (has_mask_tensor(s)) {
    if (s.mask == AttentionMaskKind::additive && !is_floating(s.mask_dtype))
      return fmt::format("additive mask of dtype {} (needs f16, bf16 or f32)", dtype_name(s.mask_dtype));
    if (s.mask == AttentionMaskKind::boolean && s.mask_dtype != DType::boolean)
      return fmt::format("boolean mask of dtype {} (needs bool)", dtype_name(s.mask_dtype));
    for (int a = 0; a < 4; ++a) {
      if (s.mask_view.strides[a] < 0)
        return fmt::format("the mask has a negative stride {} on axis {}", s.mask_view.strides[a], a);
    }
  }
  if ((s.mask == AttentionMaskKind::causal || s.mask == AttentionMaskKind::boolean) &&
      std::isnan(s.fill))
    return "a NaN fill";
  if (!std::isfinite(s.scale) || !std::isfinite(s.mask_scale))
    return fmt::format("a non-finite scale {} or mask_scale {}", s.scale, s.mask_scale);
  return "";
}

Kernel generate_attention(const AttentionSpec& spec, const Target& target) {
  if (const std::string why = refuse_attention_kernel(spec); !why.empty())
    throw InternalError("generate_attention: " + why);
  if (target.cc < 80)
    throw InternalError(fmt::format(
        "generate_attention: sm_{} has no m16n8k16 bf16/f16 mma (needs sm_80 or later)", target.cc));
  const Schedule p = plan_attention(spec);

  std::string source = fmt::format(
      "// Generated by fusejit (codegen version {}). Device helpers from templates/device, then "
      "the kernel.\n",
      kCodegenVersion);
  for (std::string_view h : {"fj_core.cuh", "fj_attention.cuh"}) {
    source += fmt::format("\n// ==== {} ====\n", h);
    source += device_source(h);
  }
  source += "\n";
  source += kKernelMarker;
  source += "\n";
  source += print_kernel(spec, p);

  Kernel k;
  k.name = fmt::format("fj_attention_{:016x}", ir::hash64(source));
  for (size_t pos = source.find(kKernelNameToken); pos != std::string::npos;
       pos = source.find(kKernelNameToken, pos)) {
    source.replace(pos, kKernelNameToken.size(), k.name);
  }
  k.source = std::move(source);
  k.block = kThreads;
  k.work_blocks = p.work;
  // Residency: registers decide it (about 130 to 250 a thread, by ptxas -v on sm_90: two blocks
  // of 128 threads in 64K registers), unless shared memory allows fewer.
  k.blocks_per_sm = std::max(1, std::min(2, target.shared_per_sm / std::max(1, p.shared_bytes)));
  k.shared_bytes = 0;  // static shared memory only
  return k;
}

}  // namespace fusejit::templates
