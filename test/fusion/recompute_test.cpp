// Recomputation (fusion/recompute.h): which elementwise values the partitioner evaluates again in
// the regions that read them, and which it writes; column softmax as two kernels. Every plan is
// checked against the plan invariants and run region by region on the CPU reference
// (workloads.h: check_plan, check_plan_computes).
#include <filesystem>
#include <string>

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

namespace {

// The regions that evaluate `id`.
int regions_computing(const Plan& plan, NodeId id) {
  int n = 0;
  for (const Region& r : plan.regions) n += contains(r.nodes, id) ? 1 : 0;
  return n;
}

bool written(const Plan& plan, NodeId id) {
  for (const Region& r : plan.regions) {
    if (contains(r.outputs, id)) return true;
  }
  return false;
}

// softmax over `axis` as the API records it (half types computed in f32 and cast back); with
// `views`, the max is taken without keepdim and broadcast back through a reshape and an expand.
struct Softmax {
  Graph g;
  NodeId x = -1, max = -1, exp = -1, sum = -1, out = -1;
};
Softmax softmax_over(DType dt, const Shape& shape, int64_t axis, bool views = false) {
  Softmax s;
  Graph& g = s.g;
  s.x = ir::add_input(g, dt, shape);
  const bool half = dt != DType::f32;
  const NodeId x = half ? ir::add_cast(g, s.x, DType::f32) : s.x;
  s.max = ir::add_reduce(g, Op::max, x, {axis}, !views);
  NodeId m = s.max;
  if (views) {
    Shape kept = shape;
    kept[static_cast<size_t>(axis)] = 1;
    m = ir::add_expand(g, ir::add_reshape(g, m, kept), shape);
  }
  s.exp = un(g, Op::exp, bin(g, Op::sub, x, m));
  s.sum = ir::add_reduce(g, Op::sum, s.exp, {axis}, true);
  const NodeId y = bin(g, Op::div, s.exp, s.sum);
  s.out = half ? ir::add_cast(g, y, dt) : y;
  g.add_output(s.out);
  return s;
}

// x -> `ops` unary ops -> y; y * sum(y, axis 0): y is needed by a column reduction and by the
// consumer of its result.
Graph chain_and_column_sum(Op op, int ops, NodeId* y_out = nullptr) {
  Graph g;
  NodeId y = ir::add_input(g, DType::f32, {R, C});
  for (int k = 0; k < ops; ++k) y = un(g, op, y);
  if (y_out) *y_out = y;
  g.add_output(bin(g, Op::mul, y, ir::add_reduce(g, Op::sum, y, {0}, true)));
  return g;
}

}  // namespace

TEST_CASE("column softmax is two kernels: the online statistics, then the output",
          "[fusion][recompute]") {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    for (bool views : {false, true}) {
      INFO(dtype_name(dt) << (views ? ", max broadcast back through views" : ""));
      const Softmax s = softmax_over(dt, {R, C}, 0, views);
      const Plan plan = plan_of(s.g);
      REQUIRE(plan.kernel_count() == 2);
      REQUIRE(plan.regions.size() == 2);
      const Region& stats = plan.regions[0];
      CHECK(stats.kind == RegionKind::reduction);
      CHECK(stats.reduce_axes == std::vector<int64_t>{0});
      CHECK(stats.inputs == std::vector<NodeId>{s.x});
      CHECK(stats.outputs == std::vector<NodeId>{s.max, s.sum});
      const Region& out = plan.regions[1];
      CHECK(out.kind == RegionKind::pointwise);
      CHECK(out.inputs == std::vector<NodeId>{s.x, s.max, s.sum});
      CHECK(out.outputs == std::vector<NodeId>{s.out});
      // The exponentials are evaluated by both, written by neither.
      CHECK(regions_computing(plan, s.exp) == 2);
      CHECK_FALSE(written(plan, s.exp));
      CHECK(regions_computing(plan, s.max) == 1);
      CHECK(regions_computing(plan, s.sum) == 1);
      CHECK(any_decision(plan, true, "online softmax pair over axes [0]"));
      CHECK(any_decision(plan, true, "recompute %" + std::to_string(s.exp) + " in region 1: exp"));
    }
  }
  const Softmax bf16 = softmax_over(DType::bf16, {R, C}, 0);
  const Plan plan = plan_of(bf16.g);
  CHECK(op_names(plan, plan.regions[0]) ==
        std::vector<std::string>{"cast", "max", "sub", "exp", "sum"});
  CHECK(op_names(plan, plan.regions[1]) ==
        std::vector<std::string>{"cast", "sub", "exp", "div", "cast"});
}

