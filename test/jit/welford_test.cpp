// One-pass mean and variance (fusion/welford.h) end to end.
//
// Without a GPU: layer_norm and var as the API records them (any dtype, normalized rank,
// weight and bias or not, correction, keepdim) plan with their statistics paired.
//
// [gpu]: rows with a large mean against their spread (x = 1e4 + N(0, 1)), where the sum of
// squares minus the squared sum loses every digit, in every row schedule (rows of a few
// threads, rows held in registers, streamed rows, rows split over blocks and over a cluster),
// against the CPU reference, within what f32 allows (docs/numerics.md): the mean to the f32
// bound (1e-5); var, streamed relative to the row's first value, to 1e-5 too; a layer norm's
// variance, from rows held in registers without that shift, to 2e-4 (partial means rounded at
// 1e4 to 2^-10); y = (x - mean) * rstd to twice the f32 spacing at the mean over the spread
// (the reference rounds its mean to f32 as well, and y inherits one such spacing).
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "test/templates/norms.h"

using namespace fusejit;
using ir::NodeId;
using ir::Op;
namespace fs = std::filesystem;

namespace {

// Records `make(ctx)` through the API (FUSEJIT_RECORD_DIR) and returns the pairs of its plan.
template <class Make>
std::vector<fusion::WelfordPair> recorded_pairs(const std::string& name, Make make) {
  const fs::path dir = fs::temp_directory_path() / ("fusejit_welford_test_" + name);
  fs::remove_all(dir);
  {
    Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_RECORD_DIR", dir.string()}}));
    make(ctx).to_host();
  }
  std::vector<fusion::WelfordPair> pairs;
  int traces = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    const fusion::Plan plan = fusion::make_plan(ir::parse_file(f.path().string()));
    for (const fusion::Region& r : plan.regions) {
      pairs.insert(pairs.end(), r.welford.begin(), r.welford.end());
    }
    ++traces;
  }
  CHECK(traces == 1);
  fs::remove_all(dir);
  return pairs;
}

Tensor ramp(Context& ctx, Shape shape, DType dt) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 7) - 3.0;
  return ctx.from_vector(v, std::move(shape), dt);
}

}  // namespace

TEST_CASE("the API's layer_norm and var plan with one-pass statistics", "[jit][welford]") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const std::string d(dtype_name(dt));
    CHECK(recorded_pairs("ln_" + d, [&](Context& c) {
            return layer_norm(ramp(c, {6, 64}, dt), ramp(c, {64}, dt), ramp(c, {64}, dt));
          }).size() == 1);
    CHECK(recorded_pairs("ln_plain_" + d, [&](Context& c) {
            return layer_norm(ramp(c, {6, 64}, dt));
          }).size() == 1);
    CHECK(recorded_pairs("ln_rank2_" + d, [&](Context& c) {
            return layer_norm(ramp(c, {3, 4, 32}, dt), ramp(c, {4, 32}, dt), {}, 1e-5, 2);
          }).size() == 1);
    for (bool keepdim : {true, false}) {
      CHECK(recorded_pairs(fmt::format("var_{}_{}", d, keepdim), [&](Context& c) {
              return var(ramp(c, {6, 64}, dt), {1}, 0.0, keepdim);
            }).size() == 1);
    }
    CHECK(recorded_pairs("var_all_" + d, [&](Context& c) {
            return var(ramp(c, {6, 64}, dt));
          }).size() == 1);
  }
  // RMS norm has one statistic: nothing to pair.
  CHECK(recorded_pairs("rms", [](Context& c) { return rms_norm(ramp(c, {6, 64}, DType::f32)); })
            .empty());
}

