// Element types and shapes as the public API sees them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fusejit/export.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

// Storage types. Arithmetic on f16/bf16 is done in f32 and rounded when stored; on i8 in 32-bit
// integers, wrapped to 8 bits when stored (as i32 wraps at 32). i8 is last so that the other
// types keep the numbers they had (traces' hashes, the kernel cache's keys).
enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean, i8 };

inline constexpr int kNumDTypes = 7;

using Shape = std::vector<int64_t>;

// "f32", "f16", "bf16", "i32", "i64", "bool", "i8".
std::string_view dtype_name(DType dtype);
// Bytes per element. These three are inline: recording an op asks them several times.
constexpr int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::boolean:
    case DType::i8:
      return 1;
  }
  return 0;  // not a DType
}
constexpr bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}
constexpr bool is_integral(DType dtype) {  // i8, i32, i64 (not bool)
  return dtype == DType::i32 || dtype == DType::i64 || dtype == DType::i8;
}

}  // namespace fusejit
FUSEJIT_PUBLIC_END
