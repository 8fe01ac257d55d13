// ir/host_tensor: dense host tensors and the storage rounding of every dtype; see host_tensor.h.
//
// The f16/bf16 conversions reproduce CUDA's __float2half_rn / __float2bfloat16_rn bit for bit:
// round to nearest, ties to even; overflow rounds to infinity; f16 results below 2^-14 become
// subnormals (or zero); every NaN becomes the canonical quiet NaN 0x7fff (CUDA drops the sign
// and payload too).
#include "ir/host_tensor.h"

#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"

namespace fusejit::ir {

namespace {

constexpr uint16_t kCanonicalNaN16 = 0x7fff;

// Truncates toward zero and wraps modulo 2^bits into the signed range (two's complement), as a
// cast through an unsigned integer of that width does. NaN and infinities give 0: no integer
// stands for them, and C++ leaves the conversion undefined.
int64_t wrap_to_int(double v, int bits) {
  if (!std::isfinite(v)) return 0;
  const double t = std::trunc(v);
  const double limit = std::ldexp(1.0, bits - 1);  // 2^(bits-1)
  int64_t r;
  if (t >= -limit && t < limit) {
    r = static_cast<int64_t>(t);
  } else {
    // |t| >= 2^31 (or 2^63): fmod is exact, and for bits == 64 the sum stays a multiple of the
    // ulp of t, so it is exactly representable below 2^64.
    const double modulus = std::ldexp(1.0, bits);
    double m = std::fmod(t, modulus);
    if (m < 0) m += modulus;
    r = static_cast<int64_t>(static_cast<uint64_t>(m));  // modular since C++20
  }
  if (bits == 32) r = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(r)));
  if (bits == 8) r = static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(r)));
  return r;
}

}  // namespace

uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return kCanonicalNaN16;
  // 65520 = 65504 + half an ulp: the tie goes to the even neighbour, which is infinity.
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  const uint32_t exp = ax >> 23;
  if (exp >= 113) {
    // Normal half: rebias the exponent (127 -> 15), keep the top 10 of the 23 mantissa bits and
    // round on the 13 dropped ones. A carry out of the mantissa bumps the exponent, as it should.
    uint32_t h = ((exp - 112) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint32_t dropped = ax & 0x1fffu;
    if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half: the result counts units of 2^-24. The float is m * 2^(exp - 150) with the
  // implicit bit in m, so it is m * 2^(exp - 126) units: shift right by 126 - exp (>= 14).
  if (exp == 0) return sign;  // float subnormals are far below half an f16 unit
  const uint32_t shift = 126 - exp;
  if (shift >= 25) return sign;  // below half a unit (m < 2^24): rounds to zero
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);  // inf or quiet NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalize the mantissa; every f16 subnormal is a normal float.
    int e = 113;  // the exponent (float bias) of 2^-14
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return kCanonicalNaN16;
  // Round to nearest even on the low 16 bits: add just under half, plus one when the kept part
  // is odd. Overflow carries into the exponent and lands on infinity.
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::f32:
      return static_cast<double>(static_cast<float>(v));
    // Half types round through f32, as the GPU stores an f32 result: double -> f32 -> half.
    case DType::f16:
      return half_bits_to_float(float_to_half_bits(static_cast<float>(v)));
    case DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    case DType::i32:
      return static_cast<double>(wrap_to_int(v, 32));
    case DType::i64:
      return static_cast<double>(wrap_to_int(v, 64));
    case DType::i8:
      return static_cast<double>(wrap_to_int(v, 8));
    case DType::boolean:
      return v != 0.0 ? 1.0 : 0.0;  // NaN != 0: true
  }
  throw InternalError(fmt::format("round_to: unknown dtype {}", static_cast<int>(dtype)));
}

namespace {

// The byte vector of a tensor of this type: a clear error for a shape past the size limit or
// memory the host does not have, rather than std::length_error or std::bad_alloc.
std::vector<std::byte> zeroed_bytes(DType dtype, const Shape& shape) {
  check_tensor_size(shape, dtype, "host tensor");
  const int64_t size = numel(shape) * dtype_size(dtype);
  try {
    return std::vector<std::byte>(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(fmt::format("host tensor {}{}: cannot allocate {} bytes of host memory",
                                       dtype_name(dtype), shape_str(shape), size),
                           size);
  }
}

}  // namespace

HostTensor::HostTensor(DType dtype_, Shape shape_)
    : dtype(dtype_), shape(std::move(shape_)), bytes(zeroed_bytes(dtype, shape)) {}

int64_t HostTensor::numel() const { return ir::numel(shape); }

int64_t round_to_integer(DType dtype, double v) {
  if (dtype == DType::boolean) return v != 0.0 ? 1 : 0;  // NaN != 0: true
  return wrap_to_int(v, dtype == DType::i32 ? 32 : dtype == DType::i8 ? 8 : 64);
}

int64_t wrap_integer(DType dtype, int64_t v) {
  if (dtype == DType::boolean) return v != 0 ? 1 : 0;
  if (dtype == DType::i32) return static_cast<int32_t>(static_cast<uint32_t>(v));
  if (dtype == DType::i8) return static_cast<int8_t>(static_cast<uint8_t>(v));
  return v;
}

int64_t HostTensor::get_integer(int64_t i) const {
  const std::byte* p =
      bytes.data() + static_cast<size_t>(i) * static_cast<size_t>(dtype_size(dtype));
  switch (dtype) {
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::boolean:
      return std::to_integer<int>(*p) != 0 ? 1 : 0;
    case DType::i8:
      return static_cast<int8_t>(std::to_integer<uint8_t>(*p));
    default:
      throw InternalError(fmt::format("get_integer of a {} tensor", dtype_name(dtype)));
  }
}

double HostTensor::get(int64_t i) const {
  const std::byte* p =
      bytes.data() + static_cast<size_t>(i) * static_cast<size_t>(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::f16:
    case DType::bf16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return dtype == DType::f16 ? half_bits_to_float(v) : bf16_bits_to_float(v);
    }
    case DType::i32:
    case DType::i64:
    case DType::boolean:
    case DType::i8:
      return static_cast<double>(get_integer(i));
  }
  throw InternalError(fmt::format("HostTensor::get: unknown dtype {}", static_cast<int>(dtype)));
}

void HostTensor::set(int64_t i, double v) {
  std::byte* p = bytes.data() + static_cast<size_t>(i) * static_cast<size_t>(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, sizeof f);
      return;
    }
    case DType::f16:
    case DType::bf16: {
      const float f = static_cast<float>(v);
      const uint16_t h = dtype == DType::f16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
      std::memcpy(p, &h, sizeof h);
      return;
    }
    case DType::i32: {
      const int32_t x = static_cast<int32_t>(wrap_to_int(v, 32));
      std::memcpy(p, &x, sizeof x);
      return;
    }
    case DType::i64: {
      const int64_t x = wrap_to_int(v, 64);
      std::memcpy(p, &x, sizeof x);
      return;
    }
    case DType::boolean:
      *p = v != 0.0 ? std::byte{1} : std::byte{0};
      return;
    case DType::i8:
      *p = static_cast<std::byte>(static_cast<uint8_t>(wrap_to_int(v, 8)));
      return;
  }
  throw InternalError(fmt::format("HostTensor::set: unknown dtype {}", static_cast<int>(dtype)));
}

}  // namespace fusejit::ir
