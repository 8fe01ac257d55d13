// fusion/plan_print: see plan_print.h.
#include "fusion/plan_print.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusion/attention.h"
#include "ir/shape.h"
#include "ir/text.h"

namespace fusejit::fusion {

namespace {

using ir::Node;

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += ch;
    }
  }
  out += '"';
  return out;
}

std::string json_id(NodeId id) { return id < 0 ? "null" : json_string(fmt::format("%{}", id)); }

// The shortest text that reads back as the same double; JSON has no NaN or infinity: null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

template <class T, class F>
std::string json_list(const std::vector<T>& items, F item) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ",";
    out += item(items[i]);
  }
  return out + "]";
}

std::string json_ints(const std::vector<int64_t>& v) {
  return json_list(v, [](int64_t x) { return std::to_string(x); });
}

std::string json_ids(const std::vector<NodeId>& v) { return json_list(v, json_id); }

bool listed_op(const Node& n) { return n.op != ir::Op::input && n.op != ir::Op::constant; }

std::string json_epilogue(const GemmEpilogue& e) {
  return fmt::format(
      "{{\"bias\":{},\"activation\":{},\"alpha\":{},\"beta\":{},\"residual\":{},"
      "\"transpose_a\":{},\"transpose_b\":{},\"batch_a\":{},\"batch_b\":{},\"refusals\":{}}}",
      json_id(e.bias), json_string(activation_name(e.activation)), json_number(e.alpha),
      json_number(e.beta), json_id(e.residual), e.transpose_a, e.transpose_b,
      json_ints(e.batch_a), json_ints(e.batch_b),
      json_list(e.refusals, [](const std::string& s) { return json_string(s); }));
}

std::string json_attention(const AttentionRegion& a) {
  return fmt::format(
      "{{\"q\":{},\"k\":{},\"v\":{},\"scale\":{},\"mask\":{},\"mask_node\":{},"
      "\"mask_scale\":{},\"fill\":{}}}",
      json_id(a.q), json_id(a.k), json_id(a.v), json_number(a.scale),
      json_string(attention_mask_name(a.mask)), json_id(a.mask_node), json_number(a.mask_scale),
      std::isinf(a.fill) ? json_string(a.fill < 0 ? "-inf" : "inf") : json_number(a.fill));
}

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

std::string json_region(const Plan& plan, const Region& r) {
  std::vector<std::string> ops;
  for (NodeId id : r.nodes) {
    const Node& n = plan.graph.node(id);
    if (listed_op(n)) ops.emplace_back(ir::op_name(n.op));
  }
  std::string out =
      fmt::format("{{\"kind\":{},\"ops\":{},\"inputs\":{},\"outputs\":{},\"shape\":{}",
                  json_string(region_kind_name(r.kind)),
                  json_list(ops, [](const std::string& s) { return json_string(s); }),
                  json_ids(r.inputs), json_ids(r.outputs), json_ints(r.shape));
  if (r.kind == RegionKind::reduction || r.kind == RegionKind::normalization) {
    out += fmt::format(",\"reduce_axes\":{}", json_ints(r.reduce_axes));
  }
  if (r.kind == RegionKind::normalization) {
    out += fmt::format(",\"welford\":{}", json_list(r.welford, [](const WelfordPair& p) {
                         return fmt::format("{{\"mean\":{},\"variance\":{}}}", json_id(p.mean),
                                            json_id(p.variance));
                       }));
  }
  if (r.kind == RegionKind::gemm) out += fmt::format(",\"epilogue\":{}", json_epilogue(r.epilogue));
  if (r.kind == RegionKind::attention) {
    out += fmt::format(",\"attention\":{}", json_attention(r.attention));
  }
  return out + "}";
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
  std::string out =
      fmt::format("{{\"kernels\":{},\"library_calls\":{},\"regions\":", plan.kernel_count(),
                  plan.library_call_count());
  out += json_list(plan.regions, [&](const Region& r) { return json_region(plan, r); });
  out += ",\"decisions\":";
  out += json_list(plan.decisions, [](const Decision& d) {
    return fmt::format("{{\"producer\":{},\"consumer\":{},\"fused\":{},\"reason\":{}}}",
                       json_id(d.producer), json_id(d.consumer), d.fused, json_string(d.reason));
  });
  return out + "}\n";
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
