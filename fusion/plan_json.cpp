// fusion/plan_json: see plan_json.h.
#include "fusion/plan_json.h"

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusion/attention.h"
#include "ir/graph.h"
#include "ir/op.h"

namespace fusejit::fusion {

namespace {

using Json = nlohmann::ordered_json;

Json json_id(NodeId id) { return id < 0 ? Json(nullptr) : Json(fmt::format("%{}", id)); }

Json json_ids(const std::vector<NodeId>& ids) {
  Json out = Json::array();
  for (NodeId id : ids) out.push_back(json_id(id));
  return out;
}

// JSON has no NaN or infinity: null. A whole number is written as an integer ("1", not "1.0"),
// any other value as the shortest decimal that reads back as the same double.
Json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  const bool whole = v == std::trunc(v) && std::fabs(v) < 0x1p53 && !(v == 0 && std::signbit(v));
  return whole ? Json(static_cast<int64_t>(v)) : Json(v);
}

Json json_epilogue(const GemmEpilogue& e) {
  return Json{{"bias", json_id(e.bias)},
              {"activation", activation_name(e.activation)},
              {"alpha", json_number(e.alpha)},
              {"beta", json_number(e.beta)},
              {"residual", json_id(e.residual)},
              {"transpose_a", e.transpose_a},
              {"transpose_b", e.transpose_b},
              {"batch_a", e.batch_a},
              {"batch_b", e.batch_b},
              {"int8_b", e.int8_b},
              {"scale", json_id(e.scale)},
              {"refusals", e.refusals}};
}

Json json_attention(const AttentionRegion& a) {
  return Json{
      {"q", json_id(a.q)},
      {"k", json_id(a.k)},
      {"v", json_id(a.v)},
      {"output", json_id(a.output)},
      {"written", json_id(a.written < 0 ? a.output : a.written)},
      {"scale", json_number(a.scale)},
      {"mask", attention_mask_name(a.mask)},
      {"mask_node", json_id(a.mask_node)},
      {"mask_scale", json_number(a.mask_scale)},
      {"fill", std::isinf(a.fill) ? Json(a.fill < 0 ? "-inf" : "inf") : json_number(a.fill)}};
}

Json json_region(const Plan& plan, const Region& r) {
  Json ops = Json::array();
  for (NodeId id : r.nodes) {
    const ir::Node& n = plan.graph.node(id);
    if (n.op != ir::Op::input && n.op != ir::Op::constant) ops.push_back(ir::op_name(n.op));
  }
  Json out{{"kind", region_kind_name(r.kind)},
           {"ops", std::move(ops)},
           {"inputs", json_ids(r.inputs)},
           {"outputs", json_ids(r.outputs)},
           {"shape", r.shape}};
  // Each input's and output's dtype and shape ("bf16[2,50,3,64]"), by id: what the region
  // reads and writes, without the trace (whose ids the passes may have renumbered).
  Json types = Json::object();
  for (const std::vector<NodeId>* ids : {&r.inputs, &r.outputs}) {
    for (NodeId id : *ids) types[fmt::format("%{}", id)] = ir::type_str(plan.graph.node(id));
  }
  out["types"] = std::move(types);
  if (r.kind == RegionKind::reduction || r.kind == RegionKind::normalization) {
    out["reduce_axes"] = r.reduce_axes;
  }
  if (r.kind == RegionKind::normalization) {
    Json welford = Json::array();
    for (const WelfordPair& p : r.welford) {
      welford.push_back({{"mean", json_id(p.mean)}, {"variance", json_id(p.variance)}});
    }
    out["welford"] = std::move(welford);
  }
  if (r.kind == RegionKind::gemm) out["epilogue"] = json_epilogue(r.epilogue);
  if (r.kind == RegionKind::attention) out["attention"] = json_attention(r.attention);
  return out;
}

}  // namespace

Json plan_json(const Plan& plan) {
  Json regions = Json::array();
  for (const Region& r : plan.regions) regions.push_back(json_region(plan, r));
  Json decisions = Json::array();
  for (const Decision& d : plan.decisions) {
    decisions.push_back({{"producer", json_id(d.producer)},
                         {"consumer", json_id(d.consumer)},
                         {"fused", d.fused},
                         {"reason", d.reason}});
  }
  return Json{{"kernels", plan.kernel_count()},
              {"library_calls", plan.library_call_count()},
              {"regions", std::move(regions)},
              {"decisions", std::move(decisions)}};
}

std::string json_line(const Json& doc) {
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace fusejit::fusion
