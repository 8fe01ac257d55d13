// jit/attention_call: attention regions as cuDNN's problem (FUSEJIT_ATTENTION=cudnn). Without a
// GPU: which traces of test/traces/attention cuDNN takes, with the dims and strides the region's
// layout gives, and that each one's graph finalizes (cuDNN 9.8+ needs no handle for that; skips,
// saying so, without cuDNN). On a GPU: a session plans each problem once. `scripts/attention-check`
// runs the traces.
#include <filesystem>
#include <map>
#include <string>

#include "fusejit_test_paths.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/libs/attention_call.h"
#include "support/catch.h"
#include "support/cudnn.h"
#include "support/gpu.h"

using namespace fusejit;

namespace {

struct Planned {
  ir::Graph graph;
  fusion::Region region;
};

Planned plan_trace(const std::string& name) {
  fusion::PlanOptions o;
  o.attention = true;
  fusion::Plan plan = fusion::make_plan(
      ir::parse_file(std::string(FUSEJIT_ATTENTION_TRACES) + "/" + name + ".trace"), o);
  for (const fusion::Region& r : plan.regions) {
    if (r.kind == fusion::RegionKind::attention) return {plan.graph, r};
  }
  FAIL("no attention region in " << name);
  return {};
}

}  // namespace

TEST_CASE("attention regions as cuDNN's problem", "[jit][cudnn][attention]") {
  SECTION("dense q, k, v; causal; GQA; an additive mask broadcast over batch and heads") {
    const Planned c = plan_trace("causal_2x4x77_d64_bf16");
    std::string why;
    const auto p = jit::cudnn_problem(c.graph, c.region, &why);
    INFO(why);
    REQUIRE(p.has_value());
    CHECK(p->dtype == DType::bf16);
    CHECK(p->mask == jit::cudnn::AttentionMaskKind::causal);
    CHECK(p->q.dims == std::array<int64_t, 4>{2, 4, 77, 64});
    CHECK(p->q.strides == std::array<int64_t, 4>{4 * 77 * 64, 77 * 64, 64, 1});
    CHECK(p->o.strides == p->q.strides);

    const Planned g = plan_trace("gqa_causal_2x8x65_d128_f16");
    const auto gp = jit::cudnn_problem(g.graph, g.region, &why);
    REQUIRE(gp.has_value());
    CHECK(gp->k.dims == std::array<int64_t, 4>{2, 2, 65, 128});  // the 2 kv heads, not 8
    CHECK(gp->k.strides == std::array<int64_t, 4>{2 * 65 * 128, 65 * 128, 128, 1});

    const Planned a = plan_trace("additive_2x4x77_d64_f16");
    const auto ap = jit::cudnn_problem(a.graph, a.region, &why);
    REQUIRE(ap.has_value());
    CHECK(ap->mask == jit::cudnn::AttentionMaskKind::bias);
    CHECK(ap->bias.dims == std::array<int64_t, 4>{1, 1, 77, 77});
    CHECK(ap->bias_dtype == DType::f16);
  }
  SECTION("[b, s, h, d] buffers are read through their strides") {
    const Planned c = plan_trace("bshd_2x3x50_d64_bf16");
    const auto p = jit::cudnn_problem(c.graph, c.region);
    REQUIRE(p.has_value());
    CHECK(p->q.strides == std::array<int64_t, 4>{50 * 3 * 64, 64, 3 * 64, 1});
    CHECK(p->k.strides == p->q.strides);
  }
  SECTION("q, k and v sliced out of one projection are one buffer, read in place") {
    const Planned c = plan_trace("qkvslices_2x3x50_d64_bf16");
    CHECK(c.region.inputs == std::vector<ir::NodeId>(3, c.graph.inputs().at(0)));
    const auto p = jit::cudnn_problem(c.graph, c.region);
    REQUIRE(p.has_value());
    for (const auto* t : {&p->q, &p->k, &p->v}) {
      CHECK(t->strides == std::array<int64_t, 4>{50 * 576, 64, 576, 1});
    }
    // The output is written as the [b, s, h * d] rows the trace permutes it into.
    CHECK(p->o.strides == std::array<int64_t, 4>{50 * 192, 64, 192, 1});
  }
  SECTION("what cuDNN does not take is refused with the reason") {
    std::string why;
    const Planned b = plan_trace("boolean_2x4x77_d64_bf16");
    CHECK_FALSE(jit::cudnn_problem(b.graph, b.region, &why).has_value());
    CHECK(why.find("boolean mask") != std::string::npos);
    // Slices 8 bytes into the buffer: the generated kernel reads them, cuDNN does not.
    const Planned u = plan_trace("qkvslices_lead4_2x3x50_d64_f16");
    CHECK_FALSE(jit::cudnn_problem(u.graph, u.region, &why).has_value());
    CHECK(why.find("q starts 8 bytes into its buffer") != std::string::npos);
  }
}

