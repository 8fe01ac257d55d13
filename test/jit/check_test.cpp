// The checking machinery of `fusejit run --check` and the GPU tests, on the CPU: row slices of a
// trace give exactly the same rows as the whole reference, and the error measure rejects NaN.
#include <cmath>

#include "fusejit/fusejit.h"
#include "ir/interp.h"
#include "ir/text.h"
#include "jit/check.h"
#include "support/catch.h"
#include "support/random_graph.h"

using namespace fusejit;

namespace {

// Checks that the reference on a row slice equals those rows of the whole reference.
void require_exact_slice(const ir::Graph& g, const jit::RowSlice& slice) {
  const std::vector<ir::HostTensor> inputs = jit::random_inputs(g, 7);
  const std::vector<ir::HostTensor> full = ir::interpret(g, inputs);
  std::vector<ir::HostTensor> sliced_inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    sliced_inputs.push_back(slice.input_sliced[k] ? jit::take_rows(inputs[k], slice.rows) : inputs[k]);
  }
  const std::vector<ir::HostTensor> part = ir::interpret(slice.graph, sliced_inputs);
  REQUIRE(part.size() == full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    CHECK(jit::take_rows(full[i], slice.rows).bytes == part[i].bytes);
  }
}

}  // namespace

TEST_CASE("row slices of the seed workloads give exactly the sampled rows", "[jit][check]") {
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const auto x = ctx.placeholder({40, 24}, DType::bf16);
  const auto w = ctx.placeholder({24, 24}, DType::bf16);
  const auto v = ctx.placeholder({24}, DType::bf16);
  const auto y = ctx.placeholder({40, 24}, DType::bf16);
  for (const std::string& text :
       {ctx.trace_text({relu(x * y + v)}), ctx.trace_text({layer_norm(x + y, v, v)}),
        ctx.trace_text({softmax(x)}), ctx.trace_text({sum(x * x, {-1})}),
        ctx.trace_text({gelu(matmul(x, w) + v, GeluApprox::tanh)}),
        ctx.trace_text({matmul(gelu(matmul(x, w) + v), w) + v}),
        ctx.trace_text({matmul(x, w) * matmul(x, transpose(w, 0, 1))})}) {
    INFO(text);
    const ir::Graph g = ir::parse(text);
    const auto slice = jit::slice_rows(g, 5);
    REQUIRE(slice.has_value());
    CHECK(slice->rows.front() == 0);
    CHECK(slice->rows.back() == 39);
    require_exact_slice(g, *slice);
  }
}

TEST_CASE("traces that mix rows are not sliced", "[jit][check]") {
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const auto x = ctx.placeholder({40, 24});
  const auto sq = ctx.placeholder({24, 24});
  CHECK_FALSE(jit::slice_rows(ir::parse(ctx.trace_text({softmax(x, 0)})), 5));  // column softmax
  CHECK_FALSE(jit::slice_rows(ir::parse(ctx.trace_text({transpose(sq, 0, 1) + sq})), 5));
  CHECK_FALSE(jit::slice_rows(ir::parse(ctx.trace_text({matmul(sq, sq)})), 5));  // rows and contraction
}

TEST_CASE("random graphs: a slice, when there is one, is exact", "[jit][check][random]") {
  int sliced = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const ir::Graph g = testing::random_graph(seed);
    if (auto slice = jit::slice_rows(g, 3)) {
      INFO("seed " << seed << "\n" << ir::print(g));
      require_exact_slice(g, *slice);
      ++sliced;
    }
  }
  CHECK(sliced > 20);
}

TEST_CASE("relative error: NaN never passes, exact results are 0", "[jit][check]") {
  ir::HostTensor a(DType::f32, {4}), b(DType::f32, {4});
  for (int i = 0; i < 4; ++i) {
    a.set(i, i + 1.0);
    b.set(i, i + 1.0);
  }
  CHECK(jit::relative_error(a, b) == 0.0);
  b.set(2, std::nan(""));
  CHECK(std::isinf(jit::relative_error(b, a)));
  a.set(0, 1.5);
  b.set(2, 3.0);
  CHECK(jit::relative_error(a, b) == Approx(0.5 / std::sqrt(30.0)));
}
