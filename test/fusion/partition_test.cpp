// The partitioner on the seed workloads and on the patterns the playbook names.
#include <map>
#include <random>
#include <string>

#include "fusejit/error.h"
#include "fusejit_test_paths.h"
#include "fusion/partition.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "fusion/recompute.h"
#include "ir/text.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

TEST_CASE("elementwise chains are one pointwise kernel", "[fusion][partition]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    for (const Graph& g : {ew_chain(dt), long_chain(dt), bias_gelu(dt)}) {
      const Plan plan = plan_of(g);
      REQUIRE(plan.kernel_count() == 1);
      CHECK(plan.library_call_count() == 0);
      const Region& r = plan.regions.front();
      CHECK(r.kind == RegionKind::pointwise);
      CHECK(r.shape == Shape{R, C});
      CHECK(r.outputs == plan.graph.outputs());
      CHECK(r.inputs == plan.graph.inputs());
      CHECK(any_decision(plan, true, "elementwise chain"));
    }
  }
  const Plan chain = plan_of(ew_chain(DType::f32));
  CHECK(op_names(chain, chain.regions.front()) == std::vector<std::string>{"mul", "add", "relu"});
}

TEST_CASE("a smaller value computed in the chain is broadcast inside the kernel",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C}), b = ir::add_input(g, DType::f32, {C});
  const NodeId b2 = un(g, Op::exp, b);
  g.add_output(un(g, Op::gelu, bin(g, Op::add, x, b2)));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].inputs == std::vector<NodeId>{x, b});
  CHECK(any_decision(plan, true, "broadcast"));
}

TEST_CASE("a row reduction with its prologue is one reduction kernel", "[fusion][partition]") {
  const Plan plan = plan_of(sumsq(DType::f32));
  REQUIRE(plan.regions.size() == 1);
  const Region& r = plan.regions.front();
  CHECK(r.kind == RegionKind::reduction);
  CHECK(r.shape == Shape{R, C});
  CHECK(r.reduce_axes == std::vector<int64_t>{1});
  CHECK(op_names(plan, r) == std::vector<std::string>{"mul", "sum"});
  CHECK(any_decision(plan, true, "prologue of the reduction"));
}

TEST_CASE("a reduction fuses its elementwise epilogue", "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId bias = ir::add_input(g, DType::f32, {R});
  const NodeId s = ir::add_reduce(g, Op::sum, un(g, Op::exp, x), {1}, false);
  g.add_output(un(g, Op::sqrt, bin(g, Op::add, s, bias)));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::reduction);
  CHECK(plan.regions[0].inputs == std::vector<NodeId>{x, bias});
  CHECK(any_decision(plan, true, "epilogue of the reduction"));
}

TEST_CASE("a column reduction is a reduction region over axis 0", "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  g.add_output(ir::add_reduce(g, Op::sum, x, {0}, false));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::reduction);
  CHECK(plan.regions[0].shape == Shape{R, C});
  CHECK(plan.regions[0].reduce_axes == std::vector<int64_t>{0});
}

TEST_CASE("softmax, written out or as the API records it, is one normalization kernel",
          "[fusion][partition]") {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    for (const Graph& g : {naive_softmax(dt), api_softmax(dt)}) {
      const Plan plan = plan_of(g);
      REQUIRE(plan.regions.size() == 1);
      const Region& r = plan.regions.front();
      CHECK(r.kind == RegionKind::normalization);
      CHECK(r.shape == Shape{R, C});
      CHECK(r.reduce_axes == std::vector<int64_t>{1});
      CHECK(r.inputs.size() == 1);
      CHECK(r.outputs == plan.graph.outputs());
      CHECK(any_decision(plan, true, "normalization"));
    }
  }
  const Plan bf16 = plan_of(api_softmax(DType::bf16));
  CHECK(op_names(bf16, bf16.regions[0]) ==
        std::vector<std::string>{"cast", "max", "sub", "exp", "sum", "div", "cast"});
}

