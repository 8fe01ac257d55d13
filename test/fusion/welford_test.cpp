// One-pass mean and variance (fusion/welford.h): the pattern fires on layer norm and var as the
// API records them (the seed and layout traces, any normalized rank, keepdim or not, either
// operand order of the deviation), and not on lookalikes: other axes, the mean of another
// value, a mean broadcast along the wrong axis, a product of two different deviations, a mean
// the region does not compute, f16/bf16 statistics. The plan lists the pairs and says so.
#include <filesystem>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "fusion/plan_print.h"
#include "fusion/welford.h"
#include "ir/text.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// The API's statistics, as jit/api/ops.cpp records them: x upcast to f32, M = mean(x) over `axes`
// (keepdim), D = x - M, then sum(D * D) over the same axes.
struct Statistics {
  Graph g;
  NodeId x = -1, mean = -1, dev = -1, variance = -1;
};

Statistics api_var(DType dt, const Shape& shape, const std::vector<int64_t>& axes, bool keepdim,
                   Op reduce = Op::sum) {
  Statistics s;
  s.x = ir::add_input(s.g, dt, shape);
  const NodeId t = dt == DType::f32 ? s.x : ir::add_cast(s.g, s.x, DType::f32);
  s.mean = ir::add_reduce(s.g, Op::mean, t, axes, true);
  s.dev = bin(s.g, Op::sub, t, s.mean);
  s.variance = ir::add_reduce(s.g, reduce, bin(s.g, Op::mul, s.dev, s.dev), axes, keepdim);
  return s;
}

bool all_computed(NodeId) { return true; }

WelfordPair pair_of(const Graph& g, NodeId variance) {
  return welford_pair(g, variance, all_computed);
}

// The pair of sum(d * d) over `axes`, added to g.
WelfordPair squares_pair(Graph& g, NodeId d, std::vector<int64_t> axes = {1}) {
  return pair_of(g, ir::add_reduce(g, Op::sum, bin(g, Op::mul, d, d), std::move(axes), true));
}

// The normalization regions of the plan of `g` and their pairs.
std::vector<WelfordPair> planned_pairs(const Graph& g) {
  const Plan plan = plan_of(g);
  std::vector<WelfordPair> out;
  for (const Region& r : plan.regions) out.insert(out.end(), r.welford.begin(), r.welford.end());
  return out;
}

}  // namespace

TEST_CASE("welford_pair fires on the API's var and layer norm statistics", "[fusion][welford]") {
  SECTION("var over the last axis, keepdim or not, sum or mean of squares") {
    for (bool keepdim : {true, false}) {
      for (Op reduce : {Op::sum, Op::mean}) {
        const Statistics s = api_var(DType::f32, {R, C}, {1}, keepdim, reduce);
        CHECK(pair_of(s.g, s.variance) == WelfordPair{s.mean, s.variance});
      }
    }
  }
  SECTION("f16 and bf16 inputs upcast to f32, as the API does") {
    for (DType dt : {DType::f16, DType::bf16}) {
      const Statistics s = api_var(dt, {R, C}, {1}, false);
      CHECK(pair_of(s.g, s.variance).mean == s.mean);
    }
  }
  SECTION("any normalized rank: the trailing two or all axes") {
    const Statistics two = api_var(DType::f32, {4, 16, 32}, {1, 2}, true);
    CHECK(pair_of(two.g, two.variance).mean == two.mean);
    const Statistics all = api_var(DType::f32, {4, 16, 32}, {0, 1, 2}, false);
    CHECK(pair_of(all.g, all.variance).mean == all.mean);
  }
  SECTION("a mean without keepdim, reshaped and expanded back over the row") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, C});
    const NodeId m = ir::add_reduce(g, Op::mean, x, {1}, false);
    const NodeId back = ir::add_expand(g, ir::add_reshape(g, m, {R, 1}), {R, C});
    const NodeId d = bin(g, Op::sub, x, back);
    const NodeId v = ir::add_reduce(g, Op::mean, bin(g, Op::mul, d, d), {1}, true);
    CHECK(pair_of(g, v) == WelfordPair{m, v});
  }
  SECTION("(M - X)^2 is the same square") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, C});
    const NodeId m = ir::add_reduce(g, Op::mean, x, {1}, true);
    const NodeId d = bin(g, Op::sub, m, x);
    const NodeId v = ir::add_reduce(g, Op::sum, bin(g, Op::mul, d, d), {1}, true);
    CHECK(pair_of(g, v) == WelfordPair{m, v});
  }
}

