// ir/random: the host side of fusejit's random numbers (rand, randn) for the CPU reference.
//
// The generator itself is templates/device/fj_random.cuh, one source compiled here as plain C++
// and pasted into the kernels that draw random numbers, so that both compute the same bits. It is
// a header with no includes and no library behind it: including it from ir/ adds no link to a
// later layer. What the values are (the counter layout, the uniforms, Box-Muller) is written
// there, and in docs/trace-format.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "templates/device/fj_random.cuh"

namespace fusejit::ir {

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
