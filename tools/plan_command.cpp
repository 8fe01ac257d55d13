// fusejit plan [--json] TRACE: the fusion plan of a trace, with no GPU.
#include <cstdio>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusejit/options.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/text.h"
#include "jit/gemm_call.h"
#include "jit/runtime.h"
#include "tools/commands.h"

namespace fusejit::tools {

namespace {

// How the executor will issue each gemm region (jit/gemm_call.h): the cuBLASLt calls, and for a
// batched one the batch strides in elements (0: the operand is broadcast).
std::string library_calls_text(const fusion::Plan& plan, bool allow_tf32) {
  std::string out;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    if (plan.regions[i].kind != fusion::RegionKind::gemm) continue;
    const jit::GemmCall call = jit::describe_gemm_call(plan, plan.regions[i], allow_tf32);
    const jit::GemmProblem& p = call.problem;
    out += fmt::format("  region {}: {}", i, jit::gemm_call_label(call));
    if (p.batch > 1) {
      out += fmt::format(", batch strides A {} B {} D {}", p.stride_a, p.stride_b, p.stride_d);
    }
    out += "\n";
  }
  return out.empty() ? out : "\nlibrary calls:\n" + out;
}

}  // namespace

int plan_command(const Args& args) {
  bool json = false;
  std::string path;
  for (const std::string& a : args) {
    if (a == "--json") json = true;
    else if (!a.empty() && a[0] == '-') throw UsageError("plan: unknown option " + a + "; usage: fusejit plan [--json] TRACE");
    else if (path.empty()) path = a;
    else throw UsageError("plan: one trace at a time; usage: fusejit plan [--json] TRACE");
  }
  if (path.empty()) throw UsageError("plan: no trace given; usage: fusejit plan [--json] TRACE");
  const Options options = options_from_env();
  const fusion::Plan plan = fusion::make_plan(ir::parse_file(path), jit::plan_options(options));
  std::string text = json ? fusion::plan_to_json(plan) : fusion::plan_to_text(plan);
  if (!json) text += library_calls_text(plan, options.allow_tf32);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  return 0;
}

}  // namespace fusejit::tools