TEST_CASE("layer norm and RMS norm are one normalization kernel", "[fusion][partition]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool mean_op : {true, false}) {
      INFO(dtype_name(dt) << (mean_op ? " mean op" : " sum * 1/C"));
      const Plan plan = plan_of(layernorm(dt, mean_op));
      REQUIRE(plan.regions.size() == 1);
      CHECK(plan.regions[0].kind == RegionKind::normalization);
      CHECK(plan.regions[0].inputs.size() == 3);
      CHECK(plan.regions[0].outputs.size() == 1);
    }
    const Plan rms = plan_of(rmsnorm(dt));
    REQUIRE(rms.regions.size() == 1);
    CHECK(rms.regions[0].kind == RegionKind::normalization);
  }
  // Over the last axis of a rank-3 tensor: the rows are the first two axes.
  const Plan plan = plan_of(layernorm(DType::f32, true, {4, 16, C}));
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::normalization);
  CHECK(plan.regions[0].shape == Shape{4, 16, C});
  CHECK(plan.regions[0].reduce_axes == std::vector<int64_t>{2});
}

TEST_CASE("add + layer norm with both results is one kernel with two outputs",
          "[fusion][partition]") {
  const Plan plan = plan_of(add_layernorm(DType::f32));
  REQUIRE(plan.regions.size() == 1);
  const Region& r = plan.regions[0];
  CHECK(r.kind == RegionKind::normalization);
  CHECK(r.outputs.size() == 2);
  CHECK(r.outputs == plan.graph.outputs());
  CHECK(r.inputs.size() == 4);
}

TEST_CASE("a reduced value broadcast back through views stays one normalization",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  // max without keepdim, then unsqueezed by a reshape and expanded explicitly.
  const NodeId m = ir::add_reduce(g, Op::max, x, {1}, false);
  const NodeId me = ir::add_expand(g, ir::add_reshape(g, m, {R, 1}), {R, C});
  g.add_output(un(g, Op::exp, bin(g, Op::sub, x, me)));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::normalization);
}

TEST_CASE("a reduced value broadcast along the wrong axis is not a normalization",
          "[fusion][partition]") {
  // sum over the last axis gives [64]; numpy broadcasting aligns it with the last axis, so row i
  // of the result needs the sums of every row: not one pass per row.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, R});
  const NodeId s = ir::add_reduce(g, Op::sum, x, {1}, false);
  g.add_output(bin(g, Op::sub, x, s));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 2);
  CHECK(plan.regions[0].kind == RegionKind::reduction);
  CHECK(plan.regions[1].kind == RegionKind::pointwise);
  CHECK(plan.regions[1].inputs == std::vector<NodeId>{x, s});
  CHECK(any_decision(plan, false, "other rows"));
}

TEST_CASE("a reduction over leading axes broadcast back is cut", "[fusion][partition]") {
  // softmax over axis 0 with recomputation off: a column max, then a column sum over values
  // that need it, each value between them written.
  Graph g;
  g.add_output(softmax_of(g, ir::add_input(g, DType::f32, {R, C}), 0));
  const Plan plan = plan_of(g, PlanOptions{.recompute = false});
  CHECK(count_kind(plan, RegionKind::normalization) == 0);
  CHECK(count_kind(plan, RegionKind::reduction) == 2);
  CHECK(plan.kernel_count() == 4);
  CHECK(any_decision(plan, false, "non-trailing"));
  CHECK_FALSE(any_decision(plan, true, "recompute"));
}

TEST_CASE("regions stay acyclic when a value is needed before and after a reduction",
          "[fusion][partition]") {
  // a feeds a column sum and a consumer of that sum: written (recomputation off), a is computed
  // by a region of its own, read by the sum's and then by the consumer's.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId a = un(g, Op::exp, x);
  const NodeId s = ir::add_reduce(g, Op::sum, a, {0}, false);
  g.add_output(bin(g, Op::mul, a, s));
  const Plan plan = plan_of(g, PlanOptions{.recompute = false});
  CHECK(plan.regions.size() == 3);
  CHECK(any_decision(plan, false, "cycle"));
  // Recomputed, a is evaluated by both the sum's region and the consumer's: two kernels, and
  // a is never written.
  const Plan both = plan_of(g);
  REQUIRE(both.regions.size() == 2);
  CHECK(both.regions[0].kind == RegionKind::reduction);
  CHECK(both.regions[0].inputs == std::vector<NodeId>{x});
  CHECK(both.regions[1].inputs == std::vector<NodeId>{x, s});
  CHECK(contains(both.regions[0].nodes, a));
  CHECK(contains(both.regions[1].nodes, a));
  CHECK(any_decision(both, true, "recompute %" + std::to_string(a) + " in region 1"));
}

