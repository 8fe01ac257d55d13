// jit/prologue: see prologue.h.
#include "jit/libs/prologue.h"

#include <algorithm>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "jit/libs/gemm_call.h"

namespace fusejit::jit {

namespace {

bool reads(const fusion::Region& r, ir::NodeId id) {
  return std::find(r.inputs.begin(), r.inputs.end(), id) != r.inputs.end();
}

// Why region j, which computes A, cannot be gemm region i's prologue, or "" when it can (`spec`:
// the skinny-GEMM kernel's for region i).
std::string refuse(const fusion::Plan& plan, size_t i, const GemmCall& call,
                   const templates::GemvSpec& spec) {
  const fusion::Region& producer = plan.regions[i - 1];
  const ir::NodeId a = call.a;
  if (call.b == a || call.bias == a || call.residual == a || call.scale == a)
    return fmt::format("%{} is also another operand", a);
  const auto& outs = plan.graph.outputs();
  if (std::find(outs.begin(), outs.end(), a) != outs.end())
    return fmt::format("%{} is a graph output", a);
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (k != i && reads(plan.regions[k], a)) return fmt::format("region {} reads %{} too", k, a);
  }
  return templates::refuse_prologue(spec, plan.graph, producer);
}

// Region i - 1 merged into region i (see absorb_prologues); returns the producer as it was.
fusion::Region merge(fusion::Plan& plan, size_t i) {
  fusion::Region producer = plan.regions[i - 1];
  fusion::Region& gemm = plan.regions[i];
  for (ir::NodeId id : producer.inputs) {
    if (!reads(gemm, id)) gemm.inputs.push_back(id);
  }
  std::vector<ir::NodeId> mine = gemm.nodes, theirs = producer.nodes, nodes;
  std::sort(mine.begin(), mine.end());  // node ids are in graph order
  std::sort(theirs.begin(), theirs.end());
  std::set_union(theirs.begin(), theirs.end(), mine.begin(), mine.end(), std::back_inserter(nodes));
  gemm.nodes = std::move(nodes);
  plan.regions.erase(plan.regions.begin() + static_cast<std::ptrdiff_t>(i - 1));
  return producer;
}

}  // namespace

std::map<size_t, fusion::Region> absorb_prologues(fusion::Plan& plan,
                                                  const templates::CodegenOptions& codegen,
                                                  bool allow_tf32) {
  std::map<size_t, fusion::Region> producers;
  if (!codegen.gemv_prologue) return producers;
  size_t i = 1;
  while (i < plan.regions.size()) {
    const fusion::Region& r = plan.regions[i];
    const fusion::Region& before = plan.regions[i - 1];
    if (r.kind != fusion::RegionKind::gemm) {
      ++i;
      continue;
    }
    const GemmCall call = describe_gemm_call(plan, r, allow_tf32);
    const auto spec = gemv_spec(call, codegen.gemv);
    if (!spec || before.outputs.empty() ||
        std::find(before.outputs.begin(), before.outputs.end(), call.a) == before.outputs.end()) {
      ++i;
      continue;
    }
    if (const std::string why = refuse(plan, i, call, *spec); !why.empty()) {
      plan.decisions.push_back(
          {call.a, call.d, false,
           fmt::format("the {} region computing %{} stays a kernel of its own before the gemv "
                       "kernel computing %{}: {}",
                       fusion::region_kind_name(before.kind), call.a, call.d, why)});
      ++i;
      continue;
    }
    plan.decisions.push_back(
        {call.a, call.d, true,
         fmt::format("the {} region computing %{} runs in the gemv kernel computing %{}, as it "
                     "stages A (a prologue): %{} is never written",
                     fusion::region_kind_name(before.kind), call.a, call.d, call.a)});
    producers.emplace(i - 1, merge(plan, i));
  }
  return producers;
}

}  // namespace fusejit::jit
