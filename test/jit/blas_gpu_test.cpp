// jit/blas: a GEMM that cuBLASLt cannot plan throws each time it is asked, and leaves no plan
// behind for the next call with the same problem.
#include "fusejit/error.h"
#include "jit/libs/blas.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;

TEST_CASE("Blas: a GEMM that cannot be planned throws every time and caches nothing",
          "[jit][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  jit::Blas& blas = testing::gpu_runtime()->blas();
  jit::GemmProblem p;
  p.dtype = DType::i32;  // no cuBLASLt type: planning throws after the plan cache was consulted
  p.m = p.n = p.k = 8;
  const int64_t before = blas.plans_cached();
  // The second call once found a null plan under this key and crashed on it.
  for (int i = 0; i < 3; ++i) {
    CHECK_THROWS_AS(blas.gemm(p, nullptr, nullptr, nullptr, nullptr, nullptr), UsageError);
  }
  CHECK(blas.plans_cached() == before);
}
