// fusion/attention: the matcher of attention written from primitives, on the variants issue 10
// lists (where the scale sits, the masks, softmax by hand or as the API records it, dtypes,
// grouped-query heads) and on look-alikes it must refuse.
#include <cmath>
#include <limits>
#include <string>

#include "fusion/attention.h"
#include "fusion/pipeline.h"
#include "ir/graph.h"
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
  const fusion::Plan plan = fusion::make_plan(x.g, {});
  int said = 0;
  for (const fusion::Decision& d : plan.decisions) {
    if (d.reason.find("attention softmax(q kᵀ * 0.125, causal) v") == std::string::npos) continue;
    ++said;
    CHECK_FALSE(d.fused);
    CHECK(d.reason.find("no fused attention kernel yet") != std::string::npos);
  }
  CHECK(said == 1);
  // A graph without attention says nothing of it.
  const Built no = attention(DType::f32, 1, 2, 16, 64, Scale::scores, Mask::none);
  Graph g = no.g;
  g.set_outputs({g.node(no.out).inputs[0], no.out});  // the probabilities are an output too
  for (const fusion::Decision& d : fusion::make_plan(g, {}).decisions) {
    CHECK(d.reason.find("attention") == std::string::npos);
  }
}
