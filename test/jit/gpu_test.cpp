// GPU differential tests: every op x dtype, 200+ random graphs, the seed workloads and GEMMs,
// each run on the GPU with poisoned outputs and compared with the CPU reference on fresh random
// inputs. Tagged [gpu]: they skip, saying so, when no GPU is present.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "fusejit/error.h"
#include "fusejit/fusejit.h"
#include "ir/graph.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/gpu_match.h"
#include "support/random_graph.h"
#include "support/transpose_graphs.h"

using namespace fusejit;
using ir::NodeId;
using ir::Op;
using fusejit::testing::require_match;

namespace {

uint64_t fresh_seed() { return std::random_device{}(); }

// n values uniform in [-scale, scale).
std::vector<double> draw_uniform(std::mt19937& rng, size_t n, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& e : v) e = u(rng);
  return v;
}

// The largest |got - want| over the largest |want|.
double largest_difference(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    norm = std::max(norm, std::abs(want[i]));
  }
  return err / norm;
}

// ||got - want|| / ||want||.
double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

// A small graph exercising `op` on operands of `dtype`, or nothing when inference rejects it.
std::optional<ir::Graph> op_graph(Op op, DType dtype) {
  ir::Graph g;
  try {
    const NodeId x = ir::add_input(g, dtype, {37, 129});
    const NodeId y = ir::add_input(g, dtype, {129});
    NodeId out = -1;
    switch (ir::op_kind(op)) {
      case ir::OpKind::unary: out = ir::add_unary(g, op, x); break;
      case ir::OpKind::binary:
      case ir::OpKind::compare: out = ir::add_binary(g, op, x, y); break;
      case ir::OpKind::select: {
        const NodeId c = ir::add_binary(g, Op::gt, x, y);
        out = ir::add_where(g, c, x, y);
        break;
      }
      case ir::OpKind::cast:
        out = ir::add_cast(g, x, dtype == DType::f32 ? DType::bf16 : DType::f32);
        break;
      case ir::OpKind::reduce: out = ir::add_reduce(g, op, x, {1}, false); break;
      case ir::OpKind::view:
        out = op == Op::reshape ? ir::add_reshape(g, x, {129, 37})
              : op == Op::permute ? ir::add_permute(g, x, {1, 0})
                                  : ir::add_expand(g, y, {5, 129});
        break;
      default: return std::nullopt;
    }
    g.set_outputs({out});
    return g;
  } catch (const Error&) {
    return std::nullopt;  // the op does not take this dtype
  }
}

}  // namespace

TEST_CASE("every op and dtype matches the reference on the GPU", "[gpu][jit]") {
  FUSEJIT_REQUIRE_GPU();
  int checked = 0;
  for (int o = 0; o < ir::kNumOps; ++o) {
    const Op op = static_cast<Op>(o);
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64,
                        DType::boolean, DType::i8}) {
      const auto g = op_graph(op, dtype);
      if (!g) continue;
      INFO(ir::op_name(op) << " " << dtype_name(dtype));
      require_match(*g);
      ++checked;
    }
  }
  CHECK(checked > 150);
}

TEST_CASE("reductions over leading, middle and all axes match on the GPU", "[gpu][jit]") {
  FUSEJIT_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> axis_sets = {{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}, {0, 1, 2}};
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
      for (const auto& axes : axis_sets) {
        ir::Graph g;
        const NodeId x = ir::add_input(g, dtype, {19, 67, 301});
        NodeId v = ir::add_unary(g, Op::sin, x);
        // A sum of signed values into one result is ill-conditioned (about sqrt(n) against n
        // in magnitudes): f32 trees within the contract missed 1e-5 on it (1.7e-5, seed
        // 578940982). As in random_graph.cpp, that sum is taken over magnitudes.
        const bool one_result = axes.size() == 3 && (op == Op::sum || op == Op::mean);
        if (one_result) v = ir::add_unary(g, Op::abs, v);
        g.set_outputs({ir::add_reduce(g, op, v, axes, false)});
        require_match(g);
      }
    }
  }
}

