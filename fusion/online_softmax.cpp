// fusion/online_softmax: see online_softmax.h.
#include "fusion/online_softmax.h"

namespace fusejit::fusion {

OnlinePair online_pair(const ir::Graph& g, ir::NodeId sum,
                       const std::function<bool(ir::NodeId)>& computed) {
  OnlinePair pair;
  const ir::Node& s = g.node(sum);
  if (s.op != ir::Op::sum || !is_floating(s.dtype)) return pair;
  const ir::NodeId e = s.inputs[0];
  if (!computed(e) || g.node(e).op != ir::Op::exp) return pair;
  const ir::NodeId d = g.node(e).inputs[0];
  if (!computed(d) || g.node(d).op != ir::Op::sub) return pair;
  pair.chain = {e, d};
  const ir::NodeId x = g.node(d).inputs[0];
  ir::NodeId m = g.node(d).inputs[1];
  while (computed(m) && (g.node(m).op == ir::Op::reshape || g.node(m).op == ir::Op::expand)) {
    pair.chain.push_back(m);
    m = g.node(m).inputs[0];
  }
  const ir::Node& max = g.node(m);
  if (computed(m) && max.op == ir::Op::max && max.inputs[0] == x && max.axes == s.axes &&
      is_floating(max.dtype)) {
    pair.max = m;
    pair.sum = sum;
  } else {
    pair.chain.clear();
  }
  return pair;
}

}  // namespace fusejit::fusion
