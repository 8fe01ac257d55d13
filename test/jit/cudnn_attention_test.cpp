// cuDNN's fused attention (jit/libs/cudnn_attention.h). Without a GPU: our validation of a problem,
// and building and finalizing the operation graph, which cuDNN 9.8+ does without a handle
// (these skip, saying so, when no cuDNN 9 is found). With a GPU ([gpu]): the plan, and O against
// a CPU reference on small shapes.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "fusejit/error.h"
#include "ir/host_tensor.h"
#include "jit/libs/cudnn_attention.h"
#include "support/catch.h"
#include "support/cudnn.h"
#include "support/gpu.h"

using namespace fusejit;
using jit::cudnn::AttentionArgs;
using jit::cudnn::AttentionGraph;
using jit::cudnn::AttentionMaskKind;
using jit::cudnn::AttentionProblem;
using jit::cudnn::AttentionTensor;

namespace {

AttentionProblem with_mask(AttentionProblem p, AttentionMaskKind mask) {
  p.mask = mask;
  return p;
}

AttentionProblem with_bias(AttentionProblem p, int64_t bias_batch, int64_t bias_heads) {
  p.mask = AttentionMaskKind::bias;
  p.bias = AttentionTensor::contiguous(bias_batch, bias_heads, p.q.dims[2], p.k.dims[2]);
  return p;
}

// q, k, v and o stored [b, s, h, d] (what a linear layer followed by a reshape gives), seen
// as [b, h, s, d].
AttentionProblem bshd(DType dtype, int64_t b, int64_t h, int64_t s, int64_t d) {
  AttentionProblem p = AttentionProblem::contiguous(dtype, b, h, h, s, s, d, d);
  for (AttentionTensor* t : {&p.q, &p.k, &p.v, &p.o}) t->strides = {s * h * d, d, h * d, 1};
  return p;
}

}  // namespace

TEST_CASE("cudnn: problems cuDNN's fused attention cannot take are refused before any call",
          "[jit][cudnn]") {
  const AttentionProblem good = AttentionProblem::contiguous(DType::bf16, 2, 8, 2, 64, 64, 64, 64);
  CHECK(jit::cudnn::refuse_attention(good) == "");
  CHECK(jit::cudnn::refuse_attention(with_mask(good, AttentionMaskKind::causal)) == "");
  CHECK(jit::cudnn::refuse_attention(with_bias(good, 1, 8)) == "");

  struct Case {
    const char* what;
    AttentionProblem p;
    const char* reason;
  };
  AttentionProblem k_dim = good;
  k_dim.k = AttentionTensor::contiguous(2, 2, 64, 128);
  AttentionProblem zero = AttentionProblem::contiguous(DType::bf16, 2, 8, 2, 0, 64, 64, 64);
  AttentionProblem strided = good;
  strided.q.strides[3] = 2;
  AttentionProblem broadcast = good;
  broadcast.k.strides[0] = 0;
  AttentionProblem wrong_o = good;
  wrong_o.o = AttentionTensor::contiguous(2, 2, 64, 64);
  const Case cases[] = {
      {"head dims of q and k differ", k_dim, "the head dims of q (64) and k (128) differ"},
      {"q heads not a multiple of kv heads",
       AttentionProblem::contiguous(DType::bf16, 2, 6, 4, 64, 64, 64, 64),
       "q's 6 heads are not a multiple of k and v's 4 heads"},
      {"a zero dim", zero, "every dim must be at least 1"},
      {"f32", AttentionProblem::contiguous(DType::f32, 1, 1, 1, 8, 8, 64, 64), "f16 or bf16"},
      {"head dim not a multiple of 8",
       AttentionProblem::contiguous(DType::f16, 1, 1, 1, 8, 8, 60, 60), "multiple of 8"},
      {"head dim over 256", AttentionProblem::contiguous(DType::f16, 1, 1, 1, 8, 8, 320, 320),
       "at most 256"},
      {"last axis not contiguous", strided, "the last axis must be contiguous"},
      {"a broadcast batch of k", broadcast, "make the tensor contiguous"},
      {"o of the wrong shape", wrong_o, "o must be [2,8,64,64]"},
      {"a bias of the wrong shape", with_bias(good, 1, 3), "the bias must be [2 or 1, 8 or 1"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string why = jit::cudnn::refuse_attention(c.p);
    CHECK_THAT(why, ContainsSubstring(c.reason));
    CHECK_THAT(why, ContainsSubstring("cuDNN attention refused"));
    if (testing::test_cudnn()) {
      CHECK_THROWS_AS(AttentionGraph(testing::test_cudnn().api, c.p), UsageError);
    }
  }
}

TEST_CASE("cudnn: attention graphs build and finalize without a GPU", "[jit][cudnn]") {
  FUSEJIT_REQUIRE_CUDNN();
  const auto& api = testing::test_cudnn().api;
  struct Case {
    const char* what;
    AttentionProblem p;
    int64_t operations;  // 2 matmuls, scale, 2 reductions, sub, exp, log, add
                         // (the statistics), div; +1 bias, +4 causal
  };
  using jit::cudnn::AttentionMaskKind;
  const Case cases[] = {
      {"bf16 d64", AttentionProblem::contiguous(DType::bf16, 2, 4, 4, 128, 128, 64, 64), 10},
      {"f16 d128 causal",
       with_mask(AttentionProblem::contiguous(DType::f16, 1, 8, 8, 256, 256, 128, 128),
                 AttentionMaskKind::causal),
       14},
      {"bf16 d128 bias over batch and heads",
       with_bias(AttentionProblem::contiguous(DType::bf16, 2, 8, 8, 128, 128, 128, 128), 1, 1), 11},
      {"f16 d64 bias per batch and head",
       with_bias(AttentionProblem::contiguous(DType::f16, 2, 4, 4, 64, 96, 64, 64), 2, 4), 11},
      {"bf16 GQA 16 q heads over 4 kv heads, causal",
       with_mask(AttentionProblem::contiguous(DType::bf16, 2, 16, 4, 512, 512, 128, 128),
                 AttentionMaskKind::causal),
       14},
      {"bf16 odd lengths 1000 x 1000, causal",
       with_mask(AttentionProblem::contiguous(DType::bf16, 1, 8, 2, 1000, 1000, 128, 128),
                 AttentionMaskKind::causal),
       14},
      {"f16 s_q 37 over s_kv 1000",
       AttentionProblem::contiguous(DType::f16, 3, 4, 4, 37, 1000, 64, 64), 10},
      {"bf16 [b,s,h,d] storage", bshd(DType::bf16, 2, 8, 333, 64), 10},
      {"bf16 bias with stride 0 on its broadcast dims",
       [] {
         AttentionProblem p =
             with_bias(AttentionProblem::contiguous(DType::bf16, 2, 4, 4, 64, 64, 64, 64), 1, 1);
         p.bias.strides = {0, 0, 64, 1};
         return p;
       }(),
       11},
      {"bf16 value dim 64 under head dim 128",
       AttentionProblem::contiguous(DType::bf16, 1, 4, 4, 128, 128, 128, 64), 10},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": " << c.p.describe());
    AttentionGraph graph(api, c.p);  // no handle: cuDNN 9.8+ finalizes the graph without one
    CHECK(graph.operation_count() == c.operations);
    CHECK_FALSE(graph.planned());
  }
}

