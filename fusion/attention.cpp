// fusion/attention: see attention.h.
#include "fusion/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace fusejit::fusion {

std::string_view attention_mask_name(AttentionMask m) {
  switch (m) {
    case AttentionMask::none:
      return "no mask";
    case AttentionMask::additive:
      return "additive mask";
    case AttentionMask::causal:
      return "causal";
    case AttentionMask::computed:
      return "computed mask";
    case AttentionMask::boolean:
      return "boolean mask";
  }
  return "?";
}

namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::Op;

// A refusal: the reason, for `why`.
struct NotAttention {
  std::string why;
};

[[noreturn]] void refuse(std::string why) { throw NotAttention{std::move(why)}; }

// The largest n such that every integer 0..n is exact in `t`: the positions an arange of that
// dtype (or a cast to it) holds without rounding.
int64_t exact_integers(DType t) {
  switch (t) {
    case DType::f16:
      return 2048;
    case DType::bf16:
      return 256;
    case DType::f32:
      return int64_t{1} << 24;
    case DType::i32:
      return std::numeric_limits<int32_t>::max();
    case DType::i64:
      return std::numeric_limits<int64_t>::max();
    case DType::boolean:
      return 1;
    case DType::i8:
      return 127;
  }
  return 0;
}

// Positions 0, 1, ..., count - 1 along one of the last two axes of a value.
struct Positions {
  int64_t axis = 0;   // counted from the right: 1 the columns, 2 the rows; 0 when not positions
  int64_t count = 0;  // the arange's length
  // The dtype along the way (the arange's, each cast's) that holds the fewest exact integers,
  // and the node that has it.
  DType narrowest = DType::i64;
  NodeId narrowest_node = -1;
};

// The positions `id` holds: a plain arange reached through casts, reshapes and expands, varying
// along one axis of `id`.
Positions positions(const Graph& g, NodeId id) {
  Positions p;
  auto note = [&](NodeId at) {
    const DType t = g.node(at).dtype;
    if (p.narrowest_node < 0 || exact_integers(t) < exact_integers(p.narrowest)) {
      p.narrowest = t;
      p.narrowest_node = at;
    }
  };
  note(id);
  while (g.node(id).op == Op::cast || g.node(id).op == Op::expand) {
    id = g.node(id).inputs[0];
    note(id);
  }
  const Shape& shape = g.node(id).shape;
  int64_t axis = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (axis != 0) return {};  // varies along two axes
    axis = static_cast<int64_t>(shape.size() - d);
  }
  if (axis == 0 || axis > 2) return {};
  while (g.node(id).op == Op::cast || g.node(id).op == Op::reshape) {
    id = g.node(id).inputs[0];
    note(id);
  }
  if (g.node(id).op != Op::arange) return {};
  p.axis = axis;
  p.count = g.node(id).shape.at(0);
  return p;
}

