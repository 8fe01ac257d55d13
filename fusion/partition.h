// fusion/partition: cuts an optimized graph into regions (Graph -> Plan), following the
// playbook in DESIGN.md, and records why each producer/consumer pair was fused or cut.
#pragma once

#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion {

struct PartitionOptions {
  bool fusion = true;    // false: every non-view op in its own region (for bisecting)
  bool epilogue = true;  // false: nothing folds into cuBLASLt epilogues
  // false: no elementwise value is recomputed in the regions that read it (recompute.h)
  bool recompute = true;
};

// Regions are in a valid execution order; plan.h states what each kind guarantees. Nodes no
// output needs are in no region.
Plan partition(const ir::Graph& g, const PartitionOptions& options = {});

}  // namespace fusejit::fusion