// ---- on a GPU: plans, and results against a CPU reference

namespace {

// O = softmax(q kᵀ * scale + bias, causal) v in double over [b,h,s,d]-contiguous data.
std::vector<double> reference(const AttentionProblem& p, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& bias, float scale) {
  const auto [b, hq, sq, d] = p.q.dims;
  const int64_t hk = p.k.dims[1], skv = p.k.dims[2], dv = p.v.dims[3];
  std::vector<double> o(static_cast<size_t>(b * hq * sq * dv));
  std::vector<double> s(static_cast<size_t>(skv));
  for (int64_t n = 0; n < b; ++n) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hk);
      for (int64_t i = 0; i < sq; ++i) {
        double max = -INFINITY;
        for (int64_t j = 0; j < skv; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot +=
                double(q[((n * hq + h) * sq + i) * d + e]) * k[((n * hk + kh) * skv + j) * d + e];
          }
          s[j] = dot * scale;
          if (p.mask == AttentionMaskKind::bias) {
            const int64_t bn = p.bias.dims[0] == 1 ? 0 : n, bh = p.bias.dims[1] == 1 ? 0 : h;
            s[j] += bias[((bn * p.bias.dims[1] + bh) * sq + i) * skv + j];
          }
          if (p.mask == AttentionMaskKind::causal && j > i) s[j] = -INFINITY;
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < skv; ++j) sum += (s[j] = std::exp(s[j] - max));
        for (int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < skv; ++j)
            acc += s[j] / sum * v[((n * hk + kh) * skv + j) * dv + e];
          o[((n * hq + h) * sq + i) * dv + e] = acc;
        }
      }
    }
  }
  return o;
}

uint16_t to_bits(DType t, float f) {
  return t == DType::bf16 ? ir::float_to_bf16_bits(f) : ir::float_to_half_bits(f);
}
float from_bits(DType t, uint16_t b) {
  return t == DType::bf16 ? ir::bf16_bits_to_float(b) : ir::half_bits_to_float(b);
}

// Random values rounded to `t`, as floats and as the 16-bit patterns the GPU reads.
std::vector<float> random_values(DType t, int64_t n, std::mt19937& rng,
                                 std::vector<uint16_t>& bits) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  bits.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = to_bits(t, dist(rng));
    values[i] = from_bits(t, bits[i]);
  }
  return values;
}

void* to_device(const std::vector<uint16_t>& bits) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, bits.size() * 2) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  return p;
}

}  // namespace

