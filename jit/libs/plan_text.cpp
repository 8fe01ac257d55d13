// jit/plan_text: see plan_text.h.
#include "jit/libs/plan_text.h"

#include <fmt/format.h>

#include "fusion/plan_print.h"
#include "jit/libs/gemm_call.h"

namespace fusejit::jit {

namespace {

// How the executor will issue each gemm region (jit/libs/gemm_call.h).
std::string library_calls_text(const fusion::Plan& plan, bool allow_tf32) {
  std::string out;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    if (plan.regions[i].kind != fusion::RegionKind::gemm) continue;
    const GemmCall call = describe_gemm_call(plan, plan.regions[i], allow_tf32);
    const GemmProblem& p = call.problem;
    out += fmt::format("  region {}: {}", i, gemm_call_label(call));
    if (p.batch > 1) {
      out += fmt::format(", batch strides A {} B {} D {}", p.stride_a, p.stride_b, p.stride_d);
    }
    out += "\n";
  }
  return out.empty() ? out : "\nlibrary calls:\n" + out;
}

}  // namespace

std::string plan_text(const fusion::Plan& plan, bool allow_tf32) {
  return fusion::plan_to_text(plan) + library_calls_text(plan, allow_tf32);
}

}  // namespace fusejit::jit