// Why the comparison `cond` of two positions does not compare the exact integers 0..n-1, or ""
// (also when it is no comparison of positions). f16 holds the integers exactly up to 2048, bf16
// up to 256: past that, positions round and neighbours tie, and col > row no longer holds
// where the positions say it does.
std::string inexact_positions(const Graph& g, NodeId cond) {
  const Node& c = g.node(cond);
  if (c.inputs.size() != 2) return "";
  const Positions a = positions(g, c.inputs[0]), b = positions(g, c.inputs[1]);
  if (a.axis == 0 || b.axis == 0) return "";
  for (const Positions& p : {a, b}) {
    if (p.count - 1 > exact_integers(p.narrowest)) {
      return fmt::format("the positions are {} at %{}, exact only up to {}, and there are {} of "
                         "them; make them i32 or i64 (or f32)",
                         dtype_name(p.narrowest), p.narrowest_node, exact_integers(p.narrowest),
                         p.count);
    }
  }
  // Operands of different dtypes compare in their common one.
  const DType common = ir::promote(g.node(c.inputs[0]).dtype, g.node(c.inputs[1]).dtype);
  const int64_t largest = std::max(a.count, b.count) - 1;
  if (largest > exact_integers(common)) {
    return fmt::format("%{} compares the positions as {}, exact only up to {}, and there are {} "
                       "of them; make them i32 or i64 (or f32)",
                       cond, dtype_name(common), exact_integers(common), largest + 1);
  }
  return "";
}

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), users_(g.size(), 0) {
    for (const Node& n : g.nodes()) {
      for (NodeId in : n.inputs) ++users_[static_cast<size_t>(in)];
    }
    for (NodeId out : g.outputs()) outputs_.insert(out);
  }

  AttentionPattern match(NodeId out) {
    AttentionPattern p;
    p.output = out;
    const Node& o = node(out);
    if (o.op != Op::matmul) refuse(fmt::format("%{} is not a matmul", out));
    take(out);
    const int64_t rank = static_cast<int64_t>(o.shape.size());
    if (rank < 2) refuse("the output has rank below 2");
    const NodeId logits = softmax(o.inputs[0], rank);
    NodeId s = modifiers(logits, p);
    if (node(s).op != Op::matmul) refuse(fmt::format("the softmax does not read a matmul"));
    p.scores = s;
    take(s);
    const Node& scores = node(s);
    // kᵀ: a permute that swaps the last two axes (a scale around it is allowed).
    NodeId kt = scale_on(scores.inputs[1], p);
    if (node(kt).op != Op::permute) refuse("the scores' second operand is not a transpose of k");
    if (is_last_two_swap(kt)) {
      take(kt);
      p.k = scale_on(node(kt).inputs[0], p);
    } else {
      // A permute that is not a plain swap: the graph passes compose k's own permute (from
      // [b, s, h, d]) with the transpose, so there is no k node, only kᵀ.
      p.k = kt;
      p.k_transposed = true;
    }
    p.q = scale_on(scores.inputs[0], p);
    p.v = o.inputs[1];
    p.k_source = through_views(p.k, p.kv_broadcast);
    p.v_source = through_views(p.v, p.kv_broadcast);
    const Shape& qs = node(p.q).shape;
    const Shape& vs = node(p.v).shape;
    p.seq_q = qs[qs.size() - 2];
    p.head_dim = qs.back();
    p.seq_kv = vs[vs.size() - 2];
    p.value_dim = vs.back();
    check_users(p);
    p.nodes.assign(taken_.begin(), taken_.end());
    return p;
  }

 private:
  const Node& node(NodeId id) const { return g_.node(id); }
  void take(NodeId id) { taken_.insert(id); }

  bool is_scalar_constant(NodeId id, double* value = nullptr) const {
    while (node(id).op == Op::cast) id = node(id).inputs[0];
    const Node& n = node(id);
    if (n.op != Op::constant || !n.shape.empty()) return false;
    if (value != nullptr) *value = n.value;
    return true;
  }

  // Casts from `id` down, taken into the pattern; the first node that is not one.
  NodeId strip_casts(NodeId id) {
    while (node(id).op == Op::cast) {
      take(id);
      id = node(id).inputs[0];
    }
    return id;
  }

  // softmax over the last axis: div(e, sum(e)), e = exp(x - max(x)), keepdims; casts around
  // it. Returns x.
  NodeId softmax(NodeId p, int64_t rank) {
    const NodeId d = strip_casts(p);
    const Node& div = node(d);
    if (div.op != Op::div) refuse("the matmul's first operand is not a softmax (no division)");
    const NodeId e = div.inputs[0];
    const Node& sum = node(div.inputs[1]);
    if (sum.op != Op::sum || sum.inputs[0] != e || !last_axis(sum, rank)) {
      refuse("the softmax's divisor is not the sum of its numerator over the last axis");
    }
    const Node& exp = node(e);
    if (exp.op != Op::exp || node(exp.inputs[0]).op != Op::sub) {
      refuse("the softmax's numerator is not exp(x - max x)");
    }
    const NodeId sub = exp.inputs[0];
    const NodeId x = node(sub).inputs[0];
    const Node& max = node(node(sub).inputs[1]);
    if (max.op != Op::max || max.inputs[0] != x || !last_axis(max, rank)) {
      refuse("the softmax does not subtract the maximum over the last axis");
    }
    for (NodeId id : {d, div.inputs[1], e, sub, node(sub).inputs[1]}) take(id);
    return x;
  }

  static bool last_axis(const Node& reduce, int64_t rank) {
    return reduce.keepdim && reduce.axes == std::vector<int64_t>{rank - 1};
  }

  // True when `id` leads (through casts and constant scales) to a matmul: the scores' side.
  bool scores_side(NodeId id) const {
    for (;;) {
      const Node& n = node(id);
      if (n.op == Op::matmul) return true;
      if (n.op == Op::cast) {
        id = n.inputs[0];
      } else if ((n.op == Op::mul || n.op == Op::div) && is_scalar_constant(n.inputs[1])) {
        id = n.inputs[0];
      } else if (n.op == Op::mul && is_scalar_constant(n.inputs[0])) {
        id = n.inputs[1];
      } else {
        return false;
      }
    }
  }

  // The chain from the scores to the softmax's input: casts, constant scales, one mask.
  NodeId modifiers(NodeId x, AttentionPattern& p) {
    for (;;) {
      const Node& n = node(x);
      switch (n.op) {
        case Op::matmul:
          return x;
        case Op::cast:
          take(x);
          x = n.inputs[0];
          continue;
        case Op::mul:
        case Op::div: {
          double c = 0;
          const bool right = is_scalar_constant(n.inputs[1], &c);
          if (right || (n.op == Op::mul && is_scalar_constant(n.inputs[0], &c))) {
            p.scale = n.op == Op::mul ? p.scale * c : p.scale / c;
            take(x);
            x = n.inputs[right ? 0 : 1];
            continue;
          }
          refuse(fmt::format("the scores are {} by a tensor (%{})",
                             n.op == Op::mul ? "multiplied" : "divided", x));
        }
        case Op::add: {
          const bool left = scores_side(n.inputs[0]);
          const NodeId mask = n.inputs[left ? 1 : 0];
          if (!left && !scores_side(n.inputs[1])) refuse("an addition on the scores has no scores side");
          set_mask(p, AttentionMask::additive, mask, -1);
          p.fill_where_true = true;
          take(x);
          x = n.inputs[left ? 0 : 1];
          continue;
        }
        case Op::where: {
          // where(c, scores, fill): fill where c is false; where(c, fill, scores): where true.
          const bool fill_true = is_scalar_constant(n.inputs[1]);
          const NodeId fill = n.inputs[fill_true ? 1 : 2];
          if (!is_scalar_constant(fill)) refuse("a where on the scores fills with a tensor");
          set_mask(p, classify(n.inputs[0], fill_true, fill), n.inputs[0], fill);
          is_scalar_constant(fill, &p.fill_value);
          p.fill_value *= p.mask_scale;
          p.fill_where_true = fill_true;
          take(x);
          x = n.inputs[fill_true ? 2 : 1];
          continue;
        }
        default:
          refuse(fmt::format("the scores pass through {} (%{})", ir::op_name(n.op), x));
      }
    }
  }

  static void set_mask(AttentionPattern& p, AttentionMask m, NodeId mask, NodeId fill) {
    if (p.mask != AttentionMask::none) refuse("the scores have two masks");
    p.mask = m;
    p.mask_node = mask;
    p.fill = fill;
    // Walking down from the softmax, the scales met so far are those applied after the mask.
    p.mask_scale = p.scale;
  }

  // The kind of mask a where's condition makes, `fill_true` when the fill goes where it holds.
  AttentionMask classify(NodeId cond, bool fill_true, NodeId fill) const {
    const Node& c = node(cond);
    const bool compare = c.op == Op::lt || c.op == Op::le || c.op == Op::gt || c.op == Op::ge;
    if (!compare) return AttentionMask::boolean;
    const Positions pa = positions(g_, c.inputs[0]), pb = positions(g_, c.inputs[1]);
    const int64_t a = pa.axis, b = pb.axis;
    if (a == 0 || b == 0 || a == b) return AttentionMask::boolean;
    // The masked positions as a function of (row, col), against col > row on a few points.
    const auto holds = [&](int64_t row, int64_t col) {
      const int64_t x = a == 2 ? row : col, y = b == 2 ? row : col;
      switch (c.op) {
        case Op::lt: return x < y;
        case Op::le: return x <= y;
        case Op::gt: return x > y;
        default: return x >= y;
      }
    };
    bool causal = true;
    for (const auto& [row, col] : {std::pair{0, 0}, {0, 1}, {1, 0}, {1, 2}, {2, 1}, {3, 3}}) {
      const bool masked = fill_true ? holds(row, col) : !holds(row, col);
      causal = causal && masked == (col > row);
    }
    // A fill that exp takes to 0 against any finite maximum: the masked scores add nothing.
    double f = 0;
    is_scalar_constant(fill, &f);
    const bool vanishes = f <= -1e9;
    // Positions rounded in their dtype tie (bf16 past 256): the comparison is no longer col > row.
    const bool exact = inexact_positions(g_, cond).empty();
    return causal && vanishes && exact ? AttentionMask::causal : AttentionMask::computed;
  }

  bool is_last_two_swap(NodeId id) const {
    const Node& n = node(id);
    if (n.op != Op::permute) return false;
    const auto r = static_cast<int64_t>(n.axes.size());
    if (r < 2) return false;
    for (int64_t i = 0; i < r - 2; ++i) {
      if (n.axes[static_cast<size_t>(i)] != i) return false;
    }
    return n.axes[static_cast<size_t>(r - 2)] == r - 1 && n.axes[static_cast<size_t>(r - 1)] == r - 2;
  }

  // A constant scale on q or k (mul by a scalar constant, on either side): taken, its value
  // folded into the pattern's scale; the operand it scales.
  NodeId scale_on(NodeId id, AttentionPattern& p) {
    for (;;) {
      const Node& n = node(id);
      double c = 0;
      if (n.op == Op::mul && is_scalar_constant(n.inputs[1], &c)) {
        id = n.inputs[0];
      } else if (n.op == Op::mul && is_scalar_constant(n.inputs[0], &c)) {
        id = n.inputs[1];
      } else if (n.op == Op::div && is_scalar_constant(n.inputs[1], &c)) {
        c = 1.0 / c;
        id = n.inputs[0];
      } else {
        return id;
      }
      p.scale *= c;
      take(static_cast<NodeId>(&n - g_.nodes().data()));
    }
  }

  NodeId through_views(NodeId id, bool& broadcast) const {
    for (;;) {
      const Node& n = node(id);
      if (n.op == Op::expand) broadcast = true;
      if (n.op != Op::reshape && n.op != Op::expand && n.op != Op::permute) return id;
      id = n.inputs[0];
    }
  }

  // Every taken node but the output is read only by taken nodes, and is no graph output.
  void check_users(const AttentionPattern& p) const {
    std::vector<int> inside(g_.size(), 0);
    for (NodeId id : taken_) {
      for (NodeId in : node(id).inputs) ++inside[static_cast<size_t>(in)];
    }
    for (NodeId id : taken_) {
      if (id == p.output) continue;
      if (outputs_.count(id) != 0) {
        refuse(fmt::format("%{} ({}) is an output of the graph", id, ir::op_name(node(id).op)));
      }
      if (inside[static_cast<size_t>(id)] != users_[static_cast<size_t>(id)]) {
        refuse(fmt::format("%{} ({}) is read outside the pattern", id, ir::op_name(node(id).op)));
      }
    }
  }

  const Graph& g_;
  std::vector<int> users_;
  std::set<NodeId> outputs_;
  std::set<NodeId> taken_;
};

}  // namespace

