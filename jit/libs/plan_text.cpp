// jit/plan_text: see plan_text.h.
#include "jit/libs/plan_text.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "fusion/plan_print.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/prologue.h"

namespace fusejit::jit {

namespace {

// With the gemv option, the skinny-GEMM kernel that runs a gemm region (its parameters, with
// `consumer` evaluated at its store where not null), or why cuBLASLt still does; "" when it does
// not say.
std::string gemv_text(const fusion::Plan& plan, const GemmCall& call, GemvMode gemv, bool ring,
                      const fusion::Region* consumer) {
  std::string why;
  if (auto spec = gemv_spec(call, gemv, &why)) {
    spec->ring = ring;
    const templates::GemvEpilogue epilogue{&plan.graph, consumer, {}};
    if (consumer) spec->epilogue = &epilogue;
    return fmt::format(", run instead by the generated kernel {}",
                       templates::params_text("gemv", templates::gemv_params(*spec, {})));
  }
  // Only FUSEJIT_GEMV=1 says why the kernel does not run a GEMM (auto leaves most to cuBLASLt).
  return gemv == GemvMode::on ? fmt::format(", not the gemv kernel ({})", why) : "";
}

// The A of each gemm region that computes it as a prologue: absorb_prologues of a copy.
std::set<ir::NodeId> prologue_operands(const fusion::Plan& plan, bool allow_tf32, GemvMode gemv,
                                       bool prologue) {
  std::set<ir::NodeId> out;
  if (!prologue) return out;
  fusion::Plan copy = plan;
  templates::CodegenOptions codegen;
  codegen.gemv = gemv;
  codegen.gemv_prologue = true;
  for (const auto& [i, producer] : absorb_prologues(copy, codegen, allow_tf32))
    out.insert(producer.outputs.at(0));
  return out;
}

// The region (its index in `plan`) whose work each gemm region does at its store, by the gemm
// region's index: absorb_epilogues of a copy.
std::map<size_t, size_t> epilogue_regions(const fusion::Plan& plan, bool allow_tf32, GemvMode gemv,
                                          bool epilogue) {
  std::map<size_t, size_t> out;
  if (!epilogue) return out;
  fusion::Plan copy = plan;
  templates::CodegenOptions codegen;
  codegen.gemv = gemv;
  codegen.gemv_epilogue = true;
  for (const auto& [i, consumer] : absorb_epilogues(copy, codegen, allow_tf32)) {
    for (size_t j = 0; j < plan.regions.size(); ++j) {  // (consumers follow their GEMM: i stays)
      if (plan.regions[j].outputs == consumer.outputs) out.emplace(i, j);
    }
  }
  return out;
}

// How the executor will issue each gemm region (jit/libs/gemm_call.h).
std::string library_calls_text(const fusion::Plan& plan, bool allow_tf32, GemvMode gemv,
                               bool prologue, bool ring, bool epilogue) {
  const std::set<ir::NodeId> computed = prologue_operands(plan, allow_tf32, gemv, prologue);
  const std::map<size_t, size_t> stored = epilogue_regions(plan, allow_tf32, gemv, epilogue);
  std::string out;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    if (plan.regions[i].kind != fusion::RegionKind::gemm) continue;
    const GemmCall call = describe_gemm_call(plan, plan.regions[i], allow_tf32);
    const GemmProblem& p = call.problem;
    const auto j = stored.find(i);
    const fusion::Region* consumer = j == stored.end() ? nullptr : &plan.regions[j->second];
    out += fmt::format("  region {}: {}{}", i, gemm_call_label(call),
                       gemv_text(plan, call, gemv, ring, consumer));
    if (computed.count(call.a) != 0) {
      out += fmt::format(
          ", computing A (%{}) as region {} would, as it stages it (a prologue: "
          "region {} runs no kernel)",
          call.a, i - 1, i - 1);
    }
    if (consumer) {
      out += fmt::format(
          ", evaluating region {} at its store (an epilogue region: region {} runs no kernel, %{} "
          "is never written)",
          j->second, j->second, call.d);
    }
    if (p.batch > 1) {
      out += fmt::format(", batch strides A {} B {} D {}", p.stride_a, p.stride_b, p.stride_d);
    }
    out += "\n";
  }
  return out.empty() ? out : "\nlibrary calls:\n" + out;
}

}  // namespace

std::string plan_text(const fusion::Plan& plan, bool allow_tf32, GemvMode gemv, bool prologue,
                      bool ring, bool epilogue) {
  return fusion::plan_to_text(plan) +
         library_calls_text(plan, allow_tf32, gemv, prologue, ring, epilogue);
}

}  // namespace fusejit::jit
