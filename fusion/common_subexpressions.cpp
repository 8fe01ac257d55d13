// fusion/common_subexpressions: see common_subexpressions.h.
#include "fusion/common_subexpressions.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>
#include <vector>

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
  Graph out;
  std::vector<NodeId> renamed(g.size(), -1);
  std::map<NodeKey, NodeId> seen;
  bool merged = false;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    ir::NodeSpec spec = ir::spec_of(n);
    for (NodeId& in : spec.inputs) in = renamed[static_cast<size_t>(in)];
    if (n.op == ir::Op::input) {
      renamed[i] = out.add(spec);
      continue;
    }
    NodeKey key = key_of(n, spec.inputs);
    if (auto it = seen.find(key); it != seen.end()) {
      renamed[i] = it->second;
      merged = true;
      continue;
    }
    renamed[i] = out.add(spec);
    seen.emplace(std::move(key), renamed[i]);
  }
  if (!merged) return g;
  std::vector<NodeId> outputs;
  for (NodeId id : g.outputs()) outputs.push_back(renamed[static_cast<size_t>(id)]);
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace fusejit::fusion