TEST_CASE("softmax over a middle axis is two kernels too", "[fusion][recompute]") {
  const Softmax s = softmax_over(DType::bf16, {4, 64, 32}, 1);
  const Plan plan = plan_of(s.g);
  REQUIRE(plan.kernel_count() == 2);
  CHECK(plan.regions[0].kind == RegionKind::reduction);
  CHECK(plan.regions[0].reduce_axes == std::vector<int64_t>{1});
  CHECK(plan.regions[1].kind == RegionKind::pointwise);
}

TEST_CASE("the bench's column softmax traces plan as two kernels", "[fusion][recompute]") {
  for (const char* dt : {"bf16", "f16", "f32"}) {
    INFO(dt);
    const Graph g = ir::parse_file(std::string(FUSEJIT_SOURCE_DIR) + "/bench/traces/colsoftmax_" +
                                   dt + ".trace");
    const Plan plan = make_plan(g);
    check_plan(plan);
    CHECK(plan.kernel_count() == 2);
    // Without recomputation: the cast and the exponentials are written and read back.
    const Plan plain = make_plan(g, PlanOptions{.recompute = false});
    CHECK(plain.kernel_count() == (std::string(dt) == "f32" ? 4 : 5));
    const detail::PlanCost cost = detail::plan_cost(plan.graph, plan.regions);
    const detail::PlanCost before = detail::plan_cost(plain.graph, plain.regions);
    CHECK(detail::cheaper(cost, before));
    // Two passes over the input and one write of the output, plus the [1,N] statistics.
    const int64_t n = 8192, elem = std::string(dt) == "f32" ? 4 : 2;
    CHECK(cost.bytes == 3 * n * n * elem + 4 * n * 4);
  }
}

TEST_CASE("an online pair whose exponentials are read by something else is not one pass",
          "[fusion][recompute]") {
  // sum(exp(x - max) * x) needs exp(x - max) besides the pair's sum: the max must be known
  // before, so that reduction is a kernel of its own (which recomputes the exponentials).
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId m = ir::add_reduce(g, Op::max, x, {0}, true);
  const NodeId e = un(g, Op::exp, bin(g, Op::sub, x, m));
  const NodeId s = ir::add_reduce(g, Op::sum, e, {0}, true);
  const NodeId w = ir::add_reduce(g, Op::sum, bin(g, Op::mul, e, x), {0}, true);
  g.add_output(bin(g, Op::div, w, s));
  const Plan plan = plan_of(g);
  for (const Region& r : plan.regions) {
    CHECK_FALSE((contains(r.nodes, m) && contains(r.nodes, w)));
  }
  CHECK_FALSE(written(plan, e));
}

TEST_CASE(
    "reductions and matmul operands are never recomputed; values read from a matmul's "
    "written result are",
    "[fusion][recompute]") {
  SECTION("a matmul reads buffers: its operand is written") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, 128});
    const NodeId w = ir::add_input(g, DType::f32, {128, C});
    const NodeId h = un(g, Op::exp, x);
    g.set_outputs({ir::add_matmul(g, h, w),
                   bin(g, Op::mul, h, ir::add_reduce(g, Op::sum, h, {0}, true))});
    const Plan plan = plan_of(g);
    CHECK(written(plan, h));
    CHECK(regions_computing(plan, h) == 1);
  }
  SECTION("a value computed from a matmul's written result is evaluated again by its readers") {
    // The result is a buffer like any other: the column sum and the product each read it and
    // take exp themselves (RoPE's f32 cast of a fused projection's columns, in a model).
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, 128});
    const NodeId w = ir::add_input(g, DType::f32, {128, C});
    const NodeId z = un(g, Op::exp, ir::add_matmul(g, x, w));
    g.add_output(bin(g, Op::mul, z, ir::add_reduce(g, Op::sum, z, {0}, true)));
    const Plan plan = plan_of(g);
    CHECK_FALSE(written(plan, z));
    CHECK(regions_computing(plan, z) == 2);
    CHECK(plan.kernel_count() == 2);
  }
  SECTION("a reduction read by two regions is computed by one") {
    const Softmax s = softmax_over(DType::f32, {R, C}, 0);
    const Plan plan = plan_of(s.g);
    CHECK(regions_computing(plan, s.max) == 1);
    CHECK(written(plan, s.max));
  }
}

