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

}  // namespace fusejit::ir
