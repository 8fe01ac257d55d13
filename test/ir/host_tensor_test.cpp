// Host tensors, storage rounding, and the f16/bf16 conversions against known bit patterns.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "fusejit/error.h"
#include "ir/host_tensor.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {
constexpr float kInfF = std::numeric_limits<float>::infinity();
const float kNaNF = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST_CASE("float to f16 rounds to nearest even with CUDA's overflow, subnormals and NaN",
          "[ir][host_tensor]") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.5f) == 0xc100);
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);  // the largest half
  CHECK(float_to_half_bits(65519.0f) == 0x7bff);  // just below the midpoint to infinity
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);  // the midpoint ties to even: infinity
  CHECK(float_to_half_bits(-65520.0f) == 0xfc00);
  CHECK(float_to_half_bits(1e10f) == 0x7c00);
  CHECK(float_to_half_bits(kInfF) == 0x7c00);
  CHECK(float_to_half_bits(-kInfF) == 0xfc00);
  CHECK(float_to_half_bits(kNaNF) == 0x7fff);
  CHECK(float_to_half_bits(-kNaNF) == 0x7fff);

  // Ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);

  // Subnormals: units of 2^-24.
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_half_bits(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);  // half a unit ties to 0 (even)
  CHECK(float_to_half_bits(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units ties to 2
  CHECK(float_to_half_bits(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(float_to_half_bits(1023 * std::ldexp(1.0f, -24)) == 0x03ff);  // the largest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14)) == 0x0400);         // the smallest normal
  CHECK(float_to_half_bits(std::ldexp(2047.0f, -25)) == 0x0400);      // rounds up into it
  CHECK(float_to_half_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("f16 to float is exact", "[ir][host_tensor]") {
  CHECK(half_bits_to_float(0x3c00) == 1.0f);
  CHECK(half_bits_to_float(0xc100) == -2.5f);
  CHECK(half_bits_to_float(0x7bff) == 65504.0f);
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x03ff) == 1023 * std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x8000) == 0.0f);
  CHECK(std::signbit(half_bits_to_float(0x8000)));
  CHECK(half_bits_to_float(0x7c00) == kInfF);
  CHECK(half_bits_to_float(0xfc00) == -kInfF);
  CHECK(std::isnan(half_bits_to_float(0x7e00)));
  CHECK(std::isnan(half_bits_to_float(0x7c01)));  // a signalling pattern still reads as NaN

  // Every half survives the round trip; every NaN pattern stays NaN.
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan ? !std::isnan(f) : float_to_half_bits(f) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float to bf16 rounds to nearest even, overflows to inf, keeps NaN",
          "[ir][host_tensor]") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(-2.5f) == 0xc020);
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie to even (down)
  CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie to even (up)
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bf16_bits(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(float_to_bf16_bits(kInfF) == 0x7f80);
  CHECK(float_to_bf16_bits(kNaNF) == 0x7fff);
  CHECK(float_to_bf16_bits(std::bit_cast<float>(0x7f800001u)) == 0x7fff);  // low-payload NaN
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);

  CHECK(bf16_bits_to_float(0x3f80) == 1.0f);
  CHECK(bf16_bits_to_float(0xc020) == -2.5f);
  CHECK(bf16_bits_to_float(0x7f80) == kInfF);
  CHECK(std::isnan(bf16_bits_to_float(0x7fff)));
  int mismatches = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    if (nan ? !std::isnan(f) : float_to_bf16_bits(f) != b) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("round_to gives what each dtype stores", "[ir][host_tensor]") {
  CHECK(round_to(DType::f32, 0.1) == static_cast<double>(0.1f));
  CHECK(round_to(DType::f32, 1e300) == std::numeric_limits<double>::infinity());
  CHECK(round_to(DType::f16, 0.1) == 0.0999755859375);
  CHECK(round_to(DType::f16, 65520.0) == std::numeric_limits<double>::infinity());
  CHECK(round_to(DType::bf16, 1.0 + std::ldexp(1.0, -8)) == 1.0);
  CHECK(std::isnan(round_to(DType::bf16, std::nan(""))));

  // Integers: truncate toward zero, then wrap two's complement.
  CHECK(round_to(DType::i32, 3.7) == 3);
  CHECK(round_to(DType::i32, -3.7) == -3);
  CHECK(round_to(DType::i32, 2147483647.0) == 2147483647.0);
  CHECK(round_to(DType::i32, 2147483648.0) == -2147483648.0);
  CHECK(round_to(DType::i32, -2147483649.0) == 2147483647.0);
  CHECK(round_to(DType::i32, 4294967301.5) == 5);  // 2^32 + 5.5
  CHECK(round_to(DType::i32, -1e10) == -1410065408);
  CHECK(round_to(DType::i64, -3.99) == -3);
  CHECK(round_to(DType::i64, std::ldexp(1.0, 62)) == std::ldexp(1.0, 62));
  CHECK(round_to(DType::i64, std::ldexp(1.0, 63)) == -std::ldexp(1.0, 63));
  CHECK(round_to(DType::i64, std::ldexp(1.0, 64) + std::ldexp(1.0, 20)) == std::ldexp(1.0, 20));
  // Documented choice: NaN and infinities have no integer value and become 0.
  CHECK(round_to(DType::i32, std::nan("")) == 0);
  CHECK(round_to(DType::i64, std::numeric_limits<double>::infinity()) == 0);

  CHECK(round_to(DType::boolean, 0.5) == 1);
  CHECK(round_to(DType::boolean, -2) == 1);
  CHECK(round_to(DType::boolean, 0.0) == 0);
  CHECK(round_to(DType::boolean, -0.0) == 0);
  CHECK(round_to(DType::boolean, std::nan("")) == 1);
}

TEST_CASE("HostTensor stores each dtype in its native format", "[ir][host_tensor]") {
  HostTensor f(DType::f32, {2, 3});
  CHECK(f.numel() == 6);
  CHECK(f.bytes.size() == 24);
  for (int64_t i = 0; i < 6; ++i) CHECK(f.get(i) == 0.0);
  f.set(4, 0.1);
  float raw;
  std::memcpy(&raw, f.bytes.data() + 16, 4);
  CHECK(raw == 0.1f);
  CHECK(f.get(4) == static_cast<double>(0.1f));

  HostTensor h(DType::f16, {3});
  CHECK(h.bytes.size() == 6);
  h.set(0, -2.5);
  h.set(1, 65520.0);
  h.set(2, std::ldexp(1.0, -24));
  uint16_t bits[3];
  std::memcpy(bits, h.bytes.data(), 6);
  CHECK(bits[0] == 0xc100);
  CHECK(bits[1] == 0x7c00);
  CHECK(bits[2] == 0x0001);
  CHECK(h.get(0) == -2.5);
  CHECK(std::isinf(h.get(1)));

  HostTensor b(DType::bf16, {2});
  b.set(0, 1.0 + std::ldexp(1.0, -8));
  b.set(1, std::nan(""));
  std::memcpy(bits, b.bytes.data(), 4);
  CHECK(bits[0] == 0x3f80);
  CHECK(bits[1] == 0x7fff);
  CHECK(std::isnan(b.get(1)));

  HostTensor i(DType::i32, {2});
  i.set(0, 2147483648.0);
  i.set(1, -7.9);
  CHECK(i.get(0) == -2147483648.0);
  CHECK(i.get(1) == -7);

  HostTensor l(DType::i64, {1});
  l.set(0, std::ldexp(1.0, 40) + 1);
  int64_t lv;
  std::memcpy(&lv, l.bytes.data(), 8);
  CHECK(lv == (int64_t{1} << 40) + 1);

  HostTensor q(DType::boolean, {3});
  CHECK(q.bytes.size() == 3);
  q.set(0, 2.0);
  q.set(1, 0.0);
  q.set(2, std::nan(""));
  CHECK(q.bytes[0] == std::byte{1});
  CHECK(q.bytes[1] == std::byte{0});
  CHECK(q.get(0) == 1.0);
  CHECK(q.get(2) == 1.0);

  HostTensor scalar(DType::f32, {});
  CHECK(scalar.numel() == 1);
}
