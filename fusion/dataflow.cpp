// fusion/dataflow: see dataflow.h.
#include "fusion/dataflow.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "fusion/partition.h"
#include "ir/shape.h"

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

std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (NodeId out : g.outputs()) live[static_cast<size_t>(out)] = true;
  for (size_t i = g.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (NodeId in : g.nodes()[i].inputs) live[static_cast<size_t>(in)] = true;
  }
  return live;
}

// Collects what `id` reads from memory, looking through free nodes (an update_slice's
// destination is written, not read): each free node once, and
// without recursion (views can nest as deep as the trace is long, and share operands, as
// concat(v, v) of concat(w, w) ... does).
void collect_reads(const Dataflow& df, NodeId id, std::vector<NodeId>& out) {
  std::vector<NodeId> stack{id};
  std::set<NodeId> seen;
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    const Node& node = df.node(n);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const NodeId in = node.inputs[k];
      // An update_slice writes its destination in place and never reads it.
      if (node.op == Op::update_slice && k == 0) continue;
      if (!df.is_free(in))
        out.push_back(in);
      else if (seen.insert(in).second)
        stack.push_back(in);
    }
  }
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// Shape without its 1s.
Shape without_ones(const Shape& s) {
  Shape out;
  for (int64_t d : s) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

// `layout`, the buffer's batch dims as the operand of `view` presents them (1 where broadcast),
// as `view` presents them.
Shape layout_through(const Node& view, const Node& operand, const Shape& layout) {
  const Shape vb = batch_of(view.shape), ob = batch_of(operand.shape);
  Shape out(vb.size(), 1);
  switch (view.op) {
    case Op::permute:
      return layout;
    case Op::expand:  // aligned from the right; a dim expanded from 1 stays 1
      for (size_t i = 0; i < layout.size(); ++i) out[vb.size() - layout.size() + i] = layout[i];
      return out;
    default: {  // reshape: the dims other than 1 correspond in order
      size_t j = 0;
      for (size_t i = 0; i < ob.size(); ++i) {
        if (ob[i] == 1) continue;
        while (vb[j] == 1) ++j;
        out[j++] = layout[i];
      }
      return out;
    }
  }
}

// True when `id` is a buffer at this point of the analysis: an input, a computed value, or a view
// or constant already chosen to be written by a kernel.
bool is_buffer(const Dataflow& df, NodeId id) {
  const Node& n = df.node(id);
  return n.op == Op::input || !is_view_or_constant(n) ||
         !df.materialized[static_cast<size_t>(id)].empty();
}

// A matmul operand as a buffer: the operand itself when it is one; otherwise the first node
// under the batch views that fold into the call (listed in `views`, with `transpose` toggled
// per transpose, and `layout` set to the buffer's batch dims as the operand presents them),
// which must then be materialized when it is a view or constant. Below those views, a reshape
// of a buffer folds too, whatever it does to the matrix (a [b, t, c] activation read as
// [b * t, c] rows by a linear layer): a buffer is dense and row-major, so the reshape's value
// is the buffer's bytes in the reshape's shape, and the call reads them in place as that shape.
NodeId gemm_source(const Dataflow& df, NodeId operand, std::vector<NodeId>& views,
                   bool& transpose, Shape& layout) {
  NodeId id = operand;
  bool reshaped = false;  // views.back() is a reshape of the buffer that is not a batch view
  for (;;) {
    const Node& n = df.node(id);
    if (is_buffer(df, id) || ir::op_kind(n.op) != OpKind::view) break;
    if (!is_batch_view(n, df.node(n.inputs[0]))) {
      if (n.op == Op::reshape && n.shape.size() >= 2 && is_buffer(df, n.inputs[0])) {
        views.push_back(id);
        reshaped = true;
        id = n.inputs[0];
      }
      break;
    }
    views.push_back(id);
    if (n.op == Op::permute) transpose = !transpose;
    id = n.inputs[0];
  }
  // The buffer's batch dims, as the reshape that reads it in place presents them where there is
  // one; then through the batch views above it.
  size_t v = views.size();
  if (reshaped) {
    layout = batch_of(df.node(views.back()).shape);
    --v;
  } else {
    layout = batch_of(df.node(id).shape);
  }
  while (v-- > 0) {
    const Node& view = df.node(views[v]);
    layout = layout_through(view, df.node(view.inputs[0]), layout);
  }
  return id;
}

// Weight-only int8 (GemmOperands::int8_b): B a cast of an i8 buffer to the matmul's dtype, in a
// call the skinny-GEMM kernel takes, reads the buffer and leaves the cast to the call. The cast
// becomes free (another reader computes it inline) unless the graph wants it written.
void absorb_int8_cast(Dataflow& df, NodeId matmul, GemmOperands& ops) {
  const Node& m = df.node(matmul);
  const Node& cast = df.node(ops.b);
  if (cast.op != Op::cast || cast.dtype != m.dtype || !is_floating(cast.dtype)) return;
  const NodeId w = cast.inputs[0];
  const NodeRole role = df.role_of(w);
  if (df.node(w).dtype != DType::i8 || (role != NodeRole::input && role != NodeRole::compute))
    return;
  const bool batched =
      std::any_of(ops.batch_b.begin(), ops.batch_b.end(), [](int64_t d) { return d != 1; });
  const int64_t rows = ir::numel(m.shape) / std::max<int64_t>(1, m.shape.back());
  if (!ops.transpose_b || batched || rows > kInt8GemmMaxRows) return;
  const size_t c = static_cast<size_t>(ops.b);
  if (df.role[c] == NodeRole::compute && !df.graph_output[c]) df.role[c] = NodeRole::free;
  ops.b = w;
  ops.int8_b = true;
}

}  // namespace

