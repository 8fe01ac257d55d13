// ir/shape: shape arithmetic, numpy broadcasting and axis normalization.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusejit/dtype.h"

namespace fusejit::ir {

int64_t numel(const Shape& shape);
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

}  // namespace fusejit::ir
