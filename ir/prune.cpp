// ir/prune: see prune.h.
#include "ir/prune.h"

#include "ir/rebuild.h"

namespace fusejit::ir {

Graph prune(const Graph& g, const std::vector<NodeId>& outputs) {
  const std::vector<bool> live = live_nodes(g, outputs, /*keep_inputs=*/false);
  auto step = [&](NodeId id, NodeSpec spec, Graph& out) {
    return live[static_cast<size_t>(id)] ? out.add(std::move(spec)) : kDropped;
  };
  return rebuild(g, outputs, step).graph;
}

}  // namespace fusejit::ir
