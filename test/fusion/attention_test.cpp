// fusion/attention: the matcher of attention written from primitives, on the variants it
// takes (where the scale sits, the masks, softmax by hand or as the API records it, dtypes,
// grouped-query heads) and on look-alikes it must refuse.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "fusion/attention.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/interp.h"
#include "ir/shape.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::fusion::AttentionMask;
using fusejit::fusion::AttentionPattern;
using fusejit::fusion::match_attention;

namespace {

// softmax over the last axis as the API records it: in f32, cast back to x's dtype.
NodeId softmax(Graph& g, NodeId x) {
  const DType d = g.node(x).dtype;
  const NodeId t = d == DType::f32 ? x : add_cast(g, x, DType::f32);
  const int64_t last = static_cast<int64_t>(g.node(x).shape.size()) - 1;
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, t, add_reduce(g, Op::max, t, {last}, true)));
  const NodeId p = add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {last}, true));
  return d == DType::f32 ? p : add_cast(g, p, d);
}

NodeId transpose_last(Graph& g, NodeId x) {
  const auto r = static_cast<int64_t>(g.node(x).shape.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r - 2; ++i) perm.push_back(i);
  perm.push_back(r - 1);
  perm.push_back(r - 2);
  return add_permute(g, x, perm);
}

// The causal condition as the transformer example writes it: col > row over arange(s).
NodeId future(Graph& g, int64_t s) {
  const NodeId pos = add_arange(g, s, DType::i32);
  return add_binary(g, Op::gt, add_reshape(g, pos, {1, s}), add_reshape(g, pos, {s, 1}));
}

struct Built {
  Graph g;
  NodeId q = -1, k = -1, v = -1, out = -1, mask = -1;
};

enum class Scale { scores, q, none };
enum class Mask { none, additive, causal_where, causal_keep, window, boolean };

Built attention(DType d, int64_t b, int64_t h, int64_t s, int64_t dh, Scale scale, Mask mask) {
  Built x;
  Graph& g = x.g;
  x.q = add_input(g, d, {b, h, s, dh});
  x.k = add_input(g, d, {b, h, s, dh});
  x.v = add_input(g, d, {b, h, s, dh});
  const NodeId c = add_constant(g, d, 1.0 / std::sqrt(double(dh)));
  const NodeId q = scale == Scale::q ? add_binary(g, Op::mul, x.q, c) : x.q;
  NodeId scores = add_matmul(g, q, transpose_last(g, x.k));
  if (scale == Scale::scores) scores = add_binary(g, Op::mul, scores, c);
  const NodeId ninf = add_constant(g, d, -std::numeric_limits<double>::infinity());
  switch (mask) {
    case Mask::none:
      break;
    case Mask::additive:
      x.mask = add_input(g, d, {s, s});
      scores = add_binary(g, Op::add, scores, x.mask);
      break;
    case Mask::causal_where:  // where(col > row, -inf, scores)
      scores = add_where(g, future(g, s), ninf, scores);
      break;
    case Mask::causal_keep: {  // where(row >= col, scores, -inf)
      const NodeId pos = add_arange(g, s, DType::i64);
      const NodeId keep =
          add_binary(g, Op::ge, add_reshape(g, pos, {s, 1}), add_reshape(g, pos, {1, s}));
      scores = add_where(g, keep, scores, ninf);
      break;
    }
    case Mask::window: {  // where(row > col, scores, -inf): the diagonal is hidden too
      const NodeId pos = add_arange(g, s, DType::i32);
      const NodeId keep =
          add_binary(g, Op::gt, add_reshape(g, pos, {s, 1}), add_reshape(g, pos, {1, s}));
      scores = add_where(g, keep, scores, ninf);
      break;
    }
    case Mask::boolean:
      x.mask = add_input(g, DType::boolean, {b, 1, s, s});
      scores = add_where(g, x.mask, scores, ninf);
      break;
  }
  x.out = add_matmul(g, softmax(g, scores), x.v);
  g.set_outputs({x.out});
  return x;
}

AttentionPattern require_match(const Built& x) {
  std::string why;
  const auto p = match_attention(x.g, x.out, &why);
  INFO(why);
  REQUIRE(p.has_value());
  CHECK(p->output == x.out);
  CHECK(p->q == x.q);
  CHECK(p->k == x.k);
  CHECK(p->v == x.v);
  CHECK(p->k_source == x.k);
  CHECK(p->v_source == x.v);
  CHECK_FALSE(p->kv_broadcast);
  CHECK(x.g.node(p->scores).op == Op::matmul);
  return *p;
}

}  // namespace

