// What folds into a GEMM's cuBLASLt epilogue, D = act(alpha * (A @ B) + beta * C + bias), and
// what is refused, with the reason. Every plan is also run region by region (workloads.h):
// exactly equal to the reference through the folded nodes, and within a few roundings, element by
// element, through the epilogue's description, as the executor computes it.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

using Act = GemmEpilogue::Activation;
constexpr int64_t K = 128;

bool any_refusal(const Region& r, const std::string& part) {
  for (const std::string& s : r.epilogue.refusals) {
    if (s.find(part) != std::string::npos) return true;
  }
  return false;
}

const Region& only_gemm(const Plan& plan) {
  REQUIRE(plan.library_call_count() == 1);
  for (const Region& r : plan.regions) {
    if (r.kind == RegionKind::gemm) return r;
  }
  FAIL("no gemm region");
  return plan.regions.front();
}

// x [R,K] @ w [K,C], in a fresh graph; returns the matmul.
struct Gemm {
  Graph g;
  NodeId x = -1, w = -1, mm = -1;
  explicit Gemm(DType dt, Shape x_shape = {R, K}, Shape w_shape = {K, C}) {
    x = ir::add_input(g, dt, std::move(x_shape));
    w = ir::add_input(g, dt, std::move(w_shape));
    mm = ir::add_matmul(g, x, w);
  }
};

}  // namespace

TEST_CASE("gemm_bias_relu and gemm_bias_gelu are one library call", "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    for (const bool gelu : {false, true}) {
      const Plan plan = plan_of(gelu ? gemm_bias_gelu(dt) : gemm_bias_relu(dt));
      CHECK(plan.kernel_count() == 0);
      REQUIRE(plan.regions.size() == 1);
      const Region& r = plan.regions[0];
      CHECK(r.kind == RegionKind::gemm);
      CHECK(r.epilogue.bias == 2);
      CHECK(r.epilogue.activation == (gelu ? Act::gelu_tanh : Act::relu));
      CHECK(r.epilogue.alpha == 1.0);
      CHECK(r.epilogue.residual == -1);
      CHECK(r.epilogue.refusals.empty());
      CHECK(r.inputs == std::vector<NodeId>{0, 1, 2});
      CHECK(r.outputs == plan.graph.outputs());
      CHECK(op_names(plan, r) ==
            std::vector<std::string>{"matmul", "add", gelu ? "gelu_tanh" : "relu"});
      CHECK(any_decision(plan, true, "folded into the cuBLASLt epilogue of matmul %3: bias %2"));
      CHECK(any_decision(plan, true, gelu ? "(epilogue GELU_BIAS)" : "(epilogue RELU_BIAS)"));
    }
  }
}

TEST_CASE("gemm_layernorm is a call with a bias and one normalization kernel",
          "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const Plan plan = plan_of(gemm_layernorm(dt));
    CHECK(plan.library_call_count() == 1);
    REQUIRE(plan.kernel_count() == 1);
    const Region& gemm = plan.regions.at(0);
    CHECK(gemm.kind == RegionKind::gemm);
    CHECK(gemm.epilogue.bias == 2);
    CHECK(gemm.epilogue.activation == Act::none);
    CHECK(gemm.outputs == std::vector<NodeId>{4});
    CHECK(plan.regions.at(1).kind == RegionKind::normalization);
    CHECK(plan.regions.at(1).inputs == std::vector<NodeId>{4});
    // Why the chain stops: bf16 normalizes in f32 (a cast); f32 reads the value twice.
    REQUIRE(gemm.epilogue.refusals.size() == 1);
    CHECK(any_refusal(gemm, dt == DType::f32 ? "%4 is read by %5 and %6, so it is written as it is"
                                             : "cast %5 is not something cuBLASLt's epilogue "
                                               "computes"));
  }
}

