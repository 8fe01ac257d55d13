// See context_memory.h.
#include "support/context_memory.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace fusejit::testing {

namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
  }
}

}  // namespace

ContextMemory::ContextMemory(Context& ctx, size_t bytes) : ctx_(ctx), bytes_(bytes) {
  if (ctx.has_gpu()) {
    int current = 0;
    check(cudaGetDevice(&current), "cudaGetDevice");
    check(cudaSetDevice(ctx.device()), "cudaSetDevice");
    check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    check(cudaSetDevice(current), "cudaSetDevice");
  } else {
    ptr_ = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  }
}

ContextMemory::~ContextMemory() {
  if (ctx_.has_gpu()) {
    ctx_.synchronize();
    cudaFree(ptr_);
  } else {
    std::free(ptr_);
  }
}

void ContextMemory::write(const void* src, size_t bytes, size_t offset) {
  if (ctx_.has_gpu()) {
    ctx_.synchronize();
    check(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy");
  } else {
    std::memcpy(static_cast<char*>(ptr_) + offset, src, bytes);
  }
}

void ContextMemory::read(void* dst, size_t bytes, size_t offset) const {
  read_context_memory(ctx_, static_cast<const char*>(ptr_) + offset, dst, bytes);
}

void read_context_memory(Context& ctx, const void* ptr, void* dst, size_t bytes) {
  if (ctx.has_gpu()) {
    ctx.synchronize();
    check(cudaMemcpy(dst, ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  } else {
    std::memcpy(dst, ptr, bytes);
  }
}

}  // namespace fusejit::testing