TEST_CASE("welford_pair does not fire on lookalikes", "[fusion][welford]") {
  SECTION("the variance over other axes than the mean") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {C, C});
    const NodeId m = ir::add_reduce(g, Op::mean, x, {1}, true);
    const NodeId d = bin(g, Op::sub, x, m);
    CHECK(squares_pair(g, d, {0}).mean == -1);
  }
  SECTION("the mean of another value") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, C});
    const NodeId y = ir::add_input(g, DType::f32, {R, C});
    const NodeId d = bin(g, Op::sub, x, ir::add_reduce(g, Op::mean, y, {1}, true));
    CHECK(squares_pair(g, d).mean == -1);
  }
  SECTION("a mean without keepdim broadcast along the wrong axis (square rows)") {
    // [C] against [C, C] aligns with the last axis: element (i, j) reads the mean of row j.
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {C, C});
    const NodeId d = bin(g, Op::sub, x, ir::add_reduce(g, Op::mean, x, {1}, false));
    CHECK(squares_pair(g, d).mean == -1);
  }
  SECTION("a reshape that puts the means along the reduced axis") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {C, C});
    const NodeId m = ir::add_reduce(g, Op::mean, x, {1}, true);
    const NodeId d = bin(g, Op::sub, x, ir::add_reshape(g, m, {1, C}));
    CHECK(squares_pair(g, d).mean == -1);
  }
  SECTION("the product of two different deviations, or of the deviation and x") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, C});
    const NodeId m = ir::add_reduce(g, Op::mean, x, {1}, true);
    const NodeId d = bin(g, Op::sub, x, m);
    const NodeId e = bin(g, Op::sub, x, ir::add_reduce(g, Op::max, x, {1}, true));
    CHECK(pair_of(g, ir::add_reduce(g, Op::sum, bin(g, Op::mul, d, e), {1}, true)).mean == -1);
    CHECK(pair_of(g, ir::add_reduce(g, Op::sum, bin(g, Op::mul, d, x), {1}, true)).mean == -1);
  }
  SECTION("a max, or a sum written where the mean should be") {
    Graph g;
    const NodeId x = ir::add_input(g, DType::f32, {R, C});
    const NodeId d = bin(g, Op::sub, x, ir::add_reduce(g, Op::sum, x, {1}, true));
    CHECK(squares_pair(g, d).mean == -1);
    CHECK(pair_of(g, ir::add_reduce(g, Op::max, bin(g, Op::mul, d, d), {1}, true)).mean == -1);
  }
  SECTION("statistics in f16 or bf16 (rounded where the reference rounds them)") {
    for (DType dt : {DType::f16, DType::bf16}) {
      Graph g;
      const NodeId x = ir::add_input(g, dt, {R, C});
      const NodeId d = bin(g, Op::sub, x, ir::add_reduce(g, Op::mean, x, {1}, true));
      CHECK(squares_pair(g, d).mean == -1);
    }
  }
  SECTION("a mean, deviation or square the region reads from memory") {
    const Statistics s = api_var(DType::f32, {R, C}, {1}, true);
    const NodeId square = s.g.node(s.variance).inputs[0];
    for (NodeId outside : {s.mean, s.dev, square}) {
      CHECK(welford_pair(s.g, s.variance, [&](NodeId id) { return id != outside; }).mean == -1);
    }
  }
}

TEST_CASE("the plan pairs the statistics of every recorded layer norm", "[fusion][welford]") {
  int traces = 0;
  for (const char* folder : {"/examples/traces", "/bench/traces"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(FUSEJIT_SOURCE_DIR) + folder)) {
      const std::string name = entry.path().filename().string();
      if (name.find("layernorm") == std::string::npos) continue;
      INFO(name);
      const Graph g = ir::parse_file(entry.path().string());
      const Plan plan = make_plan(g);  // (too large for plan_of's run on the reference)
      check_plan(plan);
      int pairs = 0;
      for (const Region& r : plan.regions) {
        pairs += static_cast<int>(r.welford.size());
        if (r.welford.empty()) continue;
        CHECK(r.kind == RegionKind::normalization);
        CHECK(any_decision(plan, true, "one-pass statistics"));
      }
      CHECK(pairs == 1);
      ++traces;
    }
  }
  CHECK(traces >= 17);  // 4 seed traces and 12 layout traces, plus what is added
}

TEST_CASE("a variance whose mean another region computes is not paired", "[fusion][welford]") {
  const Statistics s = api_var(DType::f32, {R, C}, {1}, false);
  Graph g = s.g;
  g.add_output(s.variance);
  CHECK(planned_pairs(g) == std::vector<WelfordPair>{{s.mean, s.variance}});
  // With fusion off every op is a region of its own: the variance reads the mean from memory.
  const Plan unfused = plan_of(g, PlanOptions{.fusion = false});
  for (const Region& r : unfused.regions) CHECK(r.welford.empty());
  // Hand-written statistics of bf16 values reduce in bf16: not paired.
  CHECK(planned_pairs(layernorm(DType::bf16, true)).empty());
  // The mean written as sum * (1/C) is not a mean node: two reductions as before.
  CHECK(planned_pairs(layernorm(DType::f32, false)).empty());
  CHECK(planned_pairs(layernorm(DType::f32, true)).size() == 1);
}

TEST_CASE("plan text and JSON show the one-pass statistics", "[fusion][welford]") {
  const Statistics s = api_var(DType::f32, {R, C}, {1}, false);
  Graph g = s.g;
  g.add_output(s.variance);
  const Plan plan = plan_of(g);
  REQUIRE(plan.regions.size() == 1);
  const std::string json = plan_to_json(plan);
  CHECK(json.find(fmt::format("\"welford\":[{{\"mean\":\"%{}\",\"variance\":\"%{}\"}}]", s.mean,
                              s.variance)) != std::string::npos);
  const std::string text = plan_to_text(plan);
  CHECK(text.find(fmt::format("one-pass statistics: mean %{}, variance %{} (Welford)", s.mean,
                              s.variance)) != std::string::npos);
  // Regions without pairs list none; reductions and pointwise regions have no such key.
  const std::string sumsq_json = plan_to_json(plan_of(sumsq(DType::f32)));
  CHECK(sumsq_json.find("\"welford\"") == std::string::npos);
  const std::string softmax_json = plan_to_json(plan_of(api_softmax(DType::f32)));
  CHECK(softmax_json.find("\"welford\":[]") != std::string::npos);
}
