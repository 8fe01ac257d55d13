// fusion/recompute: see recompute.h.
#include "fusion/recompute.h"

#include <algorithm>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/shape.h"

namespace fusejit::fusion::detail {

namespace {

using ir::Node;
using ir::Op;

bool is_view(const Node& n) { return ir::op_kind(n.op) == ir::OpKind::view; }

// Per node, the live nodes that take it as an operand.
std::vector<std::vector<NodeId>> users_of(const Dataflow& df) {
  std::vector<std::vector<NodeId>> users(df.role.size());
  for (size_t i = 0; i < df.role.size(); ++i) {
    if (df.role[i] == NodeRole::dead) continue;
    for (NodeId in : df.node(static_cast<NodeId>(i)).inputs) {
      users[static_cast<size_t>(in)].push_back(static_cast<NodeId>(i));
    }
  }
  return users;
}

// Every use of `id` reads each element it reaches once: through reshapes, permutes and slices
// (a part of it: RoPE's even and odd halves), elementwise nodes of the same element count and
// reductions; no expand, no matmul. With `broadcast`, elementwise nodes of more elements (a
// broadcast operand) are uses too: for a cast, which costs such a reader one conversion per
// element, next to the op it evaluates there anyway.
bool read_whole(const Dataflow& df, const std::vector<std::vector<NodeId>>& users, NodeId id,
                int64_t count, bool broadcast) {
  for (NodeId u : users[static_cast<size_t>(id)]) {
    const Node& n = df.node(u);
    if (n.op == Op::reshape || n.op == Op::permute) {
      if (!read_whole(df, users, u, count, broadcast)) return false;
    } else if (n.op == Op::slice) {
      if (!read_whole(df, users, u, ir::numel(n.shape), broadcast)) return false;
    } else if (ir::is_elementwise(n.op)) {
      const int64_t reads = ir::numel(n.shape);
      if (reads != count && !(broadcast && reads > count)) return false;
    } else if (ir::op_kind(n.op) != ir::OpKind::reduce) {
      return false;
    }
  }
  return true;
}

struct Search {
  const Dataflow& df;
  std::vector<std::vector<NodeId>> users;
  std::vector<int> region_of;      // per compute node: its kernel region; -1 otherwise
  std::set<NodeId> library_values;   // what gemm regions evaluate or write
  std::set<NodeId> library_outputs;  // what they write: buffers any kernel may read
  // Buffers an update_slice writes in place: a value read from one is never recomputed, since
  // the update's kernel (where it could be evaluated again) must not read that buffer.
  std::set<NodeId> written;

  // `id` may be recomputed (recompute.h's candidates, less the written-by condition).
  bool eligible(NodeId id) const {
    const size_t i = static_cast<size_t>(id);
    const Node& n = df.node(id);
    if (df.role[i] != NodeRole::compute || !ir::is_elementwise(n.op) || df.graph_output[i] ||
        region_of[i] < 0) {
      return false;
    }
    for (NodeId r : df.reads[i]) {
      // A GEMM's written result is a buffer like any other (RoPE's cast of the q and k columns
      // of a fused projection); what its epilogue evaluates and does not write is not.
      const bool library = df.role_of(r) == NodeRole::gemm || library_values.count(r) != 0;
      if (library && library_outputs.count(r) == 0) return false;
      if (written.count(r) != 0) return false;
    }
    for (NodeId r : df.readers[i]) {
      if (df.role_of(r) == NodeRole::gemm || library_values.count(r) != 0) return false;
    }
    return read_whole(df, users, id, ir::numel(n.shape), n.op == Op::cast);
  }

