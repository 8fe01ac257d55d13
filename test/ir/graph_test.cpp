// Shape inference, broadcasting, promotion and the errors of Graph::add.
#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/shape.h"
#include "support/catch.h"
#include "support/random_graph.h"

using namespace fusejit;
using namespace fusejit::ir;

TEST_CASE("broadcasting follows numpy", "[ir][shape]") {
  CHECK(broadcast_shapes({4, 1, 3}, {5, 1}, "add") == Shape{4, 5, 3});
  CHECK(broadcast_shapes({}, {2, 3}, "add") == Shape{2, 3});
  CHECK(broadcast_shapes({2, 3}, {3}, "add") == Shape{2, 3});
  REQUIRE_THROWS_WITH(broadcast_shapes({2, 3}, {4}, "mul"),
                      ContainsSubstring("mul: shapes [2,3] and [4] do not broadcast"));
  CHECK(broadcast_shapes({2, 3}, {2, 3}, "add") == Shape{2, 3});  // the equal-shapes shortcut
  CHECK(broadcast_shapes({}, {}, "add") == Shape{});
  CHECK(broadcasts_to({3}, {2, 3}));
  CHECK_FALSE(broadcasts_to({2, 3}, {3}));
  CHECK_FALSE(broadcasts_to({2}, {2, 3}));
}

