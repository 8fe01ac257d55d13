// update_slice through the public API, on whatever the machine has (the GPU, or the CPU
// reference on CI): a KV cache filled one position per step lands in the tensor's own buffer
// (caller memory included), every handle sees the write, an eval performs every write recorded
// so far, reads recorded before a write see the old values, and new positions cost no plan and
// no compile. The [gpu] cases compare generated kernels with the reference on random inputs.
#include <cstring>

#include <cuda_runtime.h>
#include <vector>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/gpu_match.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;
using fj::Shape;
using fusejit::testing::require_match;

namespace {

// cache [1, 2, positions, 3] after writing step s's entry (s * 10 + h * 3 + d, doubled) at
// position s for steps [0, steps).
std::vector<double> written_cache(int64_t steps, int64_t positions) {
  std::vector<double> want(static_cast<size_t>(2 * positions * 3), 0.0);
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < 3; ++d) {
        want[static_cast<size_t>((h * positions + s) * 3 + d)] =
            2.0 * static_cast<double>(s * 10 + h * 3 + d);
      }
    }
  }
  return want;
}

fj::Tensor cache_entry(fj::Context& ctx, int64_t step, DType dtype) {
  std::vector<double> v;
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < 3; ++d) v.push_back(static_cast<double>(step * 10 + h * 3 + d));
  }
  return ctx.from_vector(v, {1, 2, 1, 3}, dtype);
}

}  // namespace

TEST_CASE("a KV cache fills one position per step, in place", "[jit][update]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(fj::dtype_name(dtype));
    fj::Context ctx(fusejit::testing::quiet());
    fj::Tensor cache = ctx.zeros({1, 2, 5, 3}, dtype).eval();
    const fj::Tensor alias = cache;  // another handle to the same tensor
    for (int64_t step = 0; step < 4; ++step) {
      const fj::Tensor pos = ctx.from_vector(std::vector<double>{double(step)}, {}, DType::i32);
      fj::update_slice(cache, 2, pos, cache_entry(ctx, step, dtype) * 2.0);
      // Read after the write, in the same trace: the row sums see the new entry.
      const std::vector<double> sums = fj::sum(cache, {1, 3}).to_host();
      const std::vector<double> want = written_cache(step + 1, 5);
      for (int64_t p = 0; p < 5; ++p) {
        double s = 0;
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t d = 0; d < 3; ++d) s += want[static_cast<size_t>((h * 5 + p) * 3 + d)];
        }
        CHECK(sums[static_cast<size_t>(p)] == s);
      }
    }
    CHECK(cache.to_host() == written_cache(4, 5));
    CHECK(alias.to_host() == written_cache(4, 5));
    // One plan served every position: the start is data.
    CHECK(ctx.stats().plans_built <= 3);
  }
}

TEST_CASE("an eval performs every write recorded so far, asked for or not", "[jit][update]") {
  fj::Context ctx(fusejit::testing::quiet());
  fj::Tensor cache = ctx.zeros({1, 2, 5, 3}).eval();
  const fj::Tensor pos = ctx.from_vector(std::vector<double>{1}, {1}, DType::i64);
  fj::update_slice(cache, 2, pos, cache_entry(ctx, 1, DType::f32) * 2.0);
  const std::vector<double> unrelated = (ctx.ones({2}) * 3.0).to_host();
  CHECK(unrelated == std::vector<double>{3, 3});
  const int64_t evals = ctx.stats().traces_evaluated;
  const std::vector<double> got = cache.to_host();  // already written: nothing to run
  CHECK(ctx.stats().traces_evaluated == evals);
  std::vector<double> want = written_cache(2, 5);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < 3; ++d)
      want[static_cast<size_t>((h * 5 + 0) * 3 + d)] = 0;  // step 0 not written
  }
  CHECK(got == want);
}