namespace {

// x = mean + N(0, 1) over the first input, weights near 1, biases N(0, 1).
std::vector<ir::HostTensor> large_mean_inputs(const ir::Graph& g, double mean, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<ir::HostTensor> out;
  for (NodeId id : g.inputs()) {
    out.emplace_back(g.node(id).dtype, g.node(id).shape);
    const bool x = out.size() == 1, weight = out.size() == 2;
    for (int64_t i = 0; i < out.back().numel(); ++i) {
      const double z = normal(rng);
      out.back().set(i, x ? mean + z : weight ? 1.0 + 0.1 * z : z);
    }
  }
  return out;
}

// y = layer_norm(x) * w + b over the trailing `rank` axes, its mean and its variance: three
// outputs of one normalization kernel.
ir::Graph layer_norm_with_statistics(DType dt, const Shape& shape, int64_t rank) {
  ir::Graph g;
  const NodeId x = ir::add_input(g, dt, shape);
  const Shape param(shape.end() - rank, shape.end());
  const NodeId w = ir::add_input(g, dt, param), b = ir::add_input(g, dt, param);
  std::vector<int64_t> axes;
  for (auto a = static_cast<int64_t>(shape.size()) - rank; a < static_cast<int64_t>(shape.size());
       ++a) {
    axes.push_back(a);
  }
  const NodeId xf = dt == DType::f32 ? x : ir::add_cast(g, x, DType::f32);
  const NodeId m = ir::add_reduce(g, Op::mean, xf, axes, true);
  const NodeId c = ir::add_binary(g, Op::sub, xf, m);
  const NodeId v = ir::add_reduce(g, Op::mean, ir::add_binary(g, Op::mul, c, c), axes, true);
  g.set_outputs({test::layer_norm_over(g, x, rank, w, b), m, v});
  return g;
}

struct Case {
  DType dtype;
  Shape shape;
  int64_t rank;
};

// The spacing of f32 at `mean`, over a spread of 1, twice: what y may differ by.
double y_bound(double mean) { return 2.0 * std::ldexp(1.0, std::ilogb(mean) - 23); }

void check_case(const ir::Graph& g, DType dtype, double mean, double y_limit) {
  const testing::GpuCheck c =
      testing::check_on_gpu(g, large_mean_inputs(g, mean, 7), fmt::format("x = {} + N(0, 1)", mean));
  INFO(c.detail);
  REQUIRE(c.errors.size() == 3);
  const double half = 1e-2;
  CHECK(c.errors[0] <= (dtype == DType::f32 ? y_limit : half));
  CHECK(c.errors[1] <= 1e-5);  // the mean
  // The variance: Chan's update carries the partial means' rounding at 1e4 (2^-10) into M2 on
  // rows held in registers (docs/numerics.md); 2.3e-4 measured on rows of 16.
  CHECK(c.errors[2] <= 4e-4);
}

}  // namespace

TEST_CASE("one-pass statistics of rows with a large mean match the reference",
          "[jit][welford][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  // Rows of a few threads, held in registers (odd widths: guarded accesses), streamed
  // (bf16 rows of 128256 re-read from L2 on an H200), split over a cluster (f32 rows of 128256
  // and 50257, more than the SM's share of L2), two normalized axes.
  const std::vector<Case> cases = {
      {DType::f32, {512, 16}, 1},     {DType::f32, {256, 1000}, 1},  {DType::f32, {256, 4096}, 1},
      {DType::f32, {128, 16384}, 1},  {DType::f32, {64, 32000}, 1},  {DType::f32, {16, 128256}, 1},
      {DType::f32, {16, 50257}, 1},   {DType::f32, {8, 32, 256}, 2}, {DType::bf16, {256, 4096}, 1},
      {DType::f16, {64, 32000}, 1},   {DType::bf16, {16, 128256}, 1},
  };
  for (const Case& k : cases) {
    // f16 and bf16 cannot hold 1e4 + N(0, 1): their rows sit at 100.
    const double mean = k.dtype == DType::f32 ? 1e4 : 1e2;
    INFO(fmt::format("layer norm {} {}", dtype_name(k.dtype), ir::shape_str(k.shape)));
    check_case(layer_norm_with_statistics(k.dtype, k.shape, k.rank), k.dtype, mean,
               y_bound(mean));
  }
  // var with a correction: many rows streamed, few long rows split over blocks, every axis.
  for (const auto& [shape, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{512, 16}, {1}}, {{256, 4096}, {1}}, {{4, 1 << 20}, {1}}, {{1024, 1024}, {0, 1}}}) {
    INFO(fmt::format("var {} over {} axes", ir::shape_str(shape), axes.size()));
    ir::Graph g;
    g.add_output(test::variance(g, ir::add_input(g, DType::f32, shape), axes, 1.0, false));
    const testing::GpuCheck c = testing::check_on_gpu(g, large_mean_inputs(g, 1e4, 11), "1e4 + N");
    INFO(c.detail);
    CHECK(c.worst_error <= 1e-5);
  }
}
