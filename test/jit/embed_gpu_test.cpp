// Embedding on the GPU ([gpu]: they skip, saying so, without one): a Context on the caller's
// stream reads a buffer that the caller's own kernel wrote on that stream, with no
// synchronization but stream order, and writes its results into the caller's buffers; the
// caller's current device and the default memory pool are left as they were.
#include <cmath>

#include <cuda_runtime.h>

#include "fusejit/fusejit.h"
#include "jit/runtime/driver.h"
#include "jit/runtime/nvrtc.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;
using fusejit::testing::quiet;

namespace {

#define CUDA_OK(call) REQUIRE((call) == cudaSuccess)

int current_device() {
  int d = -1;
  cudaGetDevice(&d);
  return d;
}

// The caller's own kernel, compiled by NVRTC and launched through the driver API on its
// stream: x[i] = x[i] * scale + i % 97.
class CallerKernel {
 public:
  CallerKernel() : driver_(fj::jit::Driver::load()) {
    fj::templates::Kernel k;
    k.name = "caller_ramp";
    k.source =
        "extern \"C\" __global__ void caller_ramp(float* x, int n, float scale) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) x[i] = x[i] * scale + (float)(i % 97);\n"
        "}\n";
    const fj::jit::CompiledKernel c = fj::jit::compile(k, "compute_75");
    cudaFree(nullptr);  // the primary context, current
    FUSEJIT_DRIVER(driver_, module_load_data, &module_, c.ptx.data());
    FUSEJIT_DRIVER(driver_, module_get_function, &function_, module_, "caller_ramp");
  }
  ~CallerKernel() { driver_.module_unload(module_); }

  void launch(float* x, int n, float scale, cudaStream_t stream) {
    void* args[] = {&x, &n, &scale};
    FUSEJIT_DRIVER(driver_, launch_kernel, function_, static_cast<unsigned>((n + 255) / 256), 1, 1,
                   256, 1, 1, 0, stream, args, nullptr);
  }

 private:
  fj::jit::Driver driver_;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
};

std::vector<float> to_host(const void* device_ptr, size_t count, cudaStream_t stream) {
  std::vector<float> out(count);
  REQUIRE(cudaMemcpyAsync(out.data(), device_ptr, count * sizeof(float), cudaMemcpyDeviceToHost,
                          stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  return out;
}

}  // namespace

TEST_CASE("a Context on the caller's stream reads and writes the caller's buffers in stream order",
          "[gpu][jit][embed]") {
  FUSEJIT_REQUIRE_GPU();
  cudaMemPool_t default_pool = nullptr;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  uint64_t original = 0, sentinel = 4096, now = 0;
  CUDA_OK(cudaMemPoolGetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &original));
  CUDA_OK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &sentinel));
  const int device_before = current_device();

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int rows = 4096, cols = 4096, n = rows * cols;  // large, so that a race would show
  float *x = nullptr, *y_out = nullptr, *row_sums = nullptr;
  CUDA_OK(cudaMalloc(&x, sizeof(float) * n));
  CUDA_OK(cudaMalloc(&y_out, sizeof(float) * n));
  CUDA_OK(cudaMalloc(&row_sums, sizeof(float) * rows));
  CallerKernel kernel;
  {
    fj::Context ctx(quiet(), {.device = 0, .stream = stream});
    CHECK(ctx.stream() == stream);
    CHECK(current_device() == device_before);
    for (int round = 0; round < 3; ++round) {
      // The caller writes x on its stream: zeros, then its own kernel; fusejit never waits.
      CUDA_OK(cudaMemsetAsync(x, 0, sizeof(float) * n, stream));
      kernel.launch(x, n, 1.0f, stream);
      const auto xt = ctx.wrap(x, {rows, cols}, DType::f32);
      const auto y = fj::relu(xt * 0.5 - (10.0 + round));
      fj::eval_into({{y, y_out, sizeof(float) * n}, {fj::sum(xt, {1}), row_sums, sizeof(float) * rows}});
      CHECK(ctx.stats().outputs_copied == 0);  // the kernels wrote the caller's buffers
      CHECK(current_device() == device_before);
      const std::vector<float> got = to_host(y_out, n, stream);
      const std::vector<float> sums = to_host(row_sums, rows, stream);
      int wrong = 0;
      for (int i = 0; i < n; ++i) {
        const float want = std::max(0.0f, static_cast<float>(i % 97) * 0.5f - (10.0f + round));
        if (got[i] != want) ++wrong;
      }
      CHECK(wrong == 0);
      double want_sum = 0;
      for (int j = 0; j < cols; ++j) want_sum += (cols * 7 + j) % 97;  // row 7
      CHECK(sums[7] == Approx(want_sum).epsilon(1e-5));
    }
    CHECK(current_device() == device_before);
  }
  CHECK(current_device() == device_before);
  CUDA_OK(cudaMemPoolGetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &now));
  CHECK(now == sentinel);  // fusejit's pool is its own
  CUDA_OK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &original));
  cudaFree(x);
  cudaFree(y_out);
  cudaFree(row_sums);
  cudaStreamDestroy(stream);
}

