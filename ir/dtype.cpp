// ir/dtype: names and promotion; see dtype.h.
#include "ir/dtype.h"

#include <array>

namespace fusejit {

namespace {
struct DTypeInfo {
  std::string_view name;
  int size;
  bool floating;
  bool integral;
};

// Indexed by DType.
constexpr std::array<DTypeInfo, kNumDTypes> kInfo{{
    {"f32", 4, true, false},
    {"f16", 2, true, false},
    {"bf16", 2, true, false},
    {"i32", 4, false, true},
    {"i64", 8, false, true},
    {"bool", 1, false, false},
}};

const DTypeInfo& info(DType d) { return kInfo[static_cast<int>(d)]; }
}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
int dtype_size(DType dtype) { return info(dtype).size; }
bool is_floating(DType dtype) { return info(dtype).floating; }
bool is_integral(DType dtype) { return info(dtype).integral; }

namespace ir {

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::string_view dtype_names() { return "f32, f16, bf16, i32, i64, bool"; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  // Category: bool 0, integer 1, floating 2. The higher category wins.
  auto category = [](DType d) { return is_floating(d) ? 2 : is_integral(d) ? 1 : 0; };
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return DType::i64;  // i32 with i64
  // Two different floats: f32 wins; f16 with bf16 has no common half type.
  return DType::f32;
}

}  // namespace ir
}  // namespace fusejit