std::optional<AttentionPattern> match_attention(const Graph& g, NodeId node, std::string* why) {
  try {
    return Matcher(g).match(node);
  } catch (const NotAttention& e) {
    if (why != nullptr) *why = e.why;
    return std::nullopt;
  }
}

std::vector<AttentionPattern> find_attention(const Graph& g) {
  std::vector<AttentionPattern> out;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.nodes()[i].op != Op::matmul) continue;
    if (auto p = match_attention(g, static_cast<NodeId>(i))) out.push_back(std::move(*p));
  }
  return out;
}

std::string AttentionPattern::describe(const Graph& g) const {
  std::string mask;
  if (this->mask != AttentionMask::none) {
    mask = fmt::format(", {}", attention_mask_name(this->mask));
    if (this->mask != AttentionMask::causal) mask += fmt::format(" %{}", mask_node);
  }
  return fmt::format("softmax(q kᵀ * {}{}) v: q {}, k {}{}, v {}", scale, mask,
                     ir::type_str(g.node(q)), ir::type_str(g.node(k_source)),
                     kv_broadcast ? " (heads broadcast)" : "", ir::type_str(g.node(v_source)));
}

}  // namespace fusejit::fusion

namespace fusejit::fusion {

AttentionRegion attention_region(const AttentionPattern& p) {
  return AttentionRegion{.q = p.q,
                         .k = p.k,
                         .v = p.v,
                         .k_transposed = p.k_transposed,
                         .scores = p.scores,
                         .output = p.output,
                         .mask = p.mask,
                         .mask_node = p.mask_node,
                         .scale = p.scale,
                         .mask_scale = p.mask_scale,
                         .fill = p.fill_value,
                         .fill_where_true = p.fill_where_true};
}

namespace {

using ir::Graph;
using ir::NodeId;
using ir::Op;

// One axis of a strided view: index i reaches element (i / group) * stride of the buffer.
struct Axis {
  int64_t extent = 1;
  int64_t stride = 0;
  int64_t group = 1;
};
using Layout = std::vector<Axis>;

struct NoLayout {
  std::string why;
};
[[noreturn]] void no_layout(std::string why) { throw NoLayout{std::move(why)}; }

// Two adjacent axes as one (outer first), or nothing when no stride and group express it.
std::optional<Axis> merge(const Axis& outer, const Axis& inner) {
  const int64_t extent = outer.extent * inner.extent;
  if (inner.extent == 1) return Axis{extent, outer.stride, outer.group};
  if (outer.extent == 1) return Axis{extent, inner.stride, inner.group};
  // A broadcast inner axis: the merged index divided by its extent is the outer index.
  if (inner.stride == 0) return Axis{extent, outer.stride, outer.group * inner.extent};
  if (outer.group == 1 && inner.group == 1 && outer.stride == inner.extent * inner.stride) {
    return Axis{extent, inner.stride, 1};
  }
  return std::nullopt;  // the inner index would need a modulo
}

Layout dense(const Shape& shape) {
  Layout out(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    out[d] = Axis{shape[d], shape[d] == 1 ? 0 : stride, 1};
    stride *= shape[d];
  }
  return out;
}

Layout reshape(const Layout& from, const Shape& to, NodeId id) {
  Layout src;
  for (const Axis& a : from) {
    if (a.extent != 1) src.push_back(a);
  }
  Layout out;
  size_t i = 0;
  for (int64_t extent : to) {
    if (extent == 1) {
      out.push_back(Axis{1, 0, 1});
      continue;
    }
    if (i == src.size()) no_layout(fmt::format("reshape %{} has more elements than its operand", id));
    Axis acc = src[i++];
    while (acc.extent < extent && i < src.size()) {
      const std::optional<Axis> m = merge(acc, src[i++]);
      if (!m) no_layout(fmt::format("reshape %{} merges axes that no stride can step through", id));
      acc = *m;
    }
    if (acc.extent == extent) {
      out.push_back(acc);
    } else if (acc.extent % extent == 0 && acc.group == 1) {
      // Split: this axis takes the outer part, the rest goes back for the next dims.
      const int64_t rest = acc.extent / extent;
      out.push_back(Axis{extent, acc.stride * rest, 1});
      src[--i] = Axis{rest, acc.stride, 1};
    } else {
      no_layout(fmt::format("reshape %{} splits an axis that no stride can step through", id));
    }
  }
  if (i != src.size()) no_layout(fmt::format("reshape %{} has fewer elements than its operand", id));
  return out;
}

Layout expand(const Layout& from, const Shape& to) {
  Layout out(to.size());
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < to.size(); ++d) {
    if (d < lead || from[d - lead].extent != to[d]) {
      out[d] = Axis{to[d], 0, 1};
    } else {
      out[d] = from[d - lead];
    }
  }
  return out;
}

// A slice of `layout` along the node's axis: the axis keeps its stride times the step, and the
// first element it reads moves `offset` on.
void slice_axis(Layout& layout, const ir::Node& n, NodeId id, int64_t& offset) {
  Axis& a = layout.at(static_cast<size_t>(n.axes.at(0)));
  const int64_t extent = n.shape.at(static_cast<size_t>(n.axes.at(0)));
  if (a.stride != 0) {
    if (a.group != 1) {
      no_layout(fmt::format("slice %{} cuts an axis that is broadcast in groups", id));
    }
    offset += n.start * a.stride;
    a.stride *= n.step;
  }
  a.extent = extent;
  if (extent == 1) a.stride = 0;
}

// The layout of `id` over the buffer under its views (reshape, expand, permute, slice),
// collecting the views; `buffer` gets the first node that is not one, `offset` the element of
// it that the view's first element is.
Layout strided(const Graph& g, NodeId id, NodeId& buffer, std::vector<NodeId>& views,
               int64_t& offset) {
  std::vector<NodeId> chain;
  for (;;) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::reshape && n.op != Op::expand && n.op != Op::permute && n.op != Op::slice) {
      break;
    }
    chain.push_back(id);
    id = n.inputs[0];
  }
  buffer = id;
  if (g.node(id).op == Op::constant) no_layout(fmt::format("%{} is a constant", id));
  Layout layout = dense(g.node(id).shape);
  offset = 0;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const ir::Node& n = g.node(*it);
    views.push_back(*it);
    if (n.op == Op::permute) {
      Layout p(n.axes.size());
      for (size_t d = 0; d < n.axes.size(); ++d) p[d] = layout[static_cast<size_t>(n.axes[d])];
      layout = std::move(p);
    } else if (n.op == Op::expand) {
      layout = expand(layout, n.shape);
    } else if (n.op == Op::slice) {
      slice_axis(layout, n, *it, offset);
    } else {
      layout = reshape(layout, n.shape, *it);
    }
  }
  return layout;
}

