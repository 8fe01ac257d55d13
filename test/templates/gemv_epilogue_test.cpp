// The skinny GEMM evaluating the region that reads its D at its store (templates::GemvEpilogue,
// jit/libs/prologue.h: absorb_epilogues), without a GPU: which regions merge into which GEMMs
// and why others do not; the merged kernel emulated on the CPU (emulate/gemv_shim.h) against the
// reference interpreter on random inputs, its output poisoned first: silu(gate) * up of a fused
// gate/up projection (bf16 and int8 weights, split K and not, 3 rows of f32 with a bias, the
// ring with PDL), four runs of D, D read whole; and the kernels compile for sm_90 without
// spills.
#include <cmath>
#include <cstdio>

#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/interp.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/plan_text.h"
#include "jit/libs/prologue.h"
#include "test/templates/gemv_emulation.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace gemv_epilogue_test {

// x [rows, 1, K] @ W^T with W [2F, K] (gate and up stacked, as a fused projection stores them),
// then silu(gate) * up: [rows, 1, F]. With `int8`, W is i8 cast to `dtype` and the product is
// scaled per output row; with `bias`, a bias [2F] is added first.
Graph swiglu(DType dtype, int64_t rows, int64_t k, int64_t f, bool int8 = false,
             bool bias = false) {
  Graph g;
  const NodeId x = add_input(g, dtype, {rows, 1, k});
  NodeId w = add_input(g, int8 ? DType::i8 : dtype, {2 * f, k});
  if (int8) w = add_cast(g, w, dtype);
  NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
  if (int8) d = add_binary(g, Op::mul, d, add_input(g, dtype, {2 * f}));
  if (bias) d = add_binary(g, Op::add, d, add_input(g, dtype, {2 * f}));
  const NodeId gate = add_slice(g, d, 2, 0, f);
  const NodeId up = add_slice(g, d, 2, f, 2 * f);
  g.set_outputs({add_binary(g, Op::mul, add_unary(g, Op::silu, gate), up)});
  return g;
}

// x [rows, 1, K] @ W^T with W [4F, K], then D0 * D1 + D2 * D3 of its four runs of F.
Graph four_runs(int64_t k, int64_t f, int64_t rows = 1, DType dtype = DType::bf16) {
  Graph g;
  const NodeId x = add_input(g, dtype, {rows, 1, k});
  const NodeId w = add_input(g, dtype, {4 * f, k});
  const NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
  NodeId run[4];
  for (int64_t c = 0; c < 4; ++c) run[c] = add_slice(g, d, 2, c * f, (c + 1) * f);
  const NodeId a = add_binary(g, Op::mul, run[0], run[1]);
  g.set_outputs({add_binary(g, Op::add, a, add_binary(g, Op::mul, run[2], run[3]))});
  return g;
}

// x @ W^T, then gelu(D * 0.5) as f32: D read whole.
Graph whole(int64_t k, int64_t n) {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {1, 1, k});
  const NodeId w = add_input(g, DType::bf16, {n, k});
  const NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
  const NodeId half = add_constant(g, DType::bf16, 0.5);
  g.set_outputs({add_cast(g, add_unary(g, Op::gelu, add_binary(g, Op::mul, d, half)), DType::f32)});
  return g;
}

templates::CodegenOptions gemv_on() {
  templates::CodegenOptions c;
  c.gemv = GemvMode::on;
  c.gemv_epilogue = true;
  return c;
}

// The plan of `g` with its epilogue regions merged; `consumers` those merged.
fusion::Plan with_epilogues(const Graph& g, std::map<size_t, fusion::Region>& consumers,
                            const templates::CodegenOptions& codegen = gemv_on()) {
  fusion::Plan plan = fusion::make_plan(g);
  consumers = jit::absorb_epilogues(plan, codegen, false);
  return plan;
}

// The merged kernel of `g` (one GEMM and the region after it) emulated on reference inputs; the
// relative L2 error of its output.
double emulated_error(const Graph& g, const std::string& tag,
                      const templates::CodegenOptions& codegen = gemv_on()) {
  std::map<size_t, fusion::Region> consumers;
  const fusion::Plan plan = with_epilogues(g, consumers, codegen);
  INFO(fusion::plan_to_text(plan));
  INFO(fusion::decisions_to_text(plan));
  REQUIRE(plan.regions.size() == 1);
  REQUIRE(consumers.count(0) == 1);
  const fusion::Region& consumer = consumers.at(0);
  const jit::GemmCall call = jit::describe_gemm_call(plan, plan.regions[0], false);
  CHECK(call.d == consumer.outputs.at(0));  // the kernel writes the region's output, not D
  std::string why;
  const auto kernel = jit::gemv_kernel(call, codegen, &why, &plan.graph, nullptr, &consumer);
  INFO(why);
  REQUIRE(kernel.has_value());
  INFO(test::kernel_text(*kernel));
  CHECK(kernel->params.back() == call.d);

  const test::GemvEmulation run =
      test::emulate_gemv(*kernel, plan.graph, call.b, "gemv-epilogue-" + tag, 20261208);
  CHECK(run.misaligned == 0);
  return run.error;
}

}  // namespace gemv_epilogue_test

