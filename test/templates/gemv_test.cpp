// The skinny GEMM kernel (templates/schedulers/gemv.h): refusals, parameters, NVRTC compiles of
// its variants for sm_90, and a CPU emulation of the generated body (no GPU here) against a
// double-precision reference, for odd shapes (K and N not multiples of the vector width), M of
// 1, 3 and 16, every dtype, split and unsplit K, and each epilogue.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "ir/host_tensor.h"
#include "templates/schedulers/gemv.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

using namespace fusejit;
using templates::GemvSpec;
using GemvAct = fusion::GemmEpilogue::Activation;

// A named namespace: the tests build as one unity source, whose other files have helpers of
// these names in their anonymous namespaces.
namespace gemv_test {

GemvSpec make_spec(DType dtype, int64_t m, int64_t n, int64_t k) {
  GemvSpec s;
  s.dtype = dtype;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

std::string label(const GemvSpec& s) {
  static const char* acts[] = {"none", "relu", "gelu_tanh"};
  return fmt::format("{} M{} N{} K{}{}{}{}{}{} alpha {} beta {} act {}", dtype_name(s.dtype), s.m,
                     s.n, s.k, s.transpose_a ? " A^T" : "", s.int8_weights ? " int8 B" : "",
                     s.scale ? " *scale" : "", s.bias ? " +bias" : "", s.residual ? " +C" : "",
                     s.alpha, s.beta, acts[static_cast<int>(s.activation)]);
}

// Buffers as the storage words of the dtype (16-bit or f32 bits), 16-byte aligned.
using Buffer = std::vector<uint32_t>;

double value(DType d, const Buffer& b, int64_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(b.data());
  if (d == DType::i8) return reinterpret_cast<const int8_t*>(p)[i];
  if (d == DType::f32) return reinterpret_cast<const float*>(p)[i];
  const uint16_t bits = reinterpret_cast<const uint16_t*>(p)[i];
  return d == DType::bf16 ? ir::bf16_bits_to_float(bits) : ir::half_bits_to_float(bits);
}

Buffer random_buffer(DType d, int64_t n, std::mt19937& rng, float amp) {
  std::uniform_real_distribution<float> u(-amp, amp);
  Buffer b((n * dtype_size(d) + 3) / 4 + 4);
  auto* p = reinterpret_cast<uint8_t*>(b.data());
  for (int64_t i = 0; i < n; ++i) {
    const float x = u(rng);
    if (d == DType::i8)  // every value -128..127, the ends included
      reinterpret_cast<int8_t*>(p)[i] =
          static_cast<int8_t>(std::clamp(std::lround(x / amp * 130.0f), long{-128}, long{127}));
    else if (d == DType::f32)
      reinterpret_cast<float*>(p)[i] = x;
    else
      reinterpret_cast<uint16_t*>(p)[i] =
          d == DType::bf16 ? ir::float_to_bf16_bits(x) : ir::float_to_half_bits(x);
  }
  return b;
}

struct Inputs {
  Buffer a, b, scale, bias, c;
};

Inputs make_inputs(const GemvSpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.a = random_buffer(s.dtype, s.m * s.k, rng, 1.0f);
  in.b = random_buffer(templates::gemv_weight_dtype(s), s.n * s.k, rng, 1.0f);
  if (s.scale) in.scale = random_buffer(s.dtype, s.n, rng, 0.02f);
  if (s.bias) in.bias = random_buffer(s.dtype, s.n, rng, 8.0f);
  if (s.residual) in.c = random_buffer(s.dtype, s.m * s.n, rng, 8.0f);
  return in;
}

// D = act(alpha * A B * scale + beta * C + bias) in double.
std::vector<double> reference(const GemvSpec& s, const Inputs& in) {
  std::vector<double> out(s.m * s.n);
  for (int64_t m = 0; m < s.m; ++m)
    for (int64_t n = 0; n < s.n; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < s.k; ++k)
        sum += value(s.dtype, in.a, s.transpose_a ? k * s.m + m : m * s.k + k) *
               value(templates::gemv_weight_dtype(s), in.b, n * s.k + k);
      double x = s.alpha * sum;
      if (s.scale) x *= value(s.dtype, in.scale, n);
      if (s.residual) x += s.beta * value(s.dtype, in.c, m * s.n + n);
      if (s.bias) x += value(s.dtype, in.bias, n);
      if (s.activation == GemvAct::relu) x = std::max(x, 0.0);
      if (s.activation == GemvAct::gelu_tanh)
        x = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      out[m * s.n + n] = x;
    }
  return out;
}

struct Case {
  GemvSpec spec;      // what the kernel computes
  GemvSpec expected;  // what the reference computes (differs only in the must-fail case)
  int grid = 0;       // 0: work_blocks
  templates::Kernel kernel;
  templates::Target target = {};  // (little shared memory: A staged a stage at a time)
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](GemvSpec s, int grid = 0) { out.push_back({s, s, grid, {}}); };
  // Odd K (narrow loads) split over blocks, N no multiple of a tile: the shape of the brief
  // (K 4099, N 1000) at one row of bf16, fewer outputs (and K 1027 in f16 and f32) elsewhere,
  // since the emulation's warp barriers are slow.
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (int64_t m : {1, 3, 16}) {
      const bool bf16 = d == DType::bf16;
      add(make_spec(d, m, bf16 && m == 1 ? 1000 : 130, bf16 ? 4099 : 1027));
    }
  // Wide loads (K a multiple of 8), split K, every epilogue, A stored transposed.
  GemvSpec wide = make_spec(DType::bf16, 3, 333, 4096);
  wide.bias = true;
  wide.activation = GemvAct::relu;
  add(wide, 37);  // fewer blocks than work: the grid-stride loop
  GemvSpec gelu = make_spec(DType::f16, 16, 250, 1032);
  gelu.residual = true;
  gelu.beta = 0.5;
  gelu.alpha = 0.75;
  gelu.bias = true;
  gelu.activation = GemvAct::gelu_tanh;
  add(gelu);
  GemvSpec at = make_spec(DType::f32, 5, 77, 130);
  at.transpose_a = true;
  add(at);
  // Weight-only int8: 16 weights a load where K allows (4096), narrower where not (1030), with
  // and without the scale, split and not, one row and 16.
  GemvSpec q1 = make_spec(DType::bf16, 1, 300, 4096);
  q1.int8_weights = q1.scale = true;
  add(q1);
  GemvSpec q16 = make_spec(DType::f16, 16, 70, 1030);
  q16.int8_weights = q16.scale = true;
  q16.bias = true;
  add(q16, 9);
  GemvSpec raw = make_spec(DType::f32, 4, 2100, 96);
  raw.int8_weights = true;  // no scale: the integers as weights
  add(raw);
  // The tensor-core variant (2..16 rows of bf16/f16, K a multiple of 8): 2 rows; 8 rows of
  // int8 weights with their scale, split; 11 rows (two 8-row tiles, the second partial) of int8
  // weights, N no multiple of a tile; 16 rows, tiles enough that K is not split.
  add(make_spec(DType::bf16, 2, 77, 264));
  GemvSpec q8 = make_spec(DType::bf16, 8, 300, 4096);
  q8.int8_weights = q8.scale = true;
  add(q8, 11);
  GemvSpec q11 = make_spec(DType::f16, 11, 200, 1032);
  q11.int8_weights = q11.scale = true;
  q11.residual = true;
  q11.beta = 1.0;
  add(q11);
  add(make_spec(DType::f16, 16, 70000, 64), 13);
  // Pieces of several stages (the next stage's weights load while this one's multiply), the
  // last stage past K: 5 rows of bf16 over a grid-stride loop; 9 rows of int8 into f16 words.
  add(make_spec(DType::bf16, 5, 20000, 520), 37);
  GemvSpec q9 = make_spec(DType::f16, 9, 20000, 520);
  q9.int8_weights = q9.scale = q9.bias = true;
  add(q9);
  // Enough tiles that K is not split (one piece per tile).
  add(make_spec(DType::bf16, 1, 8200, 72), 100);
  // A staged a stage at a time, not its whole piece (GemvParams::resident): on a target whose
  // SM leaves each block too little shared memory for the piece; split K, the grid-stride loop,
  // A transposed, int8 weights.
  templates::Target small;
  small.shared_per_sm = 3 * 1024;  // nothing left for a piece
  for (GemvSpec staged : {make_spec(DType::f32, 3, 130, 1027), at, q1}) {
    add(staged, staged.m == 3 ? 7 : 0);
    out.back().target = small;
  }
  // A resident but the weights in registers, not through the ring (GemvParams::ring): declined
  // by the spec, split and over a grid-stride loop; and on an SM with room for A only.
  GemvSpec registers = make_spec(DType::bf16, 1, 300, 4096);
  registers.ring = false;
  add(registers, 9);
  templates::Target mid;
  mid.shared_per_sm = 100 * 1024;
  add(make_spec(DType::f16, 1, 8200, 72), 100);
  out.back().target = mid;
  // Must fail: the kernel scales by another alpha than the reference.
  GemvSpec wrong = make_spec(DType::bf16, 2, 100, 520);
  out.push_back({wrong, wrong, 0, {}});
  out.back().spec.alpha = 1.25;
  return out;
}

