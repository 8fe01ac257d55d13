// fusion/plan_print: see plan_print.h.
#include "fusion/plan_print.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusion/attention.h"
#include "fusion/plan_json.h"
#include "ir/shape.h"
#include "ir/text.h"

namespace fusejit::fusion {

namespace {

std::string attention_text(const AttentionRegion& a) {
  std::string mask = a.mask == AttentionMask::none ? "" : fmt::format(", {}", attention_mask_name(a.mask));
  if (a.mask_node >= 0 && a.mask != AttentionMask::causal) mask += fmt::format(" %{}", a.mask_node);
  if (a.mask == AttentionMask::additive && a.mask_scale != 1.0) mask += fmt::format(" * {}", a.mask_scale);
  if (a.mask == AttentionMask::causal || a.mask == AttentionMask::boolean) {
    mask += fmt::format(" (fill {})", a.fill);
  }
  return fmt::format("softmax(%{} %{}{} * {}{}) %{}", a.q, a.k, a.k_transposed ? "" : "ᵀ", a.scale,
                     mask, a.v);
}

std::string ids(const std::vector<NodeId>& v) {
  if (v.empty()) return "-";
  std::string out;
  for (NodeId id : v) out += fmt::format("{}%{}", out.empty() ? "" : " ", id);
  return out;
}

std::string epilogue_text(const GemmEpilogue& e) {
  std::vector<std::string> parts;
  if (e.transpose_a) parts.emplace_back("transpose_a");
  if (e.transpose_b) parts.emplace_back("transpose_b");
  const bool broadcast = e.batch_a != e.batch_b ||
                         std::count(e.batch_a.begin(), e.batch_a.end(), 1) > 0;
  if (broadcast) {
    parts.push_back(fmt::format("batch A{} B{}", ir::shape_str(e.batch_a),
                                ir::shape_str(e.batch_b)));
  }
  if (e.int8_b) parts.emplace_back("int8 B");
  if (e.scale >= 0) parts.push_back(fmt::format("scale %{}", e.scale));
  if (e.bias >= 0) parts.push_back(fmt::format("bias %{}", e.bias));
  if (e.activation != GemmEpilogue::Activation::none) {
    parts.emplace_back(activation_name(e.activation));
  }
  if (e.alpha != 1.0) parts.push_back(fmt::format("alpha {}", e.alpha));
  if (e.residual >= 0) parts.push_back(fmt::format("residual %{} beta {}", e.residual, e.beta));
  if (parts.empty()) return "none";
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string plan_to_json(const Plan& plan) {
  return json_line(plan_json(plan)) + "\n";
}

std::string plan_to_text(const Plan& plan) {
  const int kernels = plan.kernel_count(), calls = plan.library_call_count();
  std::string out = fmt::format("plan: {} kernel{}, {} library call{}\n", kernels,
                                kernels == 1 ? "" : "s", calls, calls == 1 ? "" : "s");
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const Region& r = plan.regions[i];
    out += fmt::format("\nregion {}: {} {}", i, region_kind_name(r.kind), ir::shape_str(r.shape));
    if (!r.reduce_axes.empty())
      out += fmt::format(" reduce axes [{}]", fmt::join(r.reduce_axes, ","));
    out += r.kind == RegionKind::gemm ? " (library call)\n" : " (kernel)\n";
    out += fmt::format("  inputs:  {}\n  outputs: {}\n", ids(r.inputs), ids(r.outputs));
    if (r.kind == RegionKind::gemm)
      out += fmt::format("  epilogue: {}\n", epilogue_text(r.epilogue));
    if (r.kind == RegionKind::attention)
      out += fmt::format("  attention: {}\n", attention_text(r.attention));
    for (const WelfordPair& p : r.welford) {
      out += fmt::format("  one-pass statistics: mean %{}, variance %{} (Welford)\n", p.mean,
                         p.variance);
    }
    for (const std::string& refusal : r.epilogue.refusals) out += "  not folded: " + refusal + "\n";
    for (NodeId id : r.nodes) out += "    " + ir::node_line(plan.graph, id) + "\n";
  }
  if (!plan.decisions.empty()) out += "\ndecisions:\n" + decisions_to_text(plan);
  return out;
}

std::string decisions_to_text(const Plan& plan) {
  std::string out;
  for (const Decision& d : plan.decisions) {
    const std::string producer = d.producer < 0 ? "-" : fmt::format("%{}", d.producer);
    const std::string consumer = d.consumer < 0 ? "-" : fmt::format("%{}", d.consumer);
    out += fmt::format("  {:5} {} -> {}: {}\n", d.fused ? "fused" : "cut", producer, consumer,
                       d.reason);
  }
  return out;
}

}  // namespace fusejit::fusion