bool is_view_or_constant(const Node& n) {
  const OpKind kind = ir::op_kind(n.op);
  return n.op == Op::constant || n.op == Op::arange || kind == OpKind::view ||
         kind == OpKind::random;
}

bool is_last_two_swap(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

bool is_batch_view(const Node& n, const Node& in) {
  const size_t r = n.shape.size(), ri = in.shape.size();
  if (r < 2 || ri < 2) return false;
  const bool same_matrix = n.shape[r - 2] == in.shape[ri - 2] && n.shape[r - 1] == in.shape[ri - 1];
  switch (n.op) {
    case Op::permute:
      return is_last_two_swap(n.axes);
    case Op::expand:
      return same_matrix;
    case Op::reshape:
      return same_matrix && without_ones(batch_of(n.shape)) == without_ones(batch_of(in.shape));
    default:
      return false;
  }
}

// A concat evaluates every operand per element, and a free node is evaluated inline in each
// reader, so concats of concats multiply: concat(64 x concat(64 x a)) makes its reader evaluate
// 4,160 operand values per element, a kernel no region limit could cut. Walking free nodes in
// order, a concat that would inline more than kMaxRegionWeight of them gets its operands that
// inline concats written by kernels of their own instead.
void materialize_nested_concats(const Graph& g, Dataflow& df) {
  constexpr int64_t kEnough = int64_t{1} << 40;
  std::vector<int64_t> inlined(g.size(), 0);  // operand values a reader evaluates through node i
  auto through = [&](NodeId in) {
    return df.is_free(in) ? inlined[static_cast<size_t>(in)] : int64_t{0};
  };
  for (size_t i = 0; i < g.size(); ++i) {
    if (df.role[i] != NodeRole::free && df.role[i] != NodeRole::compute) continue;
    const Node& n = g.nodes()[i];
    int64_t cost = 0;
    if (n.op == Op::concat) {
      for (NodeId in : n.inputs) cost = std::min(kEnough, cost + 1 + through(in));
      if (cost > kMaxRegionWeight) {
        for (NodeId in : n.inputs) {
          if (through(in) == 0) continue;
          df.role[static_cast<size_t>(in)] = NodeRole::compute;
          df.materialized[static_cast<size_t>(in)] = fmt::format(
              "%{} ({}) is read by concat %{} with {} operands: inline, each element would "
              "evaluate {} operand values; a kernel writes it",
              in, ir::op_name(g.node(in).op), i, n.inputs.size(), cost);
        }
        cost = static_cast<int64_t>(n.inputs.size());
      }
    } else if (ir::op_kind(n.op) == OpKind::view) {
      cost = through(n.inputs[0]);
    }
    if (df.role[i] == NodeRole::free) inlined[i] = cost;
  }
}

Dataflow analyze(const Graph& g, const std::vector<bool>& recomputed) {
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
    else if (is_view_or_constant(n) || (i < recomputed.size() && recomputed[i]))
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
  // cuBLASLt reads buffers: under the batch views it reads through (a transpose of the last two
  // axes, a broadcast of batch dims), a matmul operand that is a view or constant is
  // materialized.
  for (size_t i = 0; i < size; ++i) {
    if (df.role[i] != NodeRole::gemm) continue;
    GemmOperands& ops = df.gemm[i];
    const Node& m = g.nodes()[i];
    ops.a = gemm_source(df, m.inputs[0], ops.views_a, ops.transpose_a, ops.batch_a);
    ops.b = gemm_source(df, m.inputs[1], ops.views_b, ops.transpose_b, ops.batch_b);
    absorb_int8_cast(df, static_cast<NodeId>(i), ops);
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

  materialize_nested_concats(g, df);

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
