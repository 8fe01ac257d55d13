// fusion/common_subexpressions: see common_subexpressions.h.
#include "fusion/common_subexpressions.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>
#include <vector>

#include "ir/rebuild.h"

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;

// Everything that defines a node's value (a slice's start and step too), with operands in
// canonical order. The constant's value is compared by its bits so that -0.0 and 0.0 differ and
// NaN equals itself. A random op's seed and offset are its key operand's values: two draws merge
// only when they read the same key node (inputs never merge), so draws with different keys stay
// apart.
using NodeKey = std::tuple<ir::Op, DType, Shape, std::vector<NodeId>, std::vector<int64_t>, bool,
                           uint64_t, int64_t, int64_t, int64_t>;

NodeKey key_of(const Node& n, std::vector<NodeId> inputs) {
  if (ir::op_has(n.op, ir::kCommutative) && inputs.size() == 2 && inputs[1] < inputs[0]) {
    std::swap(inputs[0], inputs[1]);
  }
  // Integer and bool constants hold integral values: fold -0.0 into 0.0 for them.
  const double value = is_floating(n.dtype) ? n.value : n.value + 0.0;
  return {n.op,      n.dtype,   n.shape, std::move(inputs), n.axes, n.keepdim,
          std::bit_cast<uint64_t>(value), n.integer, n.start, n.step};
}

}  // namespace

ir::Graph eliminate_common_subexpressions(ir::Graph g) {
  std::map<NodeKey, NodeId> seen;
  ir::Rebuilt merged = ir::rebuild(g, [&](NodeId id, ir::NodeSpec spec, Graph& out) {
    const Node& n = g.node(id);
    if (n.op == ir::Op::input) return out.add(std::move(spec));
    NodeKey key = key_of(n, spec.inputs);
    if (auto it = seen.find(key); it != seen.end()) return it->second;
    const NodeId added = out.add(std::move(spec));
    seen.emplace(std::move(key), added);
    return added;
  });
  return merged.changed ? std::move(merged.graph) : g;
}

}  // namespace fusejit::fusion
