// The fused attention kernel (templates/schedulers/attention.h): refusals, NVRTC compiles of its
// variants for sm_90 and sm_80, and a CPU emulation of the generated kernel body (no GPU here)
// against a double-precision reference: the body, a host shim (emulate/cuda_shim.h) and launchers
// are compiled by the host compiler into a shared object that runs each block on 128 threads.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "ir/digest.h"
#include "ir/host_tensor.h"
#include "templates/emit.h"
#include "templates/schedulers/attention.h"
#include "templates/schedulers/attention_kernel.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

using namespace fusejit;
using templates::AttentionMaskKind;
using templates::AttentionSpec;

namespace {

// Dense [b, h, s, d] strides.
std::array<int64_t, 4> dense(int64_t h, int64_t s, int64_t d) { return {h * s * d, s * d, d, 1}; }

// q, k, v dense (k and v with heads / group heads), masks over [b, h, i, j] broadcast over b.
AttentionSpec make_spec(DType dtype, int64_t dim, AttentionMaskKind mask, int64_t group,
                        int64_t seq_q, int64_t seq_kv, int64_t batch = 2, int64_t heads = 4) {
  AttentionSpec s;
  s.dtype = dtype;
  s.batch = batch;
  s.heads = heads;
  s.seq_q = seq_q;
  s.seq_kv = seq_kv;
  s.head_dim = s.value_dim = dim;
  s.q.strides = dense(heads, seq_q, dim);
  s.k.strides = s.v.strides = dense(heads / group, seq_kv, dim);
  s.k.head_group = s.v.head_group = group;
  s.scale = 1.0 / std::sqrt(static_cast<double>(dim));
  s.mask = mask;
  s.mask_view.strides = {0, seq_q * seq_kv, seq_kv, 1};
  s.mask_dtype = mask == AttentionMaskKind::boolean ? DType::boolean : DType::f32;
  return s;
}

std::string label(const AttentionSpec& s) {
  static const char* masks[] = {"none", "causal", "additive", "boolean"};
  return fmt::format("{} d{} mask {} group {} seq {}x{} batch {} heads {}", dtype_name(s.dtype),
                     s.head_dim, masks[static_cast<int>(s.mask)], s.k.head_group, s.seq_q,
                     s.seq_kv, s.batch, s.heads);
}

// Buffer elements a view of [b, h, s, d] reaches (its largest offset plus one).
int64_t extent(const templates::AttentionView& v, std::array<int64_t, 4> dims) {
  int64_t last = v.offset;
  for (int a = 0; a < 4; ++a) last += (dims[a] - 1) * v.strides[a];
  return last + 1;
}

// ---- inputs and the reference ------------------------------------------------------------------

struct Inputs {
  std::vector<uint16_t> q, k, v, mask16;
  std::vector<float> mask32;
  std::vector<uint8_t> mask8;
};

float widen(DType d, uint16_t bits) {
  return d == DType::bf16 ? ir::bf16_bits_to_float(bits) : ir::half_bits_to_float(bits);
}
uint16_t narrow(DType d, float f) {
  return d == DType::bf16 ? ir::float_to_bf16_bits(f) : ir::float_to_half_bits(f);
}

Inputs make_inputs(const AttentionSpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<uint16_t>& x, int64_t n, float amp) {
    x.resize(n);
    for (auto& e : x) e = narrow(s.dtype, amp * u(rng));
  };
  const int64_t kv_heads = s.heads / s.k.head_group;
  fill(in.q, extent(s.q, {s.batch, s.heads, s.seq_q, s.head_dim}), 2.0f);
  fill(in.k, extent(s.k, {s.batch, kv_heads, s.seq_kv, s.head_dim}), 2.0f);
  fill(in.v, extent(s.v, {s.batch, kv_heads, s.seq_kv, s.value_dim}), 1.0f);
  const int64_t mn = extent(s.mask_view, {s.batch, s.heads, s.seq_q, s.seq_kv});
  if (s.mask == AttentionMaskKind::additive) {
    if (s.mask_dtype == DType::f32) {
      in.mask32.resize(mn);
      for (auto& e : in.mask32) e = 3.0f * u(rng);
    } else {
      in.mask16.resize(mn);
      for (auto& e : in.mask16) e = narrow(s.mask_dtype, 3.0f * u(rng));
    }
  }
  if (s.mask == AttentionMaskKind::boolean) {
    in.mask8.resize(mn);
    for (auto& e : in.mask8) e = u(rng) > 0.4f ? 1 : 0;
    // Query row 3 of every head masked everywhere: NaN where the fill is -inf.
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t j = 0; j < s.seq_kv; ++j)
        in.mask8[s.mask_view.offset + h * s.mask_view.strides[1] + 3 * s.mask_view.strides[2] +
                 j * s.mask_view.strides[3]] = s.fill_where_true ? 1 : 0;
  }
  return in;
}

