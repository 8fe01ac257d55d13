// fusion/region_check: see region_check.h.
//
// Regions with reductions are checked by labelling: every node the kernel evaluates gets, for
// each of its axes, the axis of the domain D whose coordinate indexes it (or "none" for a
// size-1 axis, always index 0). Labels flow from the outputs (D-shaped outputs: the identity;
// reduced-shaped outputs: D's kept axes) back to the operands through broadcasts, permutes and
// reshapes that only add or drop size-1 axes. A reduce node must end up labelled exactly as
// "its own row" (kept axes in place, reduced axes none), and then its operand is evaluated at
// the identity. A value computed from a reduction must have one labelling: computed once per
// point, never needed at a second position. Values that do not depend on a reduction may be
// evaluated at several positions (that is index arithmetic on inputs, as in any pointwise
// kernel), and a reshape that regroups their axes just stops the labelling.
// A value of the whole domain computed from a reduction makes the region a normalization (over
// trailing axes; refused over others), except the exponentials of an online softmax pair
// (fusion/online_softmax.h) that nothing but the pair's sum reads: over non-trailing axes such a
// region is a reduction, whose kernel accumulates the pair in one pass (over trailing axes it is
// a normalization, as every row kernel handles the pattern).
#include "fusion/region_check.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusion/online_softmax.h"
#include "ir/shape.h"

namespace fusejit::fusion::detail {

namespace {

using ir::Node;
using ir::Op;
using ir::OpKind;
using ir::shape_str;

constexpr int kNone = -1;
using Labels = std::vector<int>;

struct Domain {
  Shape shape;
  std::vector<int64_t> axes;  // reduced, sorted