// `layout` (of a tensor whose last two axes are the matrix) with its batch axes aligned to
// `batch` (from the right; missing or size-1 axes broadcast) and folded into [batch, heads]:
// the heads are the batch axes after the first, merged (`heads_last`: the batch is the axes
// before the last, merged, and the heads the last).
AttentionView fold(const Layout& layout, const Shape& batch, bool heads_last, NodeId buffer,
                   const char* what) {
  const size_t r = layout.size();
  if (r < 2 || r - 2 > batch.size()) no_layout(fmt::format("{} has more batch axes than the scores", what));
  Layout b(batch.size());
  const size_t lead = batch.size() - (r - 2);
  for (size_t d = 0; d < batch.size(); ++d) {
    const bool present = d >= lead && layout[d - lead].extent == batch[d];
    b[d] = present ? layout[d - lead] : Axis{batch[d], 0, 1};
  }
  auto merged = [&](size_t from, size_t to) {
    Axis acc{1, 0, 1};
    for (size_t d = from; d < to; ++d) {
      const std::optional<Axis> m = merge(acc, b[d]);
      if (!m) no_layout(fmt::format("{}'s batch axes cannot be read as [batch, heads] by strides", what));
      acc = *m;
    }
    return acc;
  };
  const size_t split = b.empty() ? 0 : heads_last ? b.size() - 1 : std::min<size_t>(1, b.size() - 1);
  const Axis outer = merged(0, split);
  const Axis heads = merged(split, b.size());
  if (outer.group != 1) no_layout(fmt::format("{}'s batch axis is broadcast in groups", what));
  const Axis& rows = layout[r - 2];
  const Axis& cols = layout[r - 1];
  if (rows.group != 1 || cols.group != 1) {
    no_layout(fmt::format("{}'s last two axes are not strided", what));
  }
  return AttentionView{.buffer = buffer,
                       .strides = {outer.stride, heads.stride, rows.stride, cols.stride},
                       .head_group = heads.extent == 1 ? 1 : heads.group};
}

