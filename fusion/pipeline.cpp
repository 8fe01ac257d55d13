// fusion/pipeline: see pipeline.h.
#include "fusion/pipeline.h"

#include <utility>

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
  return partition(optimized,
                   PartitionOptions{.fusion = options.fusion,
                                    .epilogue = options.epilogue,
                                    .recompute = options.recompute});
}

}  // namespace fusejit::fusion