// out[b,h,i,:] = softmax_j(S) v, in double, dense [b, h, seq_q, value_dim].
std::vector<double> reference(const AttentionSpec& s, const Inputs& in) {
  std::vector<double> out(s.batch * s.heads * s.seq_q * s.value_dim);
  std::vector<double> S(s.seq_kv);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t qo =
            s.q.offset + b * s.q.strides[0] + h * s.q.strides[1] + i * s.q.strides[2];
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const int64_t ko = s.k.offset + b * s.k.strides[0] + h / s.k.head_group * s.k.strides[1] +
                             j * s.k.strides[2];
          double dot = 0;
          for (int64_t c = 0; c < s.head_dim; ++c)
            dot += double{widen(s.dtype, in.q[qo + c])} * widen(s.dtype, in.k[ko + c]);
          double x = dot * s.scale;
          const auto& m = s.mask_view.strides;
          const int64_t mo = s.mask_view.offset + b * m[0] + h * m[1] + i * m[2] + j * m[3];
          switch (s.mask) {
            case AttentionMaskKind::additive:
              x += s.mask_scale * (s.mask_dtype == DType::f32 ? in.mask32[mo]
                                                                : widen(s.mask_dtype, in.mask16[mo]));
              break;
            case AttentionMaskKind::boolean:
              if ((in.mask8[mo] != 0) == s.fill_where_true) x = s.fill;
              break;
            case AttentionMaskKind::causal:
              if (j > i) x = s.fill;
              break;
            case AttentionMaskKind::none:
              break;
          }
          S[j] = x;
        }
        double mx = -INFINITY;
        for (double x : S) mx = std::max(mx, x);
        double sum = 0;
        for (double& x : S) sum += (x = std::exp(x - mx));  // all -inf: NaN, as 0/0
        for (int64_t c = 0; c < s.value_dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.seq_kv; ++j) {
            const int64_t vo = s.v.offset + b * s.v.strides[0] +
                               h / s.v.head_group * s.v.strides[1] + j * s.v.strides[2];
            acc += S[j] * widen(s.dtype, in.v[vo + c]);
          }
          out[((b * s.heads + h) * s.seq_q + i) * s.value_dim + c] = acc / sum;
        }
      }
  return out;
}

struct Comparison {
  double rel_l2 = 0;
  int64_t nan_mismatches = 0, nans = 0;
};

Comparison compare(const AttentionSpec& s, const std::vector<uint16_t>& out,
                   const std::vector<double>& ref) {
  Comparison c;
  double err = 0, norm = 0;
  for (size_t e = 0; e < ref.size(); ++e) {
    const double got = widen(s.dtype, out[e]);
    if (std::isnan(ref[e]) || std::isnan(got)) {
      c.nans += std::isnan(ref[e]);
      c.nan_mismatches += std::isnan(ref[e]) != std::isnan(got);
      continue;
    }
    err += (got - ref[e]) * (got - ref[e]);
    norm += ref[e] * ref[e];
  }
  c.rel_l2 = std::sqrt(err / norm);
  return c;
}

// ---- the emulation -----------------------------------------------------------------------------

struct EmulationCase {
  AttentionSpec spec;      // what the kernel computes
  AttentionSpec expected;  // what the reference computes (differs only in the must-fail case)
  int grid = 0;            // blocks launched (0: work_blocks)
  templates::Kernel kernel;
  // A split schedule other than attention_params' (0: its own): the stages of K and V tiles and
  // the key tiles of a piece.
  int stages = 0;
  int64_t split_tiles = 0;
};

// The kernel of `c`: generate_attention's, or under the case's stages and pieces the same steps
// with those put into the parameters.
templates::Kernel kernel_of(const EmulationCase& c) {
  if (c.stages == 0) return templates::generate_attention(c.spec);
  const AttentionSpec f = templates::fold_query_groups(c.spec);
  templates::AttentionParams p = templates::attention_params(f, templates::Target{});
  p.stages = c.stages;
  p.shared_bytes = std::max(p.shared_bytes, 2 * p.stages * p.block_n * (p.k_pitch + p.v_pitch));
  p.split_tiles = c.split_tiles;
  p.kv_splits = (p.kv_tiles + p.split_tiles - 1) / p.split_tiles;
  p.work = p.items * p.kv_splits;
  templates::KernelBody body = templates::attention_body(f, p);
  templates::kir::place_declarations(body.fn);
  templates::kir::verify(body.fn);
  return templates::assemble_kernel(body, body.helpers, "");
}

// A q read from a [b, s, h, d] buffer.
void permute_q(AttentionSpec& s) {
  s.q.strides = {s.seq_q * s.heads * s.head_dim, s.head_dim, s.heads * s.head_dim, 1};
}