TEST_CASE("two_gemm_mul is two calls and one kernel", "[fusion][epilogue]") {
  const Plan plan = plan_of(two_gemm_mul(DType::bf16));
  CHECK(plan.library_call_count() == 2);
  CHECK(plan.kernel_count() == 1);
  for (const Region& r : plan.regions) {
    if (r.kind != RegionKind::gemm) continue;
    CHECK(r.epilogue.bias == -1);
    CHECK(any_refusal(r, "not a scalar constant: only a constant factor folds, as alpha"));
  }
  CHECK(any_decision(plan, false,
                     "matmul %3 is a library call: what follows starts a new region "
                     "(mul %5 multiplies by %4"));
}

TEST_CASE("mlp is two calls: gelu_tanh with the bias, then the bias", "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const Plan plan = plan_of(mlp(dt));
    CHECK(plan.library_call_count() == 2);
    CHECK(plan.kernel_count() == 0);
    REQUIRE(plan.regions.size() == 2);
    const Region &first = plan.regions[0], &second = plan.regions[1];
    CHECK(first.epilogue.bias == 2);
    CHECK(first.epilogue.activation == Act::gelu_tanh);
    CHECK(first.outputs == std::vector<NodeId>{7});
    CHECK(first.epilogue.refusals.empty());  // only a matmul reads h: nothing was refused
    CHECK(second.inputs == std::vector<NodeId>{7, 3, 4});
    CHECK(second.epilogue.bias == 4);
    CHECK(second.epilogue.activation == Act::none);
    CHECK(second.outputs == plan.graph.outputs());
  }
}

TEST_CASE("a constant factor is alpha, on either side", "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    for (bool left : {true, false}) {
      Gemm t(dt);
      const NodeId two = scalar(t.g, dt, 2.0);
      const NodeId y = left ? bin(t.g, Op::mul, two, t.mm) : bin(t.g, Op::mul, t.mm, two);
      t.g.add_output(y);
      const Plan plan = plan_of(t.g);
      CHECK(plan.kernel_count() == 0);
      const Region& r = only_gemm(plan);
      CHECK(r.epilogue.alpha == 2.0);
      CHECK(r.epilogue.beta == 0.0);
      CHECK(r.outputs == std::vector<NodeId>{y});
      CHECK(r.inputs == std::vector<NodeId>{t.x, t.w});
      CHECK(contains(r.nodes, two));  // the constant is evaluated where it is used
      CHECK(any_decision(plan, true, "alpha = 2"));
    }
  }
  // Two factors multiply; the constant is what the dtype holds (0.1 in bf16 is not 0.1).
  Gemm t(DType::bf16);
  const NodeId tenth = scalar(t.g, DType::bf16, 0.1);
  t.g.add_output(bin(t.g, Op::mul, bin(t.g, Op::mul, t.mm, tenth), scalar(t.g, DType::bf16, 4)));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 0);
  CHECK(only_gemm(plan).epilogue.alpha == ir::round_to(DType::bf16, 0.1) * 4);
  CHECK(only_gemm(plan).epilogue.alpha != 0.4);
}

TEST_CASE("alpha comes before the bias: a factor after it is refused", "[fusion][epilogue]") {
  Gemm before(DType::f32);
  const NodeId b = ir::add_input(before.g, DType::f32, {C});
  before.g.add_output(bin(before.g, Op::add,
                          bin(before.g, Op::mul, before.mm, scalar(before.g, DType::f32, 3)), b));
  const Plan ok = plan_of(before.g);
  CHECK(ok.kernel_count() == 0);
  CHECK(only_gemm(ok).epilogue.alpha == 3.0);
  CHECK(only_gemm(ok).epilogue.bias == b);

  Gemm after(DType::f32);
  const NodeId b2 = ir::add_input(after.g, DType::f32, {C});
  after.g.add_output(
      bin(after.g, Op::mul, bin(after.g, Op::add, after.mm, b2), scalar(after.g, DType::f32, 3)));
  const Plan refused = plan_of(after.g);
  CHECK(refused.kernel_count() == 1);
  const Region& r = only_gemm(refused);
  CHECK(r.epilogue.alpha == 1.0);
  CHECK(r.epilogue.bias == b2);
  CHECK(any_refusal(r, "scales after a bias or residual is added, but alpha scales only A @ B"));

  // A division is not folded (1/c is not exact in general).
  Gemm div(DType::f32);
  div.g.add_output(bin(div.g, Op::div, div.mm, scalar(div.g, DType::f32, 3)));
  const Plan d = plan_of(div.g);
  CHECK(d.kernel_count() == 1);
  CHECK(any_refusal(only_gemm(d), "div %"));
}

