// Hostile input to the passes and the partitioner: a concat of thousands of operands, an
// elementwise chain of tens of thousands of ops, slices whose steps overflow 64 bits when
// folded. Planning stays valid and linear in the graph's size.
#include <chrono>
#include <limits>
#include <map>
#include <string>

#include "fusejit/error.h"
#include "fusion/partition.h"
#include "fusion/pipeline.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// How many loads and selects a region's kernel evaluates per element for its concats: a concat
// evaluates each operand at an index of its own, so a concat of concats multiplies.
int64_t concat_evaluations(const Plan& plan, const Region& r) {
  std::map<NodeId, int64_t> memo;
  auto in_region = [&](NodeId id) {
    return std::binary_search(r.nodes.begin(), r.nodes.end(), id);
  };
  int64_t worst = 0;
  for (NodeId id : r.nodes) {  // ascending: operands first
    const ir::Node& n = plan.graph.node(id);
    int64_t count = 0;
    if (n.op == Op::concat) {
      for (NodeId in : n.inputs) count += in_region(in) ? std::max<int64_t>(1, memo[in]) : 1;
    }
    memo[id] = count;
    worst = std::max(worst, count);
  }
  return worst;
}

}  // namespace

TEST_CASE("a concat of one input 20,000 times plans into small kernels, quickly",
          "[fusion][hostile]") {
  // One node of weight 1 once: a kernel evaluating 20,000 operands per element, which took
  // minutes to generate and compile and overflowed the stack verifying it.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {4});
  const NodeId cat = ir::add_concat(g, std::vector<NodeId>(20000, x), 0);
  g.add_output(un(g, Op::exp, cat));
  const auto start = std::chrono::steady_clock::now();
  const Plan plan = plan_of(g);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 10.0);  // about 0.1 s; quadratic work would take far longer
  for (const ir::Node& n : plan.graph.nodes()) {
    if (n.op == Op::concat) CHECK(n.inputs.size() <= kMaxConcatOperands);
  }
  CHECK(plan.kernel_count() <= 4);  // common subexpressions: a few distinct concats
  for (const Region& r : plan.regions) CHECK(concat_evaluations(plan, r) <= kMaxRegionWeight);
}

TEST_CASE("a concat of 4,000 distinct inputs is cut into kernels within every limit",
          "[fusion][hostile]") {
  Graph g;
  std::vector<NodeId> parts;
  for (int i = 0; i < 4000; ++i) parts.push_back(ir::add_input(g, DType::f32, {2}));
  g.add_output(ir::add_concat(g, parts, 0));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() >= 4000 / kMaxRegionWeight);
  for (const Region& r : plan.regions) {
    CHECK(8 * static_cast<int64_t>(r.inputs.size() + r.outputs.size() + 1) <= kMaxKernelParamBytes);
    CHECK(concat_evaluations(plan, r) <= kMaxRegionWeight);
  }
}

TEST_CASE("concat(x, x) evaluates x twice: a producer weighs once per evaluation",
          "[fusion][hostile]") {
  Graph g;
  NodeId x = ir::add_input(g, DType::f32, {4});
  for (int i = 0; i < 200; ++i) x = un(g, Op::exp, x);  // weight 200
  // Fused into the concat, the chain would be evaluated twice: 400 ops in one kernel.
  g.add_output(ir::add_concat(g, {x, x}, 0));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() == 2);
  CHECK(any_decision(plan, false, "region size limit"));
}

TEST_CASE("planning an elementwise chain stays linear: the recompute search is bounded",
          "[fusion][hostile]") {
  // Each recompute trial partitions the whole graph; a chain of N ops has N / 256 candidates,
  // so unbounded trials made planning quadratic (200,000 ops took minutes).
  Graph g;
  NodeId x = ir::add_input(g, DType::f32, {1024});
  for (int i = 0; i < 6000; ++i) x = un(g, Op::exp, x);
  g.add_output(x);
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() >= 6000 / kMaxRegionWeight);
  CHECK(any_decision(plan, false, "recompute: the search for values worth recomputing stopped "
                                  "after 21 trials on this graph of 6001 nodes"));
  // A small graph searches as before.
  Graph small;
  NodeId y = ir::add_input(small, DType::f32, {1024});
  for (int i = 0; i < 400; ++i) y = un(small, Op::exp, y);
  small.add_output(y);
  CHECK_FALSE(any_decision(plan_of(small), false, "the search for values worth recomputing"));
}

TEST_CASE("folding slices of one element whose steps multiply past 2^63", "[fusion][hostile]") {
  // Both slices are valid (one element each: the step is never applied); their folded step
  // used to wrap and be refused as not fitting.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {8});
  const int64_t step = int64_t{1} << 62;
  const NodeId inner = g.add({.op = Op::slice, .inputs = {x}, .shape = {1}, .axes = {0},
                              .start = 5, .step = step});
  const NodeId outer = g.add({.op = Op::slice,
                              .inputs = {inner},
                              .shape = {1},
                              .axes = {0},
                              .start = 0,
                              .step = std::numeric_limits<int64_t>::max()});
  g.add_output(un(g, Op::exp, outer));
  const ir::Graph o = optimize(g, {});
  const ir::Node& slice = o.node(o.node(o.outputs()[0]).inputs[0]);
  CHECK(slice.op == Op::slice);
  CHECK(slice.inputs[0] == 0);
  CHECK(slice.start == 5);
  CHECK(slice.step == 1);
  CHECK_NOTHROW(plan_of(g));
}
