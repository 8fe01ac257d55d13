// How gemm regions map onto cuBLASLt calls (jit/libs/gemm_call.h): on the CPU, the batch split of
// broadcast batch dims, exactly, and whole descriptions run by a host model of a strided-batched
// cuBLASLt call against the reference interpreter; on the GPU ([gpu]), the same graphs run for
// real (outputs poisoned with NaN) against the reference on fresh random inputs.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "ir/interp.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "jit/libs/gemm_call.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;
using ir::NodeId;
using ir::Op;
using jit::GemmBatches;
using jit::GemmOffsets;
using jit::split_batches;

namespace {

// Matrix sizes that make every offset distinguishable.
constexpr int64_t SA = 1000, SB = 100000, SD = 10000000;

}  // namespace

TEST_CASE("batch dims broadcast on one side are one strided-batched call", "[jit][gemm]") {
  SECTION("A[8] @ B[]: B's stride is 0") {
    const GemmBatches r = split_batches({8}, {8}, {}, SA, SB, SD);
    CHECK(r.batch == 8);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == 0);
    CHECK(r.stride_d == SD);
    CHECK(r.calls == std::vector<GemmOffsets>{{0, 0, 0}});
  }
  SECTION("A[1,16] @ B[8,16]: A repeats every 16 batches, so 8 calls of 16") {
    const GemmBatches r = split_batches({8, 16}, {1, 16}, {8, 16}, SA, SB, SD);
    CHECK(r.batch == 16);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == SB);
    CHECK(r.stride_d == SD);
    REQUIRE(r.calls.size() == 8);
    CHECK(r.calls[3] == GemmOffsets{0, 3 * 16 * SB, 3 * 16 * SD});
  }
  SECTION("adjacent dims with the same pattern merge, size-1 dims in between are skipped") {
    const GemmBatches r = split_batches({2, 1, 3, 4}, {2, 1, 3, 4}, {1, 1, 1}, SA, SB, SD);
    CHECK(r.batch == 24);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == 0);
    CHECK(r.stride_d == SD);
    CHECK(r.calls.size() == 1);
  }
  SECTION("both full") {
    const GemmBatches r = split_batches({4, 5}, {4, 5}, {4, 5}, SA, SB, SD);
    CHECK(r.batch == 20);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == SB);
    CHECK(r.calls.size() == 1);
  }
  SECTION("no batch dims, or only 1s") {
    for (const GemmBatches& r :
         {split_batches({}, {}, {}, SA, SB, SD), split_batches({1, 1}, {1}, {1, 1}, SA, SB, SD)}) {
      CHECK(r.batch == 1);
      CHECK(r.calls == std::vector<GemmOffsets>{{0, 0, 0}});
    }
  }
  SECTION("operand dims that do not broadcast are an internal error") {
    CHECK_THROWS_AS(split_batches({8}, {4}, {}, SA, SB, SD), InternalError);
    CHECK_THROWS_AS(split_batches({8}, {1, 8}, {}, SA, SB, SD), InternalError);
  }
}

TEST_CASE("batch dims broadcast on both sides are a strided call per outer index", "[jit][gemm]") {
  SECTION("A[8,1] @ B[1,16]: 8 calls of batch 16") {
    for (const Shape& b : {Shape{1, 16}, Shape{16}}) {  // rank 4 and rank 3 B
      const GemmBatches r = split_batches({8, 16}, {8, 1}, b, SA, SB, SD);
      CHECK(r.batch == 16);
      CHECK(r.stride_a == 0);
      CHECK(r.stride_b == SB);
      CHECK(r.stride_d == SD);
      REQUIRE(r.calls.size() == 8);
      for (int64_t i = 0; i < 8; ++i) {
        CHECK(r.calls[static_cast<size_t>(i)] == GemmOffsets{i * SA, 0, i * 16 * SD});
      }
    }
  }
  SECTION("A[16,1] @ B[1,8]: the larger leading group is the batch, D strided by 8 matrices") {
    const GemmBatches r = split_batches({16, 8}, {16, 1}, {1, 8}, SA, SB, SD);
    CHECK(r.batch == 16);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == 0);
    CHECK(r.stride_d == 8 * SD);
    REQUIRE(r.calls.size() == 8);
    for (int64_t j = 0; j < 8; ++j) {
      CHECK(r.calls[static_cast<size_t>(j)] == GemmOffsets{0, j * SB, j * SD});
    }
  }
  SECTION("three alternating groups: the largest is the batch, the others are looped") {
    const GemmBatches r = split_batches({2, 3, 4}, {2, 1, 4}, {1, 3, 1}, SA, SB, SD);
    CHECK(r.batch == 4);
    CHECK(r.stride_a == SA);
    CHECK(r.stride_b == 0);
    CHECK(r.stride_d == SD);
    REQUIRE(r.calls.size() == 6);
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        CHECK(r.calls[static_cast<size_t>(i * 3 + j)] ==
              GemmOffsets{i * 4 * SA, j * SB, (i * 12 + j * 4) * SD});
      }
    }
  }
}