TEST_CASE("a value of the output's shape is a residual through beta", "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    for (bool left : {true, false}) {
      Gemm t(dt);
      const NodeId r = ir::add_input(t.g, dt, {R, C});
      t.g.add_output(left ? bin(t.g, Op::add, r, t.mm) : bin(t.g, Op::add, t.mm, r));
      const Plan plan = plan_of(t.g);
      CHECK(plan.kernel_count() == 0);
      const Region& region = only_gemm(plan);
      CHECK(region.epilogue.residual == r);
      CHECK(region.epilogue.beta == 1.0);
      CHECK(region.epilogue.bias == -1);
      CHECK(region.inputs == std::vector<NodeId>{t.x, t.w, r});
      CHECK(any_decision(plan, true, "residual %3 added through beta = 1"));
    }
  }
  // A residual scaled by a constant: beta is the constant, and the mul is part of the call even
  // though it was recorded before the matmul.
  Graph g;
  const NodeId r = ir::add_input(g, DType::bf16, {R, C});
  const NodeId scaled = bin(g, Op::mul, scalar(g, DType::bf16, 0.5), r);
  const NodeId x = ir::add_input(g, DType::bf16, {R, K}), w = ir::add_input(g, DType::bf16, {K, C});
  const NodeId mm = ir::add_matmul(g, x, w);
  g.add_output(bin(g, Op::add, mm, scaled));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() == 0);
  const Region& region = only_gemm(plan);
  CHECK(region.epilogue.residual == r);
  CHECK(region.epilogue.beta == 0.5);
  CHECK(region.inputs == std::vector<NodeId>{x, w, r});
  CHECK(contains(region.nodes, scaled));
  CHECK(any_decision(plan, true, "beta = 0.5 scales the residual %0"));

  // The residual may be computed by a kernel (or another call); that region runs first.
  Gemm k(DType::f32);
  const NodeId y = ir::add_input(k.g, DType::f32, {R, C});
  const NodeId e = un(k.g, Op::exp, y);
  k.g.add_output(bin(k.g, Op::add, k.mm, e));
  const Plan computed = plan_of(k.g);
  CHECK(computed.kernel_count() == 1);
  CHECK(only_gemm(computed).epilogue.residual == e);
  CHECK(computed.regions.back().kind == RegionKind::gemm);
  CHECK(any_decision(computed, false,
                     "read from memory by the cuBLASLt epilogue of matmul %2 "
                     "as its residual"));
}

TEST_CASE("the sum of two GEMMs is two calls, the second the first's residual",
          "[fusion][epilogue]") {
  Gemm t(DType::bf16);
  const NodeId w2 = ir::add_input(t.g, DType::bf16, {K, C});
  const NodeId mm2 = ir::add_matmul(t.g, t.x, w2);
  t.g.add_output(bin(t.g, Op::add, t.mm, mm2));
  const Plan plan = plan_of(t.g);
  CHECK(plan.library_call_count() == 2);
  CHECK(plan.kernel_count() == 0);
  REQUIRE(plan.regions.size() == 2);
  CHECK(plan.regions[0].outputs == std::vector<NodeId>{mm2});
  CHECK(plan.regions[1].epilogue.residual == mm2);
  CHECK(any_refusal(plan.regions[0], "folds into the epilogue of matmul %2"));
}

