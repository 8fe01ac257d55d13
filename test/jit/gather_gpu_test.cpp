// Gathers and random sources on the GPU against the CPU reference: embedding lookups fused with
// their consumers, torch.gather along each axis with shorter and out-of-range indices (clamped on
// both sides), and rand/randn/dropout, whose uniforms must be the reference's bits. Tagged [gpu]:
// they skip, saying so, when no GPU is present.
#include <random>

#include "fusejit/fusejit.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/random.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/gpu_match.h"

using namespace fusejit;
using ir::NodeId;
using ir::Op;
using fusejit::testing::require_match;

namespace {

// embedding(table, ids) * 0.125 + pos over `tokens` ids (random inputs include negative and
// out-of-range ids: the clamp is compared too).
ir::Graph embedding_graph(DType dtype, DType index, int64_t rows, int64_t dim, int64_t tokens) {
  ir::Graph g;
  const NodeId table = ir::add_input(g, dtype, {rows, dim});
  const NodeId ids = ir::add_input(g, index, {tokens});
  const NodeId pos = ir::add_input(g, dtype, {tokens, dim});
  const NodeId along = ir::add_expand(g, ir::add_reshape(g, ids, {tokens, 1}), {tokens, dim});
  const NodeId rows_read = ir::add_gather(g, table, 0, along);
  const NodeId scaled = ir::add_binary(g, Op::mul, rows_read, ir::add_constant(g, dtype, 0.125));
  g.add_output(ir::add_binary(g, Op::add, scaled, pos));
  return g;
}

}  // namespace

TEST_CASE("embedding lookups fused with their consumers match on the GPU", "[gpu][jit][gather]") {
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (DType index : {DType::i32, DType::i64}) {
      INFO(dtype_name(dtype) << " table, " << dtype_name(index) << " ids");
      require_match(embedding_graph(dtype, index, 8, 768, 513));
      require_match(embedding_graph(dtype, index, 3, 17, 1000));
    }
  }
}

TEST_CASE("torch.gather along every axis matches on the GPU", "[gpu][jit][gather]") {
  FUSEJIT_REQUIRE_GPU();
  for (int64_t axis = 0; axis < 3; ++axis) {
    INFO("axis " << axis);
    ir::Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {9, 10, 11});
    const NodeId idx = ir::add_input(g, DType::i64, {7, 10, 5});  // shorter on axes 0 and 2
    g.add_output(ir::add_gather(g, x, axis, idx));
    g.add_output(ir::add_gather(g, ir::add_permute(g, x, {2, 1, 0}), axis,
                                ir::add_permute(g, idx, {2, 1, 0})));
    require_match(g);
  }
}

TEST_CASE("the GPU draws the reference's random numbers", "[gpu][jit][random]") {
  FUSEJIT_REQUIRE_GPU();
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<double> u = ctx.rand({n}, 0x123456789abcdefull, 9).to_host();
  const std::vector<double> z = ctx.randn({n}, 0x123456789abcdefull, 9).to_host();
  int64_t uniform_mismatches = 0;
  double worst_normal = 0;
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t p = static_cast<uint64_t>(e);
    const size_t k = static_cast<size_t>(e);
    uniform_mismatches += u[k] != ir::random_uniform(0x123456789abcdefull, 9, p) ? 1 : 0;
    worst_normal = std::max(
        worst_normal, std::abs(z[k] - ir::random_normal(0x123456789abcdefull, 9, p)));
  }
  CHECK(uniform_mismatches == 0);
  CHECK(worst_normal < 1e-4);
  // dropout: the kept elements are exactly where the reference's uniform is below 1 - p.
  const std::vector<double> d = dropout(ctx.full({n}, 1.0, DType::bf16), 0.3, 5, 2).to_host();
  int64_t wrong = 0;
  for (int64_t e = 0; e < n; ++e) {
    const bool keep = ir::random_uniform(5, 2, static_cast<uint64_t>(e)) < 0.7f;
    const double want = keep ? ir::round_to(DType::bf16, static_cast<float>(1.0 / 0.7)) : 0.0;
    wrong += d[static_cast<size_t>(e)] != want ? 1 : 0;
  }
  CHECK(wrong == 0);
}

TEST_CASE("graphs with random sources match the reference on the GPU", "[gpu][jit][random]") {
  FUSEJIT_REQUIRE_GPU();
  ir::Graph g;
  const NodeId x = ir::add_input(g, DType::f16, {257, 1024});
  const NodeId key = ir::add_input(g, DType::i64, {2});  // random values: any key is a key
  const NodeId u = ir::add_random(g, Op::rand, DType::f32, {257, 1024}, key);
  const NodeId keep = ir::add_binary(g, Op::lt, u, ir::add_constant(g, DType::f32, 0.9));
  const NodeId y = ir::add_where(g, keep, ir::add_cast(g, x, DType::f32),
                                 ir::add_constant(g, DType::f32, 0));
  g.add_output(ir::add_cast(g, y, DType::f16));
  g.add_output(ir::add_reduce(g, Op::sum, y, {1}, false));  // the mask in a reduction's prologue
  g.add_output(ir::add_random(g, Op::rand, DType::bf16, {3, 5}, key));  // a draw written
  require_match(g);
}

TEST_CASE("twenty seeds of dropout compile one kernel and draw the reference's bits",
          "[gpu][jit][random]") {
  FUSEJIT_REQUIRE_GPU();
  // No disk cache: every kernel the evals need is compiled in this Context or found in memory.
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_CACHE", "memory"}}));
  const int64_t n = 100003;
  const Tensor x = ctx.from_vector(std::vector<double>(static_cast<size_t>(n), 1.0), {n});
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    const std::vector<double> d = dropout(x, 0.5, seed, seed * 7).to_host();
    int64_t wrong = 0;
    for (int64_t e = 0; e < n; ++e) {
      const bool keep = ir::random_uniform(seed, seed * 7, static_cast<uint64_t>(e)) < 0.5f;
      wrong += d[static_cast<size_t>(e)] != (keep ? 2.0 : 0.0) ? 1 : 0;
    }
    CHECK(wrong == 0);
  }
  const Context::Stats s = ctx.stats();
  CHECK(s.plans_built == 1);
  CHECK(s.trace_memo_hits == 19);
  CHECK(s.kernels_compiled == 1);
}
