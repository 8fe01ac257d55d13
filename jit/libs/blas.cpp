// jit/blas: see blas.h.
#include "jit/libs/blas.h"

#include <memory>
#include <type_traits>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default:
      throw UsageError(fmt::format("matmul: {} is not supported by cuBLASLt here; use f32, f16 or bf16",
                              dtype_name(d)));
  }
}

cublasLtEpilogue_t epilogue_of(const GemmProblem& p) {
  using A = GemmProblem::Activation;
  if (p.has_bias) {
    if (p.activation == A::relu) return CUBLASLT_EPILOGUE_RELU_BIAS;
    if (p.activation == A::gelu_tanh) return CUBLASLT_EPILOGUE_GELU_BIAS;
    return CUBLASLT_EPILOGUE_BIAS;
  }
  if (p.activation == A::relu) return CUBLASLT_EPILOGUE_RELU;
  if (p.activation == A::gelu_tanh) return CUBLASLT_EPILOGUE_GELU;
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  FUSEJIT_CUDA(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <class T>
void set_layout_attr(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                     const T& value) {
  FUSEJIT_CUDA(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof(value)));
}

}  // namespace

struct Blas::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto layout : {a, b, c, d}) {
      if (layout) cublasLtMatrixLayoutDestroy(layout);
    }
  }
};

Blas::Blas(Device& device) : device_(device) {
  FUSEJIT_CUDA(cublasLtCreate(&handle_));
  workspace_ = device_.allocate(kWorkspaceBytes);
}

Blas::~Blas() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

const Blas::Plan& Blas::plan_for(const GemmProblem& p) {
  // The plan goes into the map only once it is complete: any step below may throw, and a
  // half-made (or null) plan left under its key would be used by the next call.
  if (const auto it = plans_.find(p.key()); it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t type = cuda_type(p.dtype);
  const cublasComputeType_t compute = p.dtype == DType::f32
                                          ? (p.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                          : CUBLAS_COMPUTE_32F)
                                          : CUBLAS_COMPUTE_32F;
  FUSEJIT_CUDA(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));

  // Column-major view of the transposed product (see blas.h): cuBLAS's A is our B, its B our A.
  const cublasOperation_t op_cu_a = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_cu_b = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_cu_a);
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_cu_b);
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(p));

  // Stored column-major shapes: our B is [K,N] row-major = [N,K] col-major (ld N), or, when
  // transposed, [N,K] row-major = [K,N] col-major (ld K). Likewise for our A.
  const uint64_t cu_a_rows = p.transpose_b ? p.k : p.n, cu_a_cols = p.transpose_b ? p.n : p.k;
  const uint64_t cu_b_rows = p.transpose_a ? p.m : p.k, cu_b_cols = p.transpose_a ? p.k : p.m;
  FUSEJIT_CUDA(cublasLtMatrixLayoutCreate(&plan->a, type, cu_a_rows, cu_a_cols, cu_a_rows));
  FUSEJIT_CUDA(cublasLtMatrixLayoutCreate(&plan->b, type, cu_b_rows, cu_b_cols, cu_b_rows));
  FUSEJIT_CUDA(cublasLtMatrixLayoutCreate(&plan->c, type, p.n, p.m, p.n));
  FUSEJIT_CUDA(cublasLtMatrixLayoutCreate(&plan->d, type, p.n, p.m, p.n));
  if (p.batch > 1) {
    const int32_t count = static_cast<int32_t>(p.batch);
    const auto layouts = {std::pair{plan->a, p.stride_b}, std::pair{plan->b, p.stride_a},
                          std::pair{plan->c, p.stride_d}, std::pair{plan->d, p.stride_d}};
    for (auto [layout, stride] : layouts) {
      set_layout_attr(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
      set_layout_attr(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  FUSEJIT_CUDA(cublasLtMatmulPreferenceCreate(&pref));
  // Destroyed however this function leaves.
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                        decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
  const uint64_t workspace = kWorkspaceBytes;
  FUSEJIT_CUDA(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const uint32_t alignment = static_cast<uint32_t>(p.alignment);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    FUSEJIT_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->a, plan->b, plan->c, plan->d, pref, 1, &result, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw UsageError(fmt::format("matmul: cuBLASLt has no algorithm for {} [{}x{}] @ [{}x{}] (batch {}, "
                            "epilogue {}): {}",
                            dtype_name(p.dtype), p.m, p.k, p.k, p.n, p.batch,
                            static_cast<int>(epilogue_of(p)), cublasLtGetStatusString(status)));
  }
  plan->algo = result.algo;
  return *plans_.emplace(p.key(), std::move(plan)).first->second;
}

void Blas::gemm(const GemmProblem& p, const void* a, const void* b, const void* bias,
                const void* residual, void* d) {
  const Plan& plan = plan_for(p);
  if (p.has_bias) set_attr(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = static_cast<float>(p.alpha);
  const float beta = p.has_residual ? static_cast<float>(p.beta) : 0.0f;
  const void* c = p.has_residual ? residual : d;
  FUSEJIT_CUDA(cublasLtMatmul(handle_, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c,
                              d, plan.d, &plan.algo, workspace_->data(), kWorkspaceBytes,
                              device_.stream()));
}

}  // namespace fusejit::jit
