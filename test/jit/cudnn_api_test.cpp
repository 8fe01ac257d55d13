// Loading cuDNN at run time (jit/libs/cudnn_api.h), without a GPU: the library found and its
// version read, the version gate, failing to load with the reason (a bad FUSEJIT_CUDNN_PATH),
// a failed call's error, and cudnnCreate's failure when there is no GPU. Those that need cuDNN
// skip, saying so, when none is found.
#include <string>

#include "fusejit/error.h"
#include "fusejit/options.h"
#include "jit/libs/cudnn_api.h"
#include "support/catch.h"
#include "support/cudnn.h"
#include "support/gpu.h"

using namespace fusejit;
using jit::cudnn::CudnnLibrary;

TEST_CASE("cudnn: the library loads and is a cuDNN 9", "[jit][cudnn]") {
  FUSEJIT_REQUIRE_CUDNN();
  const auto& api = *testing::test_cudnn().api;
  INFO(api.path << " " << api.version);
  CHECK(api.version >= 90000);
  CHECK(api.version < 100000);
  CHECK(api.version_text() == std::to_string(api.version / 10000) + "." +
                                  std::to_string(api.version / 100 % 100) + "." +
                                  std::to_string(api.version % 100));
  CHECK_FALSE(api.path.empty());
  CHECK(testing::test_cudnn().unavailable.empty());
}

TEST_CASE("cudnn: a failed call throws CudaError with cuDNN's own text", "[jit][cudnn]") {
  FUSEJIT_REQUIRE_CUDNN();
  const jit::cudnn::Api& api = *testing::test_cudnn().api;
  // A tensor without dims or type cannot be finalized.
  const jit::cudnn::OwnedDescriptor t =
      jit::cudnn::make_descriptor(api, jit::cudnn::DescriptorType::tensor);
  try {
    api.check(api.finalize(t.get()), "cudnnBackendFinalize(tensor)");
    FAIL("an empty tensor descriptor finalized");
  } catch (const CudaError& e) {
    CHECK(e.call() == "cudnnBackendFinalize(tensor)");
    CHECK(e.code() / 1000 * 1000 == static_cast<int>(jit::cudnn::StatusCode::bad_param));
    CHECK_THAT(e.what(),
               ContainsSubstring("cudnnBackendFinalize(tensor) failed: CUDNN_STATUS_BAD_PARAM"));
  }
}

TEST_CASE("cudnn: without a GPU, creating a handle fails clearly", "[jit][cudnn]") {
  FUSEJIT_REQUIRE_CUDNN();
  if (testing::gpu_runtime()) {
    FUSEJIT_SKIP("a GPU is present, so a handle can be created");
  }
  CHECK_THROWS_WITH(jit::cudnn::CudnnHandle(testing::test_cudnn().api),
                    ContainsSubstring("cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED"));
}

TEST_CASE("cudnn: versions outside 9.x, and 9.10.0/9.10.1, are refused", "[jit][cudnn]") {
  CHECK(jit::cudnn::refuse_version(90000).empty());
  CHECK(jit::cudnn::refuse_version(91900).empty());
  CHECK(jit::cudnn::refuse_version(91002).empty());
  CHECK_THAT(jit::cudnn::refuse_version(91000), ContainsSubstring("known bugs"));
  CHECK_THAT(jit::cudnn::refuse_version(91001), ContainsSubstring("known bugs"));
  CHECK_THAT(jit::cudnn::refuse_version(8907), ContainsSubstring("not 9.x"));
  CHECK_THAT(jit::cudnn::refuse_version(100000), ContainsSubstring("not 9.x"));
}

TEST_CASE("cudnn: a bad FUSEJIT_CUDNN_PATH leaves cuDNN unavailable, saying why", "[jit][cudnn]") {
  SECTION("no such file") {
    const Options o = Options::parse({{"FUSEJIT_CUDNN_PATH", "/nonexistent/libcudnn.so.9"}});
    const CudnnLibrary lib = jit::cudnn::load_cudnn(o.cudnn_path);
    CHECK_FALSE(lib);
    CHECK_THAT(lib.unavailable, ContainsSubstring("cuDNN unavailable"));
    CHECK_THAT(lib.unavailable, ContainsSubstring("FUSEJIT_CUDNN_PATH=/nonexistent/libcudnn.so.9"));
    CHECK_THAT(lib.unavailable, ContainsSubstring("No such file"));
  }
  SECTION("a library that is not cuDNN") {
    const CudnnLibrary lib = jit::cudnn::load_cudnn("libm.so.6");
    CHECK_FALSE(lib);
    CHECK_THAT(lib.unavailable, ContainsSubstring("lacks cudnnGetVersion"));
  }
}
