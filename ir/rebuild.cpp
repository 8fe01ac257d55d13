// ir/rebuild: see rebuild.h.
#include "ir/rebuild.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "fusejit/error.h"

namespace fusejit::ir {

namespace {

// a and b are the same node, the constant's value compared by its bits (so that -0.0 is not
// 0.0 and a NaN constant is itself, which Node's == does not say).
bool same_node(const Node& a, const Node& b) {
  if (std::bit_cast<uint64_t>(a.value) != std::bit_cast<uint64_t>(b.value)) return false;
  if (!std::isnan(a.value)) return a == b;
  Node a0 = a, b0 = b;  // rare: compare the rest without the NaN
  a0.value = b0.value = 0.0;
  return a0 == b0;
}

}  // namespace

Rebuilt rebuild(const Graph& g, const RebuildStep& step) { return rebuild(g, g.outputs(), step); }

Rebuilt rebuild(const Graph& g, const std::vector<NodeId>& outputs, const RebuildStep& step) {
  Rebuilt r;
  std::vector<NodeId> renamed(g.size(), kDropped);
  bool copy = true;  // so far every node is itself, at its own id
  for (size_t i = 0; i < g.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    NodeSpec spec = spec_of(g.node(id));
    for (NodeId& in : spec.inputs) in = renamed[static_cast<size_t>(in)];
    renamed[i] = step(id, std::move(spec), r.graph);
    copy = copy && renamed[i] == id && r.graph.size() == i + 1 &&
           same_node(r.graph.node(id), g.node(id));
  }
  std::vector<NodeId> new_outputs;
  for (NodeId out : outputs) {
    new_outputs.push_back(renamed.at(static_cast<size_t>(out)));
    if (new_outputs.back() == kDropped) {
      throw InternalError(fmt::format("rebuild: output %{} was dropped", out));
    }
  }
  r.changed = !copy || outputs != g.outputs();
  r.graph.set_outputs(std::move(new_outputs));
  return r;
}

std::vector<bool> live_nodes(const Graph& g, const std::vector<NodeId>& outputs, bool keep_inputs) {
  std::vector<bool> live(g.size(), false);
  for (NodeId out : outputs) live.at(static_cast<size_t>(out)) = true;
  for (size_t i = g.size(); i-- > 0;) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (keep_inputs && n.op == Op::input) live[i] = true;
    if (!live[i]) continue;
    for (NodeId in : n.inputs) live[static_cast<size_t>(in)] = true;
  }
  return live;
}

}  // namespace fusejit::ir