TEST_CASE("split column reductions match on the GPU, launched twice in a row",
          "[gpu][jit][column]") {
  FUSEJIT_REQUIRE_GPU();
  // Long narrow columns (templates/schedulers/column.cpp: pieces of the reduced axis over blocks,
  // the last block of a tile folds the partials), a middle axis, and wide columns (not split). Each
  // graph runs twice: the second run reuses the loaded kernel, whose arrival counters the first run
  // must have reset (else no block finishes and the outputs stay NaN).
  struct Case {
    DType dtype;
    Shape shape;
    std::vector<int64_t> axes;
    Op op;
    bool rms = false;  // sqrt(mean(x * x)) instead of op(x)
  };
  const std::vector<Case> cases = {
      {DType::f32, {2097152, 64}, {0}, Op::sum},
      {DType::bf16, {2097152, 64}, {0}, Op::sum},
      {DType::f16, {524288, 64}, {0}, Op::sum},
      {DType::bf16, {524288, 64}, {0}, Op::mean, true},
      {DType::f32, {1000003, 3}, {0}, Op::sum},
      {DType::f32, {1000003, 3}, {0}, Op::max},
      {DType::i32, {65536, 8}, {0}, Op::sum},
      {DType::i32, {65536, 8}, {0}, Op::max},
      {DType::bf16, {64, 4096, 48}, {1}, Op::sum},
      {DType::f32, {64, 4096, 48}, {1}, Op::mean},
      {DType::bf16, {8192, 4096}, {0}, Op::mean},
  };
  for (const Case& c : cases) {
    ir::Graph g;
    const NodeId x = ir::add_input(g, c.dtype, c.shape);
    if (c.rms) {
      const NodeId ms = ir::add_reduce(g, Op::mean, ir::add_binary(g, Op::mul, x, x), c.axes, false);
      g.set_outputs({ir::add_unary(g, Op::sqrt, ms)});
    } else {
      g.set_outputs({ir::add_reduce(g, c.op, x, c.axes, false)});
    }
    INFO(ir::print(g));
    require_match(g);
    require_match(g);  // the same loaded kernel again
  }
}

TEST_CASE("column softmax (online statistics, then the output) matches on the GPU, twice",
          "[gpu][jit][column]") {
  FUSEJIT_REQUIRE_GPU();
  // Two kernels (fusion/recompute.h): max and sum(exp(x - max)) down the columns in one pass
  // (templates/schedulers/column.cpp, fj_max_sum pairs; split over blocks for long narrow columns),
  // then the output from x and the statistics. Each graph runs twice: split kernels reset their
  // arrival counters for the next launch. The stats as outputs too, checked at f32's bound.
  struct Case {
    DType dtype;
    Shape shape;
    int64_t axis;
  };
  const std::vector<Case> cases = {
      {DType::bf16, {8192, 8192}, 0}, {DType::f16, {4096, 2048}, 0},
      {DType::f32, {8192, 4096}, 0},  {DType::bf16, {2097152, 64}, 0},
      {DType::f32, {1000003, 3}, 0},  {DType::bf16, {64, 4096, 48}, 1},
      {DType::f16, {1001, 333}, 0},
  };
  for (const Case& c : cases) {
    for (bool stats : {false, true}) {
      ir::Graph g;
      const NodeId in = ir::add_input(g, c.dtype, c.shape);
      const NodeId x = c.dtype == DType::f32 ? in : ir::add_cast(g, in, DType::f32);
      const NodeId m = ir::add_reduce(g, Op::max, x, {c.axis}, true);
      const NodeId e = ir::add_unary(g, Op::exp, ir::add_binary(g, Op::sub, x, m));
      const NodeId s = ir::add_reduce(g, Op::sum, e, {c.axis}, true);
      const NodeId y = ir::add_binary(g, Op::div, e, s);
      if (stats)
        g.set_outputs({m, s});
      else
        g.set_outputs({c.dtype == DType::f32 ? y : ir::add_cast(g, y, c.dtype)});
      INFO(ir::print(g));
      require_match(g);
      require_match(g);
    }
  }
}

TEST_CASE("200+ random graphs match the reference on the GPU", "[gpu][jit][random]") {
  FUSEJIT_REQUIRE_GPU();
  for (uint64_t seed = 1; seed <= 240; ++seed) {
    INFO("random graph seed " << seed);
    require_match(testing::random_graph(seed));
  }
}

