// fj_gemv_i8.cuh's widening of an int8 weight (a bit pattern, not a cast), compiled here as host
// C++ from the device source itself, against the cast for every int8 value. The GPU tests of
// weight-only int8 GEMMs run it on the device.
#include <cmath>
#include <cstring>

#include "support/catch.h"

namespace fj_gemv_i8_host {
// What the device intrinsic does: the bits as a float.
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
#define __device__
#define __forceinline__ inline
#include "templates/device/fj_gemv_i8.cuh"
#undef __device__
#undef __forceinline__
}  // namespace fj_gemv_i8_host

TEST_CASE("gemv kernel: int8 weights widen to f32 exactly", "[gemv][templates]") {
  for (int x = -128; x <= 127; ++x) {
    INFO("x = " << x);
    const float got = fj_gemv_i8_host::fj_gemv_i8_to_f32(static_cast<signed char>(x));
    CHECK(got == static_cast<float>(x));
    CHECK(std::signbit(got) == (x < 0));  // 0 is +0, as the cast gives
  }
}