bool half_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

// The kernel computes the scores at q kᵀ's shape and softmaxes them over seq_kv = v's rows.
// A mask (or v) that broadcasts the scores to more batch entries, query rows or keys than
// q and k have is a different problem: each output row or key would reuse q's or k's one.
void check_scores_not_broadcast(const Graph& g, const AttentionRegion& a, const Shape& batch) {
  const ir::Node& scores = g.node(a.scores);
  const ir::Node& o = g.node(a.output);
  const Shape& vs = g.node(a.v).shape;
  if (o.shape.size() != scores.shape.size() ||
      !std::equal(batch.begin(), batch.end(), o.shape.begin())) {
    no_layout(fmt::format("the output {} has batch axes beyond the scores' {} (broadcast by the "
                          "mask or by v); give q and k the output's batch axes",
                          ir::type_str(o), ir::type_str(scores)));
  }
  const size_t r = scores.shape.size();
  if (o.shape[r - 2] != scores.shape[r - 2]) {
    no_layout(fmt::format("the mask broadcasts the scores' {} query rows to {} (the scores are {}, "
                          "the output {}); give q every query row",
                          scores.shape[r - 2], o.shape[r - 2], ir::type_str(scores),
                          ir::type_str(o)));
  }
  if (vs[vs.size() - 2] != scores.shape[r - 1]) {
    no_layout(fmt::format("the mask broadcasts the scores' {} keys to v's {} (the scores are {}); "
                          "give k every key",
                          scores.shape[r - 1], vs[vs.size() - 2], ir::type_str(scores)));
  }
}

