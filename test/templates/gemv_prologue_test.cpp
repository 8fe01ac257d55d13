// The skinny GEMM computing its A from the region before it (templates::GemvPrologue,
// jit/libs/prologue.h), without a GPU: which producers merge into which GEMMs and why others do
// not; and the merged kernel emulated on the CPU (emulate/gemv_shim.h) against the reference
// interpreter on random inputs, its output poisoned first: an RMS norm before a projection (one
// row; the statistics in every block), silu(gate) * up before a projection with a residual
// (bf16), the same with 3 rows of f32 and a K that takes no vectors.
#include <cmath>
#include <cstdio>

#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/interp.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/prologue.h"
#include "test/templates/gemv_emulation.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace gemv_prologue_test {

// rms_norm(x) * w as Llama writes it (f32 inside, bf16 out) into x' @ W^T: x [rows, 1, K].
Graph rms_norm_projection(int64_t rows, int64_t k, int64_t n) {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {rows, 1, k});
  const NodeId w = add_input(g, DType::bf16, {k});
  const NodeId weights = add_input(g, DType::bf16, {n, k});
  const NodeId y = add_cast(g, x, DType::f32);
  const NodeId ms = add_reduce(g, Op::mean, add_binary(g, Op::mul, y, y), {2}, true);
  const NodeId eps = add_constant(g, DType::f32, 1e-5);
  const NodeId r = add_unary(g, Op::rsqrt, add_binary(g, Op::add, ms, eps));
  const NodeId normed =
      add_binary(g, Op::mul, add_binary(g, Op::mul, y, r), add_cast(g, w, DType::f32));
  const NodeId a = add_cast(g, normed, DType::bf16);
  g.set_outputs({add_matmul(g, a, add_permute(g, weights, {1, 0}))});
  return g;
}

// silu(gate) * up of a fused gate/up projection's output [rows, 1, 2K], into a projection whose
// output adds a residual [rows, 1, N] (the cuBLASLt epilogue's bias for one row, C for more).
Graph swiglu_projection(DType dtype, int64_t rows, int64_t k, int64_t n) {
  Graph g;
  const NodeId gate_up = add_input(g, dtype, {rows, 1, 2 * k});
  const NodeId weights = add_input(g, dtype, {n, k});
  const NodeId residual = add_input(g, dtype, {rows, 1, n});
  const NodeId gate = add_slice(g, gate_up, 2, 0, k);
  const NodeId up = add_slice(g, gate_up, 2, k, 2 * k);
  const NodeId a = add_binary(g, Op::mul, add_unary(g, Op::silu, gate), up);
  const NodeId d = add_matmul(g, a, add_permute(g, weights, {1, 0}));
  g.set_outputs({add_binary(g, Op::add, residual, d)});
  return g;
}

templates::CodegenOptions gemv_on() {
  templates::CodegenOptions c;
  c.gemv = GemvMode::on;
  c.gemv_prologue = true;
  return c;
}

// The plan of `g` with its prologues merged; `producers` those merged.
fusion::Plan merged(const Graph& g, std::map<size_t, fusion::Region>& producers,
                    const templates::CodegenOptions& codegen = gemv_on()) {
  fusion::Plan plan = fusion::make_plan(g);
  producers = jit::absorb_prologues(plan, codegen, false);
  return plan;
}

// The merged kernel of `g` (one GEMM and its producer) emulated on reference inputs; the
// relative L2 error of its output.
double emulated_error(const Graph& g, const std::string& tag,
                      const templates::CodegenOptions& codegen = gemv_on(), bool resident = true) {
  std::map<size_t, fusion::Region> producers;
  const fusion::Plan plan = merged(g, producers, codegen);
  INFO(fusion::plan_to_text(plan));
  REQUIRE(plan.regions.size() == 1);
  REQUIRE(producers.count(0) == 1);
  const fusion::Region& producer = producers.at(0);
  const jit::GemmCall call = jit::describe_gemm_call(plan, plan.regions[0], false);
  std::string why;
  const auto kernel = jit::gemv_kernel(call, codegen, &why, &plan.graph, &producer);
  INFO(why);
  REQUIRE(kernel.has_value());
  INFO(test::kernel_text(*kernel));
  // A's whole piece staged once (GemvParams::resident), or a stage at a time.
  CHECK((kernel->schedule.find("resident") != std::string::npos) == resident);
  CHECK((kernel->schedule.find("ring=") != std::string::npos) == (resident && codegen.gemv_ring));
  CHECK(kernel->params.front() == producer.inputs.front());  // A is never an argument
  CHECK(std::find(kernel->params.begin(), kernel->params.end(), call.a) == kernel->params.end());

  REQUIRE(kernel->params.back() == call.d);
  const test::GemvEmulation run =
      test::emulate_gemv(*kernel, plan.graph, call.b, "gemv-prologue-" + tag, 20261206);
  // With A staged once, a piece of several stages prefetches the stages after its first into
  // L2 while A is computed: inside the weights only.
  CHECK(run.prefetches_outside == 0);
  // With PDL, the first weights are read before the grid dependency's wait (prefetched, or
  // copied into the ring): inside the weights only.
  const bool ahead =
      kernel->programmatic || (kernel->schedule.find("resident") != std::string::npos &&
                               kernel->source.find("fj_prefetch_l2(b") != std::string::npos);
  CHECK((run.prefetches_inside > 0) == ahead);
  std::printf("gemv prologue emulation (%s): %ld prefetches\n", tag.c_str(), run.prefetches_inside);
  CHECK(run.misaligned == 0);
  return run.error;
}

}  // namespace gemv_prologue_test

