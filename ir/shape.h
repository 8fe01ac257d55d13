// ir/shape: shape arithmetic, numpy broadcasting and axis normalization.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "fusejit/dtype.h"

namespace fusejit::ir {

// The size limit of a tensor, in bytes: every node of a graph, every input bound and every
// buffer holds at most this much (docs/trace-format.md, "Limits"). 2^62 leaves a factor of two
// below INT64_MAX, so any index or byte offset into a valid tensor, plus one more such offset
// (a grid stride, a rounded-up tile), still fits the 64-bit index arithmetic of the kernels and
// of the CPU reference; and it is far beyond the memory of any GPU.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

// a * b, or nothing when the product does not fit int64. The one overflow-checked multiply
// that element counts, byte sizes and strides go through.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
// The element count, or nothing when it does not fit int64.
std::optional<int64_t> checked_numel(const Shape& shape);
// The element count; throws fusejit::UsageError naming the shape when it does not fit int64.
int64_t numel(const Shape& shape);
// True when a tensor of this shape and dtype holds at most kMaxTensorBytes.
bool within_size_limit(const Shape& shape, DType dtype);
// Throws fusejit::UsageError naming `what`, the type and the limit when a tensor of this shape
// and dtype would exceed kMaxTensorBytes (or its count overflow).
void check_tensor_size(const Shape& shape, DType dtype, std::string_view what);
// "[16384,16384]"; "[]" for a scalar.
std::string shape_str(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);

// Numpy broadcasting of two shapes; throws fusejit::Error naming `op` and both shapes when
// they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// True when `from` broadcasts to `to` (numpy rules, `to` unchanged).
bool broadcasts_to(const Shape& from, const Shape& to);

// Turns a possibly negative axis into [0, rank); throws fusejit::Error naming `op` otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, std::string_view op);

// Where a gather index points along an axis of `extent` elements: a negative index counts from
// the end once (as in PyTorch), and anything still outside [0, extent) is clamped to the nearest
// end. Generated kernels compute the same (templates/lower.cpp).
constexpr int64_t gather_position(int64_t index, int64_t extent) {
  const int64_t wrapped = index < 0 ? index + extent : index;
  return wrapped < 0 ? 0 : wrapped >= extent ? extent - 1 : wrapped;
}

// Where update_slice writes a value `length` long along an axis of `extent`, for the position
// `start` read at run time: a start below 0 counts from the end once (as a gather index does),
// and the result is clamped into [0, extent - length], so the write always lands inside the
// destination. The CPU reference and the generated kernels both place it so.
constexpr int64_t update_start(int64_t start, int64_t length, int64_t extent) {
  const int64_t wrapped = start < 0 ? start + extent : start;
  return wrapped < 0 ? 0 : wrapped > extent - length ? extent - length : wrapped;
}

}  // namespace fusejit::ir