// q is f16 or bf16, and k, v and the output are of q's dtype.
void check_dtypes(const Graph& g, const AttentionRegion& a) {
  const DType t = g.node(a.q).dtype;
  if (!half_precision(t)) {
    no_layout(fmt::format("q is {}: the kernel takes f16 and bf16", dtype_name(t)));
  }
  for (NodeId id : {a.k, a.v, a.output}) {
    if (g.node(id).dtype != t) {
      no_layout(fmt::format("%{} is {} and q is {}", id, dtype_name(g.node(id).dtype),
                            dtype_name(t)));
    }
  }
}

// The problem's sizes in `out`: the batch axes split into batch and heads as the operands were
// folded, q's rows and head dim, v's rows and value dim.
void set_sizes(AttentionLayout& out, const Graph& g, const AttentionRegion& a, const Shape& batch,
               bool heads_last) {
  const size_t split =
      batch.empty() ? 0 : heads_last ? batch.size() - 1 : std::min<size_t>(1, batch.size() - 1);
  out.batch = 1;
  out.heads = 1;
  for (size_t d = 0; d < batch.size(); ++d) (d < split ? out.batch : out.heads) *= batch[d];
  const Shape& qs = g.node(a.q).shape;
  const Shape& vs = g.node(a.v).shape;
  out.seq_q = qs[qs.size() - 2];
  out.head_dim = qs.back();
  out.seq_kv = vs[vs.size() - 2];
  out.value_dim = vs.back();
  for (int64_t d : {out.head_dim, out.value_dim}) {
    if (d % 16 != 0 || d > kMaxAttentionHeadDim) {
      no_layout(fmt::format("a head dim of {}: the kernel takes multiples of 16 up to {}", d,
                            kMaxAttentionHeadDim));
    }
  }
}