std::vector<EmulationCase> emulation_cases() {
  std::vector<EmulationCase> cases;
  auto add = [&](AttentionSpec s, int grid = 0) { cases.push_back({s, s, grid, {}}); };
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t dim : {64, 128})
      for (AttentionMaskKind mask : {AttentionMaskKind::none, AttentionMaskKind::causal,
                                     AttentionMaskKind::additive, AttentionMaskKind::boolean}) {
        // Heads in pairs sharing k and v; seq 77 x 130 (tails in both); one batch at d 128,
        // the slower to emulate.
        AttentionSpec s = make_spec(dt, dim, mask, 2, 77, 130, dim == 64 ? 2 : 1, 4);
        if (mask == AttentionMaskKind::additive && dt == DType::f16) s.mask_dtype = DType::f16;
        if (mask == AttentionMaskKind::additive && dim == 128) s.mask_scale = -0.5;
        add(s, dim == 128 ? 3 : 0);  // fewer blocks than work: the grid-stride loop
      }
  // The full shape of the brief, q permuted, and odd strides (narrow loads).
  AttentionSpec big = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 2, 77, 130);
  permute_q(big);
  add(big, 5);
  AttentionSpec odd = make_spec(DType::f16, 64, AttentionMaskKind::boolean, 1, 40, 33, 1, 2);
  odd.k.strides = {2 * 33 * 66, 33 * 66, 66, 1};  // rows padded to 66: 4-byte copies
  odd.v.strides = {2 * 33 * 65, 33 * 65, 65, 1};  // rows padded to 65: 2-byte copies
  odd.q.strides = {2 * 40 * 65, 40 * 65, 65, 1};  // pairs not 4-byte aligned
  odd.fill = -7.0;
  odd.fill_where_true = false;
  add(odd);
  // q, k and v sliced out of one [b, s, 3 * h * d] projection (GPT-2's c_attn), read in place
  // at offsets 0, h * d and 2 * h * d; then offsets that break 16- and 4-byte alignment (narrow
  // loads) with a mask that starts past its buffer's first element.
  AttentionSpec fused = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 50, 50, 2, 3);
  fused.q.strides = fused.k.strides = fused.v.strides = {50 * 3 * 3 * 64, 64, 3 * 3 * 64, 1};
  fused.k.offset = 3 * 64;
  fused.v.offset = 2 * 3 * 64;
  add(fused);
  AttentionSpec shifted = make_spec(DType::f16, 64, AttentionMaskKind::additive, 1, 20, 70, 1, 2);
  shifted.q.offset = 3;
  shifted.k.offset = 2;
  shifted.v.offset = 5;
  shifted.mask_view.offset = 7;
  add(shifted);
  // o written as [b, s, h, d] rows (the permute after an attention, in its kernel): a causal
  // prefill; a decode of one query folded into rows, split (the combine writes o); two queries
  // in groups, which o's layout keeps from folding.
  const auto bshd_o = [](AttentionSpec& s) {
    s.o = templates::AttentionView{
        .strides = {s.seq_q * s.heads * s.value_dim, s.value_dim, s.heads * s.value_dim, 1}};
  };
  AttentionSpec o_prefill = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 50, 50, 2, 3);
  bshd_o(o_prefill);
  add(o_prefill);
  AttentionSpec o_decode = make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 1000, 1, 8);
  bshd_o(o_decode);
  add(o_decode, 7);
  AttentionSpec o_two = make_spec(DType::f16, 64, AttentionMaskKind::additive, 4, 2, 300, 2, 8);
  bshd_o(o_two);
  add(o_two, 9);
  // Causal with a finite fill: every key tile is computed; seq_kv < seq_q.
  AttentionSpec finite = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 100, 70, 1, 1);
  finite.fill = -2.0;
  add(finite);
  // Masks broadcast by strides of 0: one key bias row for every query row, batch and head
  // (a [1, seq_kv] mask), and a key-padding mask per batch entry ([b, 1, 1, seq_kv]).
  AttentionSpec row = make_spec(DType::bf16, 64, AttentionMaskKind::additive, 1, 77, 130, 1, 2);
  row.mask_view.strides = {0, 0, 0, 1};
  add(row);
  AttentionSpec pad = make_spec(DType::f16, 64, AttentionMaskKind::additive, 1, 40, 70, 2, 2);
  pad.mask_view.strides = {70, 0, 0, 1};
  pad.mask_dtype = DType::f16;
  add(pad);
  // Split-KV (decode: at most 16 query rows against many keys): each item's key tiles in
  // pieces that the last to arrive combines. One row of 8 heads in KV groups of 4 (a token of a
  // grouped-query model); 4 rows with the masked row 3 (NaN through the combine); 16 rows of
  // two batches with an additive mask and a tail tile. Grids below the work: blocks walk pieces
  // of several items, and an item's last piece is not its last block.
  AttentionSpec one = make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 1000, 1, 8);
  add(one, 7);
  AttentionSpec four = make_spec(DType::f16, 64, AttentionMaskKind::boolean, 1, 4, 700, 1, 2);
  add(four, 5);
  AttentionSpec sixteen = make_spec(DType::bf16, 64, AttentionMaskKind::additive, 2, 16, 333, 2, 2);
  add(sixteen);
  // Decode layouts folded into rows (fold_query_groups) under the key split: two queries of 8
  // heads in groups of 4 with a [b, h, i, j] mask (8 rows a KV head, split); three queries of
  // heads in pairs against one tile (6 rows, no split: the warps' combine stores the output);
  // 400 items of one query, enough to fill the GPU unsplit, three tiles each, the grid walking
  // items (the combine's shared memory handed back to the next item's tiles).
  add(make_spec(DType::bf16, 64, AttentionMaskKind::additive, 4, 2, 300, 2, 8), 9);
  add(make_spec(DType::f16, 128, AttentionMaskKind::none, 2, 3, 64, 1, 4));
  add(make_spec(DType::bf16, 16, AttentionMaskKind::none, 1, 1, 130, 100, 4), 7);
  // Split pieces streamed through three and four stages: 16 tiles of one query row in KV groups
  // of 4 as pieces of 5 (the last of 1: fewer tiles than stages) and of 7 (the last of 2), the
  // grid walking pieces of both items.
  cases.push_back({one, one, 3, {}, 3, 5});
  cases.push_back({one, one, 5, {}, 4, 7});
  // Must fail: the kernel computes with another scale than the reference.
  AttentionSpec wrong = make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 30, 50, 1, 1);
  cases.push_back({wrong, wrong, 0, {}});
  cases.back().spec.scale *= 1.25;
  return cases;
}