using gemv_epilogue_test::with_epilogues;

TEST_CASE("gemv epilogue region: silu(gate) * up merges into the gate/up projection",
          "[templates][gemv][epilogue]") {
  std::map<size_t, fusion::Region> consumers;
  // The 8B model's gate/up projection at batch 1: 1792 tiles, K not split.
  const Graph g = gemv_epilogue_test::swiglu(DType::bf16, 1, 4096, 14336);
  fusion::Plan plan = with_epilogues(g, consumers);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == fusion::RegionKind::gemm);
  REQUIRE(consumers.count(0) == 1);
  CHECK(consumers.at(0).kind == fusion::RegionKind::pointwise);
  CHECK(plan.regions[0].outputs == consumers.at(0).outputs);  // D has no buffer
  CHECK_THAT(fusion::decisions_to_text(plan), ContainsSubstring("(an epilogue region)"));
  // The plan's text says which region runs no kernel.
  const std::string text =
      jit::plan_text(fusion::make_plan(g), false, GemvMode::on, false, false, true);
  CHECK_THAT(text, ContainsSubstring("evaluating region 1 at its store"));
  CHECK_THAT(text, ContainsSubstring("groups=2"));  // the parameters of the kernel that runs

  // Off (the default until timed: FUSEJIT_GEMV_EPILOGUE), or where cuBLASLt runs the GEMM: the
  // region stays a kernel of its own.
  templates::CodegenOptions off = gemv_epilogue_test::gemv_on();
  off.gemv_epilogue = false;
  CHECK(with_epilogues(g, consumers, off).regions.size() == 2);
  CHECK(consumers.empty());
  templates::CodegenOptions cublas = gemv_epilogue_test::gemv_on();
  cublas.gemv = GemvMode::off;
  CHECK(with_epilogues(g, consumers, cublas).regions.size() == 2);
  CHECK(consumers.empty());

  // With prologues on as well, silu(gate) * up goes into the store of the GEMM before it, not
  // into the A of the GEMM after it; the maps are by the indices of the plan as it is after.
  Graph mlp;
  {
    const NodeId x = add_input(mlp, DType::bf16, {1, 1, 4096});
    const NodeId w_in = add_input(mlp, DType::bf16, {2 * 14336, 4096});
    const NodeId w_out = add_input(mlp, DType::bf16, {4096, 14336});
    const NodeId d = add_matmul(mlp, x, add_permute(mlp, w_in, {1, 0}));
    const NodeId a =
        add_binary(mlp, Op::mul, add_unary(mlp, Op::silu, add_slice(mlp, d, 2, 0, 14336)),
                   add_slice(mlp, d, 2, 14336, 28672));
    mlp.set_outputs({add_matmul(mlp, a, add_permute(mlp, w_out, {1, 0}))});
  }
  fusion::Plan both = fusion::make_plan(mlp);
  templates::CodegenOptions on = gemv_epilogue_test::gemv_on();
  on.gemv_prologue = true;
  const jit::AbsorbedRegions absorbed = jit::absorb_regions(both, on, false);
  REQUIRE(both.regions.size() == 2);
  CHECK(absorbed.producers.empty());
  REQUIRE(absorbed.consumers.count(0) == 1);
  CHECK(both.regions[0].outputs == absorbed.consumers.at(0).outputs);
}