// Each kernel in a namespace of its own (its module-scope scratch is per kernel), and a runner.
std::string shared_object_source(const std::vector<Case>& all) {
  std::string src = fmt::format("#include \"{}/gemv_shim.h\"\n", FUSEJIT_EMULATE_DIR);
  for (size_t i = 0; i < all.size(); ++i) {
    const templates::Kernel& k = all[i].kernel;
    // The ring's dynamic shared memory (GemvParams::ring) as an array of the launch's size.
    src += fmt::format("namespace case{} {{\n{}}}\n", i, test::emulated_body(k));
    src += fmt::format(
        "extern \"C\" void run_case{0}(void* const* args, int grid) {{ "
        "fj_emu::launch(case{0}::{1}, args, grid, {2}); }}\n",
        i, k.name, k.block);
  }
  return src;
}

std::vector<double> run(void* so, size_t i, const Case& c, Inputs& in) {
  using Entry = void (*)(void* const*, int);
  auto entry = reinterpret_cast<Entry>(dlsym(so, fmt::format("run_case{}", i).c_str()));
  REQUIRE(entry != nullptr);
  const GemvSpec& s = c.spec;
  Buffer d((s.m * s.n * dtype_size(s.dtype) + 3) / 4, 0x7fc07fc0u);  // NaN everywhere
  std::vector<void*> args = {in.a.data(), in.b.data()};
  if (s.scale) args.push_back(in.scale.data());
  if (s.bias) args.push_back(in.bias.data());
  if (s.residual) args.push_back(in.c.data());
  args.push_back(d.data());
  entry(args.data(), c.grid > 0 ? c.grid : static_cast<int>(c.kernel.work_blocks));
  std::vector<double> out(s.m * s.n);
  for (int64_t e = 0; e < s.m * s.n; ++e) out[e] = value(s.dtype, d, e);
  return out;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& ref) {
  double err = 0, norm = 0;
  for (size_t e = 0; e < ref.size(); ++e) {
    if (std::isnan(got[e])) return INFINITY;
    err += (got[e] - ref[e]) * (got[e] - ref[e]);
    norm += ref[e] * ref[e];
  }
  return std::sqrt(err / norm);
}

