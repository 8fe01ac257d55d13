// The kernel key: every ingredient (cache/key.h) changes it; it renders as 32 hex digits (the
// hash itself is tested in test/ir/digest_test.cpp); jit::KernelCache feeds it NVRTC's
// identity and flags.
#include <set>

#include "cache/key.h"
#include "jit/runtime/kernel_cache.h"
#include "jit/runtime/nvrtc.h"
#include "support.h"

using namespace fusejit;

namespace {

cache::KeyIngredients base() {
  cache::KeyIngredients in;
  in.source = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }";
  in.arch = "sm_90";
  in.compiler = "nvrtc 13.0 build-id 0123";
  in.codegen_version = 1;
  in.compile_flags = {"--gpu-architecture=sm_90", "-std=c++17"};
  return in;
}

}  // namespace

TEST_CASE("key: every ingredient changes it", "[cache][key]") {
  const cache::KernelKey k0 = cache::make_key(base());
  CHECK(cache::make_key(base()) == k0);  // deterministic

  std::set<std::string> keys = {k0.hex()};
  auto differs = [&](const cache::KeyIngredients& in) {
    const std::string hex = cache::make_key(in).hex();
    CHECK(keys.insert(hex).second);
  };
  cache::KeyIngredients in = base();
  const std::string other_source = std::string(in.source) + " ";
  in.source = other_source;
  differs(in);
  in = base();
  in.arch = "sm_80";
  differs(in);
  in = base();
  in.compiler = "nvrtc 13.1 build-id 0123";  // NVRTC version
  differs(in);
  in = base();
  in.compiler = "nvrtc 13.0 build-id 4567";  // same version, another build
  differs(in);
  in = base();
  in.codegen_version = 2;
  differs(in);
  in = base();
  in.compile_flags.push_back("-lineinfo");
  differs(in);
  in = base();
  in.compile_flags = {"-std=c++17", "--gpu-architecture=sm_90"};  // order matters
  differs(in);
  // Framing: moving bytes from one field to the next is another key.
  in = base();
  in.compile_flags = {"--gpu-architecture=sm_90-std=c++17"};
  differs(in);
  in = base();
  in.arch = "sm_9";
  in.compiler = "0nvrtc 13.0 build-id 0123";
  differs(in);
}

TEST_CASE("key: 32 lowercase hex digits that parse back", "[cache][key]") {
  const cache::KernelKey k = cache::make_key(base());
  const std::string hex = k.hex();
  REQUIRE(hex.size() == 32);
  CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(k.shard() == hex.substr(0, 2));
  const auto parsed = cache::KernelKey::from_hex(hex);
  REQUIRE(parsed);
  CHECK(*parsed == k);
  CHECK_FALSE(cache::KernelKey::from_hex(hex.substr(1)));
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != hex) CHECK_FALSE(cache::KernelKey::from_hex(upper));
  CHECK_FALSE(cache::KernelKey::from_hex(std::string(31, '0') + "g"));
}

TEST_CASE("KernelCache::key: NVRTC identity, arch, flags and source", "[cache][key]") {
  const std::string& id = jit::compiler_identity();
  CHECK_THAT(id, ContainsSubstring("nvrtc " + jit::nvrtc_version_string()));
  CHECK_THAT(id, ContainsSubstring("build-id "));
  INFO(id);
  // The toolkit's libnvrtc is shared and carries a GNU build id.
  CHECK(id.find("build-id unknown") == std::string::npos);

  Options options = Options::parse({{"FUSEJIT_CACHE", "off"}});
  test::CapturedLog log;
  jit::KernelCache kc(options, *log.logger);
  const templates::Kernel k = test::tiny_kernel(1);
  CHECK(kc.key(k, "sm_90") == kc.key(k, "sm_90"));
  CHECK_FALSE(kc.key(k, "sm_90") == kc.key(k, "sm_80"));
  CHECK_FALSE(kc.key(k, "sm_90") == kc.key(test::tiny_kernel(2), "sm_90"));

  cache::KeyIngredients in;
  in.source = k.source;
  in.arch = "sm_90";
  in.compiler = id;
  in.codegen_version = templates::kCodegenVersion;
  in.compile_flags = jit::compile_flags("sm_90");
  CHECK(cache::make_key(in) == kc.key(k, "sm_90"));
  in.codegen_version = templates::kCodegenVersion + 1;
  CHECK_FALSE(cache::make_key(in) == kc.key(k, "sm_90"));
}