TEST_CASE("bias and residual fold together, then the activation", "[fusion][epilogue]") {
  for (bool bias_first : {true, false}) {
    Gemm t(DType::bf16);
    const NodeId b = ir::add_input(t.g, DType::bf16, {C});
    const NodeId r = ir::add_input(t.g, DType::bf16, {R, C});
    const NodeId sum = bias_first ? bin(t.g, Op::add, bin(t.g, Op::add, t.mm, b), r)
                                  : bin(t.g, Op::add, bin(t.g, Op::add, t.mm, r), b);
    t.g.add_output(un(t.g, Op::relu, sum));
    const Plan plan = plan_of(t.g);
    CHECK(plan.kernel_count() == 0);
    const Region& region = only_gemm(plan);
    CHECK(region.epilogue.bias == b);
    CHECK(region.epilogue.residual == r);
    CHECK(region.epilogue.activation == Act::relu);
    CHECK(region.inputs == std::vector<NodeId>{t.x, t.w, b, r});
  }
}

TEST_CASE("what comes after the activation starts a new region", "[fusion][epilogue]") {
  Gemm t(DType::bf16);
  const NodeId b = ir::add_input(t.g, DType::bf16, {C});
  const NodeId r = ir::add_input(t.g, DType::bf16, {R, C});
  const NodeId act = un(t.g, Op::relu, bin(t.g, Op::add, t.mm, b));
  t.g.add_output(bin(t.g, Op::add, act, r));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 1);
  const Region& region = only_gemm(plan);
  CHECK(region.epilogue.activation == Act::relu);
  CHECK(region.epilogue.residual == -1);
  CHECK(region.outputs == std::vector<NodeId>{act});
  CHECK(any_refusal(region, "comes after the relu activation, which cuBLASLt applies last"));
  CHECK(any_decision(plan, false, "comes after the relu activation"));
}

TEST_CASE("exact gelu does not fold; the bias before it does", "[fusion][epilogue]") {
  Gemm t(DType::bf16);
  const NodeId b = ir::add_input(t.g, DType::bf16, {C});
  const NodeId pre = bin(t.g, Op::add, t.mm, b);
  t.g.add_output(un(t.g, Op::gelu, pre));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 1);
  const Region& region = only_gemm(plan);
  CHECK(region.epilogue.bias == b);
  CHECK(region.epilogue.activation == Act::none);
  CHECK(region.outputs == std::vector<NodeId>{pre});
  REQUIRE(region.epilogue.refusals.size() == 1);
  CHECK(region.epilogue.refusals[0] ==
        "gelu %5 is the exact (erf) GELU; cuBLASLt's GELU epilogue is the tanh approximation, so "
        "only gelu_tanh folds");
  CHECK(any_decision(plan, false,
                     "matmul %2 is a library call: what follows starts a new region "
                     "(gelu %5 is the exact (erf) GELU"));
}

TEST_CASE("a bias of another dtype is refused", "[fusion][epilogue]") {
  for (auto [gemm_dt, bias_dt] : {std::pair{DType::bf16, DType::f32}, {DType::f32, DType::bf16}}) {
    INFO(dtype_name(gemm_dt) << " GEMM, " << dtype_name(bias_dt) << " bias");
    Gemm t(gemm_dt);
    const NodeId b = ir::add_input(t.g, bias_dt, {C});
    t.g.add_output(un(t.g, Op::relu, bin(t.g, Op::add, t.mm, b)));
    const Plan plan = plan_of(t.g);
    CHECK(plan.kernel_count() == 1);
    const Region& region = only_gemm(plan);
    CHECK(region.epilogue.bias == -1);
    CHECK(region.epilogue.activation == Act::none);
    CHECK(region.outputs == std::vector<NodeId>{t.mm});
    CHECK(any_refusal(region, fmt::format("bias %{} is {} but the GEMM writes {}", b,
                                          dtype_name(bias_dt), dtype_name(gemm_dt))));
  }
  // A residual of another dtype likewise.
  Gemm t(DType::f32);
  const NodeId r = ir::add_input(t.g, DType::bf16, {R, C});
  t.g.add_output(bin(t.g, Op::add, t.mm, r));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 1);
  CHECK(any_refusal(only_gemm(plan), "residual %3 is bf16 but the GEMM writes f32"));
}