  // `id` and, recursively, the eligible values of its region of the same element count it is
  // computed from.
  void chain(NodeId id, std::set<NodeId>& out) const {
    if (!out.insert(id).second) return;
    const int64_t count = ir::numel(df.node(id).shape);
    for (NodeId r : df.reads[static_cast<size_t>(id)]) {
      if (df.role_of(r) != NodeRole::compute) continue;
      const bool same_region = region_of[static_cast<size_t>(r)] == region_of[static_cast<size_t>(id)];
      if (same_region && ir::numel(df.node(r).shape) == count && eligible(r)) chain(r, out);
    }
  }
};

// The elementwise ops evaluated to compute `id` from what is read from memory (through views,
// constants and other recomputed values), `id` included; and those values read.
void closure(const ir::Graph& g, const std::vector<bool>& recomputed, NodeId id,
             std::set<NodeId>& ops, std::set<NodeId>& leaves) {
  const Node& n = g.node(id);
  if (n.op == Op::constant) return;
  if (ir::op_kind(n.op) == ir::OpKind::random) {  // a draw reads only its key
    leaves.insert(n.inputs.begin(), n.inputs.end());
    return;
  }
  const size_t i = static_cast<size_t>(id);
  const bool evaluated = is_view(n) || (i < recomputed.size() && recomputed[i]);
  if (!evaluated) {
    leaves.insert(id);
    return;
  }
  if (!is_view(n) && !ops.insert(id).second) return;
  for (NodeId in : n.inputs) closure(g, recomputed, in, ops, leaves);
}

std::string id_list(const std::set<NodeId>& ids) {
  std::vector<std::string> parts;
  for (NodeId id : ids) parts.push_back(fmt::format("%{}", id));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

PlanCost plan_cost(const ir::Graph& g, const std::vector<Region>& regions) {
  PlanCost c;
  for (const Region& r : regions) {
    if (r.kind != RegionKind::gemm) ++c.kernels;
    for (const auto* ids : {&r.inputs, &r.outputs}) {
      for (NodeId id : *ids) {
        const Node& n = g.node(id);
        // Each tensor is at most 2^62 bytes (ir/shape.h); a sum of many saturates.
        // (An update writes its value's elements only: ir::computed_shape.)
        const int64_t b = ir::numel(ir::computed_shape(g, id)) * dtype_size(n.dtype);
        c.bytes = c.bytes > std::numeric_limits<int64_t>::max() - b
                      ? std::numeric_limits<int64_t>::max()
                      : c.bytes + b;
      }
    }
  }
  return c;
}

bool cheaper(const PlanCost& a, const PlanCost& b) {
  return a.kernels <= b.kernels && a.bytes <= b.bytes && (a.kernels < b.kernels || a.bytes < b.bytes);
}

std::vector<std::vector<NodeId>> recompute_candidates(const Dataflow& df,
                                                      const std::vector<Region>& regions) {
  Search s{df, users_of(df), std::vector<int>(df.role.size(), -1), {}, {}, {}};
  for (const Node& n : df.graph->nodes()) {
    if (n.op == Op::update_slice) s.written.insert(n.inputs[0]);
  }
  for (size_t k = 0; k < regions.size(); ++k) {
    const Region& r = regions[k];
    if (r.kind == RegionKind::gemm) s.library_outputs.insert(r.outputs.begin(), r.outputs.end());
    for (NodeId id : r.nodes) {
      if (r.kind == RegionKind::gemm)
        s.library_values.insert(id);
      else if (df.role_of(id) == NodeRole::compute)
        s.region_of[static_cast<size_t>(id)] = static_cast<int>(k);
    }
  }
  std::vector<std::vector<NodeId>> out;
  for (const Region& r : regions) {
    if (r.kind == RegionKind::gemm) continue;
    for (NodeId id : r.outputs) {
      if (!s.eligible(id)) continue;
      std::set<NodeId> values;
      s.chain(id, values);
      out.emplace_back(values.begin(), values.end());
      if (values.size() > 1) out.push_back({id});
    }
  }
  return out;
}

bool within_budget(const ir::Graph& g, const std::vector<bool>& recomputed) {
  for (size_t i = 0; i < recomputed.size(); ++i) {
    if (!recomputed[i]) continue;
    std::set<NodeId> ops, leaves;
    closure(g, recomputed, static_cast<NodeId>(i), ops, leaves);
    if (static_cast<int>(ops.size()) > kMaxRecomputedOps) return false;
    for (NodeId op : ops) {
      if (ir::op_has(g.node(op).op, ir::kCostly)) return false;
    }
  }
  return true;
}

std::vector<Decision> recompute_decisions(const Dataflow& df, const std::vector<Region>& regions,
                                          const std::map<NodeId, std::string>& steps) {
  std::vector<Decision> out;
  for (const auto& [id, step] : steps) {
    if (!df.is_free(id)) continue;  // written after all (a later step made it a region output)
    std::vector<size_t> where;
    for (size_t k = 0; k < regions.size(); ++k) {
      if (std::binary_search(regions[k].nodes.begin(), regions[k].nodes.end(), id)) where.push_back(k);
    }
    std::set<NodeId> ops, leaves;
    std::vector<bool> free(df.role.size(), false);
    for (size_t i = 0; i < free.size(); ++i) free[i] = df.role[i] == NodeRole::free;
    closure(*df.graph, free, id, ops, leaves);
    const Node& n = df.node(id);
    for (size_t k : where) {
      NodeId reader = -1;
      for (NodeId m : regions[k].nodes) {
        const std::vector<NodeId>& in = df.node(m).inputs;
        if (reader < 0 && std::find(in.begin(), in.end(), id) != in.end()) reader = m;
      }
      out.push_back(
          {id, reader, true,
           fmt::format("recompute %{} in region {}: {} {} is evaluated from {} ({} op{}) in "
                       "region{} {}, never written; {}",
                       id, k, ir::op_name(n.op), ir::type_str(n), id_list(leaves), ops.size(),
                       ops.size() == 1 ? "" : "s", where.size() == 1 ? "" : "s",
                       fmt::join(where, ", "), step)});
    }
  }
  return out;
}

}  // namespace fusejit::fusion::detail