TEST_CASE("attention from primitives is recognized in every variant", "[fusion][attention]") {
  for (const DType d : {DType::bf16, DType::f16, DType::f32}) {
    for (const int64_t dh : {64, 128}) {
      INFO(dtype_name(d) << " head dim " << dh);
      const AttentionPattern p = require_match(attention(d, 2, 4, 100, dh, Scale::scores, Mask::none));
      CHECK(p.scale == Approx(1.0 / std::sqrt(double(dh))));
      CHECK(p.mask == AttentionMask::none);
      CHECK(p.seq_q == 100);
      CHECK(p.seq_kv == 100);
      CHECK(p.head_dim == dh);
      CHECK(p.value_dim == dh);
    }
  }
  SECTION("the scale folded into q") {
    const AttentionPattern p = require_match(attention(DType::bf16, 2, 4, 77, 64, Scale::q, Mask::none));
    CHECK(p.scale == Approx(0.125).epsilon(1e-2));  // a bf16 constant
  }
  SECTION("no scale") {
    CHECK(require_match(attention(DType::f16, 1, 2, 33, 64, Scale::none, Mask::none)).scale == 1.0);
  }
  SECTION("an additive mask input") {
    const Built x = attention(DType::bf16, 2, 4, 100, 64, Scale::scores, Mask::additive);
    const AttentionPattern p = require_match(x);
    CHECK(p.mask == AttentionMask::additive);
    CHECK(p.mask_node == x.mask);
    CHECK(p.describe(x.g).find("additive mask") != std::string::npos);
  }
  SECTION("a causal mask from arange, as the transformer example writes it") {
    const AttentionPattern p =
        require_match(attention(DType::bf16, 2, 4, 100, 128, Scale::scores, Mask::causal_where));
    CHECK(p.mask == AttentionMask::causal);
    CHECK(p.fill >= 0);
  }
  SECTION("a causal mask written as what to keep") {
    CHECK(require_match(attention(DType::f32, 1, 1, 9, 64, Scale::q, Mask::causal_keep)).mask ==
          AttentionMask::causal);
  }
  SECTION("an arange comparison that is not causal is a computed mask") {
    CHECK(require_match(attention(DType::f32, 1, 1, 9, 64, Scale::q, Mask::window)).mask ==
          AttentionMask::computed);
  }
  SECTION("a boolean mask input") {
    const Built x = attention(DType::bf16, 2, 4, 100, 64, Scale::scores, Mask::boolean);
    const AttentionPattern p = require_match(x);
    CHECK(p.mask == AttentionMask::boolean);
    CHECK(p.mask_node == x.mask);
  }
}

TEST_CASE("grouped-query heads broadcast through expand are recognized", "[fusion][attention]") {
  // k and v: [2,2,1,64,64] expanded to [2,2,4,64,64] and merged to 8 heads.
  Graph g;
  const NodeId q = add_input(g, DType::bf16, {2, 8, 64, 64});
  const NodeId k_small = add_input(g, DType::bf16, {2, 2, 1, 64, 64});
  const NodeId v_small = add_input(g, DType::bf16, {2, 2, 1, 64, 64});
  const auto heads = [&](NodeId t) {
    return add_reshape(g, add_expand(g, t, {2, 2, 4, 64, 64}), {2, 8, 64, 64});
  };
  const NodeId k = heads(k_small), v = heads(v_small);
  const NodeId scores =
      add_binary(g, Op::mul, add_matmul(g, q, transpose_last(g, k)), add_constant(g, DType::bf16, 0.125));
  const NodeId out = add_matmul(g, softmax(g, scores), v);
  g.set_outputs({out});
  std::string why;
  const auto p = match_attention(g, out, &why);
  INFO(why);
  REQUIRE(p.has_value());
  CHECK(p->k_source == k_small);
  CHECK(p->v_source == v_small);
  CHECK(p->kv_broadcast);
  CHECK(p->describe(g).find("heads broadcast") != std::string::npos);
  CHECK(fusion::find_attention(g).size() == 1);
}

TEST_CASE("look-alikes of attention are refused with a reason", "[fusion][attention]") {
  SECTION("the probabilities are also an output") {
    Built x = attention(DType::f32, 1, 2, 16, 64, Scale::scores, Mask::none);
    const NodeId probs = x.g.node(x.out).inputs[0];
    x.g.set_outputs({x.out, probs});
    std::string why;
    CHECK_FALSE(match_attention(x.g, x.out, &why).has_value());
    CHECK(why.find("output of the graph") != std::string::npos);
  }
  SECTION("the scores are read elsewhere") {
    Built x = attention(DType::f32, 1, 2, 16, 64, Scale::none, Mask::none);
    NodeId scores = -1;
    for (size_t i = 0; i < x.g.size(); ++i) {
      if (x.g.nodes()[i].op == Op::matmul) { scores = static_cast<NodeId>(i); break; }
    }
    const NodeId other = add_unary(x.g, Op::relu, scores);
    x.g.set_outputs({x.out, other});
    std::string why;
    CHECK_FALSE(match_attention(x.g, x.out, &why).has_value());
    CHECK(why.find("read outside the pattern") != std::string::npos);
  }
  SECTION("a softmax over another axis") {
    Graph g;
    const NodeId q = add_input(g, DType::f32, {2, 16, 64});
    const NodeId k = add_input(g, DType::f32, {2, 16, 64});
    const NodeId s = add_matmul(g, q, transpose_last(g, k));
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, s, add_reduce(g, Op::max, s, {1}, true)));
    const NodeId p = add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {1}, true));
    const NodeId out = add_matmul(g, p, k);
    g.set_outputs({out});
    std::string why;
    CHECK_FALSE(match_attention(g, out, &why).has_value());
    CHECK(why.find("last axis") != std::string::npos);
  }
  SECTION("scores multiplied by a tensor, and a plain matmul") {
    Graph g;
    const NodeId q = add_input(g, DType::f32, {16, 64});
    const NodeId k = add_input(g, DType::f32, {16, 64});
    const NodeId w = add_input(g, DType::f32, {16, 16});
    const NodeId s = add_binary(g, Op::mul, add_matmul(g, q, transpose_last(g, k)), w);
    const NodeId out = add_matmul(g, softmax(g, s), k);
    const NodeId plain = add_matmul(g, q, transpose_last(g, k));
    g.set_outputs({out, plain});
    std::string why;
    CHECK_FALSE(match_attention(g, out, &why).has_value());
    CHECK(why.find("multiplied by a tensor") != std::string::npos);
    CHECK_FALSE(match_attention(g, plain, &why).has_value());
    CHECK(why.find("softmax") != std::string::npos);
    CHECK(fusion::find_attention(g).empty());
  }
  SECTION("no transpose of k") {
    Graph g;
    const NodeId q = add_input(g, DType::f32, {16, 64});
    const NodeId kt = add_input(g, DType::f32, {64, 16});
    const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, kt)), q);
    g.set_outputs({out});
    std::string why;
    CHECK_FALSE(match_attention(g, out, &why).has_value());
    CHECK(why.find("transpose") != std::string::npos);
  }
}

