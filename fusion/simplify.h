// fusion/simplify: algebraic simplification that keeps IEEE semantics.
#pragma once

#include "ir/graph.h"

namespace fusejit::fusion {

// Rewrites, each exact for every value including NaN, infinities and signed zeros:
//   x * 1 -> x      x / 1 -> x      x + (-0.0) -> x      x - (+0.0) -> x
//   (for integer x: x + 0 -> x, x - 0 -> x)
//   neg(neg(x)) -> x      cast(x) to x's own dtype -> x
//   reshape/expand to x's own shape -> x      identity permute -> x
//   reshape(reshape(x)) -> reshape(x)      permute(permute(x)) -> one permute
//   slice(slice(x)) -> one slice      a slice of one element -> step 1
//   concat of more than kMaxConcatOperands (fusion/partition.h) -> a concat of concats
// A rewrite is made only when the node's dtype and shape equal x's (x * 1 that promotes or
// broadcasts stays). Never x * 0 -> 0 (NaN * 0 is NaN, -1 * 0 is -0.0), x - x -> 0 (inf - inf
// is NaN) or x + 0.0 -> x (-0.0 + 0.0 is +0.0). Nodes left unused are not removed. Returns `g`
// unchanged when nothing simplifies.
ir::Graph simplify(ir::Graph g);

}  // namespace fusejit::fusion
