// ir/rebuild: the one node-by-node copy every rewriting pass goes through (operands and outputs
// renamed, dropped and reused nodes, the unchanged flag) and the liveness sweep beside it.
#include <cmath>
#include <limits>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/rebuild.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

NodeId copy_node(NodeId, NodeSpec spec, Graph& out) { return out.add(std::move(spec)); }

}  // namespace

TEST_CASE("rebuild copying every node reports no change", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId c = add_constant(g, DType::f32, std::numeric_limits<double>::quiet_NaN());
  const NodeId z = add_constant(g, DType::f32, -0.0);
  g.set_outputs({add_binary(g, Op::add, add_binary(g, Op::mul, x, c), z)});

  const Rebuilt r = rebuild(g, copy_node);
  CHECK_FALSE(r.changed);  // a NaN constant is still the same node
  CHECK(r.graph.size() == g.size());
  CHECK(r.graph.outputs() == g.outputs());
  CHECK(r.graph.node_hashes() == g.node_hashes());
}

TEST_CASE("rebuild renames operands and outputs past dropped nodes", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId dead = add_unary(g, Op::exp, x);
  const NodeId deader = add_unary(g, Op::neg, dead);
  const NodeId y = add_input(g, DType::f32, {4});
  const NodeId sum = add_binary(g, Op::add, x, y);
  g.set_outputs({sum, y});

  std::vector<NodeId> seen;
  const Rebuilt r = rebuild(g, [&](NodeId id, NodeSpec spec, Graph& out) {
    seen.push_back(id);
    if (id == deader) CHECK(spec.inputs == std::vector<NodeId>{kDropped});
    if (id == dead || id == deader) return kDropped;
    if (id == sum) CHECK(spec.inputs == std::vector<NodeId>{0, 1});  // y is now %1
    return out.add(std::move(spec));
  });
  CHECK(seen == std::vector<NodeId>{0, 1, 2, 3, 4});
  CHECK(r.changed);
  REQUIRE(r.graph.size() == 3);
  CHECK(r.graph.node(2).op == Op::add);
  CHECK(r.graph.outputs() == std::vector<NodeId>{2, 1});
  CHECK(r.graph.inputs() == std::vector<NodeId>{0, 1});
}

TEST_CASE("rebuild lets a step stand for an existing node", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId a = add_unary(g, Op::exp, x);
  const NodeId b = add_unary(g, Op::exp, x);
  g.set_outputs({add_binary(g, Op::mul, a, b)});

  const Rebuilt r = rebuild(g, [&](NodeId id, NodeSpec spec, Graph& out) {
    return id == b ? NodeId{1} : out.add(std::move(spec));  // b is a again
  });
  CHECK(r.changed);
  REQUIRE(r.graph.size() == 3);
  CHECK(r.graph.node(2).inputs == std::vector<NodeId>{1, 1});
  CHECK(r.graph.outputs() == std::vector<NodeId>{2});
}

TEST_CASE("rebuild sees a rewritten node, a changed constant and new outputs", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId zero = add_constant(g, DType::f32, 0.0);
  const NodeId sum = add_binary(g, Op::add, x, zero);
  g.set_outputs({sum});

  SECTION("a spec rewritten in place") {
    const Rebuilt r = rebuild(g, [&](NodeId id, NodeSpec spec, Graph& out) {
      if (id == sum) spec.op = Op::sub;
      return out.add(std::move(spec));
    });
    CHECK(r.changed);
    CHECK(r.graph.node(sum).op == Op::sub);
  }
  SECTION("0.0 becoming -0.0, which == alone would miss") {
    const Rebuilt r = rebuild(g, [&](NodeId id, NodeSpec spec, Graph& out) {
      if (id == zero) spec.value = -0.0;
      return out.add(std::move(spec));
    });
    CHECK(r.changed);
    CHECK(std::signbit(r.graph.node(zero).value));
  }
  SECTION("other outputs") {
    const Rebuilt r = rebuild(g, std::vector<NodeId>{x, sum}, copy_node);
    CHECK(r.changed);
    CHECK(r.graph.outputs() == std::vector<NodeId>{x, sum});
  }
}

TEST_CASE("rebuild refuses to keep a node or output that uses a dropped one", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId e = add_unary(g, Op::exp, x);
  g.set_outputs({add_unary(g, Op::neg, e)});
  auto drop_exp = [&](NodeId id, NodeSpec spec, Graph& out) {
    return id == e ? kDropped : out.add(std::move(spec));
  };
  REQUIRE_THROWS_WITH(rebuild(g, drop_exp), ContainsSubstring("operand %-1 does not exist"));
  auto keep_input = [&](NodeId id, NodeSpec spec, Graph& out) {
    return id == x ? out.add(std::move(spec)) : kDropped;
  };
  REQUIRE_THROWS_AS(rebuild(g, keep_input), InternalError);
}

TEST_CASE("live_nodes sweeps back from the outputs", "[ir][rebuild]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  const NodeId unused = add_input(g, DType::f32, {4});
  const NodeId dead = add_unary(g, Op::exp, x);
  const NodeId out = add_unary(g, Op::neg, x);
  (void)unused;
  (void)dead;
  CHECK(live_nodes(g, {out}, false) == std::vector<bool>{true, false, false, true});
  CHECK(live_nodes(g, {out}, true) == std::vector<bool>{true, true, false, true});
  CHECK(live_nodes(g, {}, true) == std::vector<bool>{true, true, false, false});
  CHECK_THROWS(live_nodes(g, {7}, false));
}
