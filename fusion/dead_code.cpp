// fusion/dead_code: see dead_code.h.
#include "fusion/dead_code.h"

#include <algorithm>
#include <vector>

#include "ir/rebuild.h"

namespace fusejit::fusion {

ir::Graph eliminate_dead_code(ir::Graph g) {
  const std::vector<bool> live = ir::live_nodes(g, g.outputs(), /*keep_inputs=*/true);
  if (std::all_of(live.begin(), live.end(), [](bool l) { return l; })) return g;
  return ir::rebuild(g, [&](ir::NodeId id, ir::NodeSpec spec, ir::Graph& out) {
           return live[static_cast<size_t>(id)] ? out.add(std::move(spec)) : ir::kDropped;
         })
      .graph;
}

}  // namespace fusejit::fusion