TEST_CASE("reads recorded before a write see the old values", "[jit][update]") {
  fj::Context ctx(fusejit::testing::quiet());
  fj::Tensor cache = ctx.ones({1, 2, 5, 3}).eval();
  const fj::Tensor before = fj::sum(cache);  // pending: reads the cache as it is now
  const fj::Tensor pos = ctx.from_vector(std::vector<double>{-1}, {}, DType::i32);  // the last
  fj::update_slice(cache, 2, pos, ctx.full({1, 2, 1, 3}, 7.0));
  const fj::Tensor after = fj::sum(cache);
  fj::eval({after, before});
  CHECK(before.to_host() == std::vector<double>{30});
  CHECK(after.to_host() == std::vector<double>{30 - 6 + 6 * 7});
}

TEST_CASE("a wrapped buffer is written in place", "[jit][update]") {
  fj::Context ctx(fusejit::testing::quiet());
  if (ctx.has_gpu()) {
    SUCCEED("caller device memory: see the [gpu] case");
    return;
  }
  std::vector<float> memory(2 * 4, 1.0f);
  fj::Tensor buffer = ctx.wrap(memory.data(), {2, 4}, DType::f32);
  const fj::Tensor pos = ctx.from_vector(std::vector<double>{2}, {}, DType::i64);
  fj::update_slice(buffer, 1, pos, ctx.full({2, 2}, 5.0));
  buffer.eval();
  CHECK(memory == std::vector<float>{1, 1, 5, 5, 1, 1, 5, 5});
}

TEST_CASE("update_slice refuses a destination that holds no data yet", "[jit][update]") {
  fj::Context ctx(fusejit::testing::quiet());
  fj::Tensor pending = ctx.zeros({2, 4}) + 1.0;
  const fj::Tensor pos = ctx.from_vector(std::vector<double>{0}, {}, DType::i32);
  try {
    fj::update_slice(pending, 1, pos, ctx.full({2, 2}, 5.0));
    FAIL("no error");
  } catch (const fj::UsageError& e) {
    CHECK(std::string(e.what()).find("evaluate the destination first") != std::string::npos);
  }
  fj::Tensor data = pending.eval();
  CHECK_THROWS_AS(fj::update_slice(data, 1, pos, ctx.full({3, 2}, 5.0)), fj::UsageError);
  CHECK_THROWS_AS(fj::update_slice(data, 1, ctx.scalar(1.0), ctx.full({2, 2}, 5.0)),
                  fj::UsageError);
}

TEST_CASE("KV-cache appends match the reference on the GPU", "[gpu][jit][update]") {
  FUSEJIT_REQUIRE_GPU();
  using ir::NodeId;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t tokens : {1, 3, 16}) {
      INFO(fj::dtype_name(dtype) << ", " << tokens << " tokens");
      ir::Graph g;
      const NodeId cache = ir::add_input(g, dtype, {3, 4, 37, 24});
      const NodeId x = ir::add_input(g, dtype, {3, tokens, 4, 24});
      const NodeId pos = ir::add_input(g, DType::i64, {});  // random: clamped on both sides
      const NodeId k = ir::add_permute(
          g, ir::add_binary(g, ir::Op::mul, x, ir::add_constant(g, dtype, 0.5)), {0, 2, 1, 3});
      const NodeId written = ir::add_update_slice(g, cache, k, 2, pos);
      g.add_output(ir::add_reduce(g, ir::Op::sum, written, {3}, false));
      g.add_output(written);
      require_match(g);
    }
  }
}

