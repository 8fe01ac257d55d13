// ir/shape: see shape.h.
#include "ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "ir/dtype.h"

namespace fusejit::ir {

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

std::optional<int64_t> checked_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    const std::optional<int64_t> next = checked_mul(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

int64_t numel(const Shape& shape) {
  const std::optional<int64_t> n = checked_numel(shape);
  if (!n) {
    throw UsageError(fmt::format("shape {}: the element count overflows 64 bits (a tensor holds "
                                 "at most 2^62 bytes)",
                                 shape_str(shape)));
  }
  return *n;
}

namespace {

std::optional<int64_t> byte_count(const Shape& shape, DType dtype) {
  const std::optional<int64_t> count = checked_numel(shape);
  return count ? checked_mul(*count, dtype_size(dtype)) : count;
}

}  // namespace

bool within_size_limit(const Shape& shape, DType dtype) {
  const std::optional<int64_t> bytes = byte_count(shape, dtype);
  return bytes && *bytes <= kMaxTensorBytes;
}

void check_tensor_size(const Shape& shape, DType dtype, std::string_view what) {
  const std::optional<int64_t> bytes = byte_count(shape, dtype);
  if (!bytes || *bytes > kMaxTensorBytes) {
    throw UsageError(fmt::format(
        "{}: {}{} holds {} bytes, more than the limit of 2^62 bytes per tensor; split the "
        "computation into smaller tensors",
        what, dtype_name(dtype), shape_str(shape),
        bytes ? std::to_string(*bytes) : std::string("2^63 or more")));
  }
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
