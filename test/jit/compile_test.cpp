// With no GPU (as in CI): every kernel the pipeline generates for the seed traces and for 220
// randomly generated graphs of pointwise, broadcast, view and reduction ops compiles with NVRTC
// for sm_90.
#include <filesystem>

#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/nvrtc.h"
#include "jit/runtime.h"
#include "support/catch.h"
#include "support/random_graph.h"
#include "templates/kernel.h"

using namespace fusejit;

namespace {

// Plans `g`, generates every kernel region and compiles it; returns how many kernels compiled.
int compile_all(const ir::Graph& g) {
  const fusion::Plan plan = fusion::make_plan(g);
  int compiled = 0;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind == fusion::RegionKind::gemm) continue;
    const templates::Kernel k = templates::generate(plan.graph, r);
    const jit::CompiledKernel c = jit::compile(k, "sm_90");
    CHECK_FALSE(c.cubin.empty());
    CHECK(c.ptx.find(k.name) != std::string::npos);
    ++compiled;
  }
  return compiled;
}

}  // namespace

TEST_CASE("every kernel of the seed traces compiles for sm_90", "[jit][nvrtc]") {
  int kernels = 0, traces = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces")) {
    INFO(entry.path());
    kernels += compile_all(ir::parse_file(entry.path().string()));
    ++traces;
  }
  CHECK(traces >= 23);
  CHECK(kernels >= 19);
}

TEST_CASE("every kernel of 220 random graphs compiles for sm_90", "[jit][nvrtc][random]") {
  int kernels = 0;
  for (uint64_t seed = 1; seed <= 220; ++seed) {
    const ir::Graph g = testing::random_graph(seed);
    INFO("random graph seed " << seed << "\n" << ir::print(g));
    kernels += compile_all(g);
  }
  CHECK(kernels >= 220);
}