// The view of an additive or boolean mask, folded as q, k and v are; its views go to `views`.
AttentionView mask_view(const Graph& g, const AttentionRegion& a, const Shape& batch,
                        bool heads_last, std::vector<NodeId>& views) {
  NodeId id = a.mask_node;
  while (g.node(id).op == Op::cast) {
    // The kernel reads the buffer under the casts: only casts that change no value.
    const DType from = g.node(g.node(id).inputs[0]).dtype, to = g.node(id).dtype;
    if (from != to && !(half_precision(from) && to == DType::f32)) {
      no_layout(fmt::format("the mask is cast from {} to {} at %{}, which rounds it; the "
                            "kernel reads the mask as it is in memory: give it the scores' "
                            "dtype or f32",
                            dtype_name(from), dtype_name(to), id));
    }
    id = g.node(id).inputs[0];
  }
  NodeId buffer = -1;
  int64_t offset = 0;
  Layout l = strided(g, id, buffer, views, offset);
  // The mask broadcasts to the scores as an elementwise operand does: aligned from the right
  // (check_scores_not_broadcast leaves the scores at the output's batch, rows and keys).
  Layout full = expand(l, g.node(a.scores).shape);
  AttentionView mask = fold(full, batch, heads_last, buffer, "the mask");
  mask.offset = offset;
  // The kernel reads mask head h at h * stride (no head groups, unlike k and v).
  if (mask.head_group != 1) {
    no_layout(fmt::format("the mask is broadcast over an inner head axis (groups of {})",
                          mask.head_group));
  }
  const DType mt = g.node(buffer).dtype;
  const bool ok = a.mask == AttentionMask::boolean ? mt == DType::boolean
                                                   : half_precision(mt) || mt == DType::f32;
  if (!ok) {
    no_layout(fmt::format("the mask is {}: the kernel reads {}", dtype_name(mt),
                          a.mask == AttentionMask::boolean ? "bool" : "f16, bf16 or f32"));
  }
  return mask;
}

// The mask's part of `out`: refuses the masks the kernel does not take, and reads an additive
// or boolean one from memory.
void layout_mask(AttentionLayout& out, const Graph& g, const AttentionRegion& a,
                 const Shape& batch, bool heads_last) {
  switch (a.mask) {
    case AttentionMask::none:
      break;
    case AttentionMask::causal:
      if (!(a.fill <= -1e4)) {
        no_layout(fmt::format("the causal fill {} is not far enough below the scores for the "
                              "kernel to skip the masked keys", a.fill));
      }
      break;
    case AttentionMask::computed: {
      const std::string inexact = inexact_positions(g, a.mask_node);
      if (!inexact.empty()) {
        no_layout(fmt::format("its causal-looking mask %{} compares rounded positions: {}",
                              a.mask_node, inexact));
      }
      no_layout("a mask computed from positions other than causal is not fused yet");
    }
    case AttentionMask::additive:
    case AttentionMask::boolean:
      out.mask = mask_view(g, a, batch, heads_last, out.views);
      break;
  }
}

