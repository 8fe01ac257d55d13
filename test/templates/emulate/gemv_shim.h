// test/templates/emulate/gemv_shim: what a generated GEMV kernel's body needs, on top of
// pointwise_shim.h (threads, blocks, storage formats, vector moves), to run as host C++ in the
// GEMV emulation test: fj_gemv.cuh's helpers (the fence and the atomic count of the split are
// cuda_shim.h's). Written from what each helper means, not from templates/device.
#pragma once

#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "pointwise_shim.h"

inline float fj_gemv_shfl_xor(float v, int m) { return fj_emu::shfl_xor(v, m); }
inline float fj_gemv_relu(float x) { return std::isnan(x) || x > 0.0f ? x : 0.0f; }
inline float fj_gemv_gelu_tanh(float x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * double{x} * x * x);
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
}
inline float fj_gemv_partial(const float* p) { return *p; }
// fj_stage.cuh: a cp.async copy of N elements into shared memory, made only when the thread
// waits for it (the latest moment it may land), so that a read before the wait, or in another
// thread before the barrier after it, sees stale data. Copies form groups at each commit;
// fj_stage_wait_group<N> lands every committed group but the N newest, fj_stage_wait every copy.
struct fj_gemv_copy {
  void* dst;
  const void* src;
  size_t bytes;
};
inline thread_local std::vector<fj_gemv_copy> fj_gemv_copies;              // not committed
inline thread_local std::deque<std::vector<fj_gemv_copy>> fj_gemv_groups;  // oldest first
template <class T, int N>
void fj_stage_vec(T* dst, const T* src) {
  static_assert(N * sizeof(T) == 4 || N * sizeof(T) == 8 || N * sizeof(T) == 16);
  fj_emu::aligned(dst, N * sizeof(T));  // both ends of a cp.async: its size
  fj_emu::aligned(src, N * sizeof(T));
  if (fj_emu::before_wait) fj_emu::read_before_wait(src);  // the ring's first stages under PDL
  fj_gemv_copies.push_back({dst, src, N * sizeof(T)});
}
inline void fj_gemv_land(const std::vector<fj_gemv_copy>& copies) {
  for (const fj_gemv_copy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
}
inline void fj_stage_commit() {
  fj_gemv_groups.push_back(std::move(fj_gemv_copies));
  fj_gemv_copies.clear();
}
template <int N>
void fj_stage_wait_group() {
  while (fj_gemv_groups.size() > static_cast<size_t>(N)) {
    fj_gemv_land(fj_gemv_groups.front());
    fj_gemv_groups.pop_front();
  }
}
inline void fj_stage_wait() {
  fj_stage_commit();
  fj_stage_wait_group<0>();
}
// fj_gemv_i8.cuh: an int8 weight as f32.
inline float fj_gemv_i8_to_f32(signed char x) { return static_cast<float>(x); }
// fj_gemv_i8.cuh: four int8 weights (a word of the vector) as f32.
inline void fj_gemv_i8x4_to_f32(float* out, const signed char* in) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(in[i]);
}

// The tensor-core variant: cuda_shim.h's mma (fragments rebuilt by the documented layouts), a
// join of two 16-bit elements, and two floats narrowed into one register.
inline void fj_gemv_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  fj_emu::mma<fj_emu::bf16_value>(d, a, b);
}
inline void fj_gemv_mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  fj_emu::mma<fj_emu::f16_value>(d, a, b);
}
inline unsigned fj_gemv_join(unsigned short lo, unsigned short hi) {
  return lo | (static_cast<unsigned>(hi) << 16);
}
inline unsigned fj_f32x2_to_bf16x2(float lo, float hi) {
  return fj_emu::bf16_bits(lo) | (static_cast<unsigned>(fj_emu::bf16_bits(hi)) << 16);
}
inline unsigned fj_f32x2_to_f16x2(float lo, float hi) {
  return fj_emu::f16_bits(lo) | (static_cast<unsigned>(fj_emu::f16_bits(hi)) << 16);
}
// fj_gemv_i8.cuh: two int8 weights as a register of two bf16 or f16 (exact either way).
inline unsigned fj_gemv_i8x2_to_bf16x2(signed char lo, signed char hi) {
  return fj_f32x2_to_bf16x2(static_cast<float>(lo), static_cast<float>(hi));
}
inline unsigned fj_gemv_i8x2_to_f16x2(signed char lo, signed char hi) {
  return fj_f32x2_to_f16x2(static_cast<float>(lo), static_cast<float>(hi));
}
inline void fj_gemv_i8x4_to_bf16x2(unsigned* out, const signed char* in) {
  out[0] = fj_gemv_i8x2_to_bf16x2(in[0], in[1]);
  out[1] = fj_gemv_i8x2_to_bf16x2(in[2], in[3]);
}
inline void fj_gemv_i8x4_to_f16x2(unsigned* out, const signed char* in) {
  out[0] = fj_gemv_i8x2_to_f16x2(in[0], in[1]);
  out[1] = fj_gemv_i8x2_to_f16x2(in[2], in[3]);
}

// A prologue's or epilogue region's ops (fj_math.cuh) and a normalization's block reduction
// (fj_reduce.cuh): the ones the prologue and epilogue emulation tests' regions use.
inline float fj_silu(float x) { return static_cast<float>(x / (1.0 + std::exp(-double{x}))); }
inline float fj_gelu(float x) {
  return static_cast<float>(0.5 * x * (1.0 + std::erf(double{x} * 0.70710678118654752)));
}
inline float fj_rsqrt(float x) { return static_cast<float>(1.0 / std::sqrt(double{x})); }
struct fj_op_sum {
  float operator()(float a, float b) const { return a + b; }
};
// Every thread's value into a slot, then each thread adds the slots in order.
template <int kThreads, class Op>
float fj_block_reduce(float v, Op op) {
  static float slots[kThreads];
  slots[threadIdx.x] = v;
  __syncthreads();
  float total = slots[0];
  for (int i = 1; i < kThreads; ++i) total = op(total, slots[i]);
  __syncthreads();
  return total;
}
// The approximate form bf16/f16 regions may use: here the exact value (its error bound is the
// GPU tests' to check, docs/numerics.md).
inline float fj_fast_silu(float x) { return fj_silu(x); }
