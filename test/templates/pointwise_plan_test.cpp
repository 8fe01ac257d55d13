// A plan's pointwise kernels end to end without a GPU: a graph is planned (fusion/pipeline.h),
// each pointwise region's kernel generated through templates::generate, and that kernel emulated
// on the CPU (emulate/pointwise_shim.h) on the region's inputs as the reference interpreter
// computes them; each output is compared with the interpreter's value of the same node, as
// `fusejit run --check` compares on a GPU. The graph: rotary embeddings of q and k after a fused
// projection (gpt-fast's apply_rotary_emb), whose f32 cast of the q and k columns is evaluated
// again in each RoPE kernel from the GEMM's result, read through reshapes and slices.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>

#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/interp.h"
#include "templates/kernel.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

// RoPE of `heads` heads of 64 taken at column `first` of the projection `qkv` [1, s, n]:
// pairs (x0, x1) of the f32 columns rotated by (f0, f1) of `freqs` [s, 32, 2], back to bf16.
NodeId rotate(Graph& g, NodeId qkv, NodeId freqs, int64_t first, int64_t heads) {
  const int64_t s = g.node(qkv).shape[1];
  const NodeId cols = add_slice(g, qkv, 2, first, first + heads * 64);
  const NodeId x = add_cast(g, add_reshape(g, cols, {1, s, heads, 64}), DType::f32);
  const NodeId xs = add_reshape(g, x, {1, s, heads, 32, 2});
  const NodeId fs = add_reshape(g, freqs, {1, s, 1, 32, 2});
  const auto part = [&](NodeId t, int64_t i) {
    Shape shape = g.node(t).shape;
    shape.pop_back();
    return add_reshape(g, add_slice(g, t, 4, i, i + 1), shape);
  };
  const NodeId x0 = part(xs, 0), x1 = part(xs, 1), f0 = part(fs, 0), f1 = part(fs, 1);
  const auto mul = [&](NodeId a, NodeId b) { return add_binary(g, Op::mul, a, b); };
  const NodeId o0 = add_binary(g, Op::sub, mul(x0, f0), mul(x1, f1));
  const NodeId o1 = add_binary(g, Op::add, mul(x1, f0), mul(x0, f1));
  const Shape pair = {1, s, heads, 32, 1};
  const NodeId both = add_concat(g, {add_reshape(g, o0, pair), add_reshape(g, o1, pair)}, 4);
  return add_cast(g, add_reshape(g, both, {1, s, heads, 64}), DType::bf16);
}

Graph rope_after_projection() {
  Graph g;
  const int64_t s = 16;
  const NodeId x = add_input(g, DType::bf16, {1, s, 256});
  const NodeId w = add_input(g, DType::bf16, {512, 256});
  const NodeId freqs = add_input(g, DType::bf16, {s, 32, 2});
  const NodeId qkv = add_matmul(g, x, add_permute(g, w, {1, 0}));
  g.set_outputs({rotate(g, qkv, freqs, 0, 4), rotate(g, qkv, freqs, 256, 2)});
  return g;
}

}  // namespace