std::string shared_object_source(const std::vector<EmulationCase>& cases) {
  std::string src = test::shim_include();
  for (const EmulationCase& c : cases) src += test::emulated_kernel(c.kernel, src);
  return src;
}

std::vector<uint16_t> run_emulated(void* so, const EmulationCase& c, Inputs& in) {
  using Entry = void (*)(void* const*, int);
  auto entry = reinterpret_cast<Entry>(dlsym(so, ("run_" + c.kernel.name).c_str()));
  REQUIRE(entry != nullptr);
  const AttentionSpec& s = c.spec;
  const std::array<int64_t, 4> dims{s.batch, s.heads, s.seq_q, s.value_dim};
  std::vector<uint16_t> out(s.o ? extent(*s.o, dims) : dims[0] * dims[1] * dims[2] * dims[3],
                            0x7c01);
  std::vector<void*> args = {in.q.data(), in.k.data(), in.v.data()};
  if (s.mask == AttentionMaskKind::additive)
    args.push_back(s.mask_dtype == DType::f32 ? static_cast<void*>(in.mask32.data())
                                              : static_cast<void*>(in.mask16.data()));
  if (s.mask == AttentionMaskKind::boolean) args.push_back(in.mask8.data());
  args.push_back(out.data());
  entry(args.data(), c.grid > 0 ? c.grid : static_cast<int>(c.kernel.work_blocks));
  if (!s.o) return out;
  // Gathered back into dense [b, h, seq_q, value_dim] through o's view.
  std::vector<uint16_t> dense;
  const auto& st = s.o->strides;
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t h = 0; h < dims[1]; ++h)
      for (int64_t i = 0; i < dims[2]; ++i)
        for (int64_t d = 0; d < dims[3]; ++d)
          dense.push_back(out[s.o->offset + b * st[0] + h * st[1] + i * st[2] + d * st[3]]);
  return dense;
}

// 16-byte aligned copies (the launch contract's buffers are): the kernel's wide loads rely on it.
template <class T>
void align16(std::vector<T>& x) {
  if (reinterpret_cast<uintptr_t>(x.data()) % 16 == 0) return;
  FAIL("std::vector storage not 16-byte aligned");
}

// FUSEJIT_TEST_DUMP_DIR: each emulated case's source, inputs and double reference go there
// (case<N>.cu, case<N>_<arg>.bin, case<N>_ref.f64; manifest.txt: one line per case: N, kernel
// name, grid, block, dtype, output elements, argument files), to replay them on a GPU.
void dump_case(const std::string& dir, size_t n, const EmulationCase& c, const Inputs& in,
               const std::vector<double>& ref) {
  auto write = [&](const std::string& file, const void* data, size_t bytes) {
    std::ofstream(dir + "/" + file, std::ios::binary).write(static_cast<const char*>(data), bytes);
    return file;
  };
  std::ofstream(dir + "/case" + std::to_string(n) + ".cu") << c.kernel.source;
  const std::string p = "case" + std::to_string(n) + "_";
  std::vector<std::string> args = {write(p + "q.bin", in.q.data(), 2 * in.q.size()),
                                   write(p + "k.bin", in.k.data(), 2 * in.k.size()),
                                   write(p + "v.bin", in.v.data(), 2 * in.v.size())};
  if (!in.mask32.empty()) args.push_back(write(p + "mask.bin", in.mask32.data(), 4 * in.mask32.size()));
  if (!in.mask16.empty()) args.push_back(write(p + "mask.bin", in.mask16.data(), 2 * in.mask16.size()));
  if (!in.mask8.empty()) args.push_back(write(p + "mask.bin", in.mask8.data(), in.mask8.size()));
  write(p + "ref.f64", ref.data(), 8 * ref.size());
  std::ofstream m(dir + "/manifest.txt", std::ios::app);
  m << n << " " << c.kernel.name << " " << (c.grid > 0 ? c.grid : c.kernel.work_blocks) << " "
    << c.kernel.block << " " << dtype_name(c.spec.dtype) << " " << ref.size();
  for (const std::string& a : args) m << " " << a;
  m << "\n";
}

}  // namespace

