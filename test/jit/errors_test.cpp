// Error kinds a caller can catch apart (fusejit/error.h) and the log callback a host application
// installs (fusejit/log.h). CPU only: CUDA failures are made by the same throw functions the
// runtime uses, with the statuses a failing device returns.
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "jit/runtime/cuda_check.h"
#include "support/catch.h"

namespace fj = fusejit;

namespace {

// Collects what the log callback receives; restores stderr when it goes out of scope.
struct CapturedLog {
  std::mutex m;
  std::vector<std::pair<fj::LogLevel, std::string>> lines;
  CapturedLog() {
    fj::set_log_callback([this](fj::LogLevel level, std::string_view text) {
      std::lock_guard<std::mutex> lock(m);
      lines.emplace_back(level, std::string(text));
    });
  }
  ~CapturedLog() { fj::set_log_callback(nullptr); }
  bool has(fj::LogLevel level, const std::string& what) {
    std::lock_guard<std::mutex> lock(m);
    for (const auto& [l, text] : lines) {
      if (l == level && text.find(what) != std::string::npos) return true;
    }
    return false;
  }
};

}  // namespace

TEST_CASE("a caller's mistake is a UsageError, and still an Error", "[jit][errors]") {
  fj::Context ctx(fj::Options::parse({{"FUSEJIT_LOG", "error"}}));
  const auto a = ctx.from_vector(std::vector<double>(6, 1.0), {2, 3});
  const auto b = ctx.from_vector(std::vector<double>(4, 1.0), {4});
  CHECK_THROWS_AS(a + b, fj::UsageError);
  CHECK_THROWS_AS(a + b, fj::Error);
  CHECK_THROWS_AS(fj::Options::parse({{"FUSEJIT_LOG", "loud"}}), fj::UsageError);
}

TEST_CASE("shapes past the 2^62-byte tensor limit are UsageErrors when recorded",
          "[jit][errors][limits]") {
  fj::Context ctx(fj::Options::parse({{"FUSEJIT_LOG", "error"}}));
  const auto x = ctx.from_vector(std::vector<double>(4, 1.0), {4});
  const int64_t big = int64_t{1} << 32;
  CHECK_THROWS_WITH(ctx.full({big, big}, 1.0),
                    ContainsSubstring("f32[4294967296,4294967296]") &&
                        ContainsSubstring("limit of 2^62 bytes"));
  CHECK_THROWS_AS(fj::reshape(x, {big, big}), fj::UsageError);
  CHECK_THROWS_AS(fj::reshape(x, {-1, big, big}), fj::UsageError);
  CHECK_THROWS_AS(fj::expand(fj::reshape(x, {4, 1}), {4, INT64_MAX / 2}), fj::UsageError);
  float host = 0;
  CHECK_THROWS_WITH(ctx.wrap(&host, {big, big}, fj::DType::f32), ContainsSubstring("wrap"));
}

TEST_CASE("an integer constant the dtype cannot hold is a UsageError", "[jit][errors]") {
  fj::Context ctx(fj::Options::parse({{"FUSEJIT_LOG", "error"}}));
  CHECK_THROWS_WITH(ctx.scalar(3e9, fj::DType::i32),
                    ContainsSubstring("3000000000 is out of range for i32"));
  CHECK_THROWS_AS(ctx.full({4}, -2147483649.0, fj::DType::i32), fj::UsageError);
  CHECK_THROWS_AS(ctx.full({4}, 0x1p63, fj::DType::i64), fj::UsageError);
  CHECK_THROWS_AS(ctx.scalar(std::nan(""), fj::DType::i64), fj::UsageError);
  CHECK_NOTHROW(ctx.scalar(2147483647.0, fj::DType::i32));
  CHECK_NOTHROW(ctx.scalar(-2147483648.0, fj::DType::i32));
  CHECK_NOTHROW(ctx.scalar(-0x1p63, fj::DType::i64));
  CHECK_NOTHROW(ctx.scalar(3e9, fj::DType::f32));
}

TEST_CASE("CUDA failures are CudaError, allocation failures OutOfMemoryError", "[jit][errors]") {
  try {
    fj::jit::throw_cuda_error("cudaMemcpyAsync(...)", cudaErrorInvalidValue);
    FAIL("no throw");
  } catch (const fj::CudaError& e) {
    CHECK(e.call() == "cudaMemcpyAsync(...)");
    CHECK(e.code() == static_cast<int>(cudaErrorInvalidValue));
    CHECK_THAT(std::string(e.what()), ContainsSubstring("cudaErrorInvalidValue"));
  }
  CHECK_THROWS_AS(fj::jit::throw_cuda_error("cudaMallocAsync(...)", cudaErrorMemoryAllocation),
                  fj::OutOfMemoryError);
  CHECK_THROWS_AS(fj::jit::throw_cublas_error("cublasLtMatmul", CUBLAS_STATUS_ALLOC_FAILED),
                  fj::OutOfMemoryError);
  CHECK_THROWS_AS(fj::jit::throw_cublas_error("cublasLtMatmul", CUBLAS_STATUS_EXECUTION_FAILED),
                  fj::CudaError);
  // Neither is a usage error.
  try {
    fj::jit::throw_cuda_error("cudaStreamSynchronize(s)", cudaErrorLaunchFailure);
  } catch (const fj::UsageError&) {
    FAIL("a CUDA failure was reported as the caller's mistake");
  } catch (const fj::Error&) {
  }
}

TEST_CASE("an installed log callback receives every Context's lines instead of stderr",
          "[jit][log]") {
  CapturedLog log;
  // An unknown variable is logged at warn by the Context that parsed it.
  fj::Context ctx(fj::Options::parse({{"FUSEJIT_NOT_A_THING", "1"}}));
  CHECK(log.has(fj::LogLevel::warn, "FUSEJIT_NOT_A_THING is not a fusejit variable"));
  // The level filter still applies: info lines reach the callback only from FUSEJIT_LOG=info.
  fj::Context chatty(fj::Options::parse({{"FUSEJIT_LOG", "info"}, {"FUSEJIT_NOPE", "1"}}));
  CHECK(log.has(fj::LogLevel::warn, "FUSEJIT_NOPE"));
  if (!chatty.has_gpu()) CHECK(log.has(fj::LogLevel::info, "no GPU"));
}

TEST_CASE("without a GPU, the CPU fallback is announced at warn level once per process",
          "[jit][log]") {
  fj::Context first(fj::Options::parse({{"FUSEJIT_LOG", "error"}}));  // may be the first
  if (first.has_gpu()) {
    FUSEJIT_SKIP("a GPU is present: no CPU fallback to announce");
  }
  CapturedLog log;
  fj::Context a(fj::Options::parse({}));
  fj::Context b(fj::Options::parse({}));
  // Some Context of this process has announced it already (the one above at the latest);
  // no later one repeats it at warn level.
  CHECK_FALSE(log.has(fj::LogLevel::warn, "no GPU"));
}