// The wide random graphs (every dtype, rank up to 4, reductions over any axis, permutes,
// broadcasts, bool outputs: compile_test.cpp checks that they cover all of it). 1,200 of them, or
// FUSEJIT_RANDOM_GRAPHS (scripts/gpu-check's sanitizer step runs fewer).
TEST_CASE("1200 wide random graphs match the reference on the GPU", "[gpu][jit][random]") {
  FUSEJIT_REQUIRE_GPU();
  uint64_t graphs = 1200;
  if (const char* n = std::getenv("FUSEJIT_RANDOM_GRAPHS")) graphs = std::strtoull(n, nullptr, 10);
  REQUIRE(graphs > 0);  // FUSEJIT_RANDOM_GRAPHS must be a positive count
  // A graph whose f16/bf16 result depends on where rounding happens (testing::rounding_sensitive:
  // cancellation, sin of a large value) is held to the bound with FUSEJIT_ROUNDING=node, the
  // reference's own rounding; there should be few of them.
  uint64_t sensitive = 0;
  for (uint64_t seed = 1; seed <= graphs; ++seed) {
    INFO("wide random graph seed " << seed);
    const ir::Graph g = testing::random_graph(seed, testing::RandomGraphs::wide);
    const std::vector<ir::HostTensor> inputs = jit::random_inputs(g, fresh_seed());
    testing::GpuCheck c = testing::check_on_gpu(g, inputs, "wide graph");
    if (!c.pass && testing::rounding_sensitive(g, inputs)) {
      ++sensitive;
      c = testing::check_on_gpu(g, inputs, "wide graph, rounding-sensitive", Rounding::node);
    }
    INFO(c.detail);
    CHECK(c.pass);
  }
  INFO(sensitive << " of " << graphs << " graphs were rounding-sensitive");
  CHECK(sensitive * 50 <= graphs);
}

TEST_CASE("normalizations over long rows match on the GPU", "[gpu][jit]") {
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t cols : {1000, 4096, 16384, 32768}) {
      Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
      const auto x = ctx.placeholder({8, cols}, dtype);
      const auto w = ctx.placeholder({cols}, dtype);
      const auto b = ctx.placeholder({cols}, dtype);
      for (const auto& text : {ctx.trace_text({softmax(x)}), ctx.trace_text({layer_norm(x, w, b)}),
                               ctx.trace_text({rms_norm(x, w)}), ctx.trace_text({log_softmax(x)})}) {
        require_match(ir::parse(text));
      }
    }
  }
}

TEST_CASE("normalizations split over thread-block clusters match on the GPU", "[gpu][jit][cluster]") {
  FUSEJIT_REQUIRE_GPU();
  // On sm_90 on, rows of these widths are split over clusters of 2 to 8 blocks that exchange
  // their statistics through distributed shared memory (templates/schedulers/row_schedule.cpp):
  // widths that divide evenly, odd ones (scalar accesses, a short last piece), and one that takes
  // blocks of 1024 (100003). Odd row counts; each graph runs twice on the loaded kernel.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t cols : {32000, 50257, 100003, 128256}) {
      Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
      const auto x = ctx.placeholder({19, cols}, dtype);
      const auto w = ctx.placeholder({cols}, dtype);
      const auto b = ctx.placeholder({cols}, dtype);
      const auto m = max(x, {-1}, true);
      const auto lse = log(sum(exp(x - m), {-1}, true)) + m;
      for (const auto& text : {ctx.trace_text({softmax(x)}), ctx.trace_text({layer_norm(x, w, b)}),
                               ctx.trace_text({rms_norm(x, w)}), ctx.trace_text({lse})}) {
        INFO(dtype_name(dtype) << " rows of " << cols << "\n" << text);
        require_match(ir::parse(text));
        require_match(ir::parse(text));
      }
    }
  }
}

TEST_CASE("transposed reads through shared-memory tiles match the reference on the GPU",
          "[gpu][jit][transpose]") {
  FUSEJIT_REQUIRE_GPU();
  // The graphs of test/templates/transpose_test.cpp (tiled or not, odd extents, every width),
  // then shapes with more tiles than a grid of 4 waves holds (the grid-stride loop).
  for (const testing::TransposeGraph& t : testing::transpose_graphs()) {
    INFO(t.name);
    require_match(t.graph);
  }
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO("large permutes, " << dtype_name(dtype));
    require_match(testing::permute021_broadcast(dtype, {32, 1024, 1024}));
    require_match(testing::permute_scale(dtype, {64, 96, 1000}, {2, 0, 1}));
    require_match(testing::permute_combine(dtype, {3000, 4100}, {1, 0}));
  }
}