TEST_CASE("a GEMM result into the caller's buffer, a misaligned input, events", "[gpu][jit][embed]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context ctx(quiet());
  const int m = 64, k = 32, n = 48;
  std::vector<float> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.25f;
  float *a_dev = nullptr, *b_dev = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&a_dev, sizeof(float) * (a.size() + 1)));
  CUDA_OK(cudaMalloc(&b_dev, sizeof(float) * b.size()));
  CUDA_OK(cudaMalloc(&out, sizeof(float) * m * n));
  // a starts one float into its allocation: not 256-byte aligned, so fusejit reads a copy.
  CUDA_OK(cudaMemcpy(a_dev + 1, a.data(), sizeof(float) * a.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b_dev, b.data(), sizeof(float) * b.size(), cudaMemcpyHostToDevice));
  const auto at = ctx.wrap(a_dev + 1, {m, k}, DType::f32);
  const auto bt = ctx.wrap(b_dev, {n, k}, DType::f32, {1, n});  // b^T, as a strided view
  fj::matmul(at, fj::transpose(bt, 0, 1)).eval_into(out, sizeof(float) * m * n);
  CHECK(ctx.stats().outputs_copied == 0);  // cuBLASLt wrote D into the caller's buffer
  CHECK(ctx.stats().inputs_realigned == 1);  // a, not b
  ctx.synchronize();
  std::vector<float> got(m * n);
  CUDA_OK(cudaMemcpy(got.data(), out, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += double(a[i * k + p]) * b[p * n + j];
      if (std::abs(got[i * n + j] - want) > 1e-4 * (1 + std::abs(want))) ++wrong;
    }
  }
  CHECK(wrong == 0);

  // A destination that is not 256-byte aligned gets a copy of the result.
  float* shifted = nullptr;
  CUDA_OK(cudaMalloc(&shifted, sizeof(float) * (a.size() + 1)));
  (at * 2.0).eval_into(shifted + 1, sizeof(float) * a.size());
  CHECK(ctx.stats().outputs_copied == 1);
  ctx.synchronize();
  std::vector<float> doubled(a.size());
  CUDA_OK(cudaMemcpy(doubled.data(), shifted + 1, sizeof(float) * a.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < a.size(); ++i) wrong += doubled[i] != 2 * a[i];
  CHECK(wrong == 0);
  cudaFree(shifted);

  // Another stream waits for a result through an event, then reads it at data_ptr.
  cudaStream_t other = nullptr;
  cudaEvent_t ready = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  const auto y = fj::exp(at * 0.0) * 3.0;
  const void* p = y.data_ptr();
  ctx.record_event(ready);
  CUDA_OK(cudaStreamWaitEvent(other, ready, 0));
  CHECK(to_host(p, 5, other) == std::vector<float>(5, 3.0f));

  std::vector<float> host(4, 1.0f);
  CHECK_THROWS_WITH(ctx.wrap(host.data(), {4}, DType::f32), ContainsSubstring("host memory"));
  CHECK_THROWS_AS(fj::Context(quiet(), {.device = 1 << 20}), fj::UsageError);
  cudaEventDestroy(ready);
  cudaStreamDestroy(other);
  cudaFree(a_dev);
  cudaFree(b_dev);
  cudaFree(out);
}

TEST_CASE("dropping a wrapped buffer queues its release behind the stream's work",
          "[gpu][jit][embed]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context ctx(quiet());
  float* x = nullptr;
  CUDA_OK(cudaMalloc(&x, sizeof(float) * 1024));
  CUDA_OK(cudaMemset(x, 0, sizeof(float) * 1024));
  int released = 0;
  {
    // The release calls CUDA, as a program's usually does.
    const auto t = ctx.wrap(x, {1024}, DType::f32, {}, [&] {
      CHECK(cudaFree(x) == cudaSuccess);
      ++released;
    });
    (t + 1.0).eval();
  }
  CHECK(released == 0);  // queued, not waited for, when the last tensor was dropped
  ctx.synchronize();
  CHECK(released == 1);
}

TEST_CASE("a Context on another GPU leaves the caller's current device alone",
          "[gpu][jit][embed]") {
  FUSEJIT_REQUIRE_GPU();
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  if (count < 2) {
    FUSEJIT_SKIP("one GPU (the guard is checked on a machine with two or more)");
  }
  CUDA_OK(cudaSetDevice(0));
  float* on_zero = nullptr;
  CUDA_OK(cudaMalloc(&on_zero, sizeof(float) * 4));
  {
    fj::Context ctx(quiet(), {.device = 1});
    CHECK(current_device() == 0);
    CHECK(ctx.device() == 1);
    const auto y = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4}) * 2.0;
    CHECK(y.to_host() == std::vector<double>{2, 4, 6, 8});
    CHECK(current_device() == 0);
    y.data_ptr();
    CHECK(current_device() == 0);
    CHECK_THROWS_WITH(ctx.wrap(on_zero, {4}, DType::f32), ContainsSubstring("memory of GPU 0"));
  }
  CHECK(current_device() == 0);
  cudaFree(on_zero);
}
