// fj_gemv_i8.cuh's widening of an int8 weight (a bit pattern, not a cast), compiled here as host
// C++ from the device source itself, against the cast for every int8 value (and every pair, for
// the tensor-core kernel's words). The GPU tests of weight-only int8 GEMMs run it on the device.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "support/catch.h"

namespace fj_gemv_i8_host {
// What the device intrinsic does: the bits as a float.
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// PTX prmt's default mode: byte i of the result is byte (s >> 4i) & 7 of {b, a} (a's bytes 0-3).
inline unsigned __byte_perm(unsigned a, unsigned b, unsigned s) {
  const uint64_t both = (static_cast<uint64_t>(b) << 32) | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<unsigned>((both >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
// An f16's value (normal or zero; what these tests make), and a value's f16 bits where it is
// one exactly (else ~0, which no check accepts).
inline double f16_value(unsigned h) {
  const int exponent = static_cast<int>((h >> 10) & 0x1F);
  const double magnitude =
      exponent == 0 ? std::ldexp(h & 0x3FF, -24) : std::ldexp(1024 + (h & 0x3FF), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}
inline unsigned f16_bits(double v) {
  for (unsigned h = 0; h < 0x7C00; ++h) {
    if (f16_value(h) == v && !(v == 0 && std::signbit(v))) return h;
    if (f16_value(h | 0x8000) == v && v != 0) return h | 0x8000;
  }
  return ~0u;
}
// What fj_gemv.cuh's f16x2 subtraction gives where each half's difference is an f16 exactly.
inline unsigned fj_gemv_f16x2_sub(unsigned a, unsigned b) {
  const unsigned lo = f16_bits(f16_value(a & 0xFFFF) - f16_value(b & 0xFFFF));
  const unsigned hi = f16_bits(f16_value(a >> 16) - f16_value(b >> 16));
  return lo | (hi << 16);
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

TEST_CASE("gemv kernel: a word of four int8 weights widens to four f32 exactly",
          "[gemv][templates]") {
  // Every value in every byte of the word, beside neighbours of every sign.
  const signed char others[] = {-128, -1, 0, 1, 127, 85};
  int wrong = 0;
  for (int at = 0; at < 4; ++at)
    for (int x = -128; x <= 127; ++x)
      for (const signed char other : others) {
        signed char in[4] = {other, static_cast<signed char>(-other - 1), other, 3};
        in[at] = static_cast<signed char>(x);
        float out[4];
        fj_gemv_i8_host::fj_gemv_i8x4_to_f32(out, in);
        for (int i = 0; i < 4; ++i) {
          wrong += out[i] != static_cast<float>(in[i]);
          wrong += std::signbit(out[i]) != (in[i] < 0);  // a zero weight is +0, as the cast gives
        }
      }
  CHECK(wrong == 0);
}

TEST_CASE("gemv kernel: a word of four int8 weights becomes two bf16x2 or f16x2 words exactly",
          "[gemv][templates]") {
  using namespace fj_gemv_i8_host;
  // Every value in every byte of the word, beside neighbours of every sign, against the pairs'
  // conversion (checked exhaustively below).
  const signed char others[] = {-128, -1, 0, 1, 127, 85};
  int wrong = 0;
  for (int at = 0; at < 4; ++at)
    for (int x = -128; x <= 127; ++x)
      for (const signed char other : others) {
        signed char in[4] = {other, static_cast<signed char>(-other - 1), 3, other};
        in[at] = static_cast<signed char>(x);
        unsigned bf[2], f16[2];
        fj_gemv_i8x4_to_bf16x2(bf, in);
        fj_gemv_i8x4_to_f16x2(f16, in);
        for (int i = 0; i < 2; ++i) {
          wrong += bf[i] != fj_gemv_i8x2_to_bf16x2(in[2 * i], in[2 * i + 1]);
          wrong += f16[i] != fj_gemv_i8x2_to_f16x2(in[2 * i], in[2 * i + 1]);
        }
      }
  CHECK(wrong == 0);
}

TEST_CASE("gemv kernel: pairs of int8 weights become bf16x2 and f16x2 words exactly",
          "[gemv][templates]") {
  using namespace fj_gemv_i8_host;
  // Each value's bf16 and f16 bits, from its f32 (integers of at most 8 bits are exact in both).
  unsigned bf16[256], f16[256];
  for (int x = -128; x <= 127; ++x) {
    bf16[x + 128] = __float_as_uint(static_cast<float>(x)) >> 16;
    f16[x + 128] = f16_bits(x);
    REQUIRE(f16[x + 128] != ~0u);
  }
  int wrong = 0;
  for (int lo = -128; lo <= 127; ++lo)
    for (int hi = -128; hi <= 127; ++hi) {
      const auto l = static_cast<signed char>(lo), h = static_cast<signed char>(hi);
      wrong += fj_gemv_i8x2_to_bf16x2(l, h) != (bf16[lo + 128] | bf16[hi + 128] << 16);
      wrong += fj_gemv_i8x2_to_f16x2(l, h) != (f16[lo + 128] | f16[hi + 128] << 16);
    }
  CHECK(wrong == 0);
  // Signs and zero: -1 is 0xBF80 in bf16 and 0xBC00 in f16; 0 is +0 in both.
  CHECK(fj_gemv_i8x2_to_bf16x2(-1, 0) == 0x0000BF80u);
  CHECK(fj_gemv_i8x2_to_f16x2(0, -128) == 0xD8000000u);
}