TEST_CASE("a matmul is a library call; what its epilogue cannot fold is a new kernel",
          "[fusion][partition]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    Graph g;
    const NodeId x = ir::add_input(g, dt, {R, 128}), w = ir::add_input(g, dt, {128, C});
    const NodeId mm = ir::add_matmul(g, x, w);
    g.add_output(un(g, Op::sigmoid, un(g, Op::exp, mm)));
    const Plan plan = plan_of(g);
    CHECK(plan.library_call_count() == 1);
    CHECK(plan.kernel_count() == 1);
    REQUIRE(plan.regions.size() == 2);
    CHECK(plan.regions[0].kind == RegionKind::gemm);
    CHECK(plan.regions[0].outputs == std::vector<NodeId>{mm});
    CHECK(plan.regions[1].kind == RegionKind::pointwise);
    CHECK(plan.regions[1].inputs == std::vector<NodeId>{mm});
    CHECK(any_decision(plan, false, "library call"));
    CHECK(plan.regions[0].epilogue.bias == -1);
    CHECK(plan.regions[0].epilogue.activation == GemmEpilogue::Activation::none);
    REQUIRE(plan.regions[0].epilogue.refusals.size() == 1);
    CHECK(plan.regions[0].epilogue.refusals[0].find("exp %") == 0);
  }
  const Plan two = plan_of(two_gemm_mul(DType::bf16));
  CHECK(two.library_call_count() == 2);
  CHECK(two.kernel_count() == 1);
  CHECK(two.regions.back().kind == RegionKind::pointwise);
  CHECK(two.regions.back().inputs.size() == 2);
}

TEST_CASE("a transpose feeding a matmul is a layout flag", "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::bf16, {R, 128});
  const NodeId w = ir::add_input(g, DType::bf16, {C, 128});  // [out, in], as linear takes it
  g.add_output(ir::add_matmul(g, x, ir::add_permute(g, w, {1, 0})));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.kernel_count() == 0);
  const Region& r = plan.regions[0];
  CHECK(r.kind == RegionKind::gemm);
  CHECK(r.inputs == std::vector<NodeId>{x, w});
  CHECK_FALSE(r.epilogue.transpose_a);
  CHECK(r.epilogue.transpose_b);
  CHECK(any_decision(plan, true, "transpose_b"));

  // Batched, transposing A: the batch axis stays.
  Graph b;
  const NodeId a3 = ir::add_input(b, DType::f32, {4, 128, R});
  const NodeId b3 = ir::add_input(b, DType::f32, {4, 128, C});
  b.add_output(ir::add_matmul(b, ir::add_permute(b, a3, {0, 2, 1}), b3));
  const Plan batched = plan_of(b);
  REQUIRE(batched.regions.size() == 1);
  CHECK(batched.regions[0].epilogue.transpose_a);
  CHECK(batched.regions[0].inputs == std::vector<NodeId>{a3, b3});
}

TEST_CASE("a permute that is not a transpose of the last two axes is copied for a matmul",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, 4, 128});
  const NodeId w = ir::add_input(g, DType::f32, {128, C});
  g.add_output(ir::add_matmul(g, ir::add_permute(g, x, {1, 0, 2}), w));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() == 1);
  CHECK(plan.library_call_count() == 1);
  CHECK(plan.regions[0].kind == RegionKind::pointwise);
  CHECK(any_decision(plan, false, "reads buffers"));
}