// The output's part of `out`: where [b, h, i, d] lands in the buffer of `a.written`, found by
// walking its views back to the output (a reshape of the dense buffer, then each permute
// undone).
void layout_output(AttentionLayout& out, const Graph& g, const AttentionRegion& a,
                   const Shape& batch, bool heads_last) {
  const NodeId written = a.written < 0 ? a.output : a.written;
  Layout l = dense(g.node(written).shape);
  for (NodeId id = written; id != a.output;) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::permute && n.op != Op::reshape) {
      no_layout(
          fmt::format("%{} between the output and %{} is no permute or reshape", id, written));
    }
    out.out_views.push_back(id);
    const Shape& in = g.node(n.inputs[0]).shape;
    if (n.op == Op::permute) {
      Layout p(l.size());
      for (size_t d = 0; d < n.axes.size(); ++d) p[static_cast<size_t>(n.axes[d])] = l[d];
      l = std::move(p);
    } else {
      l = reshape(l, in, id);
    }
    id = n.inputs[0];
  }
  std::reverse(out.out_views.begin(), out.out_views.end());
  out.o = fold(l, batch, heads_last, written, "the output");
  if (out.o.strides[3] != 1 || out.o.head_group != 1) {
    no_layout(fmt::format("%{} does not hold the output's rows contiguously, once each", written));
  }
}

AttentionLayout layout_of(const Graph& g, const AttentionRegion& a, int attempt) {
  AttentionLayout out;
  const ir::Node& scores = g.node(a.scores);
  const Shape batch(scores.shape.begin(), scores.shape.end() - 2);
  check_scores_not_broadcast(g, a, batch);
  check_dtypes(g, a);
  const bool heads_last = attempt == 1;
  auto view = [&](NodeId id, const char* what, bool transposed = false) {
    NodeId buffer = -1;
    int64_t offset = 0;
    const Layout l = strided(g, id, buffer, out.views, offset);
    AttentionView v = fold(l, batch, heads_last, buffer, what);
    v.offset = offset;
    if (transposed) std::swap(v.strides[2], v.strides[3]);
    if (v.strides[3] != 1) no_layout(fmt::format("{}'s last axis is not contiguous", what));
    return v;
  };
  out.q = view(a.q, "q");
  out.k = view(a.k, "k", a.k_transposed);
  out.v = view(a.v, "v");
  set_sizes(out, g, a, batch, heads_last);
  layout_mask(out, g, a, batch, heads_last);
  layout_output(out, g, a, batch, heads_last);
  std::sort(out.views.begin(), out.views.end());
  out.views.erase(std::unique(out.views.begin(), out.views.end()), out.views.end());
  return out;
}

}  // namespace

std::vector<NodeId> output_views(const Graph& g, NodeId output) {
  std::vector<int> readers(g.size(), 0);
  std::vector<NodeId> reader(g.size(), -1);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    for (NodeId in : g.node(id).inputs) {
      ++readers[static_cast<size_t>(in)];
      reader[static_cast<size_t>(in)] = id;
    }
  }
  const std::vector<NodeId>& outputs = g.outputs();
  const auto is_output = [&](NodeId id) {
    return std::find(outputs.begin(), outputs.end(), id) != outputs.end();
  };
  std::vector<NodeId> chain;
  for (NodeId at = output; !is_output(at) && readers[static_cast<size_t>(at)] == 1;) {
    const NodeId next = reader[static_cast<size_t>(at)];
    const Op op = g.node(next).op;
    if (op != Op::permute && op != Op::reshape) break;
    chain.push_back(next);
    at = next;
  }
  return chain;
}

std::optional<AttentionLayout> attention_layout(const Graph& g, const AttentionRegion& a,
                                                std::string* why) {
  // The batch axes as [first, the rest merged] (the usual [B, H, S, D]), or else as [all but
  // the last merged, the last]; the same split for every operand.
  std::string first;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      return layout_of(g, a, attempt);
    } catch (const NoLayout& e) {
      if (attempt == 0) first = e.why;
    }
  }
  if (why != nullptr) *why = first;
  return std::nullopt;
}

}  // namespace fusejit::fusion