TEST_CASE("every attention trace cuDNN takes builds and finalizes its graph",
          "[jit][cudnn][attention]") {
  FUSEJIT_REQUIRE_CUDNN();
  const auto& api = testing::test_cudnn().api;
  if (api->graph_needs_handle()) {
    FUSEJIT_SKIP("cuDNN " << api->version_text() << " needs a handle (a GPU) to build a graph");
  }
  std::map<std::string, std::string> refused;
  int built = 0;
  for (const auto& e : std::filesystem::directory_iterator(FUSEJIT_ATTENTION_TRACES)) {
    const std::string name = e.path().stem().string();
    if (name.starts_with("refused_")) continue;  // planned with no attention region, by design
    const Planned c = plan_trace(name);
    std::string why;
    const auto p = jit::cudnn_problem(c.graph, c.region, &why);
    if (!p) {
      refused[name] = why;
      continue;
    }
    INFO(name << ": " << p->describe());
    CHECK_NOTHROW(jit::cudnn::AttentionGraph(api, *p));
    ++built;
  }
  // Left to the generated kernel: the boolean masks, additive masks broadcast over query rows
  // or keys (cuDNN reads strided tensors only; the refusal names the broadcast axis), and slices
  // that start off cuDNN's 16-byte alignment.
  for (const auto& [name, why] : refused) {
    INFO(name << ": " << why);
    CHECK((name.starts_with("boolean_") ||
           why.find("the mask is broadcast along axis") != std::string::npos ||
           (name.starts_with("qkvslices_lead4") && why.find("bytes into") != std::string::npos)));
  }
  CHECK(refused.count("qkvslices_2x3x50_d64_bf16") == 0);
  CHECK(refused.count("boolean_2x4x77_d64_bf16") == 1);
  CHECK(refused.count("additive_2x4x77_d64_f16") == 0);
  CHECK(refused.count("additive_maskb1qk_2x4x77_d64_bf16") == 0);  // full along q and k
  CHECK(built >= 20);
}

TEST_CASE("a cuDNN session plans each attention problem once", "[jit][cudnn][attention][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  FUSEJIT_REQUIRE_CUDNN();
  auto session = std::make_shared<jit::CudnnSession>();
  session->api = testing::test_cudnn().api;
  session->handle = std::make_unique<jit::cudnn::CudnnHandle>(session->api);
  const Planned causal = plan_trace("causal_2x4x77_d64_bf16");
  const Planned additive = plan_trace("additive_2x4x77_d64_f16");
  std::string why;
  const auto first = jit::plan_attention_call(causal.graph, causal.region, session, &why);
  REQUIRE(first != nullptr);
  CHECK(session->plans_made == 1);
  // Another region of the same problem (a model's next layer): its own call, the same graph.
  const auto again = jit::plan_attention_call(causal.graph, causal.region, session, &why);
  REQUIRE(again != nullptr);
  CHECK(again != first);
  CHECK(again->graph == first->graph);
  CHECK(session->plans_made == 1);
  // Another problem: another graph.
  const auto other = jit::plan_attention_call(additive.graph, additive.region, session, &why);
  REQUIRE(other != nullptr);
  CHECK(other->graph != first->graph);
  CHECK(session->plans_made == 2);
  CHECK(session->planned.size() == 2);
}
