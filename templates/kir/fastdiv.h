// templates/fastdiv: division by a runtime extent in a dynamic kernel's index arithmetic.
//
// A dynamic kernel whose index math divides by a dim of a symbol (the `% S` of a table
// broadcast over one symbol of two, the `/ (B*H)` of a permute that moves a dynamic axis inward)
// cannot let the compiler strength-reduce that division, and a hardware integer division costs
// about twenty instructions. The host instead turns each such extent d into a 32-bit multiplier
// m and a shift l once per size, and the kernel divides with one high multiply, one add and one
// shift (device/fj_fastdiv.cuh):
//     l = ceil(log2 d),   m = floor(2^(32+l) / d) - 2^32 + 1   (0 < m <= 2^32 - 1; m = 1 for
//                                                              every power of two d)
//     n / d = (umulhi(n, m) + n) >> l
// This is the round-up method (Granlund and Montgomery, 1994, theorem 4.2): 2^(32+l)/d <=
// 2^32 + m < 2^(32+l)/d + 2^l/d, so the error of n * (2^32 + m) / 2^(32+l) against n / d is
// below n / 2^32 * 2^l / d / 2^l < 1/d for n < 2^32, which keeps the floor. The sum
// umulhi(n, m) + n is computed in 32 bits: umulhi(n, m) < n, so it cannot wrap while
// n < 2^31. Hence the bound the host enforces: every dividend is at most kFastDivMaxDividend
// (and the divisor at most kFastDivMaxDivisor); beyond it the size gets a kernel of its own.
//
// RuntimeExtents is what lowering a dynamic kernel's indices (index.h, kir::lower_indices) needs to
// know about them: which numbers of an instantiation stand for runtime extents, and which kernel
// argument holds each. It does not own the symbols or the launch: see generate_dynamic (kernel.h)
// and jit/runtime/dynamic.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace fusejit::templates {

namespace kir {
struct Var;
}

inline constexpr int64_t kFastDivMaxDividend = (int64_t{1} << 31) - 1;
inline constexpr int64_t kFastDivMaxDivisor = int64_t{1} << 31;

struct FastDivisor {
  uint32_t multiplier = 1;
  uint32_t shift = 0;
  // The kernel argument `fj_m<k>`: the multiplier in the low 32 bits, the shift above them.
  uint64_t packed() const { return uint64_t{multiplier} | (uint64_t{shift} << 32); }
};

// The multiplier and shift of `d`; throws InternalError unless 1 <= d <= kFastDivMaxDivisor.
FastDivisor fast_divisor(int64_t d);
// What the kernel computes (fj_fastdiv in device/fj_fastdiv.cuh), in the same 32-bit arithmetic:
// n / d for n <= kFastDivMaxDividend.
uint32_t fast_divide(uint32_t n, FastDivisor f);

// The runtime extents of one instantiation of a dynamic region, as its kernel prints them.
// A number of the index arithmetic stands for a runtime extent when one of the symbols' values
// divides it: the caller makes the values distinct primes that divide no static extent, so a
// number decodes to a unique static coefficient times powers of the symbols. Lowering the
// kernel's indices (kir::lower_indices) registers every runtime extent met (argument k: the
// variable `fj_e<k>` holds the extent, `fj_m<k>` its FastDivisor) and the bound of every
// dividend divided by one. The caller makes the kernel's parameters of those variables.
struct RuntimeExtents {
  std::vector<int64_t> symbols;          // the symbols' values at this instantiation
  std::vector<int64_t> extents;          // argument k's extent at this instantiation
  std::vector<int64_t> dividend_bounds;  // a runtime division's dividend is below each
  std::vector<std::shared_ptr<const kir::Var>> extent_vars;      // fj_e<k>, an int
  std::vector<std::shared_ptr<const kir::Var>> multiplier_vars;  // fj_m<k>, unsigned long long

  // Whether `n` stands for a runtime extent (a symbol's value divides it).
  bool runtime(int64_t n) const;
  // The argument that holds `n` (registered, with its two variables, the first time).
  int argument(int64_t n);
  // A runtime division of a value below `bound`.
  void dividend_below(int64_t bound);
};

}  // namespace fusejit::templates
