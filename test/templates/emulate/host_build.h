// Builds generated kernels for the host: a source of kernel bodies behind emulate/cuda_shim.h
// compiled by the host compiler (FUSEJIT_HOST_CXX, from CMake) into a shared object that the
// tests dlopen. For kernels that must be checked without a GPU (the attention kernel).
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "support/catch.h"
#include "templates/kernel.h"

namespace fusejit::test {

// Compiles `source` into a shared object with the host compiler; its path, or "" and the
// compiler's output in `log` when it fails. `tag` names the temporary folder.
inline std::string build_shared_object(const std::string& source, std::string& log,
                                       const std::string& tag = "emulation") {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("fusejit-{}-{}", tag, ::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "kernels.cpp") << source;
  const std::string so = (dir / "kernels.so").string();
  const std::string cmd =
      fmt::format("'{}' -O1 -std=c++20 -shared -fPIC -pthread -o '{}' '{}' > '{}' 2>&1",
                  FUSEJIT_HOST_CXX, so, (dir / "kernels.cpp").string(), (dir / "log").string());
  const int rc = std::system(cmd.c_str());
  std::ifstream f(dir / "log");
  log.assign(std::istreambuf_iterator<char>(f), {});
  return rc == 0 ? so : "";
}

// `source` built (build_shared_object) and opened (dlopen): the handle, the test stopped with
// the compiler's log when either fails.
inline void* open_shared_object(const std::string& source, const std::string& tag) {
  std::string log;
  const std::string so_path = build_shared_object(source, log, tag);
  INFO("host compiler log:\n" << log);
  REQUIRE(!so_path.empty());
  void* so = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(so != nullptr);
  return so;
}

// The body of `k` (what follows kKernelMarker), its dynamic shared memory an array of the
// launch's size (a function static, as every __shared__ array under the shim).
inline std::string emulated_body(const templates::Kernel& k) {
  std::string body = k.source.substr(k.source.find(templates::kKernelMarker));
  const std::string dynamic = "extern __shared__ __align__(16) unsigned char fj_shared[];";
  if (const size_t at = body.find(dynamic); at != std::string::npos)
    body.replace(at, dynamic.size(),
                 fmt::format("__shared__ __align__(16) unsigned char fj_shared[{}];",
                             std::max(k.shared_bytes, 1)));
  return body;
}

// The body of `k` (what follows kKernelMarker) and an `extern "C" run_<name>(args, grid)` that
// launches it through the shim, for a shared object's source after the shim's #include; ""
// when `source` already holds that kernel.
inline std::string emulated_kernel(const templates::Kernel& k, const std::string& source) {
  if (source.find(k.name + "(") != std::string::npos) return "";
  // In a namespace of its own: a kernel's module-scope scratch (split kernels) is its own.
  return fmt::format("namespace emu_{} {{\n", k.name) + emulated_body(k) +
         fmt::format(
             "}}\nextern \"C\" void run_{0}(void* const* args, int grid) {{ "
             "fj_emu::launch(emu_{0}::{0}, args, grid, {1}); }}\n",
             k.name, k.block);
}

// The shared object's source starts with this.
inline std::string shim_include() {
  return fmt::format("#include \"{}/cuda_shim.h\"\n", FUSEJIT_EMULATE_DIR);
}

inline bool host_compiler_available() {
  const std::string cmd = fmt::format("'{}' --version > /dev/null 2>&1", FUSEJIT_HOST_CXX);
  return std::system(cmd.c_str()) == 0;
}

}  // namespace fusejit::test

// Begins a test that builds kernels for the host: skips it (FUSEJIT_SKIP), saying so, when the
// host compiler is missing.
#define FUSEJIT_REQUIRE_HOST_COMPILER()                                        \
  do {                                                                         \
    if (!::fusejit::test::host_compiler_available()) {                         \
      FUSEJIT_SKIP("host compiler " << FUSEJIT_HOST_CXX << " not found");      \
    }                                                                          \
  } while (0)
