// fusion/pipeline: see pipeline.h.
#include "fusion/pipeline.h"

#include <utility>

#include <fmt/format.h>

#include "fusion/attention.h"
#include "fusion/common_subexpressions.h"
#include "fusion/dead_code.h"
#include "fusion/fold_constants.h"
#include "fusion/simplify.h"

namespace fusejit::fusion {

ir::Graph optimize(ir::Graph g, const PassOptions& options) {
  if (!options.passes) return g;
  auto step = [&](std::string_view name, ir::Graph (*pass)(ir::Graph)) {
    g = pass(std::move(g));
    if (options.after_pass) options.after_pass(name, g);
  };
  step("eliminate_dead_code", eliminate_dead_code);
  step("eliminate_common_subexpressions", eliminate_common_subexpressions);
  step("fold_constants", fold_constants);
  step("simplify", simplify);
  step("eliminate_common_subexpressions", eliminate_common_subexpressions);
  step("eliminate_dead_code", eliminate_dead_code);
  return g;
}

Plan make_plan(const ir::Graph& g, const PlanOptions& options) {
  const ir::Graph optimized =
      optimize(g, PassOptions{.passes = options.passes, .after_pass = options.after_pass});
  Plan plan = partition(optimized, PartitionOptions{.fusion = options.fusion,
                                                    .epilogue = options.epilogue,
                                                    .recompute = options.recompute,
                                                    .attention = options.attention,
                                                    .sweeps = options.sweeps});
  // With fused attention off, attention written from primitives is still recognized and said
  // in the decisions (the partition says what it fused or refused when it is on).
  if (!options.attention) {
    for (const AttentionPattern& a : find_attention(plan.graph)) {
      plan.decisions.push_back(Decision{
          .producer = a.scores,
          .consumer = a.output,
          .fused = false,
          .reason = fmt::format("attention {}; it runs as planned above (GEMM, normalization, "
                                "GEMM): fused attention is off (FUSEJIT_ATTENTION=0); on, it "
                                "is one kernel",
                                a.describe(plan.graph))});
    }
  }
  return plan;
}

}  // namespace fusejit::fusion