TEST_CASE("GEMMs through cuBLASLt match the reference", "[gpu][jit][gemm]") {
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    ir::Graph g;
    const NodeId a = ir::add_input(g, dtype, {96, 200});
    const NodeId b = ir::add_input(g, dtype, {200, 72});
    const NodeId w = ir::add_input(g, dtype, {72, 200});
    const NodeId a3 = ir::add_input(g, dtype, {3, 1, 40, 200});
    const NodeId b3 = ir::add_input(g, dtype, {4, 200, 24});
    g.set_outputs({ir::add_matmul(g, a, b),                              // plain
                   ir::add_matmul(g, a, ir::add_permute(g, w, {1, 0})),  // transposed operand
                   ir::add_matmul(g, a3, b3)});                          // broadcast batch
    require_match(g);
  }
}

TEST_CASE("int8 weights through the skinny-GEMM kernel match the reference",
          "[gpu][jit][gemm][int8]") {
  // linear(x, cast(q)) * scale + bias: up to 16 rows, the kernel reads the int8 bytes; 17 rows,
  // a kernel casts them and cuBLASLt multiplies. K 1032: 8 weights a load, not 16.
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (int64_t rows : {1, 5, 16, 17})
      for (int64_t k : {4096, 1032}) {
        INFO(dtype_name(dtype) << " " << rows << " rows, K " << k);
        ir::Graph g;
        const NodeId x = ir::add_input(g, dtype, {rows, k});
        const NodeId q = ir::add_input(g, DType::i8, {300, k});
        const NodeId s = ir::add_input(g, dtype, {300});
        const NodeId b = ir::add_input(g, dtype, {300});
        const NodeId mm =
            ir::add_matmul(g, x, ir::add_permute(g, ir::add_cast(g, q, dtype), {1, 0}));
        g.set_outputs({ir::add_binary(g, Op::add, ir::add_binary(g, Op::mul, mm, s), b)});
        require_match(g);
      }
}

TEST_CASE("the tensor-core skinny GEMM (2..16 rows) matches the reference on the GPU",
          "[gpu][jit][gemm][gemv]") {
  // FUSEJIT_GEMV=1: GEMMs of 2 to 16 rows of bf16/f16 run mma.m16n8k16 with K permuted within
  // each 32; one 8-row tile (2, 8) or two (9, 16), N no multiple of the 128-row tile, split K.
  FUSEJIT_REQUIRE_GPU();
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  const auto draw = [&](size_t count) { return draw_uniform(rng, count); };
  Context gpu(Options::parse({{"FUSEJIT_GEMV", "1"}, {"FUSEJIT_LOG", "warn"}}));
  Context cpu(Options::parse({{"FUSEJIT_LOG", "error"}}), Placement{.device = Placement::kCpu});
  const int64_t n = 1000, k = 2048;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int64_t rows : {2, 8, 9, 16}) {
      INFO(dtype_name(dtype) << " " << rows << " rows");
      const std::vector<double> x = draw(rows * k), w = draw(n * k), b = draw(n);
      const auto run = [&](Context& ctx) {
        return gelu(linear(ctx.from_vector(x, {rows, k}, dtype),
                           ctx.from_vector(w, {n, k}, dtype) * 0.03) +
                    ctx.from_vector(b, {n}, dtype))
            .to_host();
      };
      const std::vector<double> got = run(gpu), want = run(cpu);
      REQUIRE(got.size() == want.size());
      INFO("relative L2 error " << relative_l2(got, want));
      CHECK(relative_l2(got, want) <= 1e-2);
    }
}

TEST_CASE("decode attention split across blocks matches the reference on the GPU",
          "[gpu][jit][attention]") {
  // The grouped query heads of a decode step folded into rows (4 per KV head, 8 KV heads)
  // against a cache of 3000 keys, the keys past each row's position masked: 8 items of 47 key
  // tiles, so the generated kernel splits the tiles over blocks and combines them.
  FUSEJIT_REQUIRE_GPU();
  const int64_t kv = 8, rows = 4, keys = 3000, d = 128;
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  const auto draw = [&](size_t count) { return draw_uniform(rng, count); };
  const std::vector<double> q = draw(kv * rows * d), k = draw(kv * keys * d),
                            v = draw(kv * keys * d);
  std::vector<double> future(rows * keys);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < keys; ++j) future[i * keys + j] = j > 2500 + i * 100 ? 1.0 : 0.0;
  const auto run = [&](Context& ctx) {
    const Tensor tq = ctx.from_vector(q, {1, kv, rows, d}, DType::bf16);
    const Tensor tk = ctx.from_vector(k, {1, kv, keys, d}, DType::bf16);
    const Tensor tv = ctx.from_vector(v, {1, kv, keys, d}, DType::bf16);
    const Tensor mask = ctx.from_vector(future, {rows, keys}, DType::boolean);
    Tensor s = matmul(tq, transpose(tk, 2, 3)) * (1.0 / std::sqrt(double(d)));
    s = where(mask, ctx.scalar(-INFINITY, DType::bf16), s);
    return matmul(softmax(s, -1), tv).to_host();
  };
  Context gpu(Options::parse({{"FUSEJIT_ATTENTION", "kernel"}, {"FUSEJIT_LOG", "warn"}}));
  Context cpu(Options::parse({{"FUSEJIT_LOG", "error"}}), Placement{.device = Placement::kCpu});
  const std::vector<double> got = run(gpu), want = run(cpu);
  REQUIRE(got.size() == want.size());
  INFO("relative L2 error " << relative_l2(got, want));
  CHECK(relative_l2(got, want) <= 1e-2);
}

