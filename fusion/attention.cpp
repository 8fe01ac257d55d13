// fusion/attention: see attention.h.
#include "fusion/attention.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

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
    if (!is_last_two_swap(kt)) refuse("the scores' second operand is not a transpose of k");
    take(kt);
    p.k = scale_on(node(kt).inputs[0], p);
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
  }

  // The axis (counted from the right: 1 the columns, 2 the rows) along which `id` holds the
  // plain arange 0, 1, ..., reached through casts, reshapes and expands; 0 when it does not.
  int64_t arange_axis(NodeId id) const {
    while (node(id).op == Op::cast || node(id).op == Op::expand) id = node(id).inputs[0];
    const Shape& shape = node(id).shape;
    int64_t axis = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      if (axis != 0) return 0;  // varies along two axes
      axis = static_cast<int64_t>(shape.size() - d);
    }
    if (axis == 0) return 0;
    while (node(id).op == Op::cast || node(id).op == Op::reshape) id = node(id).inputs[0];
    return node(id).op == Op::arange ? axis : 0;
  }

  // The kind of mask a where's condition makes, `fill_true` when the fill goes where it holds.
  AttentionMask classify(NodeId cond, bool fill_true, NodeId fill) const {
    const Node& c = node(cond);
    const bool compare = c.op == Op::lt || c.op == Op::le || c.op == Op::gt || c.op == Op::ge;
    if (!compare) return AttentionMask::boolean;
    const int64_t a = arange_axis(c.inputs[0]), b = arange_axis(c.inputs[1]);
    if (a == 0 || b == 0 || a == b || a > 2 || b > 2) return AttentionMask::boolean;
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
    return causal && vanishes ? AttentionMask::causal : AttentionMask::computed;
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