TEST_CASE("attention kernel: refusals say why", "[templates][attention]") {
  const AttentionSpec ok = make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 10, 10);
  CHECK(templates::refuse_attention_kernel(ok).empty());
  auto refused = [&](auto change) {
    AttentionSpec s = ok;
    change(s);
    return templates::refuse_attention_kernel(s);
  };
  CHECK_THAT(refused([](auto& s) { s.dtype = DType::f32; }), ContainsSubstring("dtype f32"));
  CHECK_THAT(refused([](auto& s) { s.head_dim = 72; }), ContainsSubstring("head_dim 72"));
  CHECK_THAT(refused([](auto& s) { s.value_dim = 256; }), ContainsSubstring("value_dim 256"));
  CHECK_THAT(refused([](auto& s) { s.seq_kv = 0; }), ContainsSubstring("empty extent"));
  CHECK_THAT(refused([](auto& s) { s.k.head_group = 3; }),
             ContainsSubstring("k's head_group 3 does not divide heads 4"));
  CHECK_THAT(refused([](auto& s) { s.v.strides[3] = 2; }),
             ContainsSubstring("v's feature axis has stride 2"));
  CHECK_THAT(refused([](auto& s) { s.k.offset = -64; }),
             ContainsSubstring("k has a negative offset"));
  CHECK_THAT(refused([](auto& s) {
               s.o = templates::AttentionView{.strides = {640, 64, 65, 1}};
             }),
             ContainsSubstring("o's stride 65 on axis 2 is odd"));
  CHECK_THAT(refused([](auto& s) {
               s.o = templates::AttentionView{.strides = {640, 64, 256, 1}, .offset = 8};
             }),
             ContainsSubstring("o's head_group 1 and offset 8"));
  CHECK_THAT(refused([](auto& s) {
               s.mask = AttentionMaskKind::boolean;
               s.mask_dtype = DType::f32;
             }),
             ContainsSubstring("boolean mask of dtype f32"));
  CHECK_THAT(refused([](auto& s) {
               s.mask = AttentionMaskKind::additive;
               s.mask_dtype = DType::i32;
             }),
             ContainsSubstring("additive mask of dtype i32"));
  AttentionSpec bad = ok;
  bad.head_dim = 40;
  REQUIRE_THROWS_AS(templates::generate_attention(bad), InternalError);
  REQUIRE_THROWS_WITH(templates::generate_attention(ok, templates::target_for_arch("sm_75")),
                      ContainsSubstring("needs sm_80"));
}

TEST_CASE("attention kernel: the launch shape and arguments", "[templates][attention]") {
  AttentionSpec s = make_spec(DType::f16, 128, AttentionMaskKind::additive, 2, 77, 130);
  const templates::Kernel k = templates::generate_attention(s);
  CHECK(k.name.rfind("fj_attention_", 0) == 0);
  CHECK(k.params.empty());
  CHECK(k.block == 128);
  CHECK(k.work_blocks == 2 * 4 * 2);
  CHECK(k.shared_bytes == 0);
  const std::string text = test::kernel_text(k);
  CHECK(test::has(text, "const float* __restrict__ mask, unsigned short* __restrict__ o)"));
  CHECK(test::has(text, "fj_att_mma_f16("));
  CHECK(test::has(text, "fj_att_copy16_async("));  // dense k and v: 16-byte cp.async staging
  s.mask = AttentionMaskKind::causal;
  CHECK(test::has(test::kernel_text(templates::generate_attention(s)),
                  "unsigned short* __restrict__ v, unsigned short* __restrict__ o)"));
}

TEST_CASE("attention kernel: the builder takes its block and rows from the params",
          "[templates][attention]") {
  const AttentionSpec s = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 130, 130);
  templates::AttentionParams p = templates::attention_params(s, templates::Target{});
  CHECK(p.block == 32 * p.warps);
  CHECK(p.rows == 16 * p.warps);
  CHECK(p.q_tiles == (130 + p.rows - 1) / p.rows);
  const templates::kir::Function f = templates::build_attention_kernel(s, p);
  CHECK(f.block == p.block);
  // Params that disagree with a warp's 32 threads and 16 rows are a bug, refused by name.
  p.rows = 32;
  REQUIRE_THROWS_AS(templates::build_attention_kernel(s, p), InternalError);
  REQUIRE_THROWS_WITH(templates::build_attention_kernel(s, p),
                      ContainsSubstring("disagree (a warp takes 32 threads and 16 rows"));
  // A key split's warps share 16 rows, take whole 16-key steps of a tile and combine through the
  // tiles' shared memory, which must hold them: each broken alone is refused.
  const AttentionSpec d = make_spec(DType::bf16, 128, AttentionMaskKind::none, 1, 16, 4096, 1, 8);
  const templates::AttentionParams split = templates::attention_params(d, templates::Target{});
  REQUIRE(split.key_split);
  REQUIRE_NOTHROW(templates::build_attention_kernel(d, split));
  p = split;
  p.rows = 64;
  CHECK_THROWS_AS(templates::build_attention_kernel(d, p), InternalError);
  p = split;
  p.block_n = 32;
  CHECK_THROWS_AS(templates::build_attention_kernel(d, p), InternalError);
  p = split;
  p.shared_bytes = 4 * 4 * 16 * 128;  // the warps' O rows, not their m and l
  CHECK_THROWS_WITH(templates::build_attention_kernel(d, p), ContainsSubstring("33280 bytes"));
}

