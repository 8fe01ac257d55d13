// jit/executor without a GPU: the NVTX range names a plan's steps carry (range_name).
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/executor.h"
#include "support/catch.h"

using namespace fusejit;

namespace {

std::vector<std::string> range_names(const std::string& trace) {
  const fusion::Plan plan = fusion::make_plan(ir::parse(trace));
  std::vector<std::string> names;
  for (const fusion::Region& r : plan.regions) names.push_back(jit::range_name(plan.graph, r));
  return names;
}

}  // namespace

TEST_CASE("NVTX range names say each region's kind and ops, each op once", "[jit][executor]") {
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const Tensor x = ctx.placeholder({8, 64});
  const Tensor w = ctx.placeholder({64, 32});

  const std::vector<std::string> norm = range_names(ctx.trace_text({layer_norm(x * 2.0)}));
  REQUIRE(norm.size() == 1);
  CHECK(norm[0].rfind("fj normalization: ", 0) == 0);
  CHECK_THAT(norm[0], ContainsSubstring(" mean"));
  CHECK_THAT(norm[0], ContainsSubstring(" rsqrt"));
  CHECK_THAT(norm[0], !ContainsSubstring("reshape"));  // views are index arithmetic, not ops
  CHECK_THAT(norm[0], !ContainsSubstring("constant"));
  // mul appears twice in the region (x * 2, and the normalization): named once.
  CHECK(norm[0].find(" mul") == norm[0].rfind(" mul"));

  const std::vector<std::string> gemm = range_names(ctx.trace_text({matmul(x, w)}));
  REQUIRE(gemm.size() == 1);
  CHECK(gemm[0] == "fj gemm: matmul");

  // A long elementwise chain is cut after 8 ops.
  Tensor y = x;
  const std::vector<Tensor (*)(const Tensor&)> chain_ops = {
      fusejit::exp,  fusejit::log,  fusejit::sin,  fusejit::cos,  fusejit::tanh,
      fusejit::sigmoid, fusejit::relu, fusejit::silu, fusejit::sqrt, fusejit::abs};
  for (const auto f : chain_ops) y = f(y);
  const std::vector<std::string> chain = range_names(ctx.trace_text({y}));
  REQUIRE(chain.size() == 1);
  CHECK(chain[0] == "fj pointwise: exp log sin cos tanh sigmoid relu silu ...");
}