TEST_CASE("a repeated eval reuses the planned and compiled trace", "[gpu][jit][memo]") {
  FUSEJIT_REQUIRE_GPU();
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_CACHE", "memory"}}));
  std::vector<double> values(64 * 256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 17) - 8.0;
  for (int i = 0; i < 3; ++i) {
    const auto x = ctx.from_vector(values, {64, 256});
    const auto y = relu(x * 2.0 + 1.0);
    const std::vector<double> out = y.to_host();
    CHECK(out[3] == std::max(0.0, values[3] * 2 + 1));
  }
  CHECK(ctx.stats().plans_built == 1);
  CHECK(ctx.stats().trace_memo_hits == 2);
  CHECK(ctx.stats().kernels_compiled == 1);
}

TEST_CASE("running out of GPU memory is a clear error", "[gpu][jit][errors][oom]") {
  FUSEJIT_REQUIRE_GPU();
  jit::Runtime& rt = *testing::gpu_runtime();
  REQUIRE_THROWS_WITH(rt.device().allocate(size_t{1} << 50),
                      ContainsSubstring("out of GPU memory: allocating"));
  // Its own type, which says how much was asked for.
  try {
    rt.device().allocate(size_t{1} << 50);
    FAIL("a 1 PiB allocation succeeded");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == int64_t{1} << 50);
  }
  // The device stays usable.
  ir::Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {1024});
  g.set_outputs({ir::add_unary(g, Op::exp, x)});
  require_match(g);
}

TEST_CASE("kernels of programmatic dependent launch give the reference's results on the GPU",
          "[gpu][jit][pdl]") {
  // FUSEJIT_PDL=1: each generated kernel may be scheduled while the one ahead finishes and waits
  // for it first; the skinny-GEMM kernel prefetches its weights before that wait, or with the
  // ring (FUSEJIT_GEMV_RING=1) copies its first stages of them. FUSEJIT_PDL=gemv: only the
  // skinny GEMMs so, the other kernels let them be scheduled. A decode-like chain (norm,
  // one-row GEMMs on the generated kernel, activations) fed back into itself over evals: a
  // kernel that read its input before the wait would read the previous step's values.
  FUSEJIT_REQUIRE_GPU();
  const auto run = [](Context& ctx, const std::vector<double>& x0, const std::vector<double>& w1,
                      const std::vector<double>& w2) {
    const Tensor a = ctx.from_vector(w1, {512, 256}, DType::bf16);
    const Tensor b = ctx.from_vector(w2, {256, 512}, DType::bf16);
    Tensor x = ctx.from_vector(x0, {1, 256}, DType::bf16);
    for (int step = 0; step < 12; ++step) {
      const Tensor h = gelu(linear(rms_norm(x), a));  // [1, 512]
      x = (tanh(linear(h, b)) + x * 0.5).eval();      // [1, 256]
    }
    return x.to_host();
  };
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  const std::vector<double> x0 = draw_uniform(rng, 256, 1.0),
                            w1 = draw_uniform(rng, 512 * 256, 0.06),
                            w2 = draw_uniform(rng, 256 * 512, 0.045);
  Context cpu(Options::parse({{"FUSEJIT_LOG", "error"}}), Placement{.device = Placement::kCpu});
  const std::vector<double> want = run(cpu, x0, w1, w2);
  for (const auto& [pdl, ring] : {std::pair{"1", "0"}, {"1", "1"}, {"gemv", "1"}, {"gemv", "0"}}) {
    INFO("FUSEJIT_PDL=" << pdl << " FUSEJIT_GEMV_RING=" << ring);
    Context gpu(Options::parse({{"FUSEJIT_PDL", pdl},
                                {"FUSEJIT_GEMV_RING", ring},
                                {"FUSEJIT_GEMV", "1"},
                                {"FUSEJIT_LOG", "warn"}}));
    const std::vector<double> got = run(gpu, x0, w1, w2);
    REQUIRE(got.size() == want.size());
    // 12 steps of bf16 rounding (contracting: tanh + x / 2) stay well inside 5e-2 of the largest
    // value; a step that read its predecessor's input is off by the change of a step, O(0.1-1).
    CHECK(largest_difference(got, want) <= 5e-2);
  }
}