  bool reduced(int axis) const {
    return std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(axis));
  }
  int64_t row_length() const {
    int64_t n = 1;
    for (int64_t a : axes) n *= shape[static_cast<size_t>(a)];
    return n;
  }
  bool trailing() const {
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t k = static_cast<int64_t>(axes.size());
    for (int64_t i = 0; i < k; ++i) {
      if (axes[static_cast<size_t>(i)] != rank - k + i) return false;
    }
    return true;
  }
  std::string str() const {
    return fmt::format("axes [{}] of {}", fmt::join(axes, ","), shape_str(shape));
  }
};

Labels identity_labels(const Shape& shape) {
  Labels l;
  for (size_t t = 0; t < shape.size(); ++t)
    l.push_back(shape[t] == 1 ? kNone : static_cast<int>(t));
  return l;
}

// A reduced value read at its own row: kept axes in place, reduced axes none (or dropped).
Labels row_labels(const Domain& d, bool keepdim) {
  Labels l;
  for (size_t t = 0; t < d.shape.size(); ++t) {
    const bool red = d.reduced(static_cast<int>(t));
    if (red && !keepdim) continue;
    l.push_back(red || d.shape[t] == 1 ? kNone : static_cast<int>(t));
  }
  return l;
}

Shape reduced_shape(const Domain& d, bool keepdim) {
  Shape s;
  for (size_t t = 0; t < d.shape.size(); ++t) {
    const bool red = d.reduced(static_cast<int>(t));
    if (!red)
      s.push_back(d.shape[t]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}

std::optional<Labels> output_labels(const Domain& d, const Shape& s) {
  if (s == d.shape) return identity_labels(s);
  if (s == reduced_shape(d, true)) return row_labels(d, true);
  if (s == reduced_shape(d, false)) return row_labels(d, false);
  return std::nullopt;
}

// The labels of `operand` when `consumer` is evaluated with labels `l`; nothing when the
// operand's position is not a relabelling of the consumer's (a reshape that regroups axes).
std::optional<Labels> operand_labels(const Node& consumer, const Node& operand, const Labels& l) {
  const Shape& so = operand.shape;
  Labels out(so.size(), kNone);
  if (ir::is_elementwise(consumer.op) || consumer.op == Op::expand) {
    const size_t off = consumer.shape.size() - so.size();
    for (size_t j = 0; j < so.size(); ++j) out[j] = so[j] == 1 ? kNone : l[j + off];
    return out;
  }
  if (consumer.op == Op::permute) {
    for (size_t i = 0; i < consumer.axes.size(); ++i)
      out[static_cast<size_t>(consumer.axes[i])] = l[i];
    return out;
  }
  if (consumer.op == Op::reshape) {
    std::vector<size_t> co, oo;  // the non-1 axes of consumer and operand
    for (size_t i = 0; i < consumer.shape.size(); ++i) {
      if (consumer.shape[i] != 1) co.push_back(i);
    }
    for (size_t j = 0; j < so.size(); ++j) {
      if (so[j] != 1) oo.push_back(j);
    }
    if (co.size() != oo.size()) return std::nullopt;
    for (size_t k = 0; k < co.size(); ++k) {
      if (consumer.shape[co[k]] != so[oo[k]]) return std::nullopt;
      out[oo[k]] = l[co[k]];
    }
    return out;
  }
  return std::nullopt;
}

RegionVerdict refuse(std::string reason) {
  RegionVerdict v;
  v.reason = std::move(reason);
  return v;
}

// With `sweeps`, outputs of several shapes: the verdict's shape is the largest (the first of
// those with the most elements).
RegionVerdict pointwise_verdict(const Dataflow& df, const std::vector<NodeId>& outputs,
                                bool sweeps) {
  RegionVerdict v;
  v.shape = ir::computed_shape(*df.graph, outputs.front());
  for (NodeId o : outputs) {
    const Shape& s = ir::computed_shape(*df.graph, o);
    if (s == v.shape) continue;
    if (!sweeps) {
      return refuse(fmt::format("different iteration space {} vs {} (outputs %{} and %{})",
                                shape_str(v.shape), shape_str(s), outputs.front(), o));
    }
    if (ir::numel(s) > ir::numel(v.shape)) v.shape = s;
  }
  v.ok = true;
  v.kind = RegionKind::pointwise;
  return v;
}

// Per evaluated node: its labellings, or "opaque" once a reshape regrouped its axes.
struct Labelling {
  std::vector<Labels> sets;
  bool opaque = false;

  void add(const Labels& l) {
    if (std::find(sets.begin(), sets.end(), l) == sets.end()) sets.push_back(l);
  }
  bool touches(const Domain& d) const {
    if (opaque) return true;
    for (const Labels& l : sets) {
      for (int t : l) {
        if (t != kNone && d.reduced(t)) return true;
      }
    }
    return false;
  }
};

// The region's evaluated nodes (region_nodes: members and the free nodes they read), sorted,
// and what the checks below know of each.
struct Evaluated {
  const Dataflow& df;
  std::vector<NodeId> nodes;
  std::vector<bool> from_reduction;  // a reduce, or computed from one inside the region
  std::vector<Labelling> labels;

  std::optional<size_t> index_of(NodeId id) const {
    auto it = std::lower_bound(nodes.begin(), nodes.end(), id);
    if (it == nodes.end() || *it != id) return std::nullopt;
    return static_cast<size_t>(it - nodes.begin());
  }
  bool is_reduce(NodeId id) const { return ir::op_kind(df.node(id).op) == OpKind::reduce; }
};

// Every reduce node reduces the same shape over the same axes: that is the domain.
std::optional<std::string> disagreement(const Dataflow& df, const std::vector<NodeId>& reduces,
                                        const Domain& d) {
  for (NodeId r : reduces) {
    const Node& n = df.node(r);
    const Shape& s = df.node(n.inputs[0]).shape;
    if (s != d.shape) {
      return fmt::format("different iteration space {} vs {} (reductions %{} and %{})",
                         shape_str(d.shape), shape_str(s), reduces.front(), r);
    }
    if (n.axes != d.axes) {
      return fmt::format("reduction over other axes [{}] vs [{}] of {} (%{} and %{})",
                         fmt::join(d.axes, ","), fmt::join(n.axes, ","), shape_str(d.shape),
                         reduces.front(), r);
    }
  }
  return std::nullopt;
}

// Labels every evaluated node from the outputs back (see the top of the file); the reason when
// a value computed from a reduction would be needed at more than one position.
std::optional<std::string> label(Evaluated& e, const Domain& d,
                                 const std::vector<NodeId>& outputs) {
  const Dataflow& df = e.df;
  e.labels.assign(e.nodes.size(), {});
  for (NodeId o : outputs) {
    const std::optional<Labels> l = output_labels(d, df.node(o).shape);
    if (!l) {
      return fmt::format(
          "output %{} {} is neither the iteration space {} nor the reduced shape {} of the "
          "reduction over {}",
          o, shape_str(df.node(o).shape), shape_str(d.shape), shape_str(reduced_shape(d, true)),
          d.str());
    }
    e.labels[*e.index_of(o)].add(*l);
  }
  for (size_t k = e.nodes.size(); k-- > 0;) {
    const NodeId id = e.nodes[k];
    const Node& n = df.node(id);
    const Labelling& mine = e.labels[k];
    if (e.from_reduction[k] && (mine.opaque || mine.sets.size() > 1)) {
      return fmt::format(
          "%{} ({}), computed from a reduction over {}, would be needed at {} positions", id,
          ir::op_name(n.op), d.str(), mine.opaque ? "regrouped (reshaped)" : "several different");
    }
    if (e.is_reduce(id)) {
      if (mine.sets.empty() || mine.sets.front() != row_labels(d, n.keepdim)) {
        return fmt::format(
            "the result of %{} ({} over {}) would be read at other rows than its own", id,
            ir::op_name(n.op), d.str());
      }
      if (auto j = e.index_of(n.inputs[0])) e.labels[*j].add(identity_labels(d.shape));
      continue;
    }
    for (NodeId in : n.inputs) {
      const std::optional<size_t> j = e.index_of(in);
      if (!j) continue;
      if (mine.opaque) {
        e.labels[*j].opaque = true;
        continue;
      }
      for (const Labels& l : mine.sets) {
        if (auto ol = operand_labels(n, df.node(in), l))
          e.labels[*j].add(*ol);
        else
          e.labels[*j].opaque = true;
      }
    }
  }
  return std::nullopt;
}

// The online softmax pairs among the region's reductions (fusion/online_softmax.h) whose chain
// (exp, sub, the views of M) nothing else in the region reads: per evaluated node, whether it
// is such a chain's; `sums` receives the pairs' sums.
std::vector<bool> paired_chains(const Evaluated& e, const std::vector<NodeId>& reduces,
                                std::vector<NodeId>& sums) {
  std::vector<bool> paired(e.nodes.size(), false);
  auto evaluated = [&](NodeId id) { return e.index_of(id).has_value(); };
  for (NodeId r : reduces) {
    const OnlinePair pair = online_pair(*e.df.graph, r, evaluated);
    if (pair.max < 0) continue;
    std::vector<NodeId> allowed = pair.chain;
    allowed.push_back(pair.sum);
    bool alone = true;
    for (NodeId n : e.nodes) {
      const bool in_chain = std::find(allowed.begin(), allowed.end(), n) != allowed.end();
      for (NodeId in : e.df.node(n).inputs) {
        const bool reads_chain =
            std::find(pair.chain.begin(), pair.chain.end(), in) != pair.chain.end();
        alone = alone && (in_chain || !reads_chain);
      }
    }
    if (!alone) continue;
    for (NodeId c : pair.chain) paired[*e.index_of(c)] = true;
    sums.push_back(pair.sum);
  }
  return paired;
}

// The kind of a region whose labelling succeeded: a reduction when no value of the whole domain
// depends on a reduction and none is written; over non-trailing axes also when the only such
// values are online pairs' exponentials (one pass accumulates them); a normalization over
// trailing axes otherwise, unless its rows are few and long.
RegionVerdict reducing_verdict(const Evaluated& e, const Domain& d,
                               const std::vector<NodeId>& outputs,
                               const std::vector<NodeId>& reduces) {
  std::vector<NodeId> sums;
  const std::vector<bool> paired = paired_chains(e, reduces, sums);
  std::optional<NodeId> broadcast_back, unpaired, domain_output;
  for (size_t k = 0; k < e.nodes.size(); ++k) {
    if (!e.from_reduction[k] || e.is_reduce(e.nodes[k]) || !e.labels[k].touches(d)) continue;
    if (!broadcast_back) broadcast_back = e.nodes[k];
    if (!unpaired && !paired[k]) unpaired = e.nodes[k];
  }
  for (NodeId o : outputs) {
    if (e.labels[*e.index_of(o)].touches(d) && !domain_output) domain_output = o;
  }
  RegionVerdict v;
  v.shape = d.shape;
  v.reduce_axes = d.axes;
  v.ok = true;
  v.kind = RegionKind::reduction;
  if (!broadcast_back && !domain_output) return v;
  if (!d.trailing()) {
    if (unpaired) {
      return refuse(fmt::format(
          "reduction over non-trailing {}: its result cannot be broadcast back (%{}) in one pass "
          "over rows",
          d.str(), *unpaired));
    }
    if (domain_output) {
      return refuse(fmt::format(
          "reduction over non-trailing {}: it cannot also write values of the whole domain (%{})",
          d.str(), *domain_output));
    }
    v.online_sums = std::move(sums);
    return v;
  }
  const int64_t row = d.row_length();
  const int64_t rows = ir::numel(d.shape) / row;
  if (row > kLongRow && rows < kFewRows) {
    return refuse(fmt::format(
        "a normalization over {} runs one block per row: {} row(s) of {} elements would leave "
        "the GPU idle",
        d.str(), rows, row));
  }
  v.kind = RegionKind::normalization;
  return v;
}

RegionVerdict check_reducing(const Dataflow& df, const std::vector<NodeId>& members,
                             const std::vector<NodeId>& outputs,
                             const std::vector<NodeId>& reduces) {
  const Node& first = df.node(reduces.front());
  const Domain d{df.node(first.inputs[0]).shape, first.axes};
  if (std::optional<std::string> why = disagreement(df, reduces, d)) return refuse(*why);

  Evaluated e{df, region_nodes(df, members), {}, {}};
  e.from_reduction.assign(e.nodes.size(), false);
  for (size_t k = 0; k < e.nodes.size(); ++k) {
    if (e.is_reduce(e.nodes[k])) {
      e.from_reduction[k] = true;
      continue;
    }
    for (NodeId in : df.node(e.nodes[k]).inputs) {
      if (auto j = e.index_of(in)) e.from_reduction[k] = e.from_reduction[k] || e.from_reduction[*j];
    }
  }
  if (std::optional<std::string> why = label(e, d, outputs)) return refuse(*why);
  return reducing_verdict(e, d, outputs, reduces);
}

// A gather reads its data operand at positions only known at run time, loaded inside the
// kernel: the data must come from memory (or be a constant or random source, which any position
// can evaluate), so a gather never fuses with the producer of its data; and the reduction
// templates, which hoist loads out of their loops by the position's loop variables, do not take
// gathers yet, so a region with a gather is pointwise.
std::optional<std::string> gather_conflict(const Dataflow& df, const std::vector<NodeId>& members,
                                           bool reduces) {
  for (NodeId m : members) {
    const Node& n = df.node(m);
    if (ir::op_kind(n.op) != OpKind::gather) continue;
    if (reduces) {
      return fmt::format("gather %{} reads at positions loaded at run time; reduction kernels do "
                         "not take gathers yet",
                         m);
    }
    NodeId data = n.inputs[0];
    while (df.is_free(data) && ir::op_kind(df.node(data).op) == OpKind::view) {
      data = df.node(data).inputs[0];
    }
    const OpKind kind = ir::op_kind(df.node(data).op);
    const bool source = df.node(data).op == Op::constant || kind == OpKind::random;
    if (std::binary_search(members.begin(), members.end(), data) ||
        (df.is_free(data) && !source)) {
      return fmt::format("gather %{} reads %{} at positions loaded at run time: its data is "
                         "read from memory",
                         m, data);
    }
  }
  return std::nullopt;
}

// An update_slice writes its value into its destination's buffer, in place: only a pointwise
// kernel over the value's elements writes it (ir::computed_shape), nothing in that kernel reads
// the update's result (its readers read the buffer after the write), and nothing in it reads
// the destination (other threads of the kernel would be writing it).
std::optional<std::string> update_conflict(const Dataflow& df, const std::vector<NodeId>& members,
                                           bool reduces) {
  for (NodeId m : members) {
    const Node& n = df.node(m);
    if (n.op != Op::update_slice) continue;
    if (reduces) {
      return fmt::format(
          "update_slice %{} is written by a pointwise kernel; it does not join a "
          "reduction",
          m);
    }
    for (NodeId r : df.readers[static_cast<size_t>(m)]) {
      if (std::binary_search(members.begin(), members.end(), r)) {
        return fmt::format(
            "%{} reads update_slice %{}, whose result is read back from its "
            "buffer after the write",
            r, m);
      }
    }
    for (NodeId other : members) {
      const std::vector<NodeId>& reads = df.reads[static_cast<size_t>(other)];
      if (std::binary_search(reads.begin(), reads.end(), n.inputs[0])) {
        return fmt::format("%{} reads %{}, the buffer update_slice %{} writes in place", other,
                           n.inputs[0], m);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

RegionVerdict check_region(const Dataflow& df, const std::vector<NodeId>& members,
                           const std::vector<NodeId>& outputs, bool sweeps) {
  std::vector<NodeId> reduces;
  for (NodeId m : members) {
    const OpKind kind = ir::op_kind(df.node(m).op);
    if (kind == OpKind::matmul) return refuse("matmul is a library call");
    if (kind == OpKind::reduce) reduces.push_back(m);
  }
  if (outputs.empty()) {
    return refuse(fmt::format("internal: region of %{} has no outputs", members.front()));
  }
  if (std::optional<std::string> why = gather_conflict(df, members, !reduces.empty())) {
    return refuse(*why);
  }
  if (std::optional<std::string> why = update_conflict(df, members, !reduces.empty())) {
    return refuse(*why);
  }
  if (reduces.empty()) return pointwise_verdict(df, outputs, sweeps);
  return check_reducing(df, members, outputs, reduces);
}

RegionVerdict check_pointwise(const Dataflow& df, const std::vector<NodeId>& outputs, bool sweeps) {
  if (outputs.empty()) return refuse("internal: a region has no outputs");
  return pointwise_verdict(df, outputs, sweeps);
}

}  // namespace fusejit::fusion::detail