TEST_CASE("cudnn: attention on the GPU matches the CPU reference", "[jit][cudnn][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  FUSEJIT_REQUIRE_CUDNN();
  const auto& api = testing::test_cudnn().api;
  INFO("cuDNN " << api->version_text() << " from " << api->path);
  jit::cudnn::CudnnHandle handle(api);
  struct Case {
    const char* what;
    AttentionProblem p;
  };
  const Case cases[] = {
      {"bf16 d64", AttentionProblem::contiguous(DType::bf16, 2, 2, 2, 64, 64, 64, 64)},
      {"f16 d128 causal, odd lengths",
       with_mask(AttentionProblem::contiguous(DType::f16, 1, 2, 2, 37, 37, 128, 128),
                 AttentionMaskKind::causal)},
      {"bf16 GQA 4 over 2, s_q 17 s_kv 53",
       AttentionProblem::contiguous(DType::bf16, 1, 4, 2, 17, 53, 64, 64)},
      {"f16 bias over heads",
       with_bias(AttentionProblem::contiguous(DType::f16, 2, 2, 2, 32, 48, 64, 64), 2, 1)},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    INFO(c.what << ": " << c.p.describe());
    const AttentionProblem& p = c.p;
    AttentionGraph graph(api, p, handle.get());
    const std::string refused = graph.plan(handle.get());
    INFO("plan: " << refused);
    REQUIRE(refused.empty());
    const auto count = [](const AttentionTensor& t) {
      return t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3];
    };
    std::vector<uint16_t> qb, kb, vb, bias_bits;
    const std::vector<float> q = random_values(p.dtype, count(p.q), rng, qb);
    const std::vector<float> k = random_values(p.dtype, count(p.k), rng, kb);
    const std::vector<float> v = random_values(p.dtype, count(p.v), rng, vb);
    std::vector<float> bias;
    if (p.mask == AttentionMaskKind::bias)
      bias = random_values(p.dtype, count(p.bias), rng, bias_bits);
    const float scale = 1.0f / std::sqrt(static_cast<float>(p.q.dims[3]));
    AttentionArgs args;
    args.q = to_device(qb);
    args.k = to_device(kb);
    args.v = to_device(vb);
    args.bias = bias.empty() ? nullptr : to_device(bias_bits);
    args.scale = scale;
    const std::vector<uint16_t> nan_bits(static_cast<size_t>(count(p.o)), 0x7fff);
    args.o = to_device(nan_bits);  // poisoned: every element must be written
    if (graph.workspace_bytes() > 0)
      REQUIRE(cudaMalloc(&args.workspace, graph.workspace_bytes()) == cudaSuccess);
    graph.execute(handle.get(), nullptr, args);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<uint16_t> ob(nan_bits.size());
    REQUIRE(cudaMemcpy(ob.data(), args.o, ob.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (const void* ptr : {args.q, args.k, args.v, args.bias, static_cast<const void*>(args.o),
                            static_cast<const void*>(args.workspace)}) {
      cudaFree(const_cast<void*>(ptr));
    }
    // Relative L2 error within the f16/bf16 bound of fusejit's correctness rule (docs/design.md).
    const std::vector<double> want = reference(p, q, k, v, bias, scale);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double got = from_bits(p.dtype, ob[i]);
      diff += (got - want[i]) * (got - want[i]);
      norm += want[i] * want[i];
    }
    const double error = std::sqrt(diff / norm);
    INFO("relative error " << error);
    CHECK(error < 1e-2);
  }
}

TEST_CASE("cudnn: a graph built without a handle plans on a GPU", "[jit][cudnn][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  FUSEJIT_REQUIRE_CUDNN();
  const auto& api = testing::test_cudnn().api;
  if (api->graph_needs_handle()) {
    FUSEJIT_SKIP("cuDNN " << api->version_text() << " needs a handle to build a graph");
  }
  AttentionGraph graph(
      api, with_mask(AttentionProblem::contiguous(DType::bf16, 1, 8, 2, 1000, 1000, 128, 128),
                     AttentionMaskKind::causal));
  jit::cudnn::CudnnHandle handle(api);
  const std::string refused = graph.plan(handle.get());
  INFO(refused);
  CHECK(refused.empty());
  CHECK(graph.planned());
  CHECK(graph.workspace_bytes() >= 0);
}

TEST_CASE("cudnn: before 9.8 a graph is not built without a handle", "[jit][cudnn]") {
  FUSEJIT_REQUIRE_CUDNN();
  // The loaded library, presented as a 9.7: only the version decides.
  auto older = std::make_shared<jit::cudnn::Api>(*testing::test_cudnn().api);
  older->version = 90700;
  CHECK_THROWS_WITH(
      AttentionGraph(older, AttentionProblem::contiguous(DType::bf16, 1, 1, 1, 8, 8, 64, 64)),
      ContainsSubstring("cuDNN 9.7.0 needs a handle (a GPU) to build an operation graph"));
}