TEST_CASE("a skinny GEMM's epilogue region gives the reference's results on the GPU",
          "[gpu][jit][gemv]") {
  // FUSEJIT_GEMV_EPILOGUE=1: silu(gate) * up evaluated at the gate/up projection's store (one
  // row: 6400 outputs, 400 tiles, K not split; 600 outputs, 38 tiles, K split), bf16 and int8
  // weights, with and without PDL and the ring, fed back over evals as in the test above. The
  // region then runs no kernel: the run obtains one kernel fewer than with it off.
  FUSEJIT_REQUIRE_GPU();
  constexpr int64_t kHidden = 256;
  const auto run = [](Context& ctx, const std::vector<double>& x0, const std::vector<double>& w1,
                      const std::vector<double>& w2, bool int8) {
    const int64_t ffn = static_cast<int64_t>(w2.size()) / kHidden;
    Tensor up = ctx.from_vector(w1, {2 * ffn, kHidden}, DType::bf16);
    Tensor scale;
    if (int8) {  // per output row, scale = max |w| / 127 (bf16), q = w / scale truncated
      scale = cast(max(abs(cast(up, DType::f32)), {1}) * (1.0 / 127.0), DType::bf16).eval();
      up = cast(cast(up, DType::f32) / unsqueeze(cast(scale, DType::f32), 1), DType::i8).eval();
    }
    const Tensor down = ctx.from_vector(w2, {kHidden, ffn}, DType::bf16);
    Tensor x = ctx.from_vector(x0, {1, kHidden}, DType::bf16);
    for (int step = 0; step < 6; ++step) {
      Tensor h = int8 ? linear(x, cast(up, DType::bf16)) * scale : linear(x, up);  // [1, 2 ffn]
      h = silu(slice(h, -1, 0, ffn)) * slice(h, -1, ffn, 2 * ffn);
      x = (tanh(linear(h, down)) + x * 0.5).eval();
    }
    return x.to_host();
  };
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  const std::vector<double> x0 = draw_uniform(rng, kHidden, 1.0);
  for (const auto& [ffn, int8] :
       {std::pair{3200, false}, {3200, true}, {300, false}, {300, true}}) {
    const std::vector<double> w1 = draw_uniform(rng, 2 * ffn * kHidden, 0.12),
                              w2 = draw_uniform(rng, kHidden * ffn, 0.03 * std::sqrt(3200.0 / ffn));
    Context cpu(Options::parse({{"FUSEJIT_LOG", "error"}}), Placement{.device = Placement::kCpu});
    const std::vector<double> want = run(cpu, x0, w1, w2, int8);
    for (const auto& [pdl, ring] : {std::pair{"0", "0"}, {"all", "1"}}) {
      int64_t kernels[2] = {0, 0};  // compiled or found in a cache
      for (int epilogue : {0, 1}) {
        INFO("ffn " << ffn << ", int8 " << int8 << " FUSEJIT_PDL=" << pdl
                    << " FUSEJIT_GEMV_RING=" << ring << " FUSEJIT_GEMV_EPILOGUE=" << epilogue);
        Context gpu(Options::parse({{"FUSEJIT_PDL", pdl},
                                    {"FUSEJIT_GEMV_RING", ring},
                                    {"FUSEJIT_GEMV", "1"},
                                    {"FUSEJIT_GEMV_EPILOGUE", epilogue ? "1" : "0"},
                                    {"FUSEJIT_LOG", "warn"}}));
        const std::vector<double> got = run(gpu, x0, w1, w2, int8);
        REQUIRE(got.size() == want.size());
        CHECK(largest_difference(got, want) <= 5e-2);
        kernels[epilogue] = gpu.stats().kernels_compiled + gpu.stats().kernel_cache_hits;
      }
      CHECK(kernels[1] == kernels[0] - 1);
    }
  }
}