namespace {

// What cuBLASLt computes for `call` (row-major terms, jit/libs/blas.h), on the host: for every call
// and batch, D = act(alpha * (A @ B) + beta * C + bias), each element rounded once. Fails when an
// element of D is written twice or never, or an operand is read outside its buffer.
ir::HostTensor model_calls(const ir::Graph& g, const jit::GemmCall& call,
                           const std::map<NodeId, ir::HostTensor>& memory) {
  const jit::GemmProblem& p = call.problem;
  const ir::HostTensor& A = memory.at(call.a);
  const ir::HostTensor& B = memory.at(call.b);
  const ir::HostTensor* bias = call.bias >= 0 ? &memory.at(call.bias) : nullptr;
  const ir::HostTensor* C = call.residual >= 0 ? &memory.at(call.residual) : nullptr;
  const ir::Node& out = g.node(call.d);
  ir::HostTensor D(out.dtype, out.shape);
  std::vector<int> writes(static_cast<size_t>(D.numel()), 0);
  for (const GemmOffsets& o : call.calls) {
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      const int64_t a0 = o.a + bi * p.stride_a, b0 = o.b + bi * p.stride_b,
                    d0 = o.d + bi * p.stride_d;
      REQUIRE(a0 + p.m * p.k <= A.numel());
      REQUIRE(b0 + p.k * p.n <= B.numel());
      REQUIRE(d0 + p.m * p.n <= D.numel());
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < p.k; ++k) {
            const double a = A.get(a0 + (p.transpose_a ? k * p.m + i : i * p.k + k));
            const double b = B.get(b0 + (p.transpose_b ? j * p.k + k : k * p.n + j));
            acc += a * b;
          }
          const int64_t at = d0 + i * p.n + j;
          double v = p.alpha * acc;
          if (C) v += p.beta * C->get(at);
          if (bias) v += bias->get(j);
          if (p.activation == jit::GemmProblem::Activation::relu) v = std::max(v, 0.0);
          if (p.activation == jit::GemmProblem::Activation::gelu_tanh) {
            v = 0.5 * v *
                (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
          }
          D.set(at, v);
          ++writes[static_cast<size_t>(at)];
        }
      }
    }
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    INFO("element " << i << " of D");
    REQUIRE(writes[i] == 1);
  }
  return D;
}

// Plans `g` (matmuls, maybe with epilogues, each written as a graph output), describes each
// gemm region's calls, and runs them through model_calls against the reference on random inputs.
std::vector<jit::GemmCall> check_described(const ir::Graph& g) {
  INFO(ir::print(g));
  const fusion::Plan plan = fusion::make_plan(g);
  REQUIRE(plan.kernel_count() == 0);
  const std::vector<ir::HostTensor> inputs = jit::random_inputs(plan.graph, 11);
  std::map<NodeId, ir::HostTensor> memory;
  const std::vector<NodeId> ids = plan.graph.inputs();
  for (size_t k = 0; k < ids.size(); ++k) memory[ids[k]] = inputs[k];
  const std::vector<ir::HostTensor> ref = ir::interpret(plan.graph, inputs);
  const std::vector<NodeId> outs = plan.graph.outputs();
  std::vector<jit::GemmCall> calls;
  for (const fusion::Region& r : plan.regions) {
    calls.push_back(jit::describe_gemm_call(plan, r, false));
    const auto at = std::find(outs.begin(), outs.end(), calls.back().d);
    REQUIRE(at != outs.end());
    const ir::HostTensor got = model_calls(plan.graph, calls.back(), memory);
    CHECK(jit::relative_error(got, ref[static_cast<size_t>(at - outs.begin())]) <=
          jit::error_bound(plan.graph));
  }
  return calls;
}

jit::GemmCall check_described(const std::string& text) {
  const std::vector<jit::GemmCall> calls = check_described(ir::parse(text));
  REQUIRE(calls.size() == 1);
  return calls[0];
}

