// jit/driver and jit/cuda_check: see driver.h and cuda_check.h.
#include "jit/runtime/driver.h"

#include <fmt/format.h>

#include "fusejit/error.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

namespace {

// The driver API version whose function signatures the pointers above have.
constexpr unsigned kDriverApiVersion = 12000;

template <class Fn>
void lookup(Fn*& fn, const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &p, kDriverApiVersion, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || !p) {
    throw CudaError(fmt::format("the CUDA driver does not provide {} "
                                "(cudaGetDriverEntryPointByVersion: {}); update the NVIDIA "
                                "driver to one for CUDA 12 or newer",
                                symbol, cudaGetErrorString(status)),
                    "cudaGetDriverEntryPointByVersion", static_cast<int>(status));
  }
  fn = reinterpret_cast<Fn*>(p);
}

}  // namespace

Driver Driver::load() {
  Driver d;
  lookup(d.module_load_data, "cuModuleLoadData");
  lookup(d.module_unload, "cuModuleUnload");
  lookup(d.module_get_function, "cuModuleGetFunction");
  lookup(d.launch_kernel, "cuLaunchKernel");
  lookup(d.launch_kernel_ex, "cuLaunchKernelEx");
  lookup(d.func_set_attribute, "cuFuncSetAttribute");
  lookup(d.get_error_string, "cuGetErrorString");
  lookup(d.graph_add_kernel_node, "cuGraphAddKernelNode");
  lookup(d.graph_exec_kernel_node_set_params, "cuGraphExecKernelNodeSetParams");
  return d;
}

void Driver::check(CUresult status, const char* call) const {
  if (status != CUDA_SUCCESS) throw_driver_error(*this, call, status);
}

void throw_cuda_error(std::string_view call, cudaError_t status) {
  std::string hint;
  if (status == cudaErrorMemoryAllocation) {
    hint = "; the GPU is out of memory: free tensors you no longer hold, or use smaller shapes";
  } else if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    hint = "; no usable GPU: check nvidia-smi, or set FUSEJIT_ARCH to plan and compile only";
  }
  const std::string message = fmt::format("{} failed: {} ({}){}", call, cudaGetErrorString(status),
                                          cudaGetErrorName(status), hint);
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message, -1);
  throw CudaError(message, std::string(call), static_cast<int>(status));
}

void throw_driver_error(const Driver& driver, std::string_view call, CUresult status) {
  const char* text = nullptr;
  if (driver.get_error_string) driver.get_error_string(status, &text);
  const std::string message = fmt::format("{} failed: {} (CUresult {})", call,
                                          text ? text : "unknown error", static_cast<int>(status));
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(message, -1);
  throw CudaError(message, std::string(call), static_cast<int>(status));
}

void throw_cublas_error(std::string_view call, cublasStatus_t status) {
  const std::string message = fmt::format("{} failed: {} ({})", call,
                                          cublasLtGetStatusString(status),
                                          cublasLtGetStatusName(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemoryError(message, -1);
  throw CudaError(message, std::string(call), static_cast<int>(status));
}

}  // namespace fusejit::jit