TEST_CASE("gemv epilogue region: what stays a kernel of its own, and why",
          "[templates][gemv][epilogue]") {
  std::map<size_t, fusion::Region> consumers;
  auto refused = [&](const Graph& g, const std::string& why) {
    const fusion::Plan plan = with_epilogues(g, consumers);
    INFO(fusion::decisions_to_text(plan));
    CHECK(consumers.empty());
    CHECK_THAT(fusion::decisions_to_text(plan), ContainsSubstring(why));
  };
  // Two rows of bf16: the tensor-core variant, with which an 8B model's int8 decode at batch 8
  // ran slower.
  refused(gemv_epilogue_test::swiglu(DType::bf16, 2, 4096, 14336), "tensor-core variant");
  // Five rows of f32 (the CUDA-core variant, 2 rows a warp): four runs would need 4.
  {
    Graph g = gemv_epilogue_test::four_runs(512, 1600, 5, DType::f32);
    refused(g, "do not hold its 4 runs");
  }
  // The region reads more than D (a RoPE's cos and sin).
  {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {1, 1, 512});
    const NodeId w = add_input(g, DType::bf16, {8192, 512});
    const NodeId cos = add_input(g, DType::bf16, {1, 1, 8192});
    const NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
    g.set_outputs({add_binary(g, Op::mul, d, cos)});
    refused(g, "reads more than D");
  }
  // Slices that are not runs: one starts inside a run.
  {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {1, 1, 512});
    const NodeId w = add_input(g, DType::bf16, {9000, 512});
    const NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
    g.set_outputs(
        {add_binary(g, Op::mul, add_slice(g, d, 2, 0, 3000), add_slice(g, d, 2, 4000, 7000))});
    refused(g, "is not one of equal runs");
  }
  // D also a graph output: it must be written.
  {
    Graph g = gemv_epilogue_test::swiglu(DType::bf16, 1, 4096, 14336);
    const NodeId out = g.outputs()[0];
    const NodeId d = g.node(g.node(out).inputs[1]).inputs[0];  // up's slice of D
    g.set_outputs({out, d});
    refused(g, "is a graph output");
  }
  // A reduction of D is no pointwise region.
  {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {1, 1, 512});
    const NodeId w = add_input(g, DType::bf16, {8192, 512});
    const NodeId d = add_matmul(g, x, add_permute(g, w, {1, 0}));
    g.set_outputs({add_reduce(g, Op::sum, d, {2}, true)});
    refused(g, "takes pointwise");
  }
}

TEST_CASE("gemv epilogue region: the merged kernel, emulated, matches the reference",
          "[templates][gemv][epilogue]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  struct Case {
    const char* tag;
    Graph graph;
    double bound;
    bool ring = false;  // the weights through a ring in shared memory (FUSEJIT_GEMV_RING)
    bool pdl = false;   // programmatic dependent launch (FUSEJIT_PDL)
  };
  // 6400 outputs: 400 tiles of 16 rows, a wave: K is not split. K = 520: a partial stage.
  const Case cases[] = {
      {"swiglu", gemv_epilogue_test::swiglu(DType::bf16, 1, 520, 3200), 1e-2},
      // 600 outputs: 38 tiles, K split in pieces whose last block stores.
      {"swiglu-split", gemv_epilogue_test::swiglu(DType::bf16, 1, 1000, 300), 1e-2},
      {"swiglu-int8", gemv_epilogue_test::swiglu(DType::bf16, 1, 520, 3200, true), 1e-2},
      // 3 rows of f32 (the CUDA-core variant, 2 rows a warp), K = 1003 (one element a load), a
      // bias.
      {"swiglu-f32-bias", gemv_epilogue_test::swiglu(DType::f32, 3, 1003, 3200, false, true), 1e-4},
      {"four-runs", gemv_epilogue_test::four_runs(520, 1600), 1e-2},
      {"whole", gemv_epilogue_test::whole(520, 6400), 1e-2},
      {"swiglu-ring-pdl", gemv_epilogue_test::swiglu(DType::bf16, 1, 2048, 3200), 1e-2, true, true},
  };
  for (const Case& c : cases) {
    INFO(c.tag);
    templates::CodegenOptions codegen = gemv_epilogue_test::gemv_on();
    codegen.gemv_ring = c.ring;
    codegen.grid_dependency = c.pdl;
    const double err = gemv_epilogue_test::emulated_error(c.graph, c.tag, codegen);
    std::printf("gemv epilogue emulation (%s): rel L2 %.2e\n", c.tag, err);
    CHECK(err <= c.bound);
  }
}

TEST_CASE("gemv epilogue region: the merged kernels compile for sm_90 without spills",
          "[templates][gemv][epilogue]") {
  for (const auto& [pdl, ring] : {std::pair{false, false}, {true, true}}) {
    templates::CodegenOptions codegen = gemv_epilogue_test::gemv_on();
    codegen.grid_dependency = pdl;
    codegen.gemv_ring = ring;
    for (const Graph& g : {gemv_epilogue_test::swiglu(DType::bf16, 1, 4096, 14336),
                           gemv_epilogue_test::swiglu(DType::bf16, 1, 4096, 14336, true)}) {
      std::map<size_t, fusion::Region> consumers;
      const fusion::Plan plan = with_epilogues(g, consumers, codegen);
      REQUIRE(consumers.count(0) == 1);
      const jit::GemmCall call = jit::describe_gemm_call(plan, plan.regions[0], false);
      const auto k =
          jit::gemv_kernel(call, codegen, nullptr, &plan.graph, nullptr, &consumers.at(0));
      REQUIRE(k.has_value());
      INFO(test::kernel_text(*k));
      CHECK_THAT(k->schedule, ContainsSubstring("groups=2"));
      jit::CompiledKernel compiled;
      REQUIRE_NOTHROW(compiled = jit::compile(*k, "sm_90", {.extra = {"--ptxas-options=-v"}}));
      CHECK(!compiled.cubin.empty());
      CHECK_FALSE(jit::spills(compiled));
    }
  }
}
