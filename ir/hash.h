// ir/hash: the structural hash of a graph. It depends on the ops, dtypes, shapes, attributes and
// the shape of the dataflow, never on node numbering, pointer values or the order in which
// independent nodes were recorded. Nodes that do not reach an output do not count.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace fusejit::ir {

uint64_t structural_hash(const Graph& g);
// The same with every shape left out but its rank: the traces of one program at different sizes
// (batch sizes, sequence lengths) hash alike, which is where dynamic dims are looked for
// (ir/symbolic.h).
uint64_t shape_free_hash(const Graph& g);

}  // namespace fusejit::ir