TEST_CASE("the plan says where it recognized attention", "[fusion][attention]") {
  const Built x = attention(DType::bf16, 2, 4, 100, 64, Scale::scores, Mask::causal_where);
  fusion::PlanOptions off;
  off.attention = false;
  const fusion::Plan plan = fusion::make_plan(x.g, off);
  int said = 0;
  for (const fusion::Decision& d : plan.decisions) {
    if (d.reason.find("attention softmax(q kᵀ * 0.125, causal) v") == std::string::npos) continue;
    ++said;
    CHECK_FALSE(d.fused);
    CHECK(d.reason.find("fused attention is off (FUSEJIT_ATTENTION=0)") != std::string::npos);
  }
  CHECK(said == 1);
  // A graph without attention says nothing of it.
  const Built no = attention(DType::f32, 1, 2, 16, 64, Scale::scores, Mask::none);
  Graph g = no.g;
  g.set_outputs({g.node(no.out).inputs[0], no.out});  // the probabilities are an output too
  for (const fusion::Decision& d : fusion::make_plan(g, off).decisions) {
    CHECK(d.reason.find("attention") == std::string::npos);
  }
}

namespace {

fusion::Plan fused_plan(const Graph& g) {
  fusion::PlanOptions o;
  o.attention = true;
  return fusion::make_plan(g, o);
}

const fusion::Region* attention_region(const fusion::Plan& plan) {
  const fusion::Region* found = nullptr;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind != fusion::RegionKind::attention) continue;
    CHECK(found == nullptr);
    found = &r;
  }
  return found;
}

std::string fused_reason(const fusion::Plan& plan) {
  for (const fusion::Decision& d : plan.decisions) {
    if (d.reason.starts_with("attention ")) return (d.fused ? "fused: " : "cut: ") + d.reason;
  }
  return "";
}

}  // namespace

TEST_CASE("with FUSEJIT_ATTENTION, attention is one region reading q, k, v and the mask",
          "[fusion][attention]") {
  const int64_t b = 2, h = 4, s = 100, dh = 64;
  for (const Mask m : {Mask::none, Mask::additive, Mask::causal_where, Mask::causal_keep,
                       Mask::boolean}) {
    for (const Scale sc : {Scale::scores, Scale::q}) {
      INFO("mask " << static_cast<int>(m) << " scale " << static_cast<int>(sc));
      const Built x = attention(DType::bf16, b, h, s, dh, sc, m);
      const fusion::Plan plan = fused_plan(x.g);
      INFO(fusion::plan_to_text(plan));
      REQUIRE(plan.regions.size() == 1);
      CHECK(plan.kernel_count() == 1);
      CHECK(plan.library_call_count() == 0);
      const fusion::Region* r = attention_region(plan);
      REQUIRE(r != nullptr);
      // The plan's graph is the optimized one: its inputs are q, k, v and the mask, in order.
      std::vector<NodeId> inputs = plan.graph.inputs();
      CHECK(inputs.size() == (x.mask >= 0 ? 4u : 3u));
      CHECK(r->inputs == inputs);
      CHECK(r->outputs == plan.graph.outputs());
      CHECK(r->shape == Shape{b, h, s, dh});
      CHECK(r->attention.scale == Approx(0.125).epsilon(1e-2));
      CHECK(fused_reason(plan).starts_with("fused: attention softmax("));
      const auto layout = fusion::attention_layout(plan.graph, r->attention);
      REQUIRE(layout.has_value());
      CHECK(layout->batch == b);
      CHECK(layout->heads == h);
      CHECK(layout->q.strides == std::array<int64_t, 4>{h * s * dh, s * dh, dh, 1});
      CHECK(layout->k.head_group == 1);
      if (m == Mask::additive) {  // [s, s] broadcast over batch and heads
        CHECK(layout->mask.strides == std::array<int64_t, 4>{0, 0, s, 1});
      }
      if (m == Mask::boolean) {  // [b, 1, s, s]
        CHECK(layout->mask.strides == std::array<int64_t, 4>{s * s, 0, s, 1});
        CHECK(r->attention.fill_where_true == false);
      }
      if (m == Mask::causal_where || m == Mask::causal_keep) {
        CHECK(r->attention.mask == AttentionMask::causal);
        CHECK(r->attention.fill == -std::numeric_limits<double>::infinity());
      }
      // On by default; off, the same trace is a GEMM, a normalization and a GEMM.
      CHECK(attention_region(fusion::make_plan(x.g, {})) != nullptr);
      fusion::PlanOptions off;
      off.attention = false;
      const fusion::Plan plain = fusion::make_plan(x.g, off);
      CHECK(plain.library_call_count() == 2);
      CHECK(attention_region(plain) == nullptr);
    }
  }
}

