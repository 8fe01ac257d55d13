// fusion/partition: cuts an optimized graph into regions (Graph -> Plan), following the
// playbook in docs/design.md, and records why each producer/consumer pair was fused or cut.
#pragma once

#include <cstdint>

#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion {

struct PartitionOptions {
  bool fusion = true;    // false: every non-view op in its own region (for bisecting)
  bool epilogue = true;  // false: nothing folds into cuBLASLt epilogues
  // false: no elementwise value is recomputed in the regions that read it (recompute.h)
  bool recompute = true;
  // Recompute trials run at once (each partitions the whole graph on a thread of its own); 0:
  // one per hardware thread, at most 8. Any count gives the same plan.
  int recompute_threads = 0;
  // true: attention written from primitives (fusion/attention.h) that the fused kernel takes
  // becomes one attention region (plan.h); the rest of the graph is cut as usual around it.
  bool attention = false;
  // true: independent pointwise siblings of different shapes (neither reads the other) may
  // become one kernel with a sweep per element count. Off for symbolic graphs: a dynamic kernel
  // sweeps multiples of one outer extent, which outputs of unrelated shapes need not be.
  bool sweeps = true;
};

// Limits on one generated kernel, which the partitioner cuts regions to respect (the cut's
// decision names the limit):
//
// Parameters. A kernel takes one 8-byte pointer per region input and output, and a dynamic
// kernel one `long long fj_outer` more (templates/kernel.h); CUDA allows 32,764 bytes of them
// (4,096 before CUDA 12.1 and Volta). Regions grow only while 8 * (inputs + outputs + 1) stays
// within kMaxKernelParamBytes: an eighth of the hard limit, and within the older one, so that a
// kernel is launchable everywhere and the parameter block stays cheap to copy at each launch.
// Only a single node can exceed it (a concat of hundreds of operands); past
// kHardKernelParamBytes, partition throws fusejit::UsageError naming the node.
inline constexpr int64_t kMaxKernelParamBytes = 4096;
inline constexpr int64_t kHardKernelParamBytes = 32764;
// Size. NVRTC's compile time grows faster than linearly with a kernel's length (measured with
// `fusejit warm` on chains of exp: 250 ops 0.9 s, 500 ops 2.4 s, 1,000 ops 16 s of CPU; sin and
// cos cost some 25 times an exp each, pow a dozen). A region's weight is its compute nodes,
// kCostlyOpWeight for each op the op table marks kCostly, 1 for the others; regions grow only
// while it stays within kMaxRegionWeight, which keeps a kernel's compile to about a second.
// A concat weighs one per operand: each element of it evaluates every operand and selects one.
// simplify splits a concat of more than kMaxConcatOperands into a concat of concats, so that no
// single node outweighs a region and the partitioner can cut between them.
inline constexpr int64_t kMaxRegionWeight = 256;
inline constexpr int64_t kCostlyOpWeight = 16;
inline constexpr size_t kMaxConcatOperands = 64;

// Regions are in a valid execution order; plan.h states what each kind guarantees. Nodes no
// output needs are in no region.
Plan partition(const ir::Graph& g, const PartitionOptions& options = {});

}  // namespace fusejit::fusion
