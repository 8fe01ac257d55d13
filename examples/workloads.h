// The seed workloads, written once through the public API. The example program runs them, the
// benchmark times them, and examples/traces/ holds their full-size traces (written by
// `seed_workloads --write-traces`, so the files cannot drift from this code).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <fusejit/fusejit.h>

namespace fusejit::examples {

struct Workload {
  std::string name;      // e.g. "ew_chain"
  bool gemm = false;     // GEMM workloads exist in bf16 only
  // The input shapes at a given scale: `n` for the memory-bound ones (n x n), `n` = M = N = K
  // for the GEMM ones.
  std::function<std::vector<Shape>(int64_t n)> input_shapes;
  // Records the computation; returns its outputs.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& in)> build;
};

inline std::vector<Workload> seed_workloads() {
  using T = std::vector<Tensor>;
  auto mat3 = [](int64_t n) { return std::vector<Shape>{{n, n}, {n, n}, {n, n}}; };
  auto mat = [](int64_t n) { return std::vector<Shape>{{n, n}}; };
  auto mat_vec2 = [](int64_t n) { return std::vector<Shape>{{n, n}, {n}, {n}}; };
  auto gemm_bias = [](int64_t n) { return std::vector<Shape>{{n, n}, {n, n}, {n}}; };
  return {
      {"ew_chain", false, mat3,
       [](const T& in) { return T{relu(in[0] * in[1] + in[2])}; }},
      {"long_chain", false, mat3,
       [](const T& in) {
         const Tensor &x = in[0], &w = in[1], &b = in[2];
         return T{tanh(sigmoid(x * w + b) * x) * 0.5 + sqrt(abs(w - b))};
       }},
      {"bias_gelu", false, mat_vec2,
       [](const T& in) { return T{gelu(in[0] + in[1]) * in[2]}; }},
      {"sumsq", false, mat, [](const T& in) { return T{sum(in[0] * in[0], {-1})}; }},
      {"naive_softmax", false, mat,
       [](const T& in) {
         const Tensor& x = in[0];
         const Tensor e = exp(x - max(x, {-1}, true));
         return T{e / sum(e, {-1}, true)};
       }},
      {"softmax", false, mat, [](const T& in) { return T{softmax(in[0], -1)}; }},
      {"layernorm", false, mat_vec2,
       [](const T& in) { return T{layer_norm(in[0], in[1], in[2])}; }},
      {"rmsnorm", false, [](int64_t n) { return std::vector<Shape>{{n, n}, {n}}; },
       [](const T& in) { return T{rms_norm(in[0], in[1])}; }},
      {"add_layernorm", false,
       [](int64_t n) { return std::vector<Shape>{{n, n}, {n, n}, {n}, {n}}; },
       [](const T& in) {
         const Tensor s = in[0] + in[1];
         return T{s, layer_norm(s, in[2], in[3])};
       }},
      {"gemm_bias_relu", true, gemm_bias,
       [](const T& in) { return T{relu(matmul(in[0], in[1]) + in[2])}; }},
      {"gemm_bias_gelu", true, gemm_bias,
       [](const T& in) { return T{gelu(matmul(in[0], in[1]) + in[2], GeluApprox::tanh)}; }},
      {"two_gemm_mul", true, mat3,
       [](const T& in) { return T{matmul(in[0], in[1]) * matmul(in[0], in[2])}; }},
      {"gemm_layernorm", true, gemm_bias,
       [](const T& in) { return T{layer_norm(matmul(in[0], in[1]) + in[2])}; }},
      {"mlp", true,
       [](int64_t n) { return std::vector<Shape>{{n, n}, {n, n}, {n}, {n, n}, {n}}; },
       [](const T& in) {
         const Tensor h = gelu(matmul(in[0], in[1]) + in[2], GeluApprox::tanh);
         return T{matmul(h, in[3]) + in[4]};
       }},
  };
}

// The full sizes of examples/traces/: 16384 for memory-bound workloads, 8192 for GEMMs.
inline int64_t full_size(const Workload& w) { return w.gemm ? 8192 : 16384; }

// The dtypes each workload exists in.
inline std::vector<DType> workload_dtypes(const Workload& w) {
  if (w.gemm) return {DType::bf16};
  return {DType::f32, DType::bf16};
}

}  // namespace fusejit::examples
