// jit/cuda_check: the one checking wrapper every CUDA runtime, driver and cuBLASLt call goes
// through. A failure throws fusejit::Error naming the call and the library's error string.
#pragma once

#include <string_view>

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

namespace fusejit::jit {

struct Driver;

[[noreturn]] void throw_cuda_error(std::string_view call, cudaError_t status);
[[noreturn]] void throw_driver_error(const Driver& driver, std::string_view call, CUresult status);
[[noreturn]] void throw_cublas_error(std::string_view call, cublasStatus_t status);

inline void check(cudaError_t status, std::string_view call) {
  if (status != cudaSuccess) throw_cuda_error(call, status);
}
inline void check(cublasStatus_t status, std::string_view call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(call, status);
}

}  // namespace fusejit::jit

// FUSEJIT_CUDA(cudaMalloc(&p, n)): checks a runtime or cuBLASLt call, naming it on failure.
#define FUSEJIT_CUDA(call) ::fusejit::jit::check((call), #call)