// Batched matmuls whose batch dims broadcast on one side or both, implicitly or
// through expand, unsqueeze (reshape) and transposes. Each is one library call and no kernel;
// jit/libs/gemm_call.h turns the region into strided-batched calls.
TEST_CASE("a matmul whose batch dims broadcast is one library call with no expand kernel",
          "[fusion][partition]") {
  struct Case {
    const char* name;
    const char* text;
    std::vector<NodeId> inputs;  // of the gemm region: A, B, then bias and residual
    Shape batch_a, batch_b;      // the buffers' batch dims as the matmul sees them
    bool transpose_a = false, transpose_b = false;
  };
  const Case cases[] = {
      {"both sides, rank 4", R"(fusejit-trace 1
%0 : bf16[8,1,32,16] = input
%1 : bf16[1,16,16,32] = input
%2 : bf16[8,16,32,32] = matmul %0, %1
output %2
)",
       {0, 1}, {8, 1}, {1, 16}},
      {"both sides, rank 4 @ rank 3", R"(fusejit-trace 1
%0 : f32[8,1,32,16] = input
%1 : f32[16,16,32] = input
%2 : f32[8,16,32,32] = matmul %0, %1
output %2
)",
       {0, 1}, {8, 1}, {16}},
      {"one side, rank 3 @ rank 2", R"(fusejit-trace 1
%0 : f32[8,32,16] = input
%1 : f32[16,32] = input
%2 : f32[8,32,32] = matmul %0, %1
output %2
)",
       {0, 1}, {8}, {}},
      {"one side, rank 4, explicit expand", R"(fusejit-trace 1
%0 : bf16[8,16,32,16] = input
%1 : bf16[16,32] = input
%2 : bf16[8,16,16,32] = expand %1
%3 : bf16[8,16,32,32] = matmul %0, %2
output %3
)",
       {0, 1}, {8, 16}, {1, 1}},
      {"both sides, explicit expands", R"(fusejit-trace 1
%0 : bf16[8,1,32,16] = input
%1 : bf16[1,16,16,32] = input
%2 : bf16[8,16,32,16] = expand %0
%3 : bf16[8,16,16,32] = expand %1
%4 : bf16[8,16,32,32] = matmul %2, %3
output %4
)",
       {0, 1}, {8, 1}, {1, 16}},
      {"both sides, rank 3 unsqueezed, B transposed under its expand", R"(fusejit-trace 1
%0 : f32[8,32,16] = input
%1 : f32[16,32,16] = input
%2 : f32[8,1,32,16] = reshape %0
%3 : f32[16,16,32] = permute %1 axes=[0,2,1]
%4 : f32[8,16,16,32] = expand %3
%5 : f32[8,16,32,32] = matmul %2, %4
output %5
)",
       {0, 1}, {8, 1}, {1, 16}, false, true},
      {"transposed under an expand, with bias, residual and relu", R"(fusejit-trace 1
%0 : bf16[8,1,32,16] = input
%1 : bf16[1,16,32,16] = input
%2 : bf16[32] = input
%3 : bf16[8,16,32,32] = input
%4 : bf16[8,16,32,16] = expand %1
%5 : bf16[8,16,16,32] = permute %4 axes=[0,1,3,2]
%6 : bf16[8,16,32,32] = matmul %0, %5
%7 : bf16[8,16,32,32] = add %6, %2
%8 : bf16[8,16,32,32] = add %7, %3
%9 : bf16[8,16,32,32] = relu %8
output %9
)",
       {0, 1, 2, 3}, {8, 1}, {1, 16}, false, true},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Graph g = ir::parse(c.text);
    const Plan plan = plan_of(g);
    CHECK(plan.kernel_count() == 0);
    CHECK(plan.library_call_count() == 1);
    REQUIRE(plan.regions.size() == 1);
    const Region& r = plan.regions[0];
    CHECK(r.kind == RegionKind::gemm);
    CHECK(r.inputs == c.inputs);
    CHECK(r.epilogue.batch_a == c.batch_a);
    CHECK(r.epilogue.batch_b == c.batch_b);
    CHECK(r.epilogue.transpose_a == c.transpose_a);
    CHECK(r.epilogue.transpose_b == c.transpose_b);
    CHECK(r.epilogue.refusals.empty());
    if (std::string(c.text).find("expand") != std::string::npos) {
      CHECK(any_decision(plan, true, "batch stride of 0"));
    }
    CHECK_FALSE(any_decision(plan, false, "reads buffers"));
  }
}