TEST_CASE("fused attention reads grouped-query heads and permuted layouts without copies",
          "[fusion][attention]") {
  SECTION("k and v heads broadcast through expand") {
    Graph g;
    const NodeId q = add_input(g, DType::f16, {2, 8, 77, 128});
    const NodeId k_small = add_input(g, DType::f16, {2, 2, 77, 128});
    const NodeId v_small = add_input(g, DType::f16, {2, 2, 77, 128});
    const auto heads = [&](NodeId t) {
      const NodeId one = add_reshape(g, t, {2, 2, 1, 77, 128});
      return add_reshape(g, add_expand(g, one, {2, 2, 4, 77, 128}), {2, 8, 77, 128});
    };
    const NodeId scores = add_binary(g, Op::mul, add_matmul(g, q, transpose_last(g, heads(k_small))),
                                     add_constant(g, DType::f16, 0.125));
    const NodeId out = add_matmul(g, softmax(g, scores), heads(v_small));
    g.set_outputs({out});
    const fusion::Plan plan = fused_plan(g);
    INFO(fusion::plan_to_text(plan));
    REQUIRE(plan.regions.size() == 1);  // no kernel materializes the expanded heads
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    CHECK(r->inputs == plan.graph.inputs());
    const auto layout = fusion::attention_layout(plan.graph, r->attention);
    REQUIRE(layout.has_value());
    CHECK(layout->k.head_group == 4);
    CHECK(layout->v.head_group == 4);
    CHECK(layout->k.strides == std::array<int64_t, 4>{2 * 77 * 128, 77 * 128, 128, 1});
    CHECK(fused_reason(plan).find("groups of 4") != std::string::npos);
  }
  SECTION("q, k and v read from [b, s, h, d] through permutes, the output permuted back") {
    Graph g;
    const int64_t b = 2, s = 50, h = 3, d = 64;
    const NodeId qi = add_input(g, DType::bf16, {b, s, h, d});
    const NodeId ki = add_input(g, DType::bf16, {b, s, h, d});
    const NodeId vi = add_input(g, DType::bf16, {b, s, h, d});
    const auto bhsd = [&](NodeId t) { return add_permute(g, t, {0, 2, 1, 3}); };
    const NodeId att = add_matmul(g, softmax(g, add_matmul(g, bhsd(qi), transpose_last(g, bhsd(ki)))),
                                  bhsd(vi));
    const NodeId out = add_reshape(g, add_permute(g, att, {0, 2, 1, 3}), {b, s, h * d});
    g.set_outputs({out});
    const fusion::Plan plan = fused_plan(g);
    INFO(fusion::plan_to_text(plan));
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    CHECK(r->inputs == plan.graph.inputs());
    CHECK(r->attention.k_transposed);  // k's permute and the transpose composed into one
    const auto layout = fusion::attention_layout(plan.graph, r->attention);
    REQUIRE(layout.has_value());
    CHECK(layout->q.strides == std::array<int64_t, 4>{s * h * d, d, h * d, 1});
    CHECK(layout->k.strides == std::array<int64_t, 4>{s * h * d, d, h * d, 1});
    // The output is written through the permute and reshape after it: no kernel of its own.
    CHECK(plan.regions.size() == 1);
    CHECK(r->outputs == plan.graph.outputs());
    const NodeId written = plan.graph.outputs().at(0);  // the plan's graph numbers nodes anew
    CHECK(r->attention.written == written);
    CHECK(layout->o.buffer == written);
    CHECK(layout->o.strides == std::array<int64_t, 4>{s * h * d, d, h * d, 1});
    CHECK(layout->out_views.size() == 2);
    CHECK(fusion::plan_to_text(plan).find("through the views after its output") !=
          std::string::npos);
  }
  SECTION("an output permute that a consumer's kernel takes leaves the output dense") {
    Graph g;
    const int64_t b = 2, s = 50, h = 3, d = 64;
    const NodeId qi = add_input(g, DType::bf16, {b, h, s, d});
    const NodeId x = add_input(g, DType::bf16, {b, s, h * d});
    const NodeId att = add_matmul(g, softmax(g, add_matmul(g, qi, transpose_last(g, qi))), qi);
    const NodeId y = add_reshape(g, add_permute(g, att, {0, 2, 1, 3}), {b, s, h * d});
    g.set_outputs({add_binary(g, Op::add, y, x)});
    const fusion::Plan plan = fused_plan(g);
    INFO(fusion::plan_to_text(plan));
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    // The add's kernel reads the output itself, permuting it as it reads.
    REQUIRE(r->outputs.size() == 1);
    CHECK(plan.graph.node(r->outputs[0]).op == Op::matmul);
    CHECK(r->attention.written < 0);
    REQUIRE(plan.regions.size() == 2);
    CHECK(plan.regions[1].inputs.size() == 2);
    CHECK(plan.regions[1].inputs.back() == r->outputs[0]);
  }
  SECTION("an output that is also a graph output is written dense") {
    Graph g;
    const NodeId qi = add_input(g, DType::f16, {1, 2, 40, 64});
    const NodeId att = add_matmul(g, softmax(g, add_matmul(g, qi, transpose_last(g, qi))), qi);
    g.set_outputs({att, add_reshape(g, add_permute(g, att, {0, 2, 1, 3}), {1, 40, 128})});
    CHECK(fusion::output_views(g, att).empty());
    const fusion::Plan plan = fused_plan(g);
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    REQUIRE(r->outputs.size() == 1);
    CHECK(plan.graph.node(r->outputs[0]).op == Op::matmul);
  }
  SECTION("q, k and v sliced out of one fused projection are read in place") {
    // GPT-2's c_attn: [b, s, 3 * h * d] split into q, k and v, heads split out and permuted.
    Graph g;
    const int64_t b = 2, s = 40, h = 3, d = 32;
    const NodeId qkv = add_input(g, DType::bf16, {b, s, 3 * h * d});
    const auto head = [&](int64_t i) {
      const NodeId part = add_slice(g, qkv, 2, i * h * d, (i + 1) * h * d);
      return add_permute(g, add_reshape(g, part, {b, s, h, d}), {0, 2, 1, 3});
    };
    const NodeId q = head(0), k = head(1), v = head(2);
    const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, transpose_last(g, k))), v);
    g.set_outputs({out});
    const fusion::Plan plan = fused_plan(g);
    INFO(fusion::plan_to_text(plan));
    REQUIRE(plan.regions.size() == 1);  // no kernel copies q, k or v out of the projection
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    CHECK(r->inputs == std::vector<NodeId>{qkv, qkv, qkv});
    const auto layout = fusion::attention_layout(plan.graph, r->attention);
    REQUIRE(layout.has_value());
    const std::array<int64_t, 4> strides{s * 3 * h * d, d, 3 * h * d, 1};
    CHECK(layout->q.strides == strides);
    CHECK(layout->k.strides == strides);
    CHECK(layout->v.strides == strides);
    CHECK(layout->q.offset == 0);
    CHECK(layout->k.offset == h * d);
    CHECK(layout->v.offset == 2 * h * d);
  }
  SECTION("q computed by a kernel: that kernel writes q, the attention reads it") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {1, 2, 40, 64});
    const NodeId k = add_input(g, DType::bf16, {1, 2, 40, 64});
    const NodeId q = add_unary(g, Op::neg, x);
    const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, transpose_last(g, k))), k);
    g.set_outputs({out});
    const fusion::Plan plan = fused_plan(g);
    INFO(fusion::plan_to_text(plan));
    REQUIRE(plan.regions.size() == 2);
    REQUIRE(plan.regions[0].outputs.size() == 1);
    const NodeId neg = plan.regions[0].outputs[0];
    CHECK(plan.graph.node(neg).op == Op::neg);
    CHECK(plan.regions[1].kind == fusion::RegionKind::attention);
    const NodeId kin = plan.graph.inputs()[1];
    CHECK(plan.regions[1].inputs == std::vector<NodeId>{neg, kin, kin});
    CHECK(plan.graph.outputs().size() == 1);  // q is written for the attention, not an output
  }
}

