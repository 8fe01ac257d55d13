// fusion/region_check: can a set of compute nodes be one generated kernel, and of which kind?
// This is where the invariants promised in plan.h are established. Internal to the partitioner.
#pragma once

#include <string>
#include <vector>

#include "fusion/dataflow.h"
#include "fusion/plan.h"

namespace fusejit::fusion::detail {

struct RegionVerdict {
  bool ok = false;
  RegionKind kind = RegionKind::pointwise;
  Shape shape;  // the iteration space (a pointwise region of several sweeps: its largest output's)
  std::vector<int64_t> reduce_axes;  // reduction, normalization
  // reduction over non-trailing axes: the sums of online softmax pairs (fusion/online_softmax.h)
  // whose exp(X - M) is broadcast back over the reduced axes, accumulated with M in one pass.
  std::vector<NodeId> online_sums;
  std::string reason;  // why not, when !ok
};

// Judges the region made of `members` (compute nodes, sorted ascending, no matmul) whose
// `outputs` (region_outputs of the members, sorted) are written to memory. A pointwise region's
// outputs share one shape unless `sweeps`: then outputs of other shapes are allowed too, each
// element count one sweep of the kernel (templates/schedulers/pointwise.cpp).
RegionVerdict check_region(const Dataflow& df, const std::vector<NodeId>& members,
                           const std::vector<NodeId>& outputs, bool sweeps = false);
// check_region for a region known to have no reduction: only its outputs matter.
RegionVerdict check_pointwise(const Dataflow& df, const std::vector<NodeId>& outputs,
                              bool sweeps = false);

// A normalization kernel runs one block per row; a few very long rows would leave the GPU idle
// (then the reduction and the broadcast back are separate kernels instead).
inline constexpr int64_t kLongRow = 65536;
inline constexpr int64_t kFewRows = 64;

}  // namespace fusejit::fusion::detail