// Batched GEMMs whose batch dims broadcast, on one side or both, implicitly or through expand,
// unsqueeze (reshape) and transposes, with and without an epilogue. With odd M, K and N, calls
// start at offsets aligned to one element only.
std::vector<ir::Graph> broadcast_gemms(DType dtype, int64_t M, int64_t K, int64_t N) {
  std::vector<ir::Graph> graphs;
  {  // A[3,1,M,K] @ B[1,4,K,N] and A[3,1,M,K] @ B[4,K,N]: 3 calls of batch 4
    ir::Graph g;
    const NodeId a = ir::add_input(g, dtype, {3, 1, M, K});
    const NodeId b4 = ir::add_input(g, dtype, {1, 4, K, N});
    const NodeId b3 = ir::add_input(g, dtype, {4, K, N});
    g.set_outputs({ir::add_matmul(g, a, b4), ir::add_matmul(g, a, b3)});
    graphs.push_back(std::move(g));
  }
  {  // A[6,1,M,K] @ B[1,2,K,N], one side A[2,3,M,K] @ B[1,3,K,N], and A[5,M,K] @ B[K,N]
    ir::Graph g;
    const NodeId a = ir::add_input(g, dtype, {6, 1, M, K});
    const NodeId b = ir::add_input(g, dtype, {1, 2, K, N});
    const NodeId a2 = ir::add_input(g, dtype, {2, 3, M, K});
    const NodeId b2 = ir::add_input(g, dtype, {1, 3, K, N});
    const NodeId a3 = ir::add_input(g, dtype, {5, M, K});
    const NodeId w = ir::add_input(g, dtype, {K, N});
    g.set_outputs({ir::add_matmul(g, a, b), ir::add_matmul(g, a2, b2), ir::add_matmul(g, a3, w)});
    graphs.push_back(std::move(g));
  }
  {  // unsqueezed A[3,M,K] -> [3,1,M,K]; B[4,N,K] transposed and expanded to [3,4,K,N];
     // alpha, bias, residual and relu in the epilogue
    ir::Graph g;
    const NodeId a = ir::add_input(g, dtype, {3, M, K});
    const NodeId b = ir::add_input(g, dtype, {4, N, K});
    const NodeId bias = ir::add_input(g, dtype, {N});
    const NodeId c = ir::add_input(g, dtype, {3, 4, M, N});
    const NodeId au = ir::add_reshape(g, a, {3, 1, M, K});
    const NodeId bt = ir::add_expand(g, ir::add_permute(g, b, {0, 2, 1}), {3, 4, K, N});
    NodeId y = ir::add_matmul(g, au, bt);
    y = ir::add_binary(g, Op::mul, y, ir::add_constant(g, dtype, 0.5));
    y = ir::add_binary(g, Op::add, y, bias);
    y = ir::add_binary(g, Op::add, y, c);
    g.set_outputs({ir::add_unary(g, Op::relu, y)});
    graphs.push_back(std::move(g));
  }
  {  // A expanded [M,K] -> [2,3,M,K] against B[2,1,N,K] transposed (a batch dim that both
     // broadcast: both strides 0); bias and gelu_tanh
    ir::Graph g;
    const NodeId a = ir::add_input(g, dtype, {M, K});
    const NodeId b = ir::add_input(g, dtype, {2, 1, N, K});
    const NodeId bias = ir::add_input(g, dtype, {N});
    const NodeId ae = ir::add_expand(g, a, {2, 3, M, K});
    NodeId y = ir::add_matmul(g, ae, ir::add_permute(g, b, {0, 1, 3, 2}));
    y = ir::add_binary(g, Op::add, y, bias);
    g.set_outputs({ir::add_unary(g, Op::gelu_tanh, y)});
    graphs.push_back(std::move(g));
  }
  {  // reshapes of buffers read in place: a linear layer's [2,M,K] activation as [2M,K] rows
     // against B[N,K] transposed; A[M,K] as [1,M*K] (one row: the decode
     // step's attention output) against B[M*K,N]; and [2,K,M] read as [2,M,K] transposed
    ir::Graph g;
    const NodeId x = ir::add_input(g, dtype, {2, M, K});
    const NodeId w = ir::add_input(g, dtype, {N, K});
    const NodeId bias = ir::add_input(g, dtype, {N});
    const NodeId rows = ir::add_reshape(g, x, {2 * M, K});
    NodeId y = ir::add_matmul(g, rows, ir::add_permute(g, w, {1, 0}));
    y = ir::add_binary(g, Op::add, y, bias);
    const NodeId a = ir::add_input(g, dtype, {M, K});
    const NodeId wide = ir::add_input(g, dtype, {M * K, N});
    const NodeId one = ir::add_matmul(g, ir::add_reshape(g, a, {1, M * K}), wide);
    const NodeId km = ir::add_input(g, dtype, {2, K, M});
    const NodeId at = ir::add_permute(g, ir::add_reshape(g, km, {2, M, K}), {0, 2, 1});
    const NodeId b = ir::add_input(g, dtype, {M, N});
    g.set_outputs({y, one, ir::add_matmul(g, at, b)});
    graphs.push_back(std::move(g));
  }
  return graphs;
}