TEST_CASE("attention kernel: grouped query heads of a decode fold into rows",
          "[templates][attention]") {
  // Llama-3.1-8B's decode at batch 1: 32 query heads over 8 KV heads, one query each. The four
  // query heads of a KV head become the four rows of one head, reading the KV head directly.
  AttentionSpec s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 8192, 1, 32);
  AttentionSpec f = templates::fold_query_groups(s);
  CHECK(f.heads == 8);
  CHECK(f.seq_q == 4);
  CHECK(f.k.head_group == 1);
  CHECK(f.v.head_group == 1);
  CHECK(f.q.strides == std::array<int64_t, 4>{32 * 128, 4 * 128, 128, 1});
  CHECK(f.k.strides == s.k.strides);
  CHECK_FALSE(f.o.has_value());
  // o written as [b, s, h, d] rows folds as q does; with two queries its head stride is no
  // multiple of its query stride, and nothing folds.
  s.o = templates::AttentionView{.strides = {32 * 128, 128, 32 * 128, 1}};
  f = templates::fold_query_groups(s);
  REQUIRE(f.o.has_value());
  CHECK(f.o->strides == std::array<int64_t, 4>{32 * 128, 4 * 128, 128, 1});
  s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 2, 1000, 1, 32);
  s.o = templates::AttentionView{.strides = {2 * 32 * 128, 128, 32 * 128, 1}};
  CHECK(templates::fold_query_groups(s).heads == 32);
  // Two queries per head (speculative decode): head j's queries i are rows j * 2 + i, 8 rows.
  s = make_spec(DType::bf16, 128, AttentionMaskKind::boolean, 4, 2, 1000, 2, 32);
  s.mask_view.strides = {0, 2 * 1000, 1000, 1};
  f = templates::fold_query_groups(s);
  CHECK(f.seq_q == 8);
  CHECK(f.heads == 8);
  CHECK(f.q.strides == std::array<int64_t, 4>{32 * 2 * 128, 4 * 2 * 128, 128, 1});
  CHECK(f.mask_view.strides == std::array<int64_t, 4>{0, 4 * 2000, 1000, 1});
  // 16 queries fold nothing; 8 queries fold two heads of a group of 4 (16 rows), leaving
  // groups of 2.
  s = make_spec(DType::bf16, 64, AttentionMaskKind::none, 4, 16, 300, 1, 8);
  CHECK(templates::fold_query_groups(s).seq_q == 16);
  CHECK(templates::fold_query_groups(s).heads == 8);
  s = make_spec(DType::bf16, 64, AttentionMaskKind::none, 4, 8, 300, 1, 8);
  f = templates::fold_query_groups(s);
  CHECK(f.seq_q == 16);
  CHECK(f.heads == 4);
  CHECK(f.k.head_group == 2);
  // Left as they are: causal (the diagonal follows the query, not the row); a mask broadcast
  // over heads with more than one query (no single row stride); q [b, s, h, d] with more than one
  // query (the same); no group.
  s = make_spec(DType::bf16, 64, AttentionMaskKind::causal, 4, 1, 300, 1, 8);
  CHECK(templates::fold_query_groups(s).heads == 8);
  s = make_spec(DType::bf16, 64, AttentionMaskKind::boolean, 4, 2, 300, 1, 8);
  s.mask_view.strides = {0, 0, 300, 1};
  CHECK(templates::fold_query_groups(s).heads == 8);
  s.mask_view.strides = {0, 0, 0, 1};  // one query row of mask for every head and query: folds
  CHECK(templates::fold_query_groups(s).heads == 2);
  s = make_spec(DType::bf16, 64, AttentionMaskKind::none, 4, 2, 300, 1, 8);
  permute_q(s);
  CHECK(templates::fold_query_groups(s).heads == 8);
  s = make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 1, 300, 1, 8);
  CHECK(templates::fold_query_groups(s).heads == 8);
  // With one query, any q layout folds: [b, s, h, d] too.
  s = make_spec(DType::bf16, 64, AttentionMaskKind::none, 4, 1, 300, 1, 8);
  permute_q(s);
  CHECK(templates::fold_query_groups(s).heads == 2);
  CHECK(templates::fold_query_groups(s).q.strides[2] == s.q.strides[1]);
}

