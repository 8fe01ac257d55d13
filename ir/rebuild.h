// ir/rebuild: the one loop that copies a graph node by node into a new one, for every pass that
// rewrites, merges or drops nodes (dead code, common subexpressions, constant folding,
// simplification, pruning, instantiating dynamic dims). It owns the renaming of operands and
// outputs and the test of whether anything changed; what becomes of each node is the caller's.
// It does not decide liveness by itself: `live_nodes` below is the one backward sweep for that.
#pragma once

#include <functional>
#include <vector>

#include "ir/graph.h"

namespace fusejit::ir {

// What a step returns for a node it drops. No kept node or output may use a dropped node.
inline constexpr NodeId kDropped = -1;

// Called once per node of the old graph, in order, with the node's old id, its spec with the
// operands already renamed into `out`, and the graph being built. Returns the node's id in
// `out`: a node it adds (`out.add(spec)`, rewritten or not), an existing node it stands for, or
// kDropped. An operand that was dropped reads kDropped in the spec: such a node is dead too
// (Graph::add refuses it).
using RebuildStep = std::function<NodeId(NodeId id, NodeSpec spec, Graph& out)>;

struct Rebuilt {
  Graph graph;
  // False when `graph` is a node-for-node copy of the old graph (every constant the same to the
  // bit): a pass then returns its input.
  bool changed = false;
};

// The graph `step` builds from `g`, with g's outputs renamed. Throws InternalError when an
// output was dropped.
Rebuilt rebuild(const Graph& g, const RebuildStep& step);
// The same with `outputs` (ids in `g`) as the new graph's outputs.
Rebuilt rebuild(const Graph& g, const std::vector<NodeId>& outputs, const RebuildStep& step);

// live[i]: node i is needed by one of `outputs`, or is an input and `keep_inputs` is set (data
// binds to inputs by position, so a pass over a trace keeps them all). Operands precede their
// users, so one backward sweep decides it.
std::vector<bool> live_nodes(const Graph& g, const std::vector<NodeId>& outputs, bool keep_inputs);

}  // namespace fusejit::ir
