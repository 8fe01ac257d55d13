// The partitioner on gathers and random sources: an embedding lookup and its elementwise
// consumers are one kernel, dropout's mask costs no kernel of its own, and the gather rules of
// region_check cut where a kernel could not load at run-time positions.
#include <string>

#include "fusion/partition.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// embedding(table, ids) * 0.5 + pos, as the API records it.
NodeId embedding(Graph& g, NodeId table, NodeId ids, int64_t tokens, int64_t dim) {
  const NodeId along = ir::add_expand(g, ir::add_reshape(g, ids, {tokens, 1}), {tokens, dim});
  return ir::add_gather(g, table, 0, along);
}

}  // namespace

TEST_CASE("embedding * scale + pos is one pointwise kernel", "[fusion][gather]") {
  Graph g;
  const NodeId table = ir::add_input(g, DType::f16, {1000, 64});
  const NodeId ids = ir::add_input(g, DType::i32, {32});
  const NodeId pos = ir::add_input(g, DType::f16, {32, 64});
  const NodeId rows = embedding(g, table, ids, 32, 64);
  g.add_output(bin(g, Op::add, bin(g, Op::mul, rows, ir::add_constant(g, DType::f16, 0.5)), pos));
  const Plan plan = plan_of(g);
  REQUIRE(plan.kernel_count() == 1);
  CHECK(plan.regions[0].kind == RegionKind::pointwise);
  CHECK(plan.regions[0].inputs == std::vector<NodeId>{table, ids, pos});
}

TEST_CASE("dropout's random mask is evaluated inside the kernel that reads it",
          "[fusion][random]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId u = ir::add_random(g, Op::rand, DType::f32, {R, C}, 7, 0);
  const NodeId keep = bin(g, Op::lt, u, ir::add_constant(g, DType::f32, 0.9));
  const NodeId y = ir::add_where(g, keep, bin(g, Op::mul, x, ir::add_constant(g, DType::f32, 2)),
                                 ir::add_constant(g, DType::f32, 0));
  g.add_output(ir::add_reduce(g, Op::sum, y, {1}, false));  // and into a reduction's prologue
  const Plan plan = plan_of(g);
  REQUIRE(plan.kernel_count() == 1);
  CHECK(plan.regions[0].kind == RegionKind::reduction);
  CHECK(plan.regions[0].inputs == std::vector<NodeId>{x});
  // Two draws of different streams are not merged as common subexpressions; one draw read
  // twice is one node.
  Graph two;
  const NodeId a = ir::add_random(two, Op::randn, DType::f32, {R}, 7, 0);
  const NodeId b = ir::add_random(two, Op::randn, DType::f32, {R}, 7, 1);
  two.add_output(bin(two, Op::sub, a, b));
  const Plan p2 = plan_of(two);
  REQUIRE(p2.kernel_count() == 1);
  CHECK(op_names(p2, p2.regions[0]) == std::vector<std::string>{"randn", "randn", "sub"});
}

TEST_CASE("a gather's data is read from memory and gathers stay out of reductions",
          "[fusion][gather]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId ids = ir::add_input(g, DType::i64, {16});
  const NodeId data = un(g, Op::exp, x);
  const NodeId rows = embedding(g, data, ids, 16, C);
  g.add_output(ir::add_reduce(g, Op::sum, un(g, Op::relu, rows), {1}, false));
  const Plan plan = plan_of(g);
  // exp | gather + relu | sum: the gather neither joins its data's producer nor the reduction.
  REQUIRE(plan.kernel_count() == 3);
  CHECK(any_decision(plan, false, "its data is read from memory"));
  CHECK(any_decision(plan, false, "reduction kernels do not take gathers yet"));
}
