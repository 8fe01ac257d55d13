// ir/host_tensor: a dense, row-major tensor in host memory, stored in its dtype's native format
// (f32 as float, f16/bf16 as their 16-bit patterns, i32/i64 as integers, bool as one byte 0/1).
// It is what the CPU reference reads and writes and what is copied to and from the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusejit/dtype.h"

namespace fusejit::ir {

struct HostTensor {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<std::byte> bytes;  // numel(shape) * dtype_size(dtype)

  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);  // zero-filled

  int64_t numel() const;
  // Element i as a double (exact for every dtype except i64 beyond 2^53).
  double get(int64_t i) const;
  // Element i of an integral or bool tensor, exactly.
  int64_t get_integer(int64_t i) const;
  // Stores v rounded to the dtype as the GPU would store it (round to nearest even for floats,
  // NaN kept; truncation toward zero and wrap-around for integers; v != 0 for bool).
  void set(int64_t i, double v);
};

// Rounds a value to what `dtype` can hold, as HostTensor::set would store it.
double round_to(DType dtype, double v);
// What an integral or bool dtype holds for v, exactly: truncated and wrapped (NaN and
// infinities give 0), or v != 0 for bool.
int64_t round_to_integer(DType dtype, double v);
// What an integral or bool dtype holds for the integer v: wrapped to i32, v != 0 for bool.
int64_t wrap_integer(DType dtype, int64_t v);

// IEEE half and bfloat16 conversions, round to nearest even, NaN preserved.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

}  // namespace fusejit::ir