TEST_CASE("a view that moves a matmul operand's matrix axes is still copied",
          "[fusion][partition]") {
  // Broadcasting the rows (M) of A is not a batch stride: the view is written by a kernel,
  // which cuBLASLt then reads.
  const Plan plan = plan_of(ir::parse(R"(fusejit-trace 1
%0 : f32[1,16] = input
%1 : f32[4,16,32] = input
%2 : f32[4,32,16] = expand %0
%3 : f32[4,32,32] = matmul %2, %1
output %3
)"));
  CHECK(plan.kernel_count() == 1);
  CHECK(plan.library_call_count() == 1);
  CHECK(any_decision(plan, false, "reads buffers"));
}

TEST_CASE("a reshape of a buffer under a matmul operand is read in place, whatever its matrix",
          "[fusion][partition]") {
  // A linear layer on [b, t, c] reads the activation as [b * t, c] rows; a decode step's
  // attention output [1, kv, g, d] is read as one row of kv * g * d. A buffer is dense and
  // row-major, so the reshape's value is the buffer's bytes: no kernel copies it, and the call
  // (run_plan's host model of it) computes the reference. Under a transpose, too.
  for (const char* text : {R"(fusejit-trace 1
%0 : f32[4,8,16] = input
%1 : f32[16,32] = input
%2 : f32[32,16] = reshape %0
%3 : f32[32,32] = matmul %2, %1
output %3
)",
                           R"(fusejit-trace 1
%0 : f32[1,2,2,8] = input
%1 : f32[24,32] = input
%2 : f32[1,1,32] = reshape %0
%3 : f32[32,24] = permute %1 axes=[1,0]
%4 : f32[1,1,24] = matmul %2, %3
output %4
)",
                           R"(fusejit-trace 1
%0 : f32[6,4,5] = input
%1 : f32[3,8,5] = input
%2 : f32[3,5,8] = reshape %0
%3 : f32[3,8,5] = permute %2 axes=[0,2,1]
%4 : f32[3,8,8] = matmul %1, %2
%5 : f32[3,8,8] = matmul %3, %2
output %4, %5
)",
                           R"(fusejit-trace 1
%0 : f32[2,3,4] = input
%1 : f32[4,5] = input
%2 : f32[2,3,4] = exp %0
%3 : f32[6,4] = reshape %2
%4 : f32[6,5] = matmul %3, %1
output %4
)"}) {
    INFO(text);
    const ir::Graph g = ir::parse(text);
    const Plan plan = plan_of(g);
    CHECK(any_decision(plan, true, "reshape of a buffer read in place"));
    CHECK_FALSE(any_decision(plan, false, "reads buffers"));
    for (const Region& r : plan.regions) {
      if (r.kind != RegionKind::gemm) continue;
      for (NodeId in : r.inputs) CHECK(plan.graph.node(in).op != ir::Op::reshape);
    }
    std::mt19937 rng(7);
    std::vector<ir::HostTensor> inputs;
    for (NodeId in : plan.graph.inputs()) {
      ir::HostTensor t(plan.graph.node(in).dtype, plan.graph.node(in).shape);
      std::uniform_real_distribution<double> u(-1.0, 1.0);
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
      inputs.push_back(std::move(t));
    }
    const std::vector<ir::HostTensor> got = run_plan(plan, inputs);
    const std::vector<ir::HostTensor> want = ir::interpret(plan.graph, inputs);
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      for (int64_t i = 0; i < got[k].numel(); ++i) CHECK(got[k].get(i) == want[k].get(i));
    }
  }
}

TEST_CASE("siblings reading the same input are one kernel with several outputs",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId e = un(g, Op::exp, x), l = un(g, Op::log, x);
  g.set_outputs({e, l});
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::pointwise);
  CHECK(plan.regions[0].outputs == std::vector<NodeId>{e, l});
  CHECK(plan.regions[0].inputs == std::vector<NodeId>{x});
  CHECK(any_decision(plan, true, "siblings"));

  // A row sum of x and an elementwise function of x: one pass over each row writes both.
  Graph h;
  const NodeId y = ir::add_input(h, DType::f32, {R, C});
  h.set_outputs({un(h, Op::exp, y), ir::add_reduce(h, Op::sum, y, {1}, false)});
  const Plan both = plan_of(h);
  REQUIRE(both.regions.size() == 1);
  CHECK(both.regions[0].outputs.size() == 2);

  // Different iteration spaces stay apart, with the reason.
  Graph k;
  const NodeId z = ir::add_input(k, DType::f32, {R, C});
  k.set_outputs({un(k, Op::exp, z), ir::add_reduce(k, Op::sum, z, {0}, false)});
  const Plan apart = plan_of(k);
  CHECK(apart.regions.size() == 2);
  CHECK(any_decision(apart, false, "siblings reading"));
}