using gemv_prologue_test::merged;

TEST_CASE("gemv prologue: an RMS norm and silu(gate) * up merge into the GEMM that reads them",
          "[templates][gemv][prologue]") {
  std::map<size_t, fusion::Region> producers;
  const fusion::Plan norm =
      merged(gemv_prologue_test::rms_norm_projection(1, 1000, 300), producers);
  REQUIRE(norm.regions.size() == 1);
  CHECK(norm.regions[0].kind == fusion::RegionKind::gemm);
  REQUIRE(producers.size() == 1);
  CHECK(producers.at(0).kind == fusion::RegionKind::normalization);
  // The merged region keeps A first (describe_gemm_call reads it there) and reads x and w too.
  CHECK(norm.regions[0].inputs.size() == 4);
  CHECK(fusion::decisions_to_text(norm).find("(a prologue)") != std::string::npos);

  const fusion::Plan swiglu =
      merged(gemv_prologue_test::swiglu_projection(DType::bf16, 1, 512, 256), producers);
  REQUIRE(swiglu.regions.size() == 1);
  CHECK(producers.at(0).kind == fusion::RegionKind::pointwise);

  // Off (the default until timed: FUSEJIT_GEMV_PROLOGUE), and on where cuBLASLt runs the GEMM
  // (auto leaves small ones to it): the producer stays a kernel of its own.
  templates::CodegenOptions off = gemv_prologue_test::gemv_on();
  off.gemv_prologue = false;
  CHECK(merged(gemv_prologue_test::rms_norm_projection(1, 1000, 300), producers, off)
            .regions.size() == 2);
  CHECK(producers.empty());
  templates::CodegenOptions cublas;  // FUSEJIT_GEMV=auto: these sizes stay cuBLASLt's
  cublas.gemv_prologue = true;
  CHECK(merged(gemv_prologue_test::rms_norm_projection(1, 1000, 300), producers, cublas)
            .regions.size() == 2);
  CHECK(producers.empty());
}

TEST_CASE("gemv prologue: what stays a kernel of its own, and why", "[templates][gemv][prologue]") {
  std::map<size_t, fusion::Region> producers;
  // Two rows of bf16: the tensor-core variant, which reads A in fragments.
  fusion::Plan plan =
      merged(gemv_prologue_test::swiglu_projection(DType::bf16, 2, 512, 256), producers);
  CHECK(producers.empty());
  CHECK_THAT(fusion::decisions_to_text(plan), ContainsSubstring("tensor-core variant"));
  // A normalization over several rows: each block would need every row's statistics.
  plan = merged(gemv_prologue_test::rms_norm_projection(3, 1000, 300), producers);
  CHECK(producers.empty());
  // A is also a graph output: it must be written.
  Graph g = gemv_prologue_test::rms_norm_projection(1, 1000, 300);
  const NodeId mm = g.outputs()[0];
  g.set_outputs({mm, g.node(mm).inputs[0]});
  plan = merged(g, producers);
  CHECK(producers.empty());
  // Layer norm's variance reads its mean: one pass over the row does not give it.
  Graph ln;
  const NodeId x = add_input(ln, DType::f32, {1, 1, 512});
  const NodeId w = add_input(ln, DType::f32, {128, 512});
  const NodeId mean = add_reduce(ln, Op::mean, x, {2}, true);
  const NodeId c = add_binary(ln, Op::sub, x, mean);
  const NodeId var = add_reduce(ln, Op::mean, add_binary(ln, Op::mul, c, c), {2}, true);
  const NodeId a = add_binary(ln, Op::mul, c, add_unary(ln, Op::rsqrt, var));
  ln.set_outputs({add_matmul(ln, a, add_permute(ln, w, {1, 0}))});
  plan = merged(ln, producers);
  CHECK(producers.empty());
  CHECK_THAT(fusion::decisions_to_text(plan), ContainsSubstring("read one another"));
}

