// fusion/dead_code: see dead_code.h.
#include "fusion/dead_code.h"

#include <vector>

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::NodeId;

// live[i]: node i is an input or some output needs it. Operands precede their users, so one
// backward sweep suffices.
std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (NodeId out : g.outputs()) live[static_cast<size_t>(out)] = true;
  for (size_t i = g.size(); i-- > 0;) {
    const ir::Node& n = g.nodes()[i];
    if (n.op == ir::Op::input) live[i] = true;
    if (!live[i]) continue;
    for (NodeId in : n.inputs) live[static_cast<size_t>(in)] = true;
  }
  return live;
}

}  // namespace

ir::Graph eliminate_dead_code(ir::Graph g) {
  const std::vector<bool> live = live_nodes(g);
  bool all_live = true;
  for (bool l : live) all_live = all_live && l;
  if (all_live) return g;

  Graph out;
  std::vector<NodeId> renamed(g.size(), -1);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!live[i]) continue;
    ir::NodeSpec spec = ir::spec_of(g.nodes()[i]);
    for (NodeId& in : spec.inputs) in = renamed[static_cast<size_t>(in)];
    renamed[i] = out.add(spec);
  }
  std::vector<NodeId> outputs;
  for (NodeId id : g.outputs()) outputs.push_back(renamed[static_cast<size_t>(id)]);
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace fusejit::fusion