TEST_CASE("independent siblings of different shapes are one kernel with a sweep each",
          "[fusion][partition]") {
  // Two column ranges of one input, each through its own function: [4, 64] and [4, 32].
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {4, 96});
  const NodeId a = un(g, Op::exp, ir::add_slice(g, x, 1, 0, 64));
  const NodeId b = un(g, Op::neg, ir::add_slice(g, x, 1, 64, 96));
  g.set_outputs({a, b});
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == RegionKind::pointwise);
  CHECK(plan.regions[0].outputs == std::vector<NodeId>{a, b});
  CHECK(plan.regions[0].shape == Shape{4, 64});  // the larger sweep
  CHECK(any_decision(plan, true, "a sweep over each of [4,32], [4,64]"));

  // Off (as for symbolic graphs): a kernel each, with the reason.
  const Plan apart = plan_of(g, PlanOptions{.sweeps = false});
  CHECK(apart.regions.size() == 2);
  CHECK(any_decision(apart, false, "different iteration space"));

  // A sibling that reads the other's result keeps vertical fusion's refusal: y = exp(v) would be
  // computed again at each of z's 256 elements.
  Graph h;
  const NodeId v = ir::add_input(h, DType::f32, {64});
  const NodeId w = ir::add_input(h, DType::f32, {4, 64});
  const NodeId y = un(h, Op::exp, v);
  const NodeId z = bin(h, Op::mul, bin(h, Op::add, w, v), y);
  h.set_outputs({y, z});
  const Plan reader = plan_of(h);
  CHECK(reader.regions.size() == 2);
  CHECK(any_decision(reader, false, "different iteration space"));
}

TEST_CASE("a decode step's RoPE of q and k, and the k and v cache writes, are one kernel a layer",
          "[fusion][partition][update]") {
  // examples/generate's tiny config (2 layers), one decode step as FUSEJIT_RECORD_DIR wrote it.
  const Graph g = ir::parse_file(std::string(FUSEJIT_SOURCE_DIR) +
                                 "/test/traces/replay/tiny_decode_step.trace");
  const Plan plan = make_plan(g);  // attention regions too, which check_plan does not know
  int rope = 0;
  for (const Region& r : plan.regions) {
    int updates = 0;  // cache appends: updates of one position of 2 KV heads
    for (NodeId o : r.outputs) {
      const bool append = plan.graph.node(o).op == Op::update_slice &&
                          ir::computed_shape(plan.graph, o) == Shape{1, 2, 1, 64};
      updates += append ? 1 : 0;
    }
    if (updates == 0) continue;
    INFO(fusion::plan_to_text(plan));
    // q's rotated heads [1, 4, 1, 64] and the two cache appends [1, 2, 1, 64]: three outputs.
    CHECK(r.kind == RegionKind::pointwise);
    CHECK(updates == 2);
    CHECK(r.outputs.size() == 3);
    CHECK(r.shape == Shape{1, 4, 1, 64});
    ++rope;
  }
  CHECK(rope == 2);
  CHECK(plan.kernel_count() == 18);  // 23 before sibling sweeps (2 a layer and 3 of the rest)
}

TEST_CASE("an arange read by regions of different iteration spaces is evaluated in each",
          "[fusion][partition]") {
  // x * arange(C) summed along the rows and along the columns: two reductions of [R, C] that
  // no one kernel computes. The arange is index arithmetic, replicated into both like a constant;
  // it used to be a kernel of its own, written for the two to read.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId position = ir::add_arange(g, C, DType::f32);
  const NodeId y = bin(g, Op::mul, x, position);
  g.set_outputs({ir::add_reduce(g, Op::sum, y, {0}, false),
                 ir::add_reduce(g, Op::sum, bin(g, Op::add, x, position), {1}, false)});
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() == 2);
  for (const Region& r : plan.regions) {
    CHECK(r.inputs == std::vector<NodeId>{x});
    CHECK(contains(r.nodes, position));
  }
}

TEST_CASE("a value several consumers need is computed once and written once, or recomputed",
          "[fusion][partition]") {
  // e is needed by a pointwise consumer over [R,C] and by a column sum. Without recomputation
  // it is written by one region and read by the other, never computed twice. With it, each
  // region computes exp(x) from x: x is read twice, e never written nor read back.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId e = un(g, Op::exp, x);
  g.set_outputs(
      {bin(g, Op::mul, e, scalar(g, DType::f32, 2.0)), ir::add_reduce(g, Op::sum, e, {0}, false)});
  const Plan plan = plan_of(g, PlanOptions{.recompute = false});
  CHECK(plan.regions.size() == 2);
  CHECK(plan.regions[0].outputs.size() == 2);  // e and e * 2
  CHECK(contains(plan.regions[1].inputs, e));

  const Plan recomputed = plan_of(g);
  REQUIRE(recomputed.regions.size() == 2);
  for (const Region& r : recomputed.regions) {
    CHECK(r.inputs == std::vector<NodeId>{x});
    CHECK(contains(r.nodes, e));
    CHECK_FALSE(contains(r.outputs, e));
  }
  CHECK(detail::plan_cost(recomputed.graph, recomputed.regions).bytes <
        detail::plan_cost(plan.graph, plan.regions).bytes);
}