// M, K, N of broadcast_gemms: 16-byte aligned matrices, and odd sizes.
constexpr std::array<std::array<int64_t, 3>, 2> kSizes = {{{40, 72, 24}, {5, 7, 3}}};

}  // namespace

TEST_CASE("broadcast batched matmuls are described as strided calls that compute the reference",
          "[jit][gemm]") {
  SECTION("both sides broadcast, rank 4: 3 calls of batch 4") {
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : f32[3,1,5,7] = input
%1 : f32[1,4,7,6] = input
%2 : f32[3,4,5,6] = matmul %0, %1
output %2
)");
    CHECK(c.calls.size() == 3);
    CHECK(c.problem.batch == 4);
    CHECK(c.problem.stride_a == 0);
    CHECK(c.problem.stride_b == 7 * 6);
  }
  SECTION("both sides broadcast, rank 4 against rank 3, larger leading group") {
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : bf16[6,1,5,7] = input
%1 : bf16[2,7,6] = input
%2 : bf16[6,2,5,6] = matmul %0, %1
output %2
)");
    CHECK(c.calls.size() == 2);
    CHECK(c.problem.batch == 6);
    CHECK(c.problem.stride_d == 2 * 5 * 6);
  }
  SECTION("one side broadcast, rank 3 and rank 4: one call") {
    for (const char* text : {R"(fusejit-trace 1
%0 : f32[4,5,7] = input
%1 : f32[7,6] = input
%2 : f32[4,5,6] = matmul %0, %1
output %2
)",
                             R"(fusejit-trace 1
%0 : f32[3,4,5,7] = input
%1 : f32[1,4,7,6] = input
%2 : f32[3,4,5,6] = matmul %0, %1
output %2
)"}) {
      const jit::GemmCall c = check_described(text);
      CHECK(c.calls.size() == (std::string(text).find("[1,4,7,6]") == std::string::npos ? 1 : 3));
    }
  }
  SECTION("a batch of stacked rows against shared weights is one GEMM of batch x M rows") {
    // A decode step: [batch, 1, K] activations against linear's [N, K] weights.
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : bf16[8,1,24] = input
%1 : bf16[40,24] = input
%2 : bf16[40] = input
%3 : bf16[24,40] = permute %1 axes=[1,0]
%4 : bf16[8,1,40] = matmul %0, %3
%5 : bf16[8,1,40] = add %4, %2
output %5
)");
    CHECK(c.calls.size() == 1);
    CHECK(c.problem.batch == 1);
    CHECK(c.problem.m == 8);
    CHECK(c.problem.stride_a == 0);
    CHECK(c.problem.stride_d == 0);
    CHECK(jit::gemm_call_label(c) == "cublasLt 8x40x24 bf16+bias");
    // [4,5,7] @ [7,6]: 20 rows.
    const jit::GemmCall rows = check_described(R"(fusejit-trace 1
%0 : f32[4,5,7] = input
%1 : f32[7,6] = input
%2 : f32[4,5,6] = matmul %0, %1
output %2
)");
    CHECK(rows.problem.m == 20);
    CHECK(rows.problem.batch == 1);
  }
  SECTION("explicit expands of batch dims, a transposed operand and a full epilogue") {
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : bf16[3,1,5,7] = input
%1 : bf16[1,4,6,7] = input
%2 : bf16[6] = input
%3 : bf16[3,4,5,6] = input
%4 : bf16[3,4,5,7] = expand %0
%5 : bf16[3,4,6,7] = expand %1
%6 : bf16[3,4,7,6] = permute %5 axes=[0,1,3,2]
%7 : bf16[3,4,5,6] = matmul %4, %6
%8 : bf16[] = const 0.5
%9 : bf16[3,4,5,6] = mul %7, %8
%10 : bf16[3,4,5,6] = add %9, %2
%11 : bf16[3,4,5,6] = add %10, %3
%12 : bf16[3,4,5,6] = gelu_tanh %11
output %12
)");
    CHECK(c.problem.transpose_b);
    CHECK(c.problem.has_bias);
    CHECK(c.problem.has_residual);
    CHECK(c.problem.alpha == 0.5);
    CHECK(c.calls.size() == 3);
    CHECK(c.problem.batch == 4);
  }
  SECTION("a reshape of a buffer that changes the matrix, read in place") {
    // A linear layer on [b, t, c]: the activation read as [b * t, c] rows, one GEMM.
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : f32[2,5,7] = input
%1 : f32[6,7] = input
%2 : f32[10,7] = reshape %0
%3 : f32[7,6] = permute %1 axes=[1,0]
%4 : f32[10,6] = matmul %2, %3
output %4
)");
    CHECK(c.a == 0);  // the input itself: no kernel copies it
    CHECK(c.problem.m == 10);
    CHECK(c.problem.k == 7);
    CHECK(c.problem.batch == 1);
    CHECK(c.calls.size() == 1);
  }
  SECTION("a transposed A and an unsqueezed operand (reshape adding a leading 1)") {
    const jit::GemmCall c = check_described(R"(fusejit-trace 1
%0 : f32[3,7,5] = input
%1 : f32[4,7,6] = input
%2 : f32[3,5,7] = permute %0 axes=[0,2,1]
%3 : f32[3,1,5,7] = reshape %2
%4 : f32[3,4,5,6] = matmul %3, %1
%5 : f32[3,4,5,6] = relu %4
output %5
)");
    CHECK(c.problem.transpose_a);
    CHECK(c.calls.size() == 3);
    CHECK(c.problem.batch == 4);
  }
}

