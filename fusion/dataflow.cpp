// fusion/dataflow: see dataflow.h.
#include "fusion/dataflow.h"

#include <algorithm>

#include <fmt/format.h>

namespace fusejit::fusion::detail {

namespace {

using ir::Graph;
using ir::Node;
using ir::Op;
using ir::OpKind;

void sort_unique(std::vector<NodeId>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

bool is_view_or_constant(const Node& n) {
  return n.op == Op::constant || ir::op_kind(n.op) == OpKind::view;
}

std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (NodeId out : g.outputs()) live[static_cast<size_t>(out)] = true;
  for (size_t i = g.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (NodeId in : g.nodes()[i].inputs) live[static_cast<size_t>(in)] = true;
  }
  return live;
}

// Collects what `id` reads from memory, looking through free nodes.
void collect_reads(const Dataflow& df, NodeId id, std::vector<NodeId>& out) {
  for (NodeId in : df.node(id).inputs) {
    if (df.is_free(in))
      collect_reads(df, in, out);
    else
      out.push_back(in);
  }
}

// A matmul operand as a buffer: the operand itself when it is one; the permute's operand when
// it is a transpose of the last two axes (then `permute` is set); otherwise the operand, which
// must then be materialized.
NodeId gemm_source(const Dataflow& df, NodeId operand, NodeId& permute) {
  const Node& n = df.node(operand);
  const bool buffer = n.op == Op::input || !is_view_or_constant(n) ||
                      !df.materialized[static_cast<size_t>(operand)].empty();
  if (buffer) return operand;
  if (n.op == Op::permute && is_last_two_swap(n.axes)) {
    permute = operand;
    return n.inputs[0];
  }
  return operand;
}

}  // namespace

bool is_last_two_swap(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

Dataflow analyze(const Graph& g) {
  Dataflow df;
  df.graph = &g;
  const size_t size = g.size();
  df.role.assign(size, NodeRole::dead);
  df.graph_output.assign(size, false);
  df.materialized.assign(size, "");
  df.reads.assign(size, {});
  df.readers.assign(size, {});
  df.gemm.assign(size, {});
  for (NodeId out : g.outputs()) df.graph_output[static_cast<size_t>(out)] = true;

  const std::vector<bool> live = live_nodes(g);
  for (size_t i = 0; i < size; ++i) {
    const Node& n = g.nodes()[i];
    if (!live[i]) continue;
    if (n.op == Op::input)
      df.role[i] = NodeRole::input;
    else if (ir::op_kind(n.op) == OpKind::matmul)
      df.role[i] = NodeRole::gemm;
    else if (is_view_or_constant(n))
      df.role[i] = NodeRole::free;
    else
      df.role[i] = NodeRole::compute;
  }

  // A view or constant that is a graph output must be written by some region.
  for (size_t i = 0; i < size; ++i) {
    if (df.role[i] == NodeRole::free && df.graph_output[i]) {
      df.role[i] = NodeRole::compute;
      df.materialized[i] = fmt::format("%{} ({}) is a graph output: a kernel writes it", i,
                                       ir::op_name(g.nodes()[i].op));
    }
  }
  // cuBLASLt reads buffers: a matmul operand that is a view or constant, other than a transpose
  // of the last two axes of a buffer, is materialized.
  for (size_t i = 0; i < size; ++i) {
    if (df.role[i] != NodeRole::gemm) continue;
    GemmOperands& ops = df.gemm[i];
    const Node& m = g.nodes()[i];
    ops.a = gemm_source(df, m.inputs[0], ops.permute_a);
    ops.b = gemm_source(df, m.inputs[1], ops.permute_b);
    for (NodeId src : {ops.a, ops.b}) {
      const size_t s = static_cast<size_t>(src);
      if (df.role[s] == NodeRole::free) {
        df.role[s] = NodeRole::compute;
        df.materialized[s] =
            fmt::format("%{} ({}) feeds matmul %{}, which reads buffers: a kernel writes it", s,
                        ir::op_name(g.nodes()[s].op), i);
      }
    }
  }

  for (size_t i = 0; i < size; ++i) {
    const NodeId id = static_cast<NodeId>(i);
    if (df.role[i] == NodeRole::compute) {
      collect_reads(df, id, df.reads[i]);
    } else if (df.role[i] == NodeRole::gemm) {
      df.reads[i] = {df.gemm[i].a, df.gemm[i].b};
    } else {
      continue;
    }
    sort_unique(df.reads[i]);
    for (NodeId r : df.reads[i]) df.readers[static_cast<size_t>(r)].push_back(id);
  }
  return df;
}

std::vector<NodeId> region_nodes(const Dataflow& df, const std::vector<NodeId>& members) {
  std::vector<NodeId> nodes;
  std::vector<NodeId> stack = members;
  std::vector<bool> seen(df.role.size(), false);
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    nodes.push_back(id);
    for (NodeId in : df.node(id).inputs) {
      if (df.is_free(in)) stack.push_back(in);
    }
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

std::vector<NodeId> region_outputs(const Dataflow& df, const std::vector<NodeId>& members) {
  std::vector<NodeId> outputs;
  for (NodeId m : members) {
    bool out = df.graph_output[static_cast<size_t>(m)];
    for (NodeId r : df.readers[static_cast<size_t>(m)]) {
      out = out || !std::binary_search(members.begin(), members.end(), r);
    }
    if (out) outputs.push_back(m);
  }
  return outputs;
}

std::vector<NodeId> region_inputs(const Dataflow& df, const std::vector<NodeId>& members) {
  std::vector<NodeId> inputs;
  for (NodeId m : members) {
    for (NodeId r : df.reads[static_cast<size_t>(m)]) {
      if (!std::binary_search(members.begin(), members.end(), r)) inputs.push_back(r);
    }
  }
  sort_unique(inputs);
  return inputs;
}

}  // namespace fusejit::fusion::detail
