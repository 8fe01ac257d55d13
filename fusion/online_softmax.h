// fusion/online_softmax: the online softmax pair. sum(exp(X - M)) with M = max(X) over the same
// axes can be accumulated in the same pass as M, rescaling the running sum as the running
// maximum grows (templates/device/fj_reduce.cuh, fj_max_sum): softmax, log-softmax and
// logsumexp then read X once for both statistics. The partitioner uses this to keep such a pair
// in one reduction region over any axes; the templates to accumulate it.
#pragma once

#include <functional>
#include <vector>

#include "ir/graph.h"

namespace fusejit::fusion {

struct OnlinePair {
  ir::NodeId max = -1;  // M = max(X)
  ir::NodeId sum = -1;  // sum(exp(X - M'))
  // The nodes between M and the sum's operand: exp, sub, and the reshapes and expands that
  // broadcast M back over the reduced axes (M'). They are never evaluated on their own.
  std::vector<ir::NodeId> chain;
};

// The pair whose sum is `sum`, when `sum` is sum(exp(sub(X, M'))) with M' = M under reshapes
// and expands and M = max(X) over the same axes, all of floating dtypes, and every node of it
// (M, exp, sub, the views) is one `computed` says is evaluated where the sum is; else a pair
// whose max is -1.
OnlinePair online_pair(const ir::Graph& g, ir::NodeId sum,
                       const std::function<bool(ir::NodeId)>& computed);

}  // namespace fusejit::fusion