TEST_CASE("views and constants are replicated, not read", "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId t = ir::add_permute(g, x, {1, 0});
  const NodeId two = scalar(g, DType::f32, 2.0);
  const NodeId a = bin(g, Op::mul, un(g, Op::exp, t), two);
  const NodeId s =
      ir::add_reduce(g, Op::sum, bin(g, Op::add, t, two), {0}, false);  // over R... of [C,R]
  g.set_outputs({a, s});
  const Plan plan = plan_of(g);
  for (const Region& r : plan.regions) {
    CHECK(r.inputs == std::vector<NodeId>{x});
    CHECK(contains(r.nodes, t));
  }
}

TEST_CASE("a view that is a graph output is written by the kernel that computes it",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId out = ir::add_reshape(g, un(g, Op::exp, x), {R * C});
  g.add_output(out);
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].outputs == std::vector<NodeId>{out});
  CHECK(plan.regions[0].shape == Shape{R * C});
}

TEST_CASE("an output that is an input needs no kernel", "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  g.add_output(bin(g, Op::mul, x, scalar(g, DType::f32, 1.0)));  // simplified to x
  const Plan plan = plan_of(g);
  CHECK(plan.regions.empty());
  CHECK(plan.graph.outputs() == std::vector<NodeId>{x});
  CHECK(any_decision(plan, false, "graph input"));
}

TEST_CASE("constants and views of inputs that are outputs are written by a kernel",
          "[fusion][partition]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId two = scalar(g, DType::f32, 2.0);
  g.set_outputs({bin(g, Op::mul, two, scalar(g, DType::f32, 3.0)),  // folded to a constant
                 ir::add_permute(g, x, {1, 0})});
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 2);
  CHECK(plan.regions[0].inputs.empty());
  CHECK(plan.regions[0].shape == Shape{});
  CHECK(plan.regions[1].inputs == std::vector<NodeId>{x});
  CHECK(plan.regions[1].shape == Shape{C, R});
  CHECK(any_decision(plan, false, "is a graph output: a kernel writes it"));
}

TEST_CASE("fusion disabled puts every op in its own region", "[fusion][partition]") {
  const Plan plan = plan_of(layernorm(DType::f32, true), PlanOptions{.fusion = false});
  int ops = 0;
  for (const ir::Node& n : plan.graph.nodes()) {
    if (n.op != Op::input && n.op != Op::constant && ir::op_kind(n.op) != ir::OpKind::view) ++ops;
  }
  CHECK(static_cast<int>(plan.regions.size()) == ops);
  REQUIRE_FALSE(plan.decisions.empty());
  for (const Decision& d : plan.decisions) {
    CHECK_FALSE(d.fused);
    CHECK(d.reason == "fusion disabled");
  }
  const Plan gemm = plan_of(gemm_bias_relu(DType::f32), PlanOptions{.fusion = false});
  CHECK(gemm.library_call_count() == 1);
  CHECK(gemm.kernel_count() == 2);
}

TEST_CASE("passes run before partitioning; disabled, dead code is still in no region",
          "[fusion][partition]") {
  // x * w computed twice by the user is computed once.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C}), w = ir::add_input(g, DType::f32, {R, C});
  const NodeId dead = un(g, Op::exp, x);
  g.add_output(bin(g, Op::add, bin(g, Op::mul, x, w), bin(g, Op::mul, w, x)));
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  CHECK(op_names(plan, plan.regions[0]) == std::vector<std::string>{"mul", "add"});

  const Plan raw = plan_of(g, PlanOptions{.passes = false});
  REQUIRE(raw.regions.size() == 1);
  CHECK_FALSE(contains(raw.regions[0].nodes, dead));

  std::vector<std::string> seen;
  make_plan(g, PlanOptions{.after_pass = [&](std::string_view pass, const ir::Graph&) {
              seen.emplace_back(pass);
            }});
  CHECK(seen.front() == "eliminate_dead_code");
  CHECK(seen.size() == 6);
}