TEST_CASE("fused attention keeps the order of scale and mask", "[fusion][attention]") {
  // softmax((q kᵀ + mask) * 0.5) v: the mask is scaled too.
  Graph g;
  const NodeId q = add_input(g, DType::bf16, {1, 1, 32, 64});
  const NodeId mask = add_input(g, DType::f32, {32, 32});
  const NodeId scores = add_binary(g, Op::add, add_cast(g, add_matmul(g, q, transpose_last(g, q)), DType::f32), mask);
  const NodeId scaled = add_binary(g, Op::mul, scores, add_constant(g, DType::f32, 0.5));
  const NodeId out = add_matmul(g, add_cast(g, softmax(g, scaled), DType::bf16), q);
  g.set_outputs({out});
  const fusion::Plan plan = fused_plan(g);
  INFO(fusion::plan_to_text(plan));
  const fusion::Region* r = attention_region(plan);
  REQUIRE(r != nullptr);
  CHECK(r->attention.mask == AttentionMask::additive);
  CHECK(r->attention.scale == 0.5);
  CHECK(r->attention.mask_scale == 0.5);
  CHECK(fusion::plan_to_json(plan).find("\"kind\":\"attention\"") != std::string::npos);
}

TEST_CASE("attention the kernel cannot take is planned as before, saying why",
          "[fusion][attention]") {
  SECTION("a head dim that is not a multiple of 16") {
    const Built x = attention(DType::bf16, 1, 2, 64, 72, Scale::scores, Mask::none);
    const fusion::Plan plan = fused_plan(x.g);
    CHECK(attention_region(plan) == nullptr);
    CHECK(plan.library_call_count() == 2);
    const std::string why = fused_reason(plan);
    CHECK(why.starts_with("cut: attention"));
    CHECK(why.find("head dim of 72") != std::string::npos);
  }
  SECTION("f32") {
    const Built x = attention(DType::f32, 1, 2, 64, 64, Scale::scores, Mask::none);
    CHECK(fused_reason(fused_plan(x.g)).find("f16 and bf16") != std::string::npos);
  }
  SECTION("a mask computed from positions that is not causal") {
    const Built x = attention(DType::bf16, 1, 1, 9, 64, Scale::q, Mask::window);
    const fusion::Plan plan = fused_plan(x.g);
    CHECK(attention_region(plan) == nullptr);
    CHECK(fused_reason(plan).find("not fused yet") != std::string::npos);
  }
}