// The output's rounding dominates: half an ulp of the dtype, relative.
double tolerance(DType d) { return d == DType::bf16 ? 4e-3 : d == DType::f16 ? 1e-3 : 1e-5; }

}  // namespace gemv_test

TEST_CASE("gemv kernel: refusals say why", "[templates][gemv]") {
  const GemvSpec ok = gemv_test::make_spec(DType::bf16, 4, 64, 64);
  CHECK(templates::refuse_gemv(ok).empty());
  GemvSpec wide = ok, tall = ok, empty = ok, kn = ok;
  wide.dtype = DType::i32;
  tall.m = 17;
  empty.k = 0;
  kn.transpose_b = false;
  CHECK_THAT(templates::refuse_gemv(wide), ContainsSubstring("dtype i32"));
  CHECK_THAT(templates::refuse_gemv(tall), ContainsSubstring("M = 17 rows (takes 1..16)"));
  CHECK_THAT(templates::refuse_gemv(empty), ContainsSubstring("empty extent"));
  CHECK_THAT(templates::refuse_gemv(kn), ContainsSubstring("weights stored [K, N]"));
  GemvSpec bad = ok;
  bad.m = 32;
  REQUIRE_THROWS_AS(templates::generate_gemv(bad), InternalError);
}

TEST_CASE("gemv kernel: parameters", "[templates][gemv]") {
  // 16-byte weight loads where K allows, narrower where it does not.
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 4096, 4096), {}).vector_width ==
        8);
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::f32, 1, 4096, 4096), {}).vector_width ==
        4);
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::f16, 1, 4096, 4100), {}).vector_width ==
        4);
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 4096, 4099), {}).vector_width ==
        1);
  // Llama-3.1-8B's down projection at batch 1: 256 tiles of 16 rows, two stages of weights in
  // registers, so 3 blocks an SM: a wave of 396 items, which two pieces of K a tile (512) would
  // pass; K is not split. Its q/k/v (384 tiles) neither. Half as many tiles split K in three.
  const templates::GemvParams down =
      templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 4096, 14336), {});
  CHECK(down.prefetch);
  CHECK(down.tiles == 256);
  CHECK(down.split == 1);
  CHECK(down.piece == 14336);
  CHECK(down.work == 256);
  CHECK(down.resident);  // its whole A (14336 of bf16) in shared memory, once
  CHECK(down.shared_bytes == 2 * 14336);
  // Its weights through a ring in shared memory: its 256 items fit a wave of 2 blocks an SM,
  // each with 114 KiB, which hold A and 5 stages of 16 KiB. The q/k/v projection's 384 items
  // take 3 blocks an SM: 4 stages beside its 8 KiB of A.
  CHECK(down.ring == 5);
  CHECK(down.ring_blocks == 2);
  const templates::GemvParams qkv =
      templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 6144, 4096), {});
  CHECK(qkv.ring == 4);
  CHECK(qkv.ring_blocks == 3);
  const templates::Kernel qkv_kernel =
      templates::generate_gemv(gemv_test::make_spec(DType::bf16, 1, 6144, 4096));
  CHECK(qkv_kernel.shared_bytes == 4 * 16384);  // the ring, dynamic; A is static
  CHECK(qkv_kernel.blocks_per_sm == 3);
  // No ring: where the spec declines it (FUSEJIT_GEMV_RING=0), where the SM leaves too little
  // for 3 stages (100 KiB an SM, as sm_86 has), or where a weight load is under 16 bytes.
  GemvSpec no_ring = gemv_test::make_spec(DType::bf16, 1, 4096, 14336);
  no_ring.ring = false;
  CHECK(templates::gemv_params(no_ring, {}).ring == 0);
  CHECK(templates::gemv_params(no_ring, {}).resident);
  templates::Target mid;
  mid.shared_per_sm = 100 * 1024;
  const templates::GemvParams small_sm =
      templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 6144, 4096), mid);
  CHECK(small_sm.resident);
  CHECK(small_sm.ring == 0);
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 4096, 4100), {}).ring == 0);
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 6144, 4096), {}).split == 1);
  const templates::GemvParams half =
      templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 2048, 14336), {});
  CHECK(half.tiles == 128);
  CHECK(half.split == 3);
  CHECK(half.work == 384);
  // Int8 weights: 16 to a load.
  GemvSpec q = gemv_test::make_spec(DType::bf16, 1, 4096, 14336);
  q.int8_weights = true;
  CHECK(templates::gemv_params(q, {}).vector_width == 16);
  q.k = 4104;
  CHECK(templates::gemv_params(q, {}).vector_width == 8);
  // Its vocabulary projection: tiles enough, no split.
  CHECK(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 128256, 4096), {}).split == 1);
  // 16 rows of f32 (or of a K that is no multiple of 8): A's stage within 32 KiB of shared
  // memory.
  for (const auto& [d, k] : {std::pair{DType::f32, 4096}, std::pair{DType::bf16, 4100}}) {
    const templates::GemvParams p =
        templates::gemv_params(gemv_test::make_spec(d, 16, 4096, k), {});
    CHECK_FALSE(p.mma);
    CHECK_FALSE(p.resident);  // 16 rows of a 4096-wide piece: a stage at a time
    CHECK(p.shared_bytes <= 32768);
    CHECK(p.rows * p.unroll <= 8);
  }
  // 2 to 16 rows of bf16/f16: tensor cores, 32 weight rows a warp, 32 of K a step, two steps a
  // stage (four of int8 weights), two stages in registers, no shared memory; 4 blocks an SM
  // with one 8-row tile of A, 3 with two.
  for (int64_t m : {2, 8, 9, 16})
    for (bool int8 : {false, true}) {
      GemvSpec spec = gemv_test::make_spec(DType::bf16, m, 4096, 14336);
      spec.int8_weights = spec.scale = int8;
      const templates::GemvParams p = templates::gemv_params(spec, {});
      INFO("m = " << m << (int8 ? ", int8" : ""));
      CHECK(p.mma);
      CHECK(p.prefetch);
      CHECK(p.m_tiles == (m > 8 ? 2 : 1));
      CHECK(p.rows == 32);
      CHECK(p.chunk == (int8 ? 128 : 64));
      CHECK(p.tiles == 32);
      CHECK(p.shared_bytes == 0);
      CHECK(templates::generate_gemv(spec).blocks_per_sm == (m > 8 ? 3 : 4));
    }
  CHECK_FALSE(templates::gemv_params(gemv_test::make_spec(DType::bf16, 1, 4096, 4096), {}).mma);
  const templates::Kernel k =
      templates::generate_gemv(gemv_test::make_spec(DType::bf16, 1, 2048, 14336));
  CHECK(k.name.rfind("fj_gemv_", 0) == 0);
  CHECK(k.block == 128);
  CHECK(k.work_blocks == 384);
  CHECK(k.blocks_per_sm == 3);
  CHECK(k.serial_launches);  // split K: module-scope scratch
  CHECK(k.schedule.rfind("gemv{vector_width=8, ", 0) == 0);
}

