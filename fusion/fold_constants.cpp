// fusion/fold_constants: see fold_constants.h.
//
// The value of a folded node comes from the CPU reference interpreter itself, run on a graph of
// just the constants and the node: folding then has the reference's semantics by construction
// (gelu's erf, integer wrap-around, NaN propagation, rounding to f16/bf16), with no second copy
// of the op table's math to drift apart from it.
#include "fusion/fold_constants.h"

#include <vector>

#include "ir/host_tensor.h"
#include "ir/interp.h"
#include "ir/rebuild.h"

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::NodeId;

bool foldable(const Graph& g, const ir::NodeSpec& spec) {
  if (!ir::is_elementwise(spec.op)) return false;
  for (NodeId in : spec.inputs) {
    if (g.node(in).op != ir::Op::constant) return false;
  }
  return true;
}

// The reference's value of `spec` applied to the constants of `g` it names, as a constant of
// `g` (an integer result exactly, not through a double).
NodeId evaluate(Graph& g, const ir::NodeSpec& spec, DType dtype) {
  Graph scalar;
  ir::NodeSpec node = spec;
  for (NodeId& in : node.inputs) in = scalar.add(ir::spec_of(g.node(in)));
  scalar.set_outputs({scalar.add(node)});
  const ir::HostTensor result = ir::interpret(scalar, {}).at(0);
  if (is_floating(dtype)) return ir::add_constant(g, dtype, result.get(0));
  return ir::add_integer_constant(g, dtype, result.get_integer(0));
}

}  // namespace

ir::Graph fold_constants(ir::Graph g) {
  ir::Rebuilt folded = ir::rebuild(g, [&](NodeId id, ir::NodeSpec spec, Graph& out) {
    if (foldable(out, spec)) return evaluate(out, spec, g.node(id).dtype);
    return out.add(std::move(spec));
  });
  return folded.changed ? std::move(folded.graph) : g;
}

}  // namespace fusejit::fusion