namespace {

// `views` (of one f16 input of shape `source`, as `views(graph, input)` adds them) run by the
// reference interpreter on an input that holds its own offsets (exact in f16 up to 2048).
ir::HostTensor offsets_seen(const Shape& source,
                            const std::function<NodeId(Graph&, NodeId)>& views) {
  Graph v;
  v.set_outputs({views(v, add_input(v, DType::f16, source))});
  ir::HostTensor offsets(DType::f16, source);
  REQUIRE(offsets.numel() <= 2048);
  for (int64_t i = 0; i < offsets.numel(); ++i) offsets.set(i, double(i));
  return ir::interpret(v, {offsets}).at(0);
}

// How many elements of `seen` (dense over `dims`, [b, h, r, c]) are not the buffer element
// offset + b*s0 + (h / head_group)*s1 + r*s2 + c*s3 that `view` reaches for them.
int64_t misreads(const ir::HostTensor& seen, const fusion::AttentionView& view,
                 const std::array<int64_t, 4>& dims) {
  const auto& st = view.strides;
  int64_t i = 0, wrong = 0;
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t h = 0; h < dims[1]; ++h)
      for (int64_t r = 0; r < dims[2]; ++r)
        for (int64_t c = 0; c < dims[3]; ++c, ++i) {
          const int64_t at =
              view.offset + b * st[0] + h / view.head_group * st[1] + r * st[2] + c * st[3];
          wrong += seen.get(i) != double(at);
        }
  CHECK(i == seen.numel());
  return wrong;
}

// q of logical shape [b, h, s, d] read through `views` (applied to an f16 input of shape
// `source`): attention_layout's strides must reach, for every index, the element the views
// select, which the reference interpreter gives when the input holds its own offsets.
void check_q_views(const Shape& source, const std::function<NodeId(Graph&, NodeId)>& views) {
  Graph g;
  const NodeId x = add_input(g, DType::f16, source);
  const NodeId q = views(g, x);
  const Shape qs = g.node(q).shape;  // a copy: adding nodes below moves the graph's nodes
  REQUIRE(qs.size() == 4);
  const NodeId k = add_input(g, DType::f16, qs);
  const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, transpose_last(g, k))), k);
  g.set_outputs({out});
  const auto p = match_attention(g, out);
  REQUIRE(p.has_value());
  std::string why;
  const auto layout = fusion::attention_layout(g, fusion::attention_region(*p), &why);
  INFO(why);
  REQUIRE(layout.has_value());
  CHECK(layout->q.buffer == x);
  // The views alone, on the input's offsets.
  CHECK(misreads(offsets_seen(source, views), layout->q, {qs[0], qs[1], qs[2], qs[3]}) == 0);
}

}  // namespace

TEST_CASE("attention layouts reach the elements their views select", "[fusion][attention]") {
  SECTION("[b, s, h, d] permuted") {
    check_q_views({2, 3, 4, 16}, [](Graph& g, NodeId x) { return add_permute(g, x, {0, 2, 1, 3}); });
  }
  SECTION("heads merged with the batch, reshaped apart") {
    check_q_views({6, 3, 16}, [](Graph& g, NodeId x) { return add_reshape(g, x, {2, 3, 3, 16}); });
  }
  SECTION("a batch of one expanded") {
    check_q_views({1, 3, 2, 16}, [](Graph& g, NodeId x) { return add_expand(g, x, {3, 3, 2, 16}); });
  }
  SECTION("heads split out of the hidden axis, then permuted") {
    check_q_views({2, 5, 3 * 16}, [](Graph& g, NodeId x) {
      return add_permute(g, add_reshape(g, x, {2, 5, 3, 16}), {0, 2, 1, 3});
    });
  }
  SECTION("grouped heads after a permute") {
    check_q_views({2, 3, 2, 16}, [](Graph& g, NodeId x) {
      const NodeId bhsd = add_permute(g, x, {0, 2, 1, 3});  // [2, 2, 3, 16]
      const NodeId one = add_reshape(g, bhsd, {2, 2, 1, 3, 16});
      return add_reshape(g, add_expand(g, one, {2, 2, 3, 3, 16}), {2, 6, 3, 16});
    });
  }
  SECTION("a slice of a fused projection: k's columns of [q | k | v], heads split, permuted") {
    check_q_views({2, 5, 3 * 2 * 16}, [](Graph& g, NodeId x) {
      const NodeId k = add_slice(g, x, 2, 2 * 16, 4 * 16);
      return add_permute(g, add_reshape(g, k, {2, 5, 2, 16}), {0, 2, 1, 3});
    });
  }
  SECTION("slices with a step, and of the batch axis") {
    check_q_views({3, 2, 9, 16}, [](Graph& g, NodeId x) {
      return add_slice(g, add_slice(g, x, 2, 1, 9, 2), 0, 1, 3);  // rows 1, 3, 5, 7 of batch 1, 2
    });
  }
  SECTION("a slice after a broadcast reads the one row it broadcasts") {
    check_q_views({2, 1, 4, 16}, [](Graph& g, NodeId x) {
      return add_slice(g, add_expand(g, x, {2, 6, 4, 16}), 1, 2, 5);
    });
  }
  SECTION("a rank-3 operand: one batch of heads") {
    Graph g;
    const NodeId q = add_input(g, DType::bf16, {4, 9, 32});
    const NodeId k = add_input(g, DType::bf16, {4, 9, 32});
    const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, transpose_last(g, k))), k);
    g.set_outputs({out});
    const auto layout = fusion::attention_layout(g, fusion::attention_region(*match_attention(g, out)));
    REQUIRE(layout.has_value());
    CHECK(layout->batch == 1);
    CHECK(layout->heads == 4);
    CHECK(layout->q.strides == std::array<int64_t, 4>{0, 9 * 32, 32, 1});
  }
  SECTION("a broadcast that only a modulo could read is refused, not misread") {
    // [2, 1, 16] expanded to [2, 3, 16] and merged into 6 rows: row r reads source row r / 3.
    // Then split as [3, 2, 16]: head h of batch b is row 2b + h, source row (2b + h) / 3.
    Graph g;
    const NodeId x = add_input(g, DType::f16, {2, 1, 16});
    const NodeId rows = add_reshape(g, add_expand(g, x, {2, 3, 16}), {6, 16});
    const NodeId q = add_reshape(g, rows, {3, 2, 1, 16});
    const NodeId k = add_input(g, DType::f16, {3, 2, 1, 16});
    const NodeId out = add_matmul(g, softmax(g, add_matmul(g, q, transpose_last(g, k))), k);
    g.set_outputs({out});
    std::string why;
    CHECK_FALSE(fusion::attention_layout(g, fusion::attention_region(*match_attention(g, out)), &why));
    CHECK(why.find("stride") != std::string::npos);
  }
}

