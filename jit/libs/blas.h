// jit/blas: GEMMs through cuBLASLt. One handle per Context; the descriptors and the algorithm
// cuBLASLt's heuristic picks are cached per problem; the workspace comes from the pool.
//
// Row-major tensors map onto cuBLASLt's column-major layouts without copies by computing the
// transposed product: D^T[N,M] = op(B)^T-as-column-major x op(A)^T-as-column-major. A row-major
// [M,N] result is exactly a column-major [N,M] one, and a bias along the result's last dim is a
// vector along D^T's rows, which is what cuBLASLt's bias epilogue adds:
//   D = act(alpha * (A @ B) + beta * C + bias)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <cublasLt.h>

#include "fusejit/dtype.h"
#include "jit/runtime/device.h"

namespace fusejit::jit {

// One GEMM problem, in row-major terms.
struct GemmProblem {
  DType dtype = DType::f32;       // of A, B, C, D and bias
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;       // A is stored [K,M] (row-major) and used transposed
  bool transpose_b = false;       // B is stored [N,K] (row-major) and used transposed
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;  // elements between batches; 0 broadcasts
  bool has_bias = false;
  bool has_residual = false;      // C, same shape as D, scaled by beta
  enum class Activation { none, relu, gelu_tanh } activation = Activation::none;
  double alpha = 1.0, beta = 0.0;
  bool allow_tf32 = false;
  // Bytes to which every A, B, C and D pointer of every call and batch is aligned (a power of
  // two, at most 256): the heuristic only picks algorithms that work at that alignment.
  int64_t alignment = 256;

  auto key() const {
    return std::tuple(static_cast<int>(dtype), m, n, k, transpose_a, transpose_b, batch, stride_a,
                      stride_b, stride_d, has_bias, has_residual, static_cast<int>(activation),
                      allow_tf32, alignment);
  }
};

class Blas {
 public:
  explicit Blas(Device& device);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // D = act(alpha * (A @ B) + beta * C + bias), on the device's stream.
  void gemm(const GemmProblem& p, const void* a, const void* b, const void* bias,
            const void* residual, void* d);

  int64_t plans_cached() const { return static_cast<int64_t>(plans_.size()); }

 private:
  struct Plan;
  const Plan& plan_for(const GemmProblem& p);

  Device& device_;
  cublasLtHandle_t handle_ = nullptr;
  std::shared_ptr<DeviceBuffer> workspace_;
  std::map<decltype(GemmProblem{}.key()), std::unique_ptr<Plan>> plans_;
};

}  // namespace fusejit::jit