TEST_CASE("attention kernel: decode shapes split the keys across blocks, others do not",
          "[templates][attention]") {
  const templates::Target target{};
  // Llama-3.1-8B's decode at batch 1 against 8k keys, folded: 8 items of 4 rows. Blocks of four
  // warps that share the rows, each warp a quarter of every tile (16 of 64 keys); three on an SM
  // by registers (the kernel is built for three); 8 items of 128 key tiles, aiming at one block
  // an SM (132): 16 pieces of 8 tiles.
  const AttentionSpec s8k = templates::fold_query_groups(
      make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 8192, 1, 32));
  templates::AttentionParams p = templates::attention_params(s8k, target);
  CHECK(p.key_split);
  CHECK(p.warps == 4);
  CHECK(p.block == 128);
  CHECK(p.rows == 16);
  CHECK(p.blocks_per_sm == 3);
  CHECK(p.items == 8);
  CHECK(p.kv_tiles == 128);
  CHECK(p.kv_splits == 16);
  CHECK(p.split_tiles == 8);
  CHECK(p.work == 128);
  // generate_attention folds the unfolded spec itself.
  const templates::Kernel k = templates::generate_attention(
      make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 8192, 1, 32));
  CHECK(k.work_blocks == 128);
  CHECK(k.block == 128);
  CHECK(k.serial_launches);  // module-scope scratch
  const std::string text = test::kernel_text(k);
  CHECK(test::has(text, "__launch_bounds__(128, 3)"));
  CHECK(test::has(
      text, "__device__ __align__(16) float fj_attention_partials[65536];"));  // 128 x 4 x 128
  CHECK(test::has(text, "__device__ unsigned int fj_attention_arrivals[8];"));
  CHECK(test::has(text, "atomicAdd("));
  // The partials other blocks wrote are read past L1, by a helper only split kernels carry.
  CHECK(test::has(text, "fj_partial2(fj_attention_stats + 2 * at_row"));
  CHECK(test::has(text, "fj_partial4(fj_attention_partials + at_row * kDv + c"));
  CHECK(test::has(text, "__device__ __align__(16) float fj_attention_stats[1024];"));
  CHECK(k.source.find("// ==== fj_partial.cuh ====") != std::string::npos);

  // The grouped heads folded into rows by the caller, as generate records a decode step: 8
  // items of 4 rows against a cache of 384; pieces of 1 of the 6 key tiles.
  AttentionSpec s = make_spec(DType::bf16, 128, AttentionMaskKind::boolean, 1, 4, 384, 1, 8);
  p = templates::attention_params(s, target);
  CHECK(p.items == 8);
  CHECK(p.kv_splits == 6);
  CHECK(p.split_tiles == 1);
  // Batch 64 of those: 512 items fill the GPU alone.
  s.batch = 64;
  p = templates::attention_params(s, target);
  CHECK(p.kv_splits == 1);
  CHECK_FALSE(templates::generate_attention(s).serial_launches);
  CHECK(templates::generate_attention(s).source.find("fj_partial") == std::string::npos);
  s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 1, 4, 8192, 8, 8);
  p = templates::attention_params(s, target);
  CHECK(p.items == 64);  // batch 8 at 8k: 2 pieces of 64 tiles, 128 blocks, not 3 (192 > 132)
  CHECK(p.kv_splits == 2);
  CHECK(p.split_tiles == 64);
  CHECK(p.work <= 132);
  // 131 tiles for 8 items, aiming at 16 pieces: 15 pieces of 9 tiles, the last of 5 (none may
  // be empty: 16 of 9 would leave the last one so).
  s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 1, 1, 131 * 64, 1, 8);
  p = templates::attention_params(s, target);
  CHECK(p.kv_splits * p.split_tiles >= p.kv_tiles);
  CHECK((p.kv_splits - 1) * p.split_tiles < p.kv_tiles);
  CHECK(p.split_tiles == 9);
  CHECK(p.kv_splits == 15);
  // One item: at most 64 pieces for its last block to merge (132 would fill the GPU).
  s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 1, 1, 131072, 1, 1);
  p = templates::attention_params(s, target);
  CHECK(p.kv_splits == 64);
  CHECK(p.split_tiles == 32);
  // Prefill (more than 16 query rows), one key tile, and a causal mask that skips tiles: no
  // split; prefill keeps each warp's own rows.
  for (const AttentionSpec& x :
       {make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 17, 8192, 1, 8),
        make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 1, 64, 1, 8),
        make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 4, 8192, 1, 8)}) {
    INFO(label(x));
    CHECK(templates::attention_params(x, target).kv_splits == 1);
  }
  CHECK_FALSE(templates::attention_params(
                  make_spec(DType::bf16, 64, AttentionMaskKind::none, 1, 17, 8192, 1, 8), target)
                  .key_split);
  // The scratch stays within 4 MiB: 16 rows of 128 values at 128k keys.
  s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 1, 16, 131072, 1, 64);
  p = templates::attention_params(s, target);
  CHECK(p.kv_splits > 1);
  CHECK(p.items * p.kv_splits * s.seq_q * (s.value_dim + 2) * 4 <= 4 << 20);
  // Params whose pieces leave tiles out, or an empty piece, are a bug.
  p = templates::attention_params(s8k, target);
  p.split_tiles = 2;
  REQUIRE_THROWS_AS(templates::build_attention_kernel(s8k, p), InternalError);
  p.split_tiles = 64;
  REQUIRE_THROWS_AS(templates::build_attention_kernel(s8k, p), InternalError);
}

TEST_CASE("attention kernel: assembled and named as every kernel is", "[templates][attention]") {
  const templates::Kernel k = templates::generate_attention(
      make_spec(DType::bf16, 64, AttentionMaskKind::causal, 1, 77, 77));
  // Its device helpers by name, then the marker; none it does not call.
  const size_t core = k.source.find("\n// ==== fj_core.cuh ====\n");
  const size_t helpers = k.source.find("\n// ==== fj_attention.cuh ====\n");
  const size_t marker = k.source.find(templates::kKernelMarker);
  CHECK(core < helpers);
  CHECK(helpers < marker);
  CHECK(marker != std::string::npos);
  CHECK(k.source.find("// ==== fj_math.cuh ====") == std::string::npos);
  // Named fj_<kind>_<FNV-1a of the source before naming>.
  std::string unnamed = k.source;
  for (size_t at = unnamed.find(k.name); at != std::string::npos; at = unnamed.find(k.name, at))
    unnamed.replace(at, k.name.size(), templates::kKernelNameToken);
  CHECK(k.name == fmt::format("fj_attention_{:016x}", ir::hash64(unnamed)));
}

