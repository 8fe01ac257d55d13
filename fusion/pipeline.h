// fusion/pipeline: the straight line from a recorded trace to a Plan: the graph passes, then the
// partitioner, with a hook after each pass (what FUSEJIT_DUMP=ir writes).
#pragma once

#include <functional>
#include <string_view>

#include "fusion/partition.h"
#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion {

// Called after each pass with the pass's name and its result; may be empty.
using PassHook = std::function<void(std::string_view pass, const ir::Graph& g)>;

struct PassOptions {
  bool passes = true;  // false (FUSEJIT_DISABLE=passes): the graph is left as recorded
  PassHook after_pass;
};

struct PlanOptions {
  bool passes = true;    // FUSEJIT_DISABLE=passes turns it off
  bool fusion = true;    // FUSEJIT_DISABLE=fusion: every non-view op in its own region
  bool epilogue = true;  // FUSEJIT_DISABLE=epilogue: nothing folds into cuBLASLt epilogues
  bool recompute = true;  // false: no elementwise value is recomputed where it is read
  bool attention = true;  // FUSEJIT_ATTENTION=0 turns it off: attention patterns become one region
  bool sweeps = true;     // PartitionOptions::sweeps (off for symbolic graphs)
  PassHook after_pass;
};

// Runs, in order: eliminate_dead_code, eliminate_common_subexpressions, fold_constants,
// simplify, then eliminate_common_subexpressions and eliminate_dead_code again (folding and
// simplifying expose new duplicates and leave dead operands).
ir::Graph optimize(ir::Graph g, const PassOptions& options = {});

// optimize, then partition.
Plan make_plan(const ir::Graph& g, const PlanOptions& options = {});

}  // namespace fusejit::fusion
