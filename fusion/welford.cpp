// fusion/welford: see welford.h.
#include "fusion/welford.h"

#include <algorithm>

namespace fusejit::fusion {

namespace {

bool is_f32(const ir::Node& n) { return n.dtype == DType::f32; }

// True when `b`, right-aligned against `x` (a missing leading axis counts as extent 1), has
// extent 1 on every reduced axis and x's extent on every kept one: the keepdim shape of a
// reduction of x over `axes`, so that broadcasting b against x reads each row's own value.
bool is_keepdim_shape(const Shape& b, const Shape& x, const std::vector<int64_t>& axes) {
  if (b.size() > x.size()) return false;
  const size_t lead = x.size() - b.size();
  for (size_t a = 0; a < x.size(); ++a) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(a));
    const int64_t extent = a < lead ? 1 : b[a - lead];
    if (extent != (reduced ? 1 : x[a])) return false;
  }
  return true;
}

// The mean under `operand` (the sub's operand that is not X): expands on top, reshapes
// below them, then a mean of x over `axes` whose values the views only broadcast back over
// the reduced axes. -1 when it is anything else.
ir::NodeId broadcast_mean(const ir::Graph& g, ir::NodeId operand, ir::NodeId x,
                          const std::vector<int64_t>& axes,
                          const std::function<bool(ir::NodeId)>& computed) {
  ir::NodeId m = operand;
  while (computed(m) && g.node(m).op == ir::Op::expand) m = g.node(m).inputs[0];
  // Reshapes keep the row-major order of the mean's values: the one under the expands must
  // present them in the keepdim shape.
  if (!is_keepdim_shape(g.node(m).shape, g.node(x).shape, axes)) return -1;
  while (computed(m) && g.node(m).op == ir::Op::reshape) m = g.node(m).inputs[0];
  const ir::Node& mean = g.node(m);
  if (!computed(m) || mean.op != ir::Op::mean || mean.inputs[0] != x || mean.axes != axes ||
      !is_f32(mean)) {
    return -1;
  }
  return m;
}

}  // namespace

WelfordPair welford_pair(const ir::Graph& g, ir::NodeId variance,
                         const std::function<bool(ir::NodeId)>& computed) {
  const ir::Node& v = g.node(variance);
  if ((v.op != ir::Op::sum && v.op != ir::Op::mean) || !is_f32(v)) return {};
  const ir::NodeId q = v.inputs[0];
  const ir::Node& square = g.node(q);
  if (!computed(q) || square.op != ir::Op::mul || square.inputs[0] != square.inputs[1] ||
      !is_f32(square)) {
    return {};
  }
  const ir::NodeId d = square.inputs[0];
  const ir::Node& dev = g.node(d);
  if (!computed(d) || dev.op != ir::Op::sub || !is_f32(dev)) return {};
  // (X - M)^2 or (M - X)^2: X is the operand of the deviation's shape.
  for (const auto& [x, m] : {std::pair{dev.inputs[0], dev.inputs[1]},
                             std::pair{dev.inputs[1], dev.inputs[0]}}) {
    if (g.node(x).shape != dev.shape || !is_f32(g.node(x))) continue;
    if (const ir::NodeId mean = broadcast_mean(g, m, x, v.axes, computed); mean >= 0) {
      return {mean, variance};
    }
  }
  return {};
}

std::vector<WelfordPair> welford_pairs(const ir::Graph& g, const Region& region) {
  std::vector<WelfordPair> out;
  if (region.kind != RegionKind::normalization) return out;
  auto computed = [&](ir::NodeId id) {
    return std::binary_search(region.nodes.begin(), region.nodes.end(), id);
  };
  for (ir::NodeId id : region.nodes) {
    if (ir::op_kind(g.node(id).op) != ir::OpKind::reduce) continue;
    const WelfordPair p = welford_pair(g, id, computed);
    const bool taken = std::any_of(out.begin(), out.end(),
                                   [&](const WelfordPair& o) { return o.mean == p.mean; });
    if (p.mean >= 0 && !taken) out.push_back(p);
  }
  return out;
}

}  // namespace fusejit::fusion