TEST_CASE("random graphs give plans that keep every invariant", "[fusion][partition]") {
  // Shapes from one small family so that most random pairs broadcast; ill-formed picks are
  // skipped (Graph::add refuses them).
  std::mt19937 rng(20240611);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<Op> unary = {Op::exp, Op::neg, Op::relu, Op::tanh, Op::abs};
  const std::vector<Op> binary = {Op::add, Op::mul, Op::sub, Op::maximum, Op::div};
  int plans = 0, epilogues = 0;  // gemm regions that folded something
  int recomputing = 0;           // plans that recompute a value in several regions
  std::map<RegionKind, int> kinds;
  for (int trial = 0; trial < 300; ++trial) {
    Graph g;
    std::vector<NodeId> values = {ir::add_input(g, DType::f32, {8, 16}),
                                  ir::add_input(g, DType::f32, {16}),
                                  ir::add_input(g, DType::f32, {8, 1})};
    const int steps = 4 + static_cast<int>(pick(14));
    for (int k = 0; k < steps; ++k) {
      const NodeId a = values[pick(values.size())], b = values[pick(values.size())];
      const int64_t rank = static_cast<int64_t>(g.node(a).shape.size());
      try {
        switch (pick(11)) {
          case 0:
          case 1:
            values.push_back(un(g, unary[pick(unary.size())], a));
            break;
          case 2:
          case 3:
          case 4:
            values.push_back(bin(g, binary[pick(binary.size())], a, b));
            break;
          case 5:
            if (rank == 0) break;
            values.push_back(ir::add_reduce(g, pick(2) ? Op::sum : Op::max, a,
                                            {static_cast<int64_t>(pick(static_cast<size_t>(rank)))},
                                            pick(2) == 0));
            break;
          case 6:
            if (rank == 2)
              values.push_back(ir::add_permute(g, a, {1, 0}));
            else
              values.push_back(ir::add_reshape(g, a, {ir::numel(g.node(a).shape), 1}));
            break;
          case 7:
            values.push_back(ir::add_expand(g, a, {8, 16}));
            break;
          case 9:
          case 10:  // the normalization pattern: a value against its own row's reduction
            if (rank == 0) break;
            values.push_back(bin(g, pick(2) ? Op::sub : Op::div, a,
                                 ir::add_reduce(g, pick(2) ? Op::sum : Op::max, a, {-1}, true)));
            break;
          case 8:  // a matmul, often with a tail its epilogue may fold
            if (g.node(a).shape == Shape{8, 16}) {
              NodeId y = ir::add_matmul(g, a, ir::add_input(g, DType::f32, {16, 16}));
              values.push_back(y);
              for (size_t t = pick(4); t > 0; --t) {
                switch (pick(5)) {
                  case 0:
                    y = bin(g, Op::mul, y, scalar(g, DType::f32, 0.5));
                    break;
                  case 1:
                    y = bin(g, Op::add, y, values[1]);  // a bias
                    break;
                  case 2:
                    y = bin(g, Op::add, values[0], y);  // a residual
                    break;
                  default:
                    y = un(g, pick(2) ? Op::relu : Op::gelu_tanh, y);
                }
                values.push_back(y);
              }
            }
            break;
        }
      } catch (const Error&) {
      }
    }
    g.add_output(values.back());
    if (pick(2)) g.add_output(values[pick(values.size())]);
    for (bool fusion : {true, false}) {
      INFO("trial " << trial << (fusion ? "" : " without fusion"));
      const Plan plan = make_plan(g, PlanOptions{.fusion = fusion});
      check_plan(plan);
      check_plan_computes(g, plan);
      recomputing += any_decision(plan, true, "recompute %") ? 1 : 0;
      for (const Region& r : plan.regions) {
        ++kinds[r.kind];
        if (r.kind == RegionKind::gemm && plan.graph.node(r.outputs.at(0)).op != Op::matmul)
          ++epilogues;
      }
      ++plans;
    }
  }
  CHECK(plans == 600);
  // The generator reaches every kind of region.
  for (RegionKind kind : {RegionKind::pointwise, RegionKind::reduction, RegionKind::normalization,
                          RegionKind::gemm}) {
    INFO(region_kind_name(kind) << ": " << kinds[kind]);
    CHECK(kinds[kind] > 10);
  }
  INFO("gemm regions with a folded epilogue: " << epilogues);
  CHECK(epilogues > 10);
  INFO("plans with recomputed values: " << recomputing);
  CHECK(recomputing > 5);
}
