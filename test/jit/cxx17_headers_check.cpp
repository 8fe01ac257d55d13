// Compiled as C++17 (test/jit/CMakeLists.txt): the public headers must not need C++20, and a
// C++17 program builds a Placement without designated initializers. A failure is a build error.
#if __cplusplus != 201703L
#error "this file checks the public headers under C++17; compile it with -std=c++17"
#endif

#include "fusejit/dlpack.h"
#include "fusejit/fusejit.h"
#include "fusejit/profile.h"

namespace {

[[maybe_unused]] fusejit::Placement placement_in_cxx17(CUstream_st* stream) {
  return fusejit::Placement::on(0, stream);
}

[[maybe_unused]] void eval_into_const(const fusejit::Tensor& t, void* dst, size_t bytes) {
  t.eval_into(dst, bytes);
}

}  // namespace