TEST_CASE("gemv kernel: NVRTC compiles every variant for sm_90", "[templates][gemv]") {
  int n = 0;
  for (DType d : {DType::bf16, DType::f16, DType::f32})
    for (int64_t m : {1, 3, 16})
      for (int64_t k : {4096, 4099}) {
        GemvSpec s = gemv_test::make_spec(d, m, n % 2 ? 1000 : 14336, k);
        s.bias = n % 3 == 0;
        s.residual = n % 4 == 1;
        s.beta = 0.5;
        s.transpose_a = n % 5 == 2;
        s.activation = static_cast<GemvAct>(n % 3);
        s.int8_weights = n % 6 == 4;  // int8 weights, with their scale
        s.scale = s.int8_weights;
        ++n;
        // Every other one as a kernel of programmatic dependent launch (FUSEJIT_PDL).
        const bool pdl = n % 2 == 0;
        INFO(gemv_test::label(s) << (pdl ? " pdl" : ""));
        const templates::Kernel kernel = templates::generate_gemv(s, {}, pdl);
        CHECK(kernel.programmatic == pdl);
        CHECK((kernel.source.find("griddepcontrol.wait") != std::string::npos) == pdl);
        jit::CompiledKernel c;
        REQUIRE_NOTHROW(c = jit::compile(kernel, "sm_90", {.extra = {"--ptxas-options=-v"}}));
        INFO("NVRTC log:\n" << c.log);
        CHECK(!c.cubin.empty());
        CHECK(c.log.find("warning") == std::string::npos);
        CHECK(c.log.find(" 0 bytes spill stores") != std::string::npos);
      }
}

