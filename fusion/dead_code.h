// fusion/dead_code: dead code elimination.
#pragma once

#include "ir/graph.h"

namespace fusejit::fusion {

// Keeps only the nodes that some output needs. Input nodes are always kept, in their order,
// because data is bound to inputs by position. Returns `g` unchanged when nothing is dead.
ir::Graph eliminate_dead_code(ir::Graph g);

}  // namespace fusejit::fusion
