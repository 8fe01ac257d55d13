// fusion/recompute: which elementwise values the partitioner evaluates again in each region that
// reads them, instead of having one region write them to memory for the others to read back.
// Internal to the partitioner (partition.cpp runs the search; this file holds the rule).
//
// A value a region writes only for other regions costs a full write and a read per reader; its
// readers can often compute it themselves from what they read anyway (a cast of their own input,
// exp(x - max) from x and the [1,N] statistics), which also lets the regions around it fuse
// (column softmax: the cast and the exponentials stop being cut points). The rule:
//   - candidates: elementwise values a kernel region writes that are no graph output, are read by
//     no matmul (a matmul's operands stay library-call buffers), read of a matmul only the
//     result its region writes (not what its epilogue evaluates without writing), and are read
//     whole: every reader, through reshapes, permutes and slices, is elementwise of the same
//     element count or a reduction of them (no expand: a broadcast value would be recomputed
//     per element of its readers), except that a cast may also be read by elementwise nodes of
//     more elements (one conversion an element of theirs: the 4 rounds of a sampling search
//     read the f32 cast of a bf16 row broadcast against 256 thresholds). A candidate is tried
//     alone and with the candidates of its own region it is computed from (its chain: exp and
//     sub together);
//   - bounds: a recomputed value is evaluated from what is read from memory with at most
//     kMaxRecomputedOps elementwise ops, none of them costly (ir/op.h kCostly: pow, sin, cos,
//     gelu); reductions and matmuls are never recomputed;
//   - acceptance: the partition with the candidate recomputed must be cheaper (plan_cost): no
//     more kernels and no more bytes moved, and fewer of one. The search takes the first such
//     candidate, partitions again, and repeats until none is cheaper.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fusion/dataflow.h"
#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion::detail {

inline constexpr int kMaxRecomputedOps = 8;

// What a partition costs: the kernels it launches, and the bytes its regions move (each region
// reads each input once and writes each output once).
struct PlanCost {
  int kernels = 0;
  int64_t bytes = 0;
};
PlanCost plan_cost(const ir::Graph& g, const std::vector<Region>& regions);
// a is cheaper than b: no more kernels, no more bytes, and fewer of one.
bool cheaper(const PlanCost& a, const PlanCost& b);

// The sets of values to try recomputing next, given the partition `regions` of `df`: per
// candidate, its chain and then the candidate alone; each set sorted.
std::vector<std::vector<NodeId>> recompute_candidates(const Dataflow& df,
                                                      const std::vector<Region>& regions);

// Whether the values marked in `recomputed` stay within the bounds above.
bool within_budget(const ir::Graph& g, const std::vector<bool>& recomputed);

// The decisions of a partition with recomputed values: one per (value, region that evaluates
// it), "recompute %4 in region 1: ...". `steps` holds, per recomputed value, what recomputing
// it did to the plan (appended to its reasons).
std::vector<Decision> recompute_decisions(const Dataflow& df, const std::vector<Region>& regions,
                                          const std::map<NodeId, std::string>& steps);

}  // namespace fusejit::fusion::detail
