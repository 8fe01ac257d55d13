// test/templates/emulate/gemv_shim: what a generated GEMV kernel's body needs, on top of
// pointwise_shim.h (threads, blocks, storage formats, vector moves), to run as host C++ in the
// GEMV emulation test: fj_gemv.cuh's helpers (the fence and the atomic count of the split are
// cuda_shim.h's). Written from what each helper means, not from templates/device.
#pragma once

#include <atomic>
#include <cmath>

#include "pointwise_shim.h"

inline float fj_gemv_shfl_xor(float v, int m) { return fj_emu::shfl_xor(v, m); }
inline float fj_gemv_relu(float x) { return std::isnan(x) || x > 0.0f ? x : 0.0f; }
inline float fj_gemv_gelu_tanh(float x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * double{x} * x * x);
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
}
inline float fj_gemv_partial(const float* p) { return *p; }
