// fusejit/profile.h: the plan of pending tensors (fused and unfused, no GPU needed), that
// profiling leaves them pending, the errors, and on a GPU the timing and the reference check.
#include <cmath>

#include "fusejit/fusejit.h"
#include "jit/runtime/timing.h"
#include "support/catch.h"

namespace fj = fusejit;
using fj::DType;

namespace {

fj::Options quiet(const std::string& disable = "") {
  std::vector<std::pair<std::string, std::string>> vars{{"FUSEJIT_LOG", "error"},
                                                        {"FUSEJIT_CACHE", "memory"}};
  if (!disable.empty()) vars.emplace_back("FUSEJIT_DISABLE", disable);
  return fj::Options::parse(vars);
}

std::vector<double> ramp(int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i));
  return v;
}

}  // namespace

TEST_CASE("plan_summary: a softmax is one normalization kernel, unfused several", "[jit][profile]") {
  fj::Context fused(quiet()), unfused(quiet("fusion"));
  const fj::PlanSummary one = fj::plan_summary({fj::softmax(fused.placeholder({64, 128}), -1)});
  CHECK(one.kernels == 1);
  CHECK(one.library_calls == 0);
  REQUIRE(one.regions.size() == 1);
  CHECK_THAT(one.regions[0], ContainsSubstring("normalization:"));
  CHECK_THAT(one.regions[0], ContainsSubstring("exp"));
  CHECK_THAT(one.regions[0], !ContainsSubstring("expand"));  // views are not work

  const fj::PlanSummary many = fj::plan_summary({fj::softmax(unfused.placeholder({64, 128}), -1)});
  CHECK(many.kernels >= 4);  // max, sub, exp, sum, div: one kernel each
  CHECK(many.regions.size() == static_cast<size_t>(many.kernels));
}

TEST_CASE("plan_summary: a region of views alone is described as a copy", "[jit][profile]") {
  fj::Context ctx(quiet());
  const fj::Tensor x = ctx.placeholder({2, 3, 4, 5});
  const fj::PlanSummary plan =
      fj::plan_summary({fj::reshape(fj::transpose(x, 1, 2), {2, 4, 15})});
  REQUIRE(plan.regions.size() == 1);
  CHECK_THAT(plan.regions[0], ContainsSubstring(": copy (permute reshape)"));
}

TEST_CASE("plan_summary: a GEMM with bias and ReLU is one cuBLASLt call", "[jit][profile]") {
  for (const bool epilogue : {true, false}) {
    INFO("epilogue " << epilogue);
    fj::Context ctx(quiet(epilogue ? "" : "epilogue"));
    const fj::Tensor a = ctx.placeholder({64, 32}, DType::bf16);
    const fj::Tensor b = ctx.placeholder({32, 48}, DType::bf16);
    const fj::Tensor bias = ctx.placeholder({48}, DType::bf16);
    const fj::PlanSummary plan = fj::plan_summary({fj::relu(fj::matmul(a, b) + bias)});
    CHECK(plan.library_calls == 1);
    CHECK(plan.kernels == (epilogue ? 0 : 1));
    REQUIRE(!plan.regions.empty());
    CHECK(plan.regions[0] == (epilogue ? "gemm: cublasLt 64x48x32 bf16+bias+relu"
                                       : "gemm: cublasLt 64x48x32 bf16"));
  }
}

TEST_CASE("plan_summary leaves the tensors pending, and eval computes them as before",
          "[jit][profile]") {
  fj::Context ctx(quiet());
  const fj::Tensor x = ctx.from_vector(ramp(12), {3, 4});
  const fj::Tensor y = fj::relu(x * 2.0);
  const fj::Tensor other = fj::exp(x);  // pending too, and not asked about
  CHECK(fj::plan_summary({y}).kernels == 1);
  CHECK(ctx.stats().traces_evaluated == 0);
  const std::vector<double> values = y.to_host();
  for (size_t i = 0; i < values.size(); ++i) {
    const float x_i = static_cast<float>(ramp(12)[i]);  // x is f32
    CHECK(values[i] == std::max(0.0f, 2.0f * x_i));
  }
  CHECK(other.to_host()[1] == Approx(std::exp(ramp(12)[1])));
}