TEST_CASE("a value needed before the activation stops the chain there", "[fusion][epilogue]") {
  // The pre-activation value is also a graph output.
  Gemm t(DType::bf16);
  const NodeId b = ir::add_input(t.g, DType::bf16, {C});
  const NodeId pre = bin(t.g, Op::add, t.mm, b);
  const NodeId act = un(t.g, Op::relu, pre);
  t.g.set_outputs({act, pre});
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 1);
  const Region& region = only_gemm(plan);
  CHECK(region.epilogue.bias == b);
  CHECK(region.epilogue.activation == Act::none);
  CHECK(region.outputs == std::vector<NodeId>{pre});
  CHECK(any_refusal(region,
                    "%4 is a graph output, so it is written as it is: relu %5 cannot "
                    "fold into the epilogue"));
  CHECK(plan.regions.back().kind == RegionKind::pointwise);
  CHECK(plan.regions.back().outputs == std::vector<NodeId>{act});

  // The pre-activation value is read by another region.
  Gemm u(DType::f32);
  const NodeId b2 = ir::add_input(u.g, DType::f32, {C});
  const NodeId pre2 = bin(u.g, Op::add, u.mm, b2);
  const NodeId s = ir::add_reduce(u.g, Op::sum, pre2, {0}, false);
  u.g.set_outputs({un(u.g, Op::relu, pre2), s});
  const Plan two = plan_of(u.g);
  const Region& r2 = only_gemm(two);
  CHECK(r2.epilogue.bias == b2);
  CHECK(r2.epilogue.activation == Act::none);
  CHECK(r2.outputs == std::vector<NodeId>{pre2});
  CHECK(any_refusal(r2, "%4 is read by %5 and %6, so it is written as it is"));

  // The matmul's own result is an output: nothing folds.
  Gemm v(DType::f32);
  const NodeId b3 = ir::add_input(v.g, DType::f32, {C});
  v.g.set_outputs({v.mm, bin(v.g, Op::add, v.mm, b3)});
  const Plan three = plan_of(v.g);
  CHECK(three.kernel_count() == 1);
  CHECK(only_gemm(three).epilogue.bias == -1);
  CHECK(any_refusal(only_gemm(three), "%2 is a graph output"));
}

TEST_CASE("epilogue folding disabled folds nothing and says so", "[fusion][epilogue]") {
  for (const Graph& g :
       {gemm_bias_relu(DType::bf16), gemm_bias_gelu(DType::f32), mlp(DType::bf16)}) {
    const Plan plan = plan_of(g, PlanOptions{.epilogue = false});
    for (const Region& r : plan.regions) {
      if (r.kind != RegionKind::gemm) continue;
      CHECK(r.epilogue.bias == -1);
      CHECK(r.epilogue.residual == -1);
      CHECK(r.epilogue.activation == Act::none);
      CHECK(r.epilogue.alpha == 1.0);
      CHECK(op_names(plan, r) == std::vector<std::string>{"matmul"});
      CHECK(r.epilogue.refusals ==
            std::vector<std::string>{"epilogue folding disabled (FUSEJIT_DISABLE=epilogue)"});
    }
    CHECK(plan.kernel_count() == plan.library_call_count());
    CHECK_FALSE(any_decision(plan, true, "epilogue"));
    CHECK(any_decision(plan, false, "(epilogue folding disabled (FUSEJIT_DISABLE=epilogue))"));
  }
  // Fusion disabled: nothing folds either.
  const Plan off = plan_of(gemm_bias_relu(DType::f32), PlanOptions{.fusion = false});
  CHECK(off.kernel_count() == 2);
  CHECK(any_refusal(only_gemm(off), "fusion disabled"));
}