TEST_CASE("the broadcast GEMMs of the GPU test are calls that compute the reference",
          "[jit][gemm]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const auto& [m, k, n] : kSizes) {
      for (const ir::Graph& g : broadcast_gemms(dtype, m, k, n)) check_described(g);
    }
  }
  // The first graph: 3 calls of batch 4 for each matmul.
  for (const jit::GemmCall& c : check_described(broadcast_gemms(DType::f32, 40, 72, 24)[0])) {
    CHECK(c.calls.size() == 3);
    CHECK(c.problem.batch == 4);
  }
}

TEST_CASE("batched GEMMs whose batch dims broadcast match the reference on the GPU",
          "[gpu][jit][gemm]") {
  FUSEJIT_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& [m, k, n] : kSizes) {
      for (const ir::Graph& g : broadcast_gemms(dtype, m, k, n)) {
        INFO(dtype_name(dtype));
        const testing::GpuCheck c = testing::check_on_gpu(g, std::random_device{}());
        INFO(c.detail);
        CHECK(c.pass);
      }
    }
  }
}

TEST_CASE("a call that starts inside a buffer asks cuBLASLt for that alignment", "[jit][gemm]") {
  const auto call_of = [](const char* text) {
    const fusion::Plan plan = fusion::make_plan(ir::parse(text));
    REQUIRE(plan.regions.size() == 1);
    return jit::describe_gemm_call(plan, plan.regions[0], false);
  };
  // One call: the buffers' own 256 bytes.
  CHECK(call_of(R"(fusejit-trace 1
%0 : bf16[3,5,7] = input
%1 : bf16[7,6] = input
%2 : bf16[3,5,6] = matmul %0, %1
output %2
)")
            .problem.alignment == 256);
  // Calls at A offsets of 5*8 bf16 = 80 bytes (16-aligned) and D offsets of 4*5*6 bf16 = 240
  // bytes (16-aligned): 16.
  const jit::GemmCall c = call_of(R"(fusejit-trace 1
%0 : bf16[3,1,5,8] = input
%1 : bf16[4,8,6] = input
%2 : bf16[3,4,5,6] = matmul %0, %1
output %2
)");
  CHECK(c.calls.size() == 3);
  CHECK(c.problem.alignment == 16);
  // A offsets of 5*7 f32 = 140 bytes: 4.
  CHECK(call_of(R"(fusejit-trace 1
%0 : f32[3,1,5,7] = input
%1 : f32[4,7,8] = input
%2 : f32[3,4,5,8] = matmul %0, %1
output %2
)")
            .problem.alignment == 4);
}