TEST_CASE("a plan's pointwise kernels, emulated, match the CPU reference: RoPE after a GEMM",
          "[templates][pointwise][recompute]") {
  // With sweeps (the default) both RoPEs are one kernel, a sweep over q's [1, 16, 4, 64] and
  // one over k's [1, 16, 2, 64]; without, a kernel each.
  const bool sweeps = GENERATE(true, false);
  INFO("PlanOptions::sweeps " << sweeps);
  const fusion::Plan plan =
      fusion::make_plan(rope_after_projection(), fusion::PlanOptions{.sweeps = sweeps});
  INFO(fusion::plan_to_text(plan));
  std::vector<const fusion::Region*> kernels;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind == fusion::RegionKind::pointwise) kernels.push_back(&r);
  }
  // The GEMM, then the RoPE kernels: the f32 casts are evaluated again, never written.
  REQUIRE(plan.regions.size() == (sweeps ? 2 : 3));
  REQUIRE(kernels.size() == (sweeps ? 1 : 2));
  for (const fusion::Region* r : kernels) {
    for (NodeId o : r->outputs) CHECK(plan.graph.node(o).dtype == DType::bf16);
    CHECK(r->inputs.size() == 2);  // the projection and the table
  }
  if (sweeps) {
    REQUIRE(kernels[0]->outputs.size() == 2);
    CHECK(plan.graph.node(kernels[0]->outputs[0]).shape == Shape{1, 16, 4, 64});
    CHECK(plan.graph.node(kernels[0]->outputs[1]).shape == Shape{1, 16, 2, 64});
    CHECK(kernels[0]->shape == Shape{1, 16, 4, 64});  // the larger sweep's
  }

  FUSEJIT_REQUIRE_HOST_COMPILER();
  std::vector<templates::Kernel> made;
  std::string src = fmt::format("#include \"{}/pointwise_shim.h\"\n", FUSEJIT_EMULATE_DIR);
  for (const fusion::Region* r : kernels) {
    made.push_back(templates::generate(plan.graph, *r));
    src += test::emulated_kernel(made.back(), src);
  }
  // A name per variant: dlopen would hand back the first library for the same path.
  void* so = test::open_shared_object(src, sweeps ? "pointwise-plan-sweeps" : "pointwise-plan");

  // Every region input and output as the reference computes it.
  Graph whole = plan.graph;
  std::vector<NodeId> wanted;
  for (const fusion::Region* r : kernels) {
    wanted.insert(wanted.end(), r->inputs.begin(), r->inputs.end());
    wanted.insert(wanted.end(), r->outputs.begin(), r->outputs.end());
  }
  whole.set_outputs(wanted);
  std::vector<HostTensor> values = interpret(whole, test::random_inputs(whole, 20261206, 1.0));
  size_t at = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const fusion::Region& r = *kernels[k];
    const templates::Kernel& kernel = made[k];
    INFO("region of output %" << r.outputs[0] << ": kernel " << kernel.name << "\n"
                              << test::kernel_text(kernel));
    std::vector<NodeId> expected_params = r.inputs;
    expected_params.insert(expected_params.end(), r.outputs.begin(), r.outputs.end());
    REQUIRE(kernel.params == expected_params);
    std::vector<void*> args;
    for (size_t i = 0; i < r.inputs.size(); ++i) args.push_back(values[at + i].bytes.data());
    std::vector<HostTensor> outs;
    for (NodeId o : r.outputs) {
      outs.emplace_back(plan.graph.node(o).dtype, plan.graph.node(o).shape);
      for (int64_t i = 0; i < outs.back().numel(); ++i) outs.back().set(i, NAN);
    }
    for (HostTensor& t : outs) args.push_back(t.bytes.data());
    using Entry = void (*)(void* const*, int);
    auto entry = reinterpret_cast<Entry>(dlsym(so, ("run_" + kernel.name).c_str()));
    REQUIRE(entry != nullptr);
    entry(args.data(), static_cast<int>(kernel.work_blocks));
    for (size_t o = 0; o < outs.size(); ++o) {
      const HostTensor& ref = values[at + r.inputs.size() + o];
      double diff = 0, norm = 0;
      int64_t poisoned = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        if (std::isnan(outs[o].get(i))) {
          ++poisoned;
          continue;
        }
        diff += std::pow(outs[o].get(i) - ref.get(i), 2);
        norm += std::pow(ref.get(i), 2);
      }
      const double rel = std::sqrt(diff / norm);
      std::printf("pointwise plan emulation: %%%d: rel L2 %.2e, %lld unwritten\n",
                  static_cast<int>(r.outputs[o]), rel, static_cast<long long>(poisoned));
      CHECK(poisoned == 0);
      CHECK(rel <= 1e-2);  // bf16 outputs
    }
    at += r.inputs.size() + r.outputs.size();
  }
  auto misaligned = reinterpret_cast<long (*)()>(dlsym(so, "fj_emu_misaligned"));
  REQUIRE(misaligned != nullptr);
  CHECK(misaligned() == 0);
  dlclose(so);
}