TEST_CASE("promotion follows PyTorch for tensors", "[ir][dtype]") {
  CHECK(promote(DType::f32, DType::f32) == DType::f32);
  CHECK(promote(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote(DType::bf16, DType::f32) == DType::f32);
  CHECK(promote(DType::i32, DType::i64) == DType::i64);
  CHECK(promote(DType::i64, DType::f16) == DType::f16);
  CHECK(promote(DType::boolean, DType::i32) == DType::i32);
  CHECK(promote(DType::boolean, DType::bf16) == DType::bf16);
}

TEST_CASE("inference of elementwise, reduce, view and matmul nodes", "[ir][infer]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {8, 16});
  const NodeId b = add_input(g, DType::f32, {16});
  const NodeId i = add_input(g, DType::i32, {8, 16});

  const Node& sum = g.node(add_binary(g, Op::add, x, b));
  CHECK(sum.dtype == DType::f32);
  CHECK(sum.shape == Shape{8, 16});

  CHECK(g.node(add_unary(g, Op::exp, i)).dtype == DType::f32);
  CHECK(g.node(add_unary(g, Op::neg, i)).dtype == DType::i32);
  CHECK(g.node(add_binary(g, Op::div, i, i)).dtype == DType::f32);
  CHECK(g.node(add_binary(g, Op::lt, x, b)).dtype == DType::boolean);
  CHECK(g.node(add_reduce(g, Op::sum, i, {-1}, false)).dtype == DType::i64);

  const Node& r = g.node(add_reduce(g, Op::max, x, {1, 0}, true));
  CHECK(r.shape == Shape{1, 1});
  CHECK(r.axes == std::vector<int64_t>{0, 1});

  CHECK(g.node(add_permute(g, x, {1, 0})).shape == Shape{16, 8});
  CHECK(g.node(add_reshape(g, x, {4, 32})).shape == Shape{4, 32});
  CHECK(g.node(add_expand(g, b, {3, 8, 16})).shape == Shape{3, 8, 16});

  const NodeId a3 = add_input(g, DType::bf16, {2, 1, 8, 32});
  const NodeId w3 = add_input(g, DType::bf16, {3, 32, 4});
  CHECK(g.node(add_matmul(g, a3, w3)).shape == Shape{2, 3, 8, 4});
}

TEST_CASE("ill-formed nodes throw errors that name the op, the shapes and the fix", "[ir][errors]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {8, 16});
  const NodeId y = add_input(g, DType::f32, {8, 15});
  const NodeId h = add_input(g, DType::bf16, {16, 4});
  const NodeId i = add_input(g, DType::i32, {16, 4});

  REQUIRE_THROWS_WITH(add_binary(g, Op::add, x, y),
                      ContainsSubstring("add: shapes [8,16] and [8,15] do not broadcast"));
  REQUIRE_THROWS_WITH(add_reduce(g, Op::sum, x, {2}, false),
                      ContainsSubstring("sum: axis 2 is out of range for a tensor of rank 2"));
  REQUIRE_THROWS_WITH(add_reduce(g, Op::sum, x, {1, -1}, false),
                      ContainsSubstring("name an axis twice"));
  REQUIRE_THROWS_WITH(add_reduce(g, Op::mean, i, {0}, false),
                      ContainsSubstring("mean: the operand is i32[16,4]"));
  REQUIRE_THROWS_WITH(add_reshape(g, x, {7, 16}), ContainsSubstring("cannot reshape f32[8,16]"));
  REQUIRE_THROWS_WITH(add_permute(g, x, {0, 0}), ContainsSubstring("is not a permutation"));
  REQUIRE_THROWS_WITH(add_expand(g, x, {8, 32}), ContainsSubstring("cannot be expanded to [8,32]"));
  REQUIRE_THROWS_WITH(add_matmul(g, x, y), ContainsSubstring("inner dimensions differ"));
  REQUIRE_THROWS_WITH(add_matmul(g, x, h), ContainsSubstring("operand dtypes differ"));
  REQUIRE_THROWS_WITH(add_matmul(g, i, add_permute(g, i, {1, 0})),
                      ContainsSubstring("i32 operands are not supported"));
  REQUIRE_THROWS_WITH(add_where(g, x, x, x), ContainsSubstring("the condition must be bool"));
  REQUIRE_THROWS_WITH(add_input(g, DType::f32, {0, 3}), ContainsSubstring("empty tensors"));
  REQUIRE_THROWS_WITH(g.add({.op = Op::add, .inputs = {x, 99}}),
                      ContainsSubstring("operand %99 does not exist"));
  // A failed add leaves the graph as it was, and no node reads itself (its id is the size).
  const auto defined = static_cast<NodeId>(g.size());
  REQUIRE_THROWS_WITH(g.add({.op = Op::exp, .inputs = {defined}}),
                      ContainsSubstring("operand %" + std::to_string(defined) + " does not exist"));
  CHECK(g.size() == static_cast<size_t>(defined));
  CHECK(g.node_hashes().size() == g.size());
  CHECK(g.inputs().size() == 4);
  CHECK(add_unary(g, Op::exp, x) == defined);
}

TEST_CASE("a spec moved into Graph::add makes the node a copied one does", "[ir][infer]") {
  Graph copied, moved;
  for (Graph* g : {&copied, &moved}) {
    add_input(*g, DType::f32, {2, 3});
    add_input(*g, DType::f32, {3});
  }
  const NodeSpec spec{.op = Op::add, .inputs = {0, 1}};
  const NodeId a = copied.add(spec);
  NodeSpec taken = spec;
  const NodeId b = moved.add(std::move(taken));
  CHECK(a == b);
  CHECK(moved.node(b).inputs == std::vector<NodeId>{0, 1});
  CHECK(moved.node(b).shape == Shape{2, 3});
  CHECK(moved == copied);  // the nodes and their kept hashes
  REQUIRE_THROWS_WITH(moved.add(NodeSpec{.op = Op::add, .inputs = {0, 7}}),
                      ContainsSubstring("operand %7 does not exist"));
}

TEST_CASE("a cleared graph records the next trace as a new graph would", "[ir][infer]") {
  // Graph::clear keeps the nodes' lists for the next trace's nodes: nothing of the old nodes
  // (shapes, operands, axes, keepdim, constants, slice bounds) may show through.
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const Graph before = testing::random_graph(seed, testing::RandomGraphs::wide);
    const Graph next = testing::random_graph(seed + 1000);
    INFO("seeds " << seed << " and " << seed + 1000);
    Graph g = before;
    g.clear();
    CHECK(g.size() == 0);
    for (const Node& n : next.nodes()) g.add(spec_of(n));
    g.set_outputs(next.outputs());
    CHECK(g == next);
    CHECK(structural_hash(g) == recompute_structural_hash(g));
    // Twice, so that the second trace also comes from nodes a trace of the Graph left.
    g.clear();
    for (const Node& n : before.nodes()) g.add(spec_of(n));
    g.set_outputs(before.outputs());
    CHECK(g == before);
  }
}

TEST_CASE("written_input names the input an update_slice output writes into", "[ir][update]") {
  Graph g;
  const NodeId other = add_input(g, DType::f32, {4});
  const NodeId cache = add_input(g, DType::f32, {2, 8});
  const NodeId value = add_input(g, DType::f32, {2, 1});
  const NodeId pos = add_input(g, DType::i32, {});
  g.add_output(add_unary(g, Op::exp, other));
  // A computed destination is refused when recorded, so a written output's is always an input.
  REQUIRE_THROWS_WITH(add_update_slice(g, add_unary(g, Op::neg, cache), value, 1, pos),
                      ContainsSubstring("the destination"));
  g.add_output(add_update_slice(g, cache, value, 1, pos));
  g.add_output(cache);  // the input itself, unwritten by this output
  CHECK_FALSE(g.written_input(0).has_value());
  REQUIRE(g.written_input(1).has_value());
  CHECK(*g.written_input(1) == 1);
  CHECK_FALSE(g.written_input(2).has_value());
  CHECK_THROWS(g.written_input(3));
}
