// fusion/order_writes: see order_writes.h.
#include "fusion/order_writes.h"

#include <map>
#include <queue>
#include <vector>

#include <fmt/format.h>

#include "fusejit/error.h"

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::Op;

bool is_view(const Node& n) { return ir::op_kind(n.op) == ir::OpKind::view; }

// The nodes that read `dst`'s buffer, besides the update `writer`: views of it (transitively)
// and the nodes that read those views or the buffer itself.
std::vector<NodeId> buffer_readers(const Graph& g, NodeId dst, NodeId writer) {
  std::vector<bool> reads(g.size(), false);
  reads[static_cast<size_t>(dst)] = true;
  std::vector<NodeId> out;
  for (size_t i = static_cast<size_t>(dst) + 1; i < g.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    if (id == writer) continue;
    const Node& n = g.node(id);
    bool reader = false;
    for (NodeId in : n.inputs) reader = reader || reads[static_cast<size_t>(in)];
    if (!reader) continue;
    out.push_back(id);
    if (is_view(n)) reads[i] = true;
  }
  return out;
}

// Per node, the nodes that must come after it besides its readers: each reader of an update's
// destination is followed by the update. Empty when every such reader already comes first.
std::map<NodeId, std::vector<NodeId>> write_edges(const Graph& g) {
  std::map<NodeId, std::vector<NodeId>> after;
  std::map<NodeId, NodeId> writer_of;  // destination -> its update
  bool out_of_order = false;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op != Op::update_slice) continue;
    const auto u = static_cast<NodeId>(i);
    const NodeId dst = n.inputs[0];
    if (const auto [it, fresh] = writer_of.emplace(dst, u); !fresh) {
      throw UsageError(fmt::format(
          "update_slice %{} and %{} both write %{} in place; write the second into the first's "
          "result after evaluating it, or combine the values into one update",
          it->second, u, dst));
    }
    for (NodeId r : buffer_readers(g, dst, u)) {
      after[r].push_back(u);
      out_of_order = out_of_order || r > u;
    }
  }
  if (!out_of_order) after.clear();
  return after;
}

}  // namespace

ir::Graph order_writes(ir::Graph g) {
  const std::map<NodeId, std::vector<NodeId>> after = write_edges(g);
  if (after.empty()) return g;
  // Kahn's algorithm over operands and the write edges, the lowest old id first among the ready
  // nodes: inputs are ready from the start, so they keep their order.
  std::vector<std::vector<NodeId>> successors(g.size());
  std::vector<int> waiting(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i) {
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) {
      successors[static_cast<size_t>(in)].push_back(static_cast<NodeId>(i));
      ++waiting[i];
    }
  }
  for (const auto& [r, updates] : after) {
    for (NodeId u : updates) {
      successors[static_cast<size_t>(r)].push_back(u);
      ++waiting[static_cast<size_t>(u)];
    }
  }
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (size_t i = 0; i < g.size(); ++i) {
    if (waiting[i] == 0) ready.push(static_cast<NodeId>(i));
  }
  Graph out;
  std::vector<NodeId> renamed(g.size(), -1);
  while (!ready.empty()) {
    const NodeId id = ready.top();
    ready.pop();
    ir::NodeSpec spec = ir::spec_of(g.node(id));
    for (NodeId& in : spec.inputs) in = renamed[static_cast<size_t>(in)];
    renamed[static_cast<size_t>(id)] = out.add(std::move(spec));
    for (NodeId s : successors[static_cast<size_t>(id)]) {
      if (--waiting[static_cast<size_t>(s)] == 0) ready.push(s);
    }
  }
  if (out.size() != g.size()) {
    for (const auto& [r, updates] : after) {
      if (renamed[static_cast<size_t>(r)] >= 0) continue;
      throw UsageError(fmt::format(
          "%{} reads the buffer of update_slice %{} both before the write (through %{}) and "
          "after it; evaluate the read of the old values first, or copy the buffer before "
          "writing it",
          r, updates.front(), g.node(updates.front()).inputs[0]));
    }
    throw InternalError("order_writes: the write order has a cycle");
  }
  std::vector<NodeId> outputs;
  for (NodeId o : g.outputs()) outputs.push_back(renamed[static_cast<size_t>(o)]);
  out.set_outputs(std::move(outputs));
  return out;
}

}  // namespace fusejit::fusion
