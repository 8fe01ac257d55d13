// ir/verify: checks a graph's invariants: operands defined before use, arity, every node's dtype
// and shape equal to what inference gives, outputs in range. Throws fusejit::InternalError
// naming the node and printing the trace when a pass produced a broken graph.
#pragma once

#include "ir/graph.h"

namespace fusejit::ir {

void verify(const Graph& g);

}  // namespace fusejit::ir
