// ir/dtype: dtype names, parsing and type promotion.
//
// Promotion follows PyTorch's rules for tensors of the same priority: bool < integers <
// floating; within integers the wider wins; f16 with bf16 gives f32. Scalars given through the
// API take the tensor's category (as Python scalars do in PyTorch); that is decided when an op
// is recorded, so the IR only ever promotes tensor dtypes.
#pragma once

#include <optional>
#include <string_view>

#include "fusejit/dtype.h"

namespace fusejit::ir {

std::optional<DType> parse_dtype(std::string_view name);
// The comma-separated list of valid names, for error messages.
std::string_view dtype_names();

// Two dtypes of different kinds or widths (promote's general case, out of line).
DType promote_mixed(DType a, DType b);
inline DType promote(DType a, DType b) { return a == b ? a : promote_mixed(a, b); }

// The float type an integer or bool promotes to for ops such as exp or div (PyTorch's default).
inline constexpr DType kDefaultFloat = DType::f32;

}  // namespace fusejit::ir
