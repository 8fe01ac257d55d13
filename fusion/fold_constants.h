// fusion/fold_constants: constant folding.
#pragma once

#include "ir/graph.h"

namespace fusejit::fusion {

// Replaces every elementwise node whose operands are all constants with a constant of the
// node's dtype. The value is what the CPU reference computes for that node, rounded to the
// node's dtype, so folding never changes a result. Operands left unused are not removed (that
// is eliminate_dead_code's job). Returns `g` unchanged when nothing folds.
ir::Graph fold_constants(ir::Graph g);

}  // namespace fusejit::fusion
