// ir/dtype: names and promotion; see dtype.h.
#include "ir/dtype.h"

#include <array>

namespace fusejit {

namespace {
// Indexed by DType.
constexpr std::array<std::string_view, kNumDTypes> kNames{"f32", "f16",  "bf16", "i32",
                                                          "i64", "bool", "i8"};
}  // namespace

std::string_view dtype_name(DType dtype) { return kNames[static_cast<int>(dtype)]; }

namespace ir {

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::string_view dtype_names() { return "f32, f16, bf16, i32, i64, bool, i8"; }

DType promote_mixed(DType a, DType b) {
  // Category: bool 0, integer 1, floating 2. The higher category wins.
  auto category = [](DType d) { return is_floating(d) ? 2 : is_integral(d) ? 1 : 0; };
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return dtype_size(a) > dtype_size(b) ? a : b;  // the wider integer
  // Two different floats: f32 wins; f16 with bf16 has no common half type.
  return DType::f32;
}

}  // namespace ir
}  // namespace fusejit
