// ir/shape: see shape.h.
#include "ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"

namespace fusejit::ir {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  if (a == b) return a;  // the common case: nothing to align
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right.
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw UsageError(fmt::format(
          "{}: shapes {} and {} do not broadcast (dimension {} of the result is {} in one and {} "
          "in the other; each pair of dimensions, aligned from the right, must be equal or 1)",
          op, shape_str(a), shape_str(b), i, da, db));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[i + off]) return false;
  }
  return true;
}

int64_t normalize_axis(int64_t axis, int64_t rank, std::string_view op) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw UsageError(fmt::format("{}: axis {} is out of range for a tensor of rank {} (valid: {} to {})",
                            op, axis, rank, -rank, rank - 1));
  }
  return a;
}

}  // namespace fusejit::ir