TEST_CASE("costly ops and long chains are written, not recomputed", "[fusion][recompute]") {
  NodeId y = -1;
  // exp is cheap: y is recomputed by the column sum's region and the consumer's.
  const Plan cheap = plan_of(chain_and_column_sum(Op::exp, 1, &y));
  CHECK(cheap.kernel_count() == 2);
  CHECK(regions_computing(cheap, y) == 2);
  // sin is costly (ir/op.h kCostly): written once, read by both.
  const Plan costly = plan_of(chain_and_column_sum(Op::sin, 1, &y));
  CHECK(costly.kernel_count() == 3);
  CHECK(written(costly, y));
  CHECK_FALSE(any_decision(costly, true, "recompute"));
  // Eight tanh are evaluated again where read; nine would pass kMaxRecomputedOps.
  const Plan eight = plan_of(chain_and_column_sum(Op::tanh, detail::kMaxRecomputedOps, &y));
  CHECK(eight.kernel_count() == 2);
  CHECK(regions_computing(eight, y) == 2);
  const Plan nine = plan_of(chain_and_column_sum(Op::tanh, detail::kMaxRecomputedOps + 1, &y));
  CHECK(nine.kernel_count() == 3);
  CHECK(written(nine, y));
}

TEST_CASE("a value whose inputs cost more to read than it does is written",
          "[fusion][recompute]") {
  // y = a * b (* c * d): recomputing y in both readers reads its inputs twice. From two inputs
  // that is cheaper than writing y and reading it back twice; from four it is not.
  for (int inputs : {2, 4}) {
    INFO(inputs << " inputs");
    Graph g;
    NodeId y = ir::add_input(g, DType::f32, {R, C});
    for (int k = 1; k < inputs; ++k) y = bin(g, Op::mul, y, ir::add_input(g, DType::f32, {R, C}));
    g.add_output(bin(g, Op::mul, y, ir::add_reduce(g, Op::sum, y, {0}, true)));
    const Plan plan = plan_of(g);
    CHECK(written(plan, y) == (inputs == 4));
    CHECK(plan.kernel_count() == (inputs == 4 ? 3 : 2));
  }
}

TEST_CASE("a value broadcast to its reader is not recomputed per element", "[fusion][recompute]") {
  // e = exp(b) over [C] is read by x * e over [R,C]: recomputing it there would evaluate it R
  // times per element of b.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId b = ir::add_input(g, DType::f32, {C});
  const NodeId e = un(g, Op::exp, b);
  g.set_outputs({bin(g, Op::mul, x, e), ir::add_reduce(g, Op::sum, e, {0}, false)});
  const Plan plan = plan_of(g);
  CHECK(written(plan, e));
  CHECK(regions_computing(plan, e) == 1);
}

TEST_CASE("a cast broadcast to its readers is recomputed by them; exp of it is not",
          "[fusion][recompute]") {
  // A sampling search's round: the bf16 row cast to f32, its max, and its count at or above a
  // row of thresholds (a column reduction of [C, R] over C, the row broadcast along R). A cast
  // costs the count one conversion per element, next to its compare: recomputed, both regions
  // read the bf16 row and no f32 copy is written. exp costs more than that per element: the
  // max's region writes it for the count to read.
  for (const Op op : {Op::cast, Op::exp}) {
    INFO(ir::op_name(op));
    Graph g;
    const NodeId x = ir::add_input(g, DType::bf16, {C});
    const NodeId t = ir::add_input(g, DType::f32, {1, R});
    const NodeId wide = op == Op::cast ? ir::add_cast(g, x, DType::f32)
                                       : un(g, Op::exp, ir::add_cast(g, x, DType::f32));
    const NodeId above =
        ir::add_cast(g, bin(g, Op::ge, ir::add_reshape(g, wide, {C, 1}), t), DType::f32);
    g.set_outputs({ir::add_reduce(g, Op::max, wide, {0}, false),
                   ir::add_reduce(g, Op::sum, above, {0}, false)});
    const Plan plan = plan_of(g);
    CHECK(plan.kernel_count() == 2);
    CHECK(written(plan, wide) == (op == Op::exp));
    if (op == Op::cast) {
      CHECK(regions_computing(plan, wide) == 2);
      for (const Region& r : plan.regions) CHECK(r.inputs.front() == x);
    }
  }
}

