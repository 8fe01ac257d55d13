// fusion/common_subexpressions: common subexpression elimination.
#pragma once

#include "ir/graph.h"

namespace fusejit::fusion {

// Merges structurally equal nodes: same op, dtype, shape, attributes and (already merged)
// operands; a commutative op with swapped operands counts as equal. Constants are equal when
// their values are bit-identical (0.0 and -0.0 stay apart, equal NaNs merge). Inputs are never
// merged: each is separate data. Returns `g` unchanged when nothing merges.
ir::Graph eliminate_common_subexpressions(ir::Graph g);

}  // namespace fusejit::fusion
