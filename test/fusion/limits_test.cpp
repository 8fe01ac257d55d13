// The partitioner's limits on one kernel (fusion/partition.h): how many buffers its parameters
// name, and how large it is for NVRTC. Cuts made for them carry the limit in their decision.
#include <string>

#include "fusejit/error.h"
#include "fusion/partition.h"
#include "fusion/pipeline.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// The bytes of parameters a region's kernel takes, counting the outer extent of a dynamic one.
int64_t param_bytes(const Region& r) {
  return static_cast<int64_t>(8 * (r.inputs.size() + r.outputs.size() + 1));
}

}  // namespace

TEST_CASE("a sum of 4,096 inputs is cut so that every kernel's parameters fit",
          "[fusion][partition][limits]") {
  Graph g;
  NodeId acc = ir::add_input(g, DType::f32, {64});
  for (int i = 1; i < 4096; ++i) acc = bin(g, Op::add, acc, ir::add_input(g, DType::f32, {64}));
  g.add_output(acc);
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() > 1);
  for (const Region& r : plan.regions) CHECK(param_bytes(r) <= kMaxKernelParamBytes);
  // The size limit cuts this chain first (one op per input); see below for the other.
  CHECK(any_decision(plan, false, "limit"));
}

TEST_CASE("a chain reading many buffers per op is cut at the parameter limit",
          "[fusion][partition][limits]") {
  // Each where reads two fresh inputs and weighs 1: two buffers per unit of weight, so
  // parameters run out (at 254 ops) just before the size limit (256).
  Graph g;
  NodeId acc = ir::add_input(g, DType::f32, {64});
  for (int i = 0; i < 600; ++i) {
    const NodeId c = ir::add_input(g, DType::boolean, {64});
    acc = ir::add_where(g, c, acc, ir::add_input(g, DType::f32, {64}));
  }
  g.add_output(acc);
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() >= 600 / 254);
  for (const Region& r : plan.regions) CHECK(param_bytes(r) <= kMaxKernelParamBytes);
  CHECK(any_decision(plan, false, "kernel parameter limit"));
  CHECK_FALSE(any_decision(plan, false, "region size limit"));
}

TEST_CASE("siblings of one input merge only while their parameters fit",
          "[fusion][partition][limits]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {64});
  for (int i = 0; i < 1000; ++i) g.add_output(bin(g, Op::mul, x, ir::add_input(g, DType::f32, {64})));
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() > 1);
  for (const Region& r : plan.regions) CHECK(param_bytes(r) <= kMaxKernelParamBytes);
}

TEST_CASE("a node that alone needs more parameters than CUDA allows is a usage error",
          "[fusion][partition][limits]") {
  // The passes split so wide a concat (simplify); without them it stays one node.
  auto concat_of = [](int count) {
    Graph g;
    std::vector<NodeId> parts;
    for (int i = 0; i < count; ++i) parts.push_back(ir::add_input(g, DType::f32, {4}));
    g.add_output(un(g, Op::exp, ir::add_concat(g, parts, 0)));
    return g;
  };
  const Graph g = concat_of(4095);
  REQUIRE_THROWS_WITH(plan_of(g, PlanOptions{.passes = false}),
                      ContainsSubstring("bytes of parameters, more than the 32764"));
  const Plan plan = plan_of(g);
  for (const Region& r : plan.regions) CHECK(param_bytes(r) <= kMaxKernelParamBytes);
  // Wider still, the kernel would be too large to compile first.
  REQUIRE_THROWS_WITH(plan_of(concat_of(5000), PlanOptions{.passes = false}),
                      ContainsSubstring("exp %5001 alone weighs 5001") &&
                          ContainsSubstring("concatenate in stages of at most 64 tensors"));
}

TEST_CASE("a 4,000-op elementwise chain is cut into kernels of bounded size",
          "[fusion][partition][limits]") {
  Graph g;
  NodeId x = ir::add_input(g, DType::f32, {1024});
  for (int i = 0; i < 4000; ++i) x = un(g, i % 2 == 0 ? Op::exp : Op::neg, x);
  g.add_output(x);
  const Plan plan = plan_of(g);
  CHECK(plan.kernel_count() >= 4000 / kMaxRegionWeight);
  for (const Region& r : plan.regions) CHECK(static_cast<int64_t>(r.nodes.size()) <= kMaxRegionWeight);
  CHECK(any_decision(plan, false, "region size limit"));

  // Costly ops weigh more: a chain of sin is cut sooner.
  Graph s;
  NodeId y = ir::add_input(s, DType::f32, {1024});
  for (int i = 0; i < 100; ++i) y = un(s, Op::sin, y);
  s.add_output(y);
  const Plan sins = plan_of(s);
  CHECK(sins.kernel_count() == (100 * kCostlyOpWeight + kMaxRegionWeight - 1) / kMaxRegionWeight);
}
