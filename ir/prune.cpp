// ir/prune: see prune.h.
#include "ir/prune.h"

namespace fusejit::ir {

Graph prune(const Graph& g, const std::vector<NodeId>& outputs) {
  std::vector<bool> needed(g.size(), false);
  for (NodeId id : outputs) needed.at(static_cast<size_t>(id)) = true;
  for (size_t i = g.size(); i-- > 0;) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) needed[static_cast<size_t>(in)] = true;
  }
  Graph out;
  std::vector<NodeId> remap(g.size(), -1);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!needed[i]) continue;
    const Node& n = g.node(static_cast<NodeId>(i));
    NodeSpec spec = spec_of(n);
    for (NodeId& in : spec.inputs) in = remap[static_cast<size_t>(in)];
    remap[i] = out.add(spec);
  }
  std::vector<NodeId> outs;
  for (NodeId id : outputs) outs.push_back(remap[static_cast<size_t>(id)]);
  out.set_outputs(outs);
  return out;
}

}  // namespace fusejit::ir
