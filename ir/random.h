// ir/random: the host side of fusejit's random numbers (rand, randn) for the CPU reference.
//
// The generator itself is ir/fj_random.cuh, one source compiled here as plain C++ and embedded by
// templates/ with its device helpers into the kernels that draw random numbers, so that both
// compute the same bits. It lives in ir/ because ir/ includes nothing from a later layer. What
// the values are (the counter layout, the uniforms, Box-Muller) is written there, and in
// docs/trace-format.md.
//
// A random node's seed and offset are not attributes of the node but the values of its key
// operand, an i64[2] tensor {seed, offset} (each the two's-complement image of the u64), read by
// the kernel at run time and by the reference the same way: a new seed is new data for the same
// trace, plan and kernels, never a recompile.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>

#include "ir/fj_random.cuh"
#include "ir/host_tensor.h"

namespace fusejit::ir {

// The key operand's values for (seed, offset).
inline HostTensor random_key(uint64_t seed, uint64_t offset) {
  HostTensor key(DType::i64, {2});
  const uint64_t words[2] = {seed, offset};
  std::memcpy(key.bytes.data(), words, sizeof words);
  return key;
}

// rand: element e's uniform in [0, 1) (a multiple of 2^-24).
inline float random_uniform(uint64_t seed, uint64_t offset, uint64_t e) {
  return fj_rand(seed, offset, e);
}

// randn: element e's standard normal, the device's Box-Muller formula computed in double.
inline double random_normal(uint64_t seed, uint64_t offset, uint64_t e) {
  const fj_philox_words r = fj_random_words(seed, offset, e);
  const double u0 = 1.0 - static_cast<double>(fj_uniform_of(r.w[0]));
  const double u1 = fj_uniform_of(r.w[1]);
  return std::sqrt(-2.0 * std::log(u0)) * std::cos(2.0 * std::numbers::pi * u1);
}

}  // namespace fusejit::ir
