// test/templates/emulate/pointwise_shim: what a generated pointwise kernel's body needs, on top
// of cuda_shim.h (threads, blocks, the storage formats), to run as host C++ in the pointwise
// emulation test: the vector loads and stores, the f16/bf16 conversions and the f32
// arithmetic of the ops those tests use (pointwise_tail_test, pointwise_plan_test). Written from
// what each helper means, not from templates/device: a vector access whose address is not a
// multiple of its word (16 bytes, or the whole vector when smaller) counts as misaligned, as it
// would fault on the device.
#pragma once

#include "cuda_shim.h"

namespace fj_emu {
template <class T, int N>
constexpr uintptr_t vector_word() {
  return N * sizeof(T) >= 16 ? 16 : N * sizeof(T);
}
}  // namespace fj_emu

template <class T, int N>
void fj_load_vec(T (&dst)[N], const T* src) {
  fj_emu::aligned(src, fj_emu::vector_word<T, N>());
  std::memcpy(dst, src, sizeof dst);
}
template <class T, int N>
void fj_store_vec(T* dst, const T (&src)[N]) {
  fj_emu::aligned(dst, fj_emu::vector_word<T, N>());
  std::memcpy(dst, src, sizeof src);
}
template <int N>
void fj_store_bf16_vec(unsigned short* dst, const float (&src)[N]) {
  fj_emu::aligned(dst, fj_emu::vector_word<unsigned short, N>());
  for (int i = 0; i < N; ++i) dst[i] = fj_emu::bf16_bits(src[i]);
}
template <int N>
void fj_store_f16_vec(unsigned short* dst, const float (&src)[N]) {
  fj_emu::aligned(dst, fj_emu::vector_word<unsigned short, N>());
  for (int i = 0; i < N; ++i) dst[i] = fj_emu::f16_bits(src[i]);
}
inline float fj_bf16_to_f32(unsigned short b) { return fj_emu::bf16_value(b); }
inline unsigned short fj_f32_to_bf16(float f) { return fj_emu::bf16_bits(f); }
inline float fj_f16_to_f32(unsigned short h) { return fj_emu::f16_value(h); }
inline unsigned short fj_f32_to_f16(float f) { return fj_emu::f16_bits(f); }
inline float fj_add(float a, float b) { return a + b; }
inline float fj_mul(float a, float b) { return a * b; }
inline float fj_sub(float a, float b) { return a - b; }
// A value rounded to bf16 and back (a cast node evaluated where the rounding mode stores it).
inline float fj_round_bf16(float f) { return fj_emu::bf16_value(fj_emu::bf16_bits(f)); }
