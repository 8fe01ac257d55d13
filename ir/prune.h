// ir/prune: the subgraph that computes given nodes: only the nodes they need (inputs too), in
// the same relative order, with `outputs` as its outputs. Unlike dead-code elimination, unused
// inputs are dropped, so the result is a self-contained trace of just that computation.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace fusejit::ir {

Graph prune(const Graph& g, const std::vector<NodeId>& outputs);

}  // namespace fusejit::ir