TEST_CASE("profile functions name what is wrong with their tensors", "[jit][profile]") {
  fj::Context ctx(quiet()), other(quiet());
  const fj::Tensor x = ctx.from_vector(ramp(4), {4});
  REQUIRE_THROWS_AS(fj::plan_summary({}), fj::UsageError);
  REQUIRE_THROWS_WITH(fj::plan_summary({fj::Tensor()}), ContainsSubstring("empty Tensor"));
  const fj::Tensor done = fj::neg(x).eval();
  REQUIRE_THROWS_WITH(fj::plan_summary({done}), ContainsSubstring("already computed"));
  const fj::Tensor y = fj::neg(x), z = fj::neg(other.from_vector(ramp(4), {4}));
  REQUIRE_THROWS_WITH(fj::plan_summary({y, z}), ContainsSubstring("different Contexts"));
  if (!ctx.has_gpu()) {
    REQUIRE_THROWS_WITH(fj::time_trace({y}), ContainsSubstring("no GPU"));
    REQUIRE_THROWS_WITH(fj::check_against_reference({y}), ContainsSubstring("no GPU"));
    REQUIRE_THROWS_WITH(fj::describe_device(ctx), ContainsSubstring("no GPU"));
  } else {
    REQUIRE_THROWS_WITH(fj::time_trace({fj::neg(ctx.placeholder({4}))}),
                        ContainsSubstring("placeholder"));
  }
}

TEST_CASE("timed runs rotate through enough sets of inputs to miss the L2", "[jit][profile]") {
  using fj::jit::rotation_sets;
  constexpr int64_t MB = 1000 * 1000, l2 = 50 * MB, spare = 5000 * MB;
  // A run that moves twice the L2 or more evicts its own inputs.
  CHECK(rotation_sets(100 * MB, l2, spare) == 1);
  CHECK(rotation_sets(537 * MB, l2, spare) == 1);
  // One sequence's KV cache at 8k keys (33.6 MB): the 3 runs between two uses of a set move
  // 100.8 MB.
  CHECK(rotation_sets(int64_t{33'554'432} + 8192 * 2 * 2, l2, spare) == 4);
  CHECK(rotation_sets(99 * MB, l2, spare) == 3);
  // Small runs: at most 64 sets, and no more copies than the spare memory holds.
  CHECK(rotation_sets(4 * MB, l2, spare) == 26);
  CHECK(rotation_sets(1000, l2, spare) == 64);
  CHECK(rotation_sets(4 * MB, l2, 10 * MB) == 3);
  CHECK(rotation_sets(4 * MB, l2, 0) == 1);
  // Unknown sizes: one set.
  CHECK(rotation_sets(0, l2, spare) == 1);
  CHECK(rotation_sets(4 * MB, 0, spare) == 1);
  CHECK(rotation_sets(4 * MB, l2, -1) == 1);
}

TEST_CASE("time_trace and check_against_reference on the GPU", "[gpu][jit][profile]") {
  fj::Context ctx(quiet());
  if (!ctx.has_gpu()) {
    FUSEJIT_SKIP("no GPU");
  }
  const int64_t rows = 512, cols = 1024;
  const fj::Tensor x = ctx.from_vector(ramp(rows * cols), {rows, cols});
  const fj::Tensor w = ctx.from_vector(ramp(cols), {cols});
  const fj::Tensor y = fj::rms_norm(x, w);
  // 4.2 MB a run: timed over copies of x and w in turn (the check after it reads x and w).
  const fj::TraceTiming t = fj::time_trace({y}, 5, 1);
  CHECK(t.ms > 0.0);
  CHECK(t.bytes == (2 * rows * cols + cols) * 4);  // x and w read, y written
  CHECK(t.flops == 0.0);
  const fj::ReferenceCheck c = fj::check_against_reference({y});
  CHECK(c.passed());
  CHECK(c.bound == 1e-5);
  CHECK(c.scope == "every element");
  CHECK(ctx.stats().traces_evaluated == 0);  // still pending
  const fj::DeviceSummary d = fj::describe_device(ctx);
  CHECK(!d.name.empty());
  CHECK(d.copy_bytes_per_second > 1e9);
}