TEST_CASE("batched GEMMs: the bias is a vector, the residual has the full shape",
          "[fusion][epilogue]") {
  // [4,R,K] @ [K,C] + [C]: the bias folds, broadcast over every batch.
  Gemm t(DType::bf16, {4, R, K}, {K, C});
  const NodeId b = ir::add_input(t.g, DType::bf16, {C});
  t.g.add_output(un(t.g, Op::gelu_tanh, bin(t.g, Op::add, t.mm, b)));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 0);
  CHECK(only_gemm(plan).epilogue.bias == b);
  CHECK(only_gemm(plan).epilogue.activation == Act::gelu_tanh);
  CHECK(only_gemm(plan).shape == Shape{4, R, C});

  // [4,R,K] @ [4,K,C] + [4,R,C]: a residual of the full shape folds.
  Gemm u(DType::f32, {4, R, K}, {4, K, C});
  const NodeId r = ir::add_input(u.g, DType::f32, {4, R, C});
  u.g.add_output(bin(u.g, Op::add, u.mm, r));
  const Plan full = plan_of(u.g);
  CHECK(full.kernel_count() == 0);
  CHECK(only_gemm(full).epilogue.residual == r);

  // + [R,C]: broadcast over the batch, neither a bias nor a residual.
  Gemm v(DType::f32, {4, R, K}, {4, K, C});
  const NodeId rb = ir::add_input(v.g, DType::f32, {R, C});
  v.g.add_output(bin(v.g, Op::add, v.mm, rb));
  const Plan partial = plan_of(v.g);
  CHECK(partial.kernel_count() == 1);
  CHECK(only_gemm(partial).epilogue.residual == -1);
  CHECK(any_refusal(only_gemm(partial),
                    "adds %3 [64,256]: neither a bias (a vector [256] along the last dim) nor a "
                    "residual of the output's full shape [4,64,256]"));

  // + [4,1,C]: a bias per batch is not cuBLASLt's bias.
  Gemm w(DType::f32, {4, R, K}, {K, C});
  const NodeId bb = ir::add_input(w.g, DType::f32, {4, 1, C});
  w.g.add_output(bin(w.g, Op::add, w.mm, bb));
  const Plan per_batch = plan_of(w.g);
  CHECK(per_batch.kernel_count() == 1);
  CHECK(only_gemm(per_batch).epilogue.bias == -1);
}

TEST_CASE("linear: x @ transpose(W) + b is transpose_b and a bias", "[fusion][epilogue]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    Graph g;
    const NodeId x = ir::add_input(g, dt, {4, R, K});
    const NodeId w = ir::add_input(g, dt, {C, K});  // [out_features, in_features]
    const NodeId b = ir::add_input(g, dt, {C});
    const NodeId wt = ir::add_permute(g, w, {1, 0});
    g.add_output(un(g, Op::relu, bin(g, Op::add, ir::add_matmul(g, x, wt), b)));
    const Plan plan = plan_of(g);
    CHECK(plan.kernel_count() == 0);
    const Region& r = only_gemm(plan);
    CHECK(r.epilogue.transpose_b);
    CHECK_FALSE(r.epilogue.transpose_a);
    CHECK(r.epilogue.bias == b);
    CHECK(r.epilogue.activation == Act::relu);
    CHECK(r.inputs == std::vector<NodeId>{x, w, b});
    CHECK(op_names(plan, r) == std::vector<std::string>{"permute", "matmul", "add", "relu"});
    CHECK(any_decision(plan, true, "transpose_b"));
  }
  // Transposing A as well, with a residual.
  Graph g;
  const NodeId a = ir::add_input(g, DType::f32, {K, R});
  const NodeId w = ir::add_input(g, DType::f32, {C, K});
  const NodeId r = ir::add_input(g, DType::f32, {R, C});
  const NodeId mm = ir::add_matmul(g, ir::add_permute(g, a, {1, 0}), ir::add_permute(g, w, {1, 0}));
  g.add_output(bin(g, Op::add, mm, r));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() == 0);
  const Region& region = only_gemm(plan);
  CHECK(region.epilogue.transpose_a);
  CHECK(region.epilogue.transpose_b);
  CHECK(region.inputs == std::vector<NodeId>{a, w, r});
}

