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

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::Node;
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
  Graph out;
  std::vector<NodeId> renamed(g.size(), -1);
  bool folded = false;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    ir::NodeSpec spec = ir::spec_of(n);
    for (NodeId& in : spec.inputs) in = renamed[static_cast<size_t>(in)];
    if (foldable(out, spec)) {
      renamed[i] = evaluate(out, spec, n.dtype);
      folded = true;
    } else {
      renamed[i] = out.add(spec);
    }
  }
  if (!folded) return g;
  std::vector<NodeId> outputs;
  for (NodeId id : g.outputs()) outputs.push_back(renamed[static_cast<size_t>(id)]);
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace fusejit::fusion