TEST_CASE("attention kernel: NVRTC compiles every variant for sm_90 and sm_80",
          "[templates][attention]") {
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {77, 130}, {130, 77}};
  int n = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t dim : {64, 128})
      for (AttentionMaskKind mask : {AttentionMaskKind::none, AttentionMaskKind::causal,
                                     AttentionMaskKind::additive, AttentionMaskKind::boolean}) {
        const auto [sq, skv] = lengths[n % 3];
        AttentionSpec s = make_spec(dt, dim, mask, 1 + n % 2, sq, skv);
        if (n % 4 == 1) permute_q(s);
        if (n % 4 == 2) s.k.offset = s.v.offset = s.mask_view.offset = 3 * dim;  // slices
        if (mask == AttentionMaskKind::additive) s.mask_dtype = n % 3 == 0 ? DType::bf16 : DType::f32;
        const std::string arch = n % 4 == 0 ? "sm_80" : "sm_90";  // a quarter also for sm_80
        ++n;
        INFO(label(s) << " for " << arch);
        const templates::Kernel k = templates::generate_attention(s, templates::target_for_arch(arch));
        jit::CompiledKernel c;
        REQUIRE_NOTHROW(c = jit::compile(k, arch, {.extra = {"--ptxas-options=-v"}}));
        INFO("NVRTC log:\n" << c.log);
        CHECK(!c.cubin.empty());
        CHECK(c.log.find("warning") == std::string::npos);
        CHECK(c.log.find(" 0 bytes spill stores") != std::string::npos);  // no register spills
        CHECK(c.log.find("Used") != std::string::npos);
      }
  // Split-KV variants: one row and 16 rows, both dtypes and dims.
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t dim : {64, 128}) {
      AttentionSpec s =
          make_spec(dt, dim, dim == 64 ? AttentionMaskKind::boolean : AttentionMaskKind::none,
                    dim == 64 ? 1 : 4, dim == 64 ? 16 : 1, 4000, 1, 8);
      INFO(label(s));
      const templates::Kernel k = templates::generate_attention(s);
      REQUIRE(k.serial_launches);
      jit::CompiledKernel c;
      REQUIRE_NOTHROW(c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}}));
      INFO("NVRTC log:\n" << c.log);
      CHECK(!c.cubin.empty());
      CHECK(c.log.find("warning") == std::string::npos);
      CHECK(c.log.find(" 0 bytes spill stores") != std::string::npos);
    }
  // Split pieces through three to six stages of tiles (the emulation's schedules, at 4000 keys).
  for (int stages : {3, 4, 6}) {
    const AttentionSpec s = make_spec(DType::bf16, 128, AttentionMaskKind::none, 4, 1, 4000, 1, 8);
    INFO(label(s) << " stages " << stages);
    const templates::Kernel k = kernel_of({s, s, 0, {}, stages, 7});
    CHECK(k.shared_bytes == stages * 2 * 64 * (136 + 136));
    jit::CompiledKernel c;
    REQUIRE_NOTHROW(c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}}));
    INFO("NVRTC log:\n" << c.log);
    CHECK(c.log.find("warning") == std::string::npos);
    CHECK(c.log.find(" 0 bytes spill stores") != std::string::npos);
  }
}

TEST_CASE("attention kernel: the generated body, emulated on the CPU, matches the reference",
          "[templates][attention]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  std::vector<EmulationCase> cases = emulation_cases();
  for (EmulationCase& c : cases) c.kernel = kernel_of(c);
  const auto t0 = std::chrono::steady_clock::now();
  void* so = test::open_shared_object(shared_object_source(cases), "attention-emulation");
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("attention emulation: host compile %.1f s\n",
              std::chrono::duration<double>(t1 - t0).count());

  for (size_t n = 0; n < cases.size(); ++n) {
    const EmulationCase& c = cases[n];
    const bool must_fail = c.spec.scale != c.expected.scale;
    const std::string name =
        label(c.spec) +
        (c.stages > 0 ? fmt::format(" stages {} pieces of {}", c.stages, c.split_tiles) : "");
    INFO(name << (must_fail ? " (kernel with the wrong scale)" : ""));
    Inputs in = make_inputs(c.spec, static_cast<uint32_t>(1234 + n));
    align16(in.q);
    align16(in.k);
    align16(in.v);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<uint16_t> out = run_emulated(so, c, in);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<double> ref = reference(c.expected, in);
    const Comparison cmp = compare(c.spec, out, ref);
    if (const char* dir = std::getenv("FUSEJIT_TEST_DUMP_DIR"); dir != nullptr && *dir != '\0')
      dump_case(dir, n, c, in, ref);
    if (c.kernel.serial_launches) std::printf("attention emulation: split-KV next\n");
    std::printf(
        "attention emulation: %-60s grid %3d: rel L2 %.2e, NaN %lld (mismatched %lld), %.1f s%s\n",
        name.c_str(), c.grid > 0 ? c.grid : static_cast<int>(c.kernel.work_blocks), cmp.rel_l2,
        static_cast<long long>(cmp.nans), static_cast<long long>(cmp.nan_mismatches), secs,
        must_fail ? "  (must fail)" : "");
    if (must_fail) {
      CHECK(cmp.rel_l2 > 1e-2);
      continue;
    }
    CHECK(cmp.rel_l2 <= 1e-2);
    CHECK(cmp.nan_mismatches == 0);
    if (c.spec.mask == AttentionMaskKind::boolean && std::isinf(c.spec.fill))
      CHECK(cmp.nans == c.spec.batch * c.spec.heads * c.spec.value_dim);  // the masked row
  }
  auto misaligned = reinterpret_cast<long (*)()>(dlsym(so, "fj_emu_misaligned"));
  REQUIRE(misaligned != nullptr);
  CHECK(misaligned() == 0);  // every wide access had the alignment its instruction needs
  dlclose(so);
}