namespace {

// softmax(q kᵀ * 0.125 + mask) v, all f16, with the operands' shapes given: the mask (and the
// broadcast of q kᵀ against it) may broadcast along any axis.
Built masked(const Shape& q, const Shape& k, const Shape& v, const Shape& mask) {
  Built x;
  Graph& g = x.g;
  x.q = add_input(g, DType::f16, q);
  x.k = add_input(g, DType::f16, k);
  x.v = add_input(g, DType::f16, v);
  x.mask = add_input(g, DType::f16, mask);
  const NodeId scores = add_binary(g, Op::mul, add_matmul(g, x.q, transpose_last(g, x.k)),
                                   add_constant(g, DType::f16, 0.125));
  x.out = add_matmul(g, softmax(g, add_binary(g, Op::add, scores, x.mask)), x.v);
  g.set_outputs({x.out});
  return x;
}

// The mask element the fused kernel reads for scores element [b, h, i, j] (buffer element
// b*s0 + h*s1 + i*s2 + j*s3) is the one the mask's broadcast to the scores selects: the
// reference interpreter broadcasts a mask that holds its own offsets.
void check_mask_reads(const Built& x) {
  const auto p = match_attention(x.g, x.out);
  REQUIRE(p.has_value());
  std::string why;
  const auto layout = fusion::attention_layout(x.g, fusion::attention_region(*p), &why);
  INFO(why);
  REQUIRE(layout.has_value());
  REQUIRE(layout->mask.buffer == x.mask);
  CHECK(layout->mask.head_group == 1);
  Shape full = x.g.node(x.out).shape;
  full.back() = layout->seq_kv;
  const Shape& ms = x.g.node(x.mask).shape;
  Shape padded(full.size() - ms.size(), 1);
  padded.insert(padded.end(), ms.begin(), ms.end());
  const ir::HostTensor seen = offsets_seen(ms, [&](Graph& v, NodeId m) {
    return add_expand(v, add_reshape(v, m, padded), full);
  });
  const std::array<int64_t, 4> dims{layout->batch, layout->heads, layout->seq_q, layout->seq_kv};
  CHECK(misreads(seen, layout->mask, dims) == 0);
}

}  // namespace

TEST_CASE("masks that broadcast over any axis are fused and read by strides",
          "[fusion][attention]") {
  const int64_t b = 2, h = 4, s = 16, d = 64;
  const Shape qkv{b, h, s, d};
  for (const Shape& mask : {Shape{s, s}, Shape{1, s}, Shape{s, 1}, Shape{s}, Shape{1, 1},
                            Shape{1, h, s, s}, Shape{b, 1, s, s}, Shape{b, h, 1, s},
                            Shape{b, h, s, 1}, Shape{b, 1, 1, s}, Shape{b, 1, s, 1},
                            Shape{1, h, 1, 1}}) {
    INFO("mask " << ir::shape_str(mask));
    const Built x = masked(qkv, qkv, qkv, mask);
    const fusion::Plan plan = fused_plan(x.g);
    INFO(fusion::plan_to_text(plan));
    const fusion::Region* r = attention_region(plan);
    REQUIRE(r != nullptr);
    CHECK(r->inputs.back() == plan.graph.inputs().back());
    check_mask_reads(x);
  }
  SECTION("a mask broadcast over an inner head axis: read as [batch, heads] the other way") {
    // Scores [2, 2, 3, s, s] (grouped heads written out); the mask [2, 2, 1, s, s].
    const Shape q5{2, 2, 3, s, d};
    const Built x = masked(q5, q5, q5, Shape{2, 2, 1, s, s});
    const fusion::Plan plan = fused_plan(x.g);
    INFO(fusion::plan_to_text(plan));
    REQUIRE(attention_region(plan) != nullptr);
    check_mask_reads(x);
  }
}

