// templates/fastdiv: see fastdiv.h.
#include "templates/kir/fastdiv.h"

#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/kir/kir.h"

namespace fusejit::templates {

FastDivisor fast_divisor(int64_t d) {
  if (d < 1 || d > kFastDivMaxDivisor) {
    throw InternalError(
        fmt::format("fast division by {}: the divisor must be in [1, {}]", d, kFastDivMaxDivisor));
  }
  uint32_t l = 0;
  while ((int64_t{1} << l) < d) ++l;
  // floor(2^(32+l) / d) - 2^32 + 1 = floor(2^32 * (2^l - d) / d) + 1: no 128-bit arithmetic,
  // since (2^l - d) < 2^31 and 2^32 * (2^l - d) < 2^63.
  const uint64_t m = ((uint64_t{1} << 32) * static_cast<uint64_t>((int64_t{1} << l) - d)) /
                         static_cast<uint64_t>(d) +
                     1;
  return FastDivisor{.multiplier = static_cast<uint32_t>(m), .shift = l};
}

uint32_t fast_divide(uint32_t n, FastDivisor f) {
  const auto high = static_cast<uint32_t>((uint64_t{n} * f.multiplier) >> 32);  // __umulhi
  const uint32_t sum = high + n;  // wraps as the device's 32-bit add does
  return sum >> f.shift;
}

bool RuntimeExtents::runtime(int64_t n) const {
  return n != 0 && std::any_of(symbols.begin(), symbols.end(),
                               [n](int64_t v) { return v > 1 && n % v == 0; });
}

int RuntimeExtents::argument(int64_t n) {
  const auto it = std::find(extents.begin(), extents.end(), n);
  if (it != extents.end()) return static_cast<int>(it - extents.begin());
  const int k = static_cast<int>(extents.size());
  extents.push_back(n);
  extent_vars.push_back(kir::variable("int", fmt::format("fj_e{}", k)));
  multiplier_vars.push_back(kir::variable("unsigned long long", fmt::format("fj_m{}", k)));
  return k;
}

void RuntimeExtents::dividend_below(int64_t bound) {
  if (std::find(dividend_bounds.begin(), dividend_bounds.end(), bound) == dividend_bounds.end()) {
    dividend_bounds.push_back(bound);
  }
}

}  // namespace fusejit::templates