TEST_CASE("a bias through views of a vector folds; other shapes do not", "[fusion][epilogue]") {
  // [C] reshaped to [1,C] and expanded to [R,C]: still element j of the vector.
  Gemm t(DType::f32);
  const NodeId b = ir::add_input(t.g, DType::f32, {C});
  const NodeId view = ir::add_expand(t.g, ir::add_reshape(t.g, b, {1, C}), {R, C});
  t.g.add_output(bin(t.g, Op::add, t.mm, view));
  const Plan plan = plan_of(t.g);
  CHECK(plan.kernel_count() == 0);
  const Region& r = only_gemm(plan);
  CHECK(r.epilogue.bias == b);
  CHECK(r.inputs == std::vector<NodeId>{t.x, t.w, b});
  CHECK(contains(r.nodes, view));

  // An input of shape [1,C] is a bias too.
  Gemm u(DType::f32);
  const NodeId b2 = ir::add_input(u.g, DType::f32, {1, C});
  u.g.add_output(bin(u.g, Op::add, u.mm, b2));
  CHECK(only_gemm(plan_of(u.g)).epilogue.bias == b2);

  // A column [R,1] is not along the last dim; a scalar is neither a bias nor a residual.
  for (const bool column : {true, false}) {
    Gemm v(DType::f32);
    const NodeId c = column ? ir::add_input(v.g, DType::f32, {R, 1}) : scalar(v.g, DType::f32, 1);
    v.g.add_output(bin(v.g, Op::add, v.mm, c));
    const Plan p = plan_of(v.g);
    CHECK(p.kernel_count() == 1);
    CHECK(only_gemm(p).epilogue.bias == -1);
    CHECK(any_refusal(only_gemm(p), "neither a bias"));
  }

  // A view of a full-shape value is not a buffer laid out as the output.
  Gemm w(DType::f32);
  const NodeId rt = ir::add_input(w.g, DType::f32, {C, R});
  w.g.add_output(bin(w.g, Op::add, w.mm, ir::add_permute(w.g, rt, {1, 0})));
  const Plan p = plan_of(w.g);
  CHECK(p.kernel_count() == 1);
  CHECK(any_refusal(only_gemm(p), "which is not in memory"));
}

TEST_CASE("a folded epilogue does not pull other readers of its inputs into the call",
          "[fusion][epilogue]") {
  // b feeds the epilogue and a kernel; x feeds the matmul and a kernel.
  Gemm t(DType::f32, {R, K}, {K, C});
  const NodeId b = ir::add_input(t.g, DType::f32, {C});
  const NodeId out = un(t.g, Op::relu, bin(t.g, Op::add, t.mm, b));
  t.g.set_outputs({out, un(t.g, Op::exp, b), un(t.g, Op::exp, t.x)});
  const Plan plan = plan_of(t.g);
  CHECK(plan.library_call_count() == 1);
  CHECK(only_gemm(plan).outputs == std::vector<NodeId>{out});
  CHECK(op_names(plan, only_gemm(plan)) == std::vector<std::string>{"matmul", "add", "relu"});
}

TEST_CASE("the epilogue check catches a description that differs from the nodes",
          "[fusion][epilogue]") {
  // The check every plan above passed is not vacuous: change one field and it fails.
  Gemm t(DType::bf16);
  const NodeId b = ir::add_input(t.g, DType::bf16, {C});
  const NodeId r = ir::add_input(t.g, DType::bf16, {R, C});
  t.g.add_output(un(t.g, Op::gelu_tanh, bin(t.g, Op::add, bin(t.g, Op::add, t.mm, b), r)));
  const Plan plan = plan_of(t.g);
  const std::vector<ir::HostTensor> inputs = random_inputs(t.g, 11);
  Memory memory;
  run_plan(plan, inputs, &memory);
  const Region& good = only_gemm(plan);
  CHECK(epilogue_error(plan, good, memory) <= kEpilogueUnits);
  for (int change = 0; change < 5; ++change) {
    INFO("change " << change);
    Region bad = good;
    if (change == 0) bad.epilogue.alpha = 1.0625;
    if (change == 1) bad.epilogue.beta = 0.9375;
    if (change == 2) bad.epilogue.activation = Act::relu;
    if (change == 3) {  // no residual
      bad.epilogue.residual = -1;
      bad.epilogue.beta = 0;
      bad.inputs.pop_back();
    }
    if (change == 4) {  // no bias
      bad.epilogue.bias = -1;
      bad.inputs.erase(bad.inputs.begin() + 2);
    }
    CHECK(epilogue_error(plan, bad, memory) > kEpilogueUnits);
  }
}