TEST_CASE("a mask that broadcasts the scores themselves is refused, saying why",
          "[fusion][attention]") {
  const int64_t s = 64, d = 64;
  struct Case {
    const char* what;
    Shape q, k, mask;
    const char* reason;
  };
  for (const Case& c : {
           // q has one query row; the mask broadcasts it over 64 (the reviewer's kSeqQ = 1).
           Case{"one query row", {1, 2, 1, d}, {1, 2, s, d}, {1, 2, s, s}, "1 query rows to 64"},
           // k has one key; the mask broadcasts its column over 64 keys.
           Case{"one key", {1, 2, s, d}, {1, 2, 1, d}, {1, 2, s, s}, "1 keys to v's 64"},
           // q and k have one batch entry; the mask has two.
           Case{"one batch", {1, 2, s, d}, {1, 2, s, d}, {2, 2, s, s}, "beyond the scores'"},
       }) {
    INFO(c.what);
    const Built x = masked(c.q, c.k, {c.mask[0], 2, s, d}, c.mask);
    REQUIRE(match_attention(x.g, x.out).has_value());  // recognized, then refused
    const fusion::Plan plan = fused_plan(x.g);
    INFO(fusion::plan_to_text(plan));
    CHECK(attention_region(plan) == nullptr);
    CHECK(plan.library_call_count() == 2);
    const std::string why = fused_reason(plan);
    CHECK(why.starts_with("cut: attention"));
    CHECK_THAT(why, ContainsSubstring(c.reason));
  }
}

namespace {

// Causal attention whose positions are aranges of `q_positions` and `k_positions` (compared
// as col > row), over `s` tokens.
Built causal_from(DType q_positions, DType k_positions, int64_t s) {
  Built x;
  Graph& g = x.g;
  x.q = add_input(g, DType::bf16, {1, 2, s, 64});
  x.k = add_input(g, DType::bf16, {1, 2, s, 64});
  x.v = add_input(g, DType::bf16, {1, 2, s, 64});
  const NodeId scores = add_matmul(g, x.q, transpose_last(g, x.k));
  const NodeId cond = add_binary(g, Op::gt, add_reshape(g, add_arange(g, s, k_positions), {1, s}),
                                 add_reshape(g, add_arange(g, s, q_positions), {s, 1}));
  const NodeId ninf = add_constant(g, DType::bf16, -std::numeric_limits<double>::infinity());
  x.out = add_matmul(g, softmax(g, add_where(g, cond, ninf, scores)), x.v);
  g.set_outputs({x.out});
  return x;
}

}  // namespace

TEST_CASE("a causal mask from positions is taken only where the positions are exact",
          "[fusion][attention]") {
  struct Case {
    DType q, k;
    int64_t s;
    const char* refused;  // nullptr: fused as causal
  };
  for (const Case& c : {
           Case{DType::bf16, DType::bf16, 257, nullptr},  // 0..256: exact in bf16
           Case{DType::bf16, DType::bf16, 258, "bf16 at %"},  // 257 rounds to 256
           Case{DType::bf16, DType::bf16, 300, "exact only up to 256, and there are 300"},
           Case{DType::f16, DType::f16, 2049, nullptr},  // 0..2048: exact in f16
           Case{DType::f16, DType::f16, 2050, "exact only up to 2048"},
           Case{DType::i32, DType::i32, 5000, nullptr},
           Case{DType::f32, DType::f32, 5000, nullptr},
           // Each exact alone, compared in their common dtype f32: exact.
           Case{DType::f16, DType::bf16, 200, nullptr},
           // i32 positions compared with bf16 ones are compared as bf16.
           Case{DType::i32, DType::bf16, 300, "bf16"},
       }) {
    INFO(dtype_name(c.q) << " and " << dtype_name(c.k) << " positions over " << c.s);
    const Built x = causal_from(c.q, c.k, c.s);
    const auto p = match_attention(x.g, x.out);
    REQUIRE(p.has_value());
    CHECK(p->mask == (c.refused ? AttentionMask::computed : AttentionMask::causal));
    const fusion::Plan plan = fused_plan(x.g);
    const std::string why = fused_reason(plan);
    INFO(why);
    if (c.refused == nullptr) {
      CHECK(attention_region(plan) != nullptr);
      CHECK(why.starts_with("fused: attention softmax(q kᵀ * 1, causal)"));
    } else {
      CHECK(attention_region(plan) == nullptr);
      CHECK_THAT(why, ContainsSubstring("compares rounded positions"));
      CHECK_THAT(why, ContainsSubstring(c.refused));
    }
  }
}

TEST_CASE("a mask read through a cast that rounds it is refused", "[fusion][attention]") {
  const auto with_cast = [](DType mask, DType to) {
    Built x;
    Graph& g = x.g;
    x.q = add_input(g, DType::bf16, {1, 2, 32, 64});
    x.mask = add_input(g, mask, {32, 32});
    const NodeId scores = add_cast(g, add_matmul(g, x.q, transpose_last(g, x.q)), to);
    const NodeId p = softmax(g, add_binary(g, Op::add, scores, add_cast(g, x.mask, to)));
    x.out = add_matmul(g, to == DType::bf16 ? p : add_cast(g, p, DType::bf16), x.q);
    g.set_outputs({x.out});
    return fused_plan(x.g);
  };
  const fusion::Plan widened = with_cast(DType::bf16, DType::f32);
  INFO(fusion::plan_to_text(widened));
  CHECK(attention_region(widened) != nullptr);
  const fusion::Plan rounded = with_cast(DType::f32, DType::bf16);
  INFO(fusion::plan_to_text(rounded));
  CHECK(attention_region(rounded) == nullptr);
  CHECK_THAT(fused_reason(rounded), ContainsSubstring("cast from f32 to bf16"));
}