TEST_CASE("gemv prologue: the merged kernel, emulated, matches the reference",
          "[templates][gemv][prologue]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  struct Case {
    const char* tag;
    Graph graph;
    double bound;
    bool per_stage = false;  // A staged a stage at a time (a target of little shared memory)
    bool ring = false;       // the weights through a ring in shared memory (FUSEJIT_GEMV_RING)
    bool pdl = false;        // programmatic dependent launch (FUSEJIT_PDL)
  };
  const Case cases[] = {
      // K = 1000: two stages of 512, the second partial; a split K of 300 outputs.
      {"rms", gemv_prologue_test::rms_norm_projection(1, 1000, 300), 1e-2},
      {"swiglu", gemv_prologue_test::swiglu_projection(DType::bf16, 1, 1000, 300), 1e-2},
      // 3 rows of f32 (the CUDA-core variant), K = 1003: one element a load.
      {"swiglu-f32", gemv_prologue_test::swiglu_projection(DType::f32, 3, 1003, 130), 1e-4},
      // Pieces of 4 stages of 512 (3200 outputs, K = 2048): the stages after the first
      // prefetched into L2 while A is computed.
      {"rms-ahead", gemv_prologue_test::rms_norm_projection(1, 2048, 3200), 1e-2},
      {"swiglu-ahead", gemv_prologue_test::swiglu_projection(DType::bf16, 1, 2048, 3200), 1e-2},
      // The same norm and silu(gate) * up, staged a stage at a time.
      {"rms-per-stage", gemv_prologue_test::rms_norm_projection(1, 1000, 300), 1e-2, true},
      {"swiglu-per-stage", gemv_prologue_test::swiglu_projection(DType::bf16, 1, 1000, 300), 1e-2,
       true},
      // The weights through the ring while A is computed: split, and pieces of 4 stages.
      {"rms-ring", gemv_prologue_test::rms_norm_projection(1, 1000, 300), 1e-2, false, true},
      {"swiglu-ring", gemv_prologue_test::swiglu_projection(DType::bf16, 1, 2048, 3200), 1e-2,
       false, true},
      // The same with PDL: the ring's first stages issued before the wait, A computed after.
      {"rms-ring-pdl", gemv_prologue_test::rms_norm_projection(1, 1000, 300), 1e-2, false, true,
       true},
      {"swiglu-ring-pdl", gemv_prologue_test::swiglu_projection(DType::bf16, 1, 2048, 3200), 1e-2,
       false, true, true},
  };
  for (const Case& c : cases) {
    INFO(c.tag);
    templates::CodegenOptions codegen = gemv_prologue_test::gemv_on();
    if (c.per_stage) codegen.target.shared_per_sm = 3 * 1024;  // nothing left for a piece
    codegen.gemv_ring = c.ring;
    codegen.grid_dependency = c.pdl;
    const double err = gemv_prologue_test::emulated_error(c.graph, c.tag, codegen, !c.per_stage);
    std::printf("gemv prologue emulation (%s): rel L2 %.2e\n", c.tag, err);
    CHECK(err <= c.bound);
  }
}

TEST_CASE("gemv prologue: the merged kernels compile for sm_90 without spills, with PDL too",
          "[templates][gemv][prologue]") {
  for (const auto& [pdl, ring] :
       {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    templates::CodegenOptions codegen = gemv_prologue_test::gemv_on();
    codegen.grid_dependency = pdl;
    codegen.gemv_ring = ring;
    for (const Graph& g : {gemv_prologue_test::rms_norm_projection(1, 4096, 6144),
                           gemv_prologue_test::swiglu_projection(DType::bf16, 1, 14336, 4096)}) {
      std::map<size_t, fusion::Region> producers;
      const fusion::Plan plan = merged(g, producers, codegen);
      REQUIRE(producers.count(0) == 1);
      const jit::GemmCall call = jit::describe_gemm_call(plan, plan.regions[0], false);
      const auto k = jit::gemv_kernel(call, codegen, nullptr, &plan.graph, &producers.at(0));
      REQUIRE(k.has_value());
      INFO(test::kernel_text(*k));
      // With PDL the block prefetches its first weights before the wait: from the weights (`b`),
      // whatever parameters the prologue puts before them.
      // With the ring too, it copies its first stages into the ring before the wait instead.
      const std::string& src = k->source;
      if (pdl && !ring) CHECK(src.find("fj_prefetch_l2(b + ") != std::string::npos);
      if (pdl && ring) {
        const size_t body = src.find(templates::kKernelMarker);
        CHECK(src.find("fj_prefetch_l2(b + ") == std::string::npos);
        CHECK(src.find("fj_stage_commit();", body) < src.find("fj_grid_dependency_wait();", body));
      }
      jit::CompiledKernel c;
      REQUIRE_NOTHROW(c = jit::compile(*k, "sm_90", {.extra = {"--ptxas-options=-v"}}));
      CHECK(!c.cubin.empty());
      CHECK_FALSE(jit::spills(c));
    }
  }
}
