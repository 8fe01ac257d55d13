// fusejit plan [--json] [--dim NAME=VALUE]... TRACE: the fusion plan of a trace, with no GPU; for
// a trace with dynamic dims, the plan at those sizes (default: the examples) and which regions
// take the sizes at run time.
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fusejit/options.h"
#include "fusion/pipeline.h"
#include "fusion/plan_json.h"
#include "ir/text.h"
#include "jit/libs/plan_text.h"
#include "jit/runtime/dynamic.h"
#include "jit/runtime/runtime.h"
#include "templates/schedulers/schedule_json.h"
#include "templates/target.h"
#include "tools/commands.h"

namespace fusejit::tools {

namespace {

// The dynamic section of the plan of a trace with dynamic dims: which regions take the sizes
// at run time (one kernel for all) and which are compiled per size.
std::string dynamic_text(const ir::SymbolicGraph& trace, const jit::DynamicPlan& dp,
                         const ir::Bindings& values) {
  std::string out = fmt::format("\ndynamic dims: {} (planned once for every size)\n",
                                tools::dims_text(trace, values));
  for (size_t i = 0; i < dp.plan.regions.size(); ++i) {
    const fusion::Region& r = dp.plan.regions[i];
    std::string what = r.kind == fusion::RegionKind::gemm ? "cuBLASLt call at each size"
                       : dp.kernels[i]                    ? "one kernel for every size"
                                                          : "compiled per size";
    if (r.kind != fusion::RegionKind::gemm && !dp.reasons[i].empty()) {
      what += " (" + dp.reasons[i] + ")";
    }
    std::string shape;
    for (int64_t d : r.shape) {
      if (!shape.empty()) shape += 'x';
      shape += ir::dim_str(d, trace.symbols);
    }
    out += fmt::format("  region {} ({}): {} over {}\n", i, fusion::region_kind_name(r.kind), what,
                       shape);
  }
  return out;
}

// The "dynamic" member of a trace with dynamic dims: each dim's name and value, and for each
// region whether it takes its sizes at run time.
nlohmann::ordered_json dynamic_json(const ir::SymbolicGraph& trace, const jit::DynamicPlan& dp,
                                    const ir::Bindings& values) {
  nlohmann::ordered_json dims = nlohmann::ordered_json::array();
  for (size_t k = 0; k < trace.symbols.size(); ++k) {
    dims.push_back({{"name", trace.symbols[k].name}, {"value", values[k]}});
  }
  nlohmann::ordered_json regions = nlohmann::ordered_json::array();
  for (const auto& kernel : dp.kernels) regions.push_back(kernel.has_value());
  return {{"dims", std::move(dims)}, {"regions", std::move(regions)}};
}

// Each kernel region's "schedule" (templates/schedulers/schedule_json.h): the scheduler that
// makes its kernel at these sizes, its parameters, and why the schedulers asked before it
// refused. Library calls have none.
void add_schedules(nlohmann::ordered_json& doc, const fusion::Plan& plan,
                   const templates::CodegenOptions& codegen) {
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const fusion::Region& r = plan.regions[i];
    if (r.kind == fusion::RegionKind::gemm) continue;
    doc["regions"][i]["schedule"] =
        templates::schedule_json(templates::schedule(plan.graph, r, codegen));
  }
}

struct PlanArgs {
  bool json = false;
  std::vector<std::string> dims;
  std::string path;
};

int plan(const PlanArgs& args) {
  const bool json = args.json;
  const std::string& path = args.path;
  const std::vector<std::string>& dims = args.dims;
  const Options options = options_from_env();
  const ir::SymbolicGraph trace = ir::parse_symbolic_file(path);
  const ir::Bindings values = dim_values(trace, dims);
  const templates::CodegenOptions codegen =
      jit::build_options(options,
                         templates::target_for_arch(options.arch.empty() ? "sm_90" : options.arch))
          .codegen;
  std::optional<jit::DynamicPlan> dp;
  if (!trace.symbols.empty()) dp = jit::plan_dynamic(trace, jit::plan_options(options), codegen);
  // The plan printed is the one a run at these sizes executes.
  const fusion::Plan plan =
      dp ? fusion::instantiate_plan(dp->plan, trace.symbols, values)
         : fusion::make_plan(trace.graph, jit::plan_options(options));
  std::string text;
  if (json) {
    nlohmann::ordered_json doc = fusion::plan_json(plan);
    add_schedules(doc, plan, codegen);
    if (dp) doc["dynamic"] = dynamic_json(trace, *dp, values);
    text = fusion::json_line(doc);
  } else {
    text = jit::plan_text(plan, options.allow_tf32, options.gemv, options.gemv_prologue,
                          options.gemv_ring, options.gemv_epilogue);
    if (dp) text += dynamic_text(trace, *dp, values);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& tool) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* app = tool.add_subcommand(
      "plan",
      "Print the fusion plan of a trace: regions, their ops, kernels and library calls, and why "
      "each cut was made (no GPU needed). For a trace with dynamic dims, the plan at the --dim "
      "sizes and which regions take the sizes at run time.");
  app->add_flag("--json", args->json,
                "one JSON object: kernels, library_calls, regions (kind, ops, inputs, outputs, "
                "epilogue, schedule: the scheduler and its parameters), and dynamic for a trace "
                "with dynamic dims");
  add_dim_option(*app, args->dims);
  app->add_option("TRACE", args->path, "the trace file")->type_name("FILE")->required();
  return {app, [args] { return plan(*args); }};
}

}  // namespace fusejit::tools