TEST_CASE("gemv kernel: the generated body, emulated on the CPU, matches the reference",
          "[templates][gemv]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  std::vector<gemv_test::Case> all = gemv_test::cases();
  // Odd cases as kernels of programmatic dependent launch: the same sums, and prefetches of
  // the weights that stay inside them.
  for (size_t i = 0; i < all.size(); ++i)
    all[i].kernel = templates::generate_gemv(all[i].spec, all[i].target, i % 2 == 1);
  void* so = test::open_shared_object(gemv_test::shared_object_source(all), "gemv-emulation");
  auto prefetch_range =
      reinterpret_cast<void (*)(const void*, size_t)>(dlsym(so, "fj_emu_prefetch_range"));
  auto prefetches = reinterpret_cast<long (*)(int)>(dlsym(so, "fj_emu_prefetches"));
  REQUIRE(prefetch_range != nullptr);
  REQUIRE(prefetches != nullptr);
  int ring_split = 0, ring_continued = 0, ring_programmatic = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const gemv_test::Case& c = all[i];
    const bool must_fail = c.spec.alpha != c.expected.alpha;
    INFO(gemv_test::label(c.spec) << " " << c.kernel.schedule << (must_fail ? " (must fail)" : "")
                                  << (c.kernel.programmatic ? " pdl" : ""));
    gemv_test::Inputs in = gemv_test::make_inputs(c.spec, static_cast<uint32_t>(77 + i));
    prefetch_range(in.b.data(), static_cast<size_t>(c.spec.n * c.spec.k) *
                                    dtype_size(templates::gemv_weight_dtype(c.spec)));
    // The whole piece of A staged once wherever the target's shared memory holds it.
    const bool ring = c.kernel.schedule.find("ring=") != std::string::npos;
    if (c.kernel.schedule.find("mma") == std::string::npos) {
      CHECK((c.kernel.schedule.find("resident") != std::string::npos) ==
            (c.target.shared_per_sm >= 100 * 1024));
    }
    // The ring's paths: K split (each item its own stream), and an unsplit K over a grid-stride
    // loop (the stream running on into the block's next items).
    if (ring && c.kernel.schedule.find("split=1,") == std::string::npos) ++ring_split;
    if (ring && c.kernel.schedule.find("split=1,") != std::string::npos && c.grid > 0 &&
        c.grid < c.kernel.work_blocks)
      ++ring_continued;
    const std::vector<double> got = gemv_test::run(so, i, c, in);
    CHECK(prefetches(1) == 0);
    // Reads before the grid dependency's wait (L2 prefetches, or with the ring its first
    // stages' copies), all of the weights, in the kernels of programmatic dependent launch only.
    CHECK((prefetches(0) > 0) == c.kernel.programmatic);
    if (ring && c.kernel.programmatic) ++ring_programmatic;
    const double err = gemv_test::rel_l2(got, gemv_test::reference(c.expected, in));
    std::printf("gemv emulation: %-55s %s: rel L2 %.2e%s\n", gemv_test::label(c.spec).c_str(),
                c.kernel.schedule.c_str(), err, must_fail ? "  (must fail)" : "");
    if (must_fail) {
      CHECK(err > 1e-2);
      continue;
    }
    CHECK(err <= gemv_test::tolerance(c.spec.dtype));
  }
  auto misaligned = reinterpret_cast<long (*)()>(dlsym(so, "fj_emu_misaligned"));
  REQUIRE(misaligned != nullptr);
  CHECK(misaligned() == 0);  // every wide access had the alignment its instruction needs
  CHECK(ring_split > 0);
  CHECK(ring_continued > 0);
  CHECK(ring_programmatic > 0);
  dlclose(so);
}