// Weight-only int8: x [rows, K] @ cast(w [N, K] i8, dt)^T * scale [N] (+ bias).
struct Int8Gemm {
  Graph g;
  NodeId x = -1, w = -1, cast = -1, mm = -1, scale = -1;
  Int8Gemm(DType dt, int64_t rows) {
    x = ir::add_input(g, dt, {rows, K});
    w = ir::add_input(g, DType::i8, {C, K});
    scale = ir::add_input(g, dt, {C});
    cast = ir::add_cast(g, w, dt);
    mm = ir::add_matmul(g, x, ir::add_permute(g, cast, {1, 0}));
  }
};

TEST_CASE("int8 weights: the cast and the scale fold into a call of at most 16 rows",
          "[fusion][epilogue][int8]") {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    INFO(dtype_name(dt));
    Int8Gemm t(dt, 16);
    const NodeId bias = ir::add_input(t.g, dt, {C});
    const NodeId y = bin(t.g, Op::add, bin(t.g, Op::mul, t.mm, t.scale), bias);
    t.g.add_output(y);
    const Plan plan = plan_of(t.g);
    CHECK(plan.kernel_count() == 0);  // no kernel writes the cast weights
    const Region& r = only_gemm(plan);
    CHECK(r.epilogue.int8_b);
    CHECK(r.epilogue.scale == t.scale);
    CHECK(r.epilogue.bias == bias);
    CHECK(r.inputs == std::vector<NodeId>{t.x, t.w, t.scale, bias});
    CHECK(r.outputs == std::vector<NodeId>{y});
    CHECK(any_decision(plan, true, "scale %" + std::to_string(t.scale) + ", the int8 weights'"));
    CHECK_THAT(plan_to_text(plan), ContainsSubstring("int8 B, scale %"));
  }
}

TEST_CASE("int8 weights: more than 16 rows, or a bias first, stay a cast kernel and a plain call",
          "[fusion][epilogue][int8]") {
  // 17 rows: cuBLASLt runs it, on the weights a kernel casts; the scale is the next kernel's.
  Int8Gemm tall(DType::bf16, 17);
  tall.g.add_output(bin(tall.g, Op::mul, tall.mm, tall.scale));
  Plan plan = plan_of(tall.g);
  const Region& r = only_gemm(plan);
  CHECK_FALSE(r.epilogue.int8_b);
  CHECK(r.inputs[1] == tall.cast);
  CHECK(r.epilogue.scale < 0);
  CHECK(any_refusal(r, "only a constant factor folds"));
  CHECK(plan.kernel_count() == 2);
  // A factor after a bias is not the weights' scale.
  Int8Gemm late(DType::bf16, 1);
  const NodeId bias = ir::add_input(late.g, DType::bf16, {C});
  late.g.add_output(bin(late.g, Op::mul, bin(late.g, Op::add, late.mm, bias), late.scale));
  plan = plan_of(late.g);
  CHECK(only_gemm(plan).epilogue.int8_b);
  CHECK(only_gemm(plan).epilogue.scale < 0);
  CHECK(any_refusal(only_gemm(plan), "scales after a bias or residual is added"));
  // Weights read [K, N] (no transpose): not the skinny-GEMM kernel's layout.
  Graph g;
  const NodeId x = ir::add_input(g, DType::bf16, {1, K});
  const NodeId w = ir::add_input(g, DType::i8, {K, C});
  g.add_output(ir::add_matmul(g, x, ir::add_cast(g, w, DType::bf16)));
  plan = plan_of(g);
  CHECK_FALSE(only_gemm(plan).epilogue.int8_b);
  CHECK(plan.kernel_count() == 1);  // the cast
}