TEST_CASE("a graph output is written by the region that computes it", "[fusion][recompute]") {
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, C});
  const NodeId a = un(g, Op::exp, x);
  g.set_outputs({a, bin(g, Op::mul, a, ir::add_reduce(g, Op::sum, a, {0}, true))});
  const Plan plan = plan_of(g);
  CHECK(written(plan, a));
  CHECK(regions_computing(plan, a) == 1);
}

TEST_CASE("recomputation keeps to its bounds and its cost order", "[fusion][recompute]") {
  using detail::PlanCost;
  CHECK(detail::cheaper(PlanCost{2, 100}, PlanCost{3, 100}));
  CHECK(detail::cheaper(PlanCost{3, 90}, PlanCost{3, 100}));
  CHECK_FALSE(detail::cheaper(PlanCost{3, 100}, PlanCost{3, 100}));
  CHECK_FALSE(detail::cheaper(PlanCost{2, 101}, PlanCost{3, 100}));  // fewer kernels, more bytes
  CHECK_FALSE(detail::cheaper(PlanCost{4, 50}, PlanCost{3, 100}));

  NodeId y = -1;
  const Graph g = chain_and_column_sum(Op::exp, 3, &y);
  std::vector<bool> marks(g.size(), false);
  for (NodeId id = 1; id <= y; ++id) marks[static_cast<size_t>(id)] = true;
  CHECK(detail::within_budget(g, marks));  // 3 ops
  const Graph costly = chain_and_column_sum(Op::cos, 1, &y);
  std::vector<bool> one(costly.size(), false);
  one[static_cast<size_t>(y)] = true;
  CHECK_FALSE(detail::within_budget(costly, one));
}

TEST_CASE("recomputation can be turned off, and is off without fusion", "[fusion][recompute]") {
  const Softmax s = softmax_over(DType::bf16, {R, C}, 0);
  const Plan plan = plan_of(s.g, PlanOptions{.recompute = false});
  CHECK(plan.kernel_count() == 5);
  CHECK(written(plan, s.exp));
  CHECK_FALSE(any_decision(plan, true, "recompute"));
  // Fusion off turns it off too.
  CHECK(plan_of(s.g, PlanOptions{.fusion = false}).kernel_count() == 7);
}

TEST_CASE("the recompute search gives the same plan on any number of threads",
          "[fusion][recompute]") {
  // Trials run in batches, one per thread; the first cheaper candidate in order must win, as in
  // a one-at-a-time search. Every trace of the suites, with fused attention on and off.
  int traces = 0, recomputing = 0;
  for (const char* dir : {"examples/traces", "bench/traces", "test/traces/odd",
                          "test/traces/attention", "test/traces/index"}) {
    for (const auto& file :
         std::filesystem::directory_iterator(std::string(FUSEJIT_SOURCE_DIR) + "/" + dir)) {
      if (file.path().extension() != ".trace") continue;
      INFO(file.path().string());
      const Graph g = optimize(ir::parse_file(file.path().string()));
      for (bool attention : {false, true}) {
        const Plan serial = partition(g, {.recompute_threads = 1, .attention = attention});
        const std::string want = plan_to_json(serial);
        CHECK(plan_to_json(partition(g, {.recompute_threads = 3, .attention = attention})) == want);
        CHECK(plan_to_json(partition(g, {.recompute_threads = 8, .attention = attention})) == want);
        recomputing += any_decision(serial, true, "recomputing %") ? 1 : 0;
      }
      ++traces;
    }
  }
  CHECK(traces > 150);
  CHECK(recomputing > 10);  // the search found something to recompute in that many plans
}
