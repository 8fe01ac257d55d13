// Fast division by runtime extents (templates/kir/fastdiv.h): the host's multiplier and shift,
// through a host emulation of the kernel's 32-bit formula, against plain division over many
// divisors (1, powers of two, primes, the largest allowed) and dividends (small ones, each side
// of multiples of the divisor, and the largest allowed).
#include <cstdint>
#include <random>
#include <vector>

#include "fusejit/error.h"
#include "support/catch.h"
#include "templates/kir/fastdiv.h"

using namespace fusejit;
using templates::fast_divide;
using templates::fast_divisor;
using templates::kFastDivMaxDividend;
using templates::kFastDivMaxDivisor;

namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

std::vector<int64_t> divisors() {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= 1100; ++d) out.push_back(d);
  for (int s = 0; s <= 31; ++s) {
    const int64_t p = int64_t{1} << s;
    for (int64_t d : {p - 1, p, p + 1}) {
      if (d >= 1 && d <= kFastDivMaxDivisor) out.push_back(d);
    }
  }
  // Primes: small ones, around 2^15 (sentinel-sized symbols) and just under 2^31.
  for (int64_t start : {int64_t{32700}, int64_t{1} << 20, kFastDivMaxDividend - 2000}) {
    int found = 0;
    for (int64_t p = start; found < 12; ++p) {
      if (is_prime(p)) {
        out.push_back(p);
        ++found;
      }
    }
  }
  out.push_back(kFastDivMaxDividend);  // 2^31 - 1, a prime
  out.push_back(3 * 4096);
  out.push_back(64 * 32749);
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> any(1, kFastDivMaxDivisor);
  for (int i = 0; i < 300; ++i) out.push_back(any(rng));
  return out;
}

std::vector<int64_t> dividends(int64_t d) {
  std::vector<int64_t> out;
  for (int64_t n = 0; n < 70; ++n) out.push_back(n);
  for (int64_t q : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{65537},
                    kFastDivMaxDividend / d, kFastDivMaxDividend / d - 1}) {
    for (int64_t n : {q * d - 1, q * d, q * d + 1}) {
      if (n >= 0 && n <= kFastDivMaxDividend) out.push_back(n);
    }
  }
  for (int64_t n = kFastDivMaxDividend - 40; n <= kFastDivMaxDividend; ++n) out.push_back(n);
  std::mt19937_64 rng(static_cast<uint64_t>(d));
  std::uniform_int_distribution<int64_t> any(0, kFastDivMaxDividend);
  for (int i = 0; i < 200; ++i) out.push_back(any(rng));
  return out;
}

}  // namespace

TEST_CASE("fast division is exact up to the dividend bound", "[templates][fastdiv]") {
  int64_t checked = 0;
  for (int64_t d : divisors()) {
    const templates::FastDivisor f = fast_divisor(d);
    for (int64_t n : dividends(d)) {
      const auto got = fast_divide(static_cast<uint32_t>(n), f);
      if (got != static_cast<uint32_t>(n / d)) {
        FAIL("n = " << n << ", d = " << d << ": " << got << " instead of " << n / d
                    << " (multiplier " << f.multiplier << ", shift " << f.shift << ")");
      }
      ++checked;
    }
  }
  CHECK(checked > 300000);
}

TEST_CASE("fast divisors of powers of two are shifts", "[templates][fastdiv]") {
  for (int s = 0; s <= 31; ++s) {
    const templates::FastDivisor f = fast_divisor(int64_t{1} << s);
    CHECK(f.multiplier == 1);
    CHECK(f.shift == static_cast<uint32_t>(s));
    CHECK(f.packed() == (uint64_t{static_cast<uint32_t>(s)} << 32 | 1));
  }
}

TEST_CASE("fast division has a real dividend bound", "[templates][fastdiv]") {
  // Past 2^31 the kernel's 32-bit sum umulhi(n, m) + n can wrap: why the host keeps every
  // dividend at or below kFastDivMaxDividend (jit::runs_dynamic) and compiles a kernel per
  // size beyond it.
  const templates::FastDivisor three = fast_divisor(3);
  CHECK(fast_divide(0xffffffffu, three) != 0xffffffffu / 3);
  CHECK(fast_divide(static_cast<uint32_t>(kFastDivMaxDividend), three) ==
        static_cast<uint32_t>(kFastDivMaxDividend / 3));
  CHECK_THROWS_AS(fast_divisor(0), InternalError);
  CHECK_THROWS_AS(fast_divisor(kFastDivMaxDivisor + 1), InternalError);
}

TEST_CASE("runtime extents are numbers a symbol's value divides", "[templates][fastdiv]") {
  templates::RuntimeExtents rt{.symbols = {131, 67}};
  CHECK(rt.runtime(131));
  CHECK(rt.runtime(64 * 67));
  CHECK_FALSE(rt.runtime(64));
  CHECK_FALSE(rt.runtime(1));
  CHECK_FALSE(rt.runtime(0));
  CHECK(rt.argument(64 * 67) == 0);
  CHECK(rt.argument(131) == 1);
  CHECK(rt.argument(64 * 67) == 0);
  CHECK(rt.extents == std::vector<int64_t>{64 * 67, 131});
}
