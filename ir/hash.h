// ir/hash: the structural hash of a graph. It depends on the ops, dtypes, shapes, attributes and
// the shape of the dataflow, never on node numbering, pointer values or the order in which
// independent nodes were recorded. Nodes that do not reach an output do not count.
//
// It is kept as the trace is recorded: Graph::add hashes each new node from its fields and its
// operands' hashes (node_hash), so structural_hash only mixes the outputs' hashes, whatever the
// graph's size. recompute_structural_hash does the whole walk again, for the tests that hold the
// two equal. The hash is XXH3 (ir/digest.h) over each node's fields.
#pragma once

#include <cstdint>
#include <span>

#include "ir/graph.h"

namespace fusejit::ir {

uint64_t structural_hash(const Graph& g);
// The same with every shape left out but its rank: the traces of one program at different sizes
// (batch sizes, sequence lengths) hash alike, which is where dynamic dims are looked for
// (ir/symbolic.h).
uint64_t shape_free_hash(const Graph& g);

// The hash of `node` given the hashes of the nodes before it (earlier[id] for each operand id)
// and, for an input node, its position among the graph's inputs.
uint64_t node_hash(const Node& node, std::span<const uint64_t> earlier, uint64_t input_position);

// structural_hash computed from the nodes alone, ignoring the hashes Graph::add kept.
uint64_t recompute_structural_hash(const Graph& g);

}  // namespace fusejit::ir