namespace {

// A decode step's shapes in small: a fused projection [1, tokens, (4 + 2 + 2) heads * 16]; q's
// 4 heads rotated by a table, k's 2 rotated and appended at `pos`, v's 2 appended as they are.
ir::Graph rope_and_appends(DType dtype, int64_t tokens) {
  using ir::NodeId;
  ir::Graph g;
  const NodeId qkv = ir::add_input(g, dtype, {1, tokens, 8 * 16});
  const NodeId table = ir::add_input(g, dtype, {tokens, 1, 16});
  const NodeId pos = ir::add_input(g, DType::i64, {});
  const auto heads = [&](int64_t first, int64_t n) {
    const NodeId cols = ir::add_slice(g, qkv, 2, first * 16, (first + n) * 16);
    return ir::add_permute(g, ir::add_reshape(g, cols, {1, tokens, n, 16}), {0, 2, 1, 3});
  };
  const auto rotate = [&](NodeId x) {
    const NodeId t =
        ir::add_permute(g, ir::add_reshape(g, table, {1, tokens, 1, 16}), {0, 2, 1, 3});
    return ir::add_binary(g, ir::Op::mul, x, t);
  };
  const NodeId k_cache = ir::add_input(g, dtype, {1, 2, 11, 16});
  const NodeId v_cache = ir::add_input(g, dtype, {1, 2, 11, 16});
  g.add_output(rotate(heads(0, 4)));
  g.add_output(ir::add_update_slice(g, k_cache, rotate(heads(4, 2)), 2, pos));
  g.add_output(ir::add_update_slice(g, v_cache, heads(6, 2), 2, pos));
  return g;
}

}  // namespace

TEST_CASE("a RoPE of q with the k and v cache appends is one kernel of two sweeps",
          "[jit][update]") {
  for (int64_t tokens : {1, 3}) {
    const fusion::Plan plan = fusion::make_plan(rope_and_appends(DType::bf16, tokens));
    REQUIRE(plan.kernel_count() == 1);
    CHECK(plan.regions.front().outputs.size() == 3);
  }
}

TEST_CASE(
    "a RoPE of q with the k and v cache appends in one kernel matches the reference on "
    "the GPU",
    "[gpu][jit][update]") {
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t tokens : {1, 3}) {
      INFO(fj::dtype_name(dtype) << ", " << tokens << " tokens");
      require_match(rope_and_appends(dtype, tokens));
    }
  }
}

TEST_CASE("device memory is written in place, and positions cost no compile",
          "[gpu][jit][update]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context ctx(fusejit::testing::quiet());
  fj::Tensor cache = ctx.zeros({1, 2, 64, 3}).eval();
  int64_t compiled = 0;
  for (int64_t step = 0; step < 6; ++step) {
    const fj::Tensor pos = ctx.from_vector(std::vector<double>{double(step)}, {}, DType::i32);
    fj::update_slice(cache, 2, pos, cache_entry(ctx, step, DType::f32) * 2.0);
    cache.eval();
    if (step == 1) compiled = ctx.stats().kernels_compiled;
  }
  CHECK(ctx.stats().kernels_compiled == compiled);
  CHECK(cache.to_host() == written_cache(6, 64));
}

TEST_CASE("caller device memory is written in place, aligned or not", "[gpu][jit][update]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context ctx(fusejit::testing::quiet());
  float* memory = nullptr;
  REQUIRE(cudaMalloc(&memory, sizeof(float) * 17) == cudaSuccess);
  for (int64_t offset : {0, 1}) {  // 1: a buffer 4 bytes past alignment, run on a copy
    INFO("offset " << offset);
    std::vector<float> ones(16, 1.0f);
    REQUIRE(cudaMemcpy(memory + offset, ones.data(), sizeof(float) * 16, cudaMemcpyHostToDevice) ==
            cudaSuccess);
    fj::Tensor buffer = ctx.wrap(memory + offset, {4, 4}, DType::f32);
    const fj::Tensor pos = ctx.from_vector(std::vector<double>{1}, {}, DType::i64);
    fj::update_slice(buffer, 0, pos, ctx.full({2, 4}, 5.0));
    buffer.eval();
    ctx.synchronize();
    std::vector<float> got(16);
    REQUIRE(cudaMemcpy(got.data(), memory + offset, sizeof(float) * 16, cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(got == std::vector<float>{1, 1, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 1});
    CHECK(buffer.to_host() == std::vector<double>{1, 1, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 1});
  }
  cudaFree(memory);
}
