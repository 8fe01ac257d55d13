// Element types and shapes as the public API sees them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace fusejit {

// Storage types. Arithmetic on f16/bf16 is done in f32 and rounded when stored.
enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean };

inline constexpr int kNumDTypes = 6;

using Shape = std::vector<int64_t>;

// "f32", "f16", "bf16", "i32", "i64", "bool".
std::string_view dtype_name(DType dtype);
// Bytes per element.
int dtype_size(DType dtype);
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // i32, i64 (not bool)

}  // namespace fusejit
