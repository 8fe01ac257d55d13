// fusion/welford: one-pass row statistics. A variance V = sum((X - M)^2) or mean((X - M)^2),
// with M = mean(X) over the same axes, needs M before its own reduction can start: two
// dependent reductions, and one more pass over X. Accumulating (count, mean, M2) together
// instead (Welford's update per element, Chan's parallel update between partial results;
// templates/device/fj_reduce.cuh, fj_welford) gives M and V from one reduction, and stays
// accurate when the mean is large against the spread (the naive sum of squares minus the
// square of the sum does not). layer_norm and var record exactly this pattern (jit/api/ops.cpp);
// hand-written ones match the same way. The partitioner marks such pairs in the normalization
// regions that compute them (Region::welford); the templates accumulate them in one pass.
#pragma once

#include <functional>
#include <vector>

#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion {

// The pair whose variance is `variance`, when `variance` is sum or mean of mul(D, D) over the
// axes A, with D = sub(X, M') or sub(M', X), M' = M under reshapes and then expands that only
// broadcast it back over A (each element of D reads the mean of its own row), M = mean(X) over
// A, every one of them f32 and computed where `computed` says (in the region); else a pair
// whose mean is -1.
WelfordPair welford_pair(const ir::Graph& g, ir::NodeId variance,
                         const std::function<bool(ir::NodeId)>& computed);

// The pairs of a normalization region (none for other kinds), by ascending variance id; a
// mean pairs with at most one variance (the first).
std::vector<WelfordPair> welford_pairs(const ir::Graph& g, const Region& region);

}  // namespace fusejit::fusion
