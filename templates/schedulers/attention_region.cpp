// templates/schedulers/attention_region: the registry's attention scheduler (registry.h). It
// takes attention regions (fusion/plan.h) and only those: the region's layout
// (fusion::attention_layout: the buffers under q, k, v and the mask, with the strides that
// reach them) becomes the spec of the generated flash-attention kernel (attention.h), whose
// parameters attention.cpp decides (AttentionParams) and whose kernel attention_kernel.cpp
// builds; generate() assembles it as every other region's kernel (its parameters are the
// region's inputs, then its output). The partitioner forms only regions whose kernel it takes,
// so a refusal of an attention region is a bug, which generate() reports naming the reason.
// There is no dynamic attention kernel: one is generated for each size.
#include <optional>
#include <string>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/attention.h"
#include "templates/schedulers/attention.h"
#include "templates/schedulers/attention_kernel.h"
#include "templates/schedulers/registry.h"

namespace fusejit::templates {

namespace {

AttentionView view_of(const fusion::AttentionView& v) {
  return AttentionView{.strides = v.strides, .head_group = v.head_group, .offset = v.offset};
}

std::optional<AttentionMaskKind> mask_kind(fusion::AttentionMask m) {
  switch (m) {
    case fusion::AttentionMask::none:
      return AttentionMaskKind::none;
    case fusion::AttentionMask::causal:
      return AttentionMaskKind::causal;
    case fusion::AttentionMask::additive:
      return AttentionMaskKind::additive;
    case fusion::AttentionMask::boolean:
      return AttentionMaskKind::boolean;
    case fusion::AttentionMask::computed:
      break;
  }
  return std::nullopt;
}

// The kernel's spec for an attention region, or nothing and why (`why`).
std::optional<AttentionSpec> region_spec(const ir::Graph& g, const fusion::Region& region,
                                         std::string& why) {
  const fusion::AttentionRegion& a = region.attention;
  const std::optional<fusion::AttentionLayout> layout = fusion::attention_layout(g, a, &why);
  if (!layout) return std::nullopt;
  const std::optional<AttentionMaskKind> mask = mask_kind(a.mask);
  if (!mask) {
    why = "a computed mask (the kernel reads a mask from memory or computes a causal one)";
    return std::nullopt;
  }
  AttentionSpec spec;
  spec.dtype = g.node(a.q).dtype;
  spec.batch = layout->batch;
  spec.heads = layout->heads;
  spec.seq_q = layout->seq_q;
  spec.seq_kv = layout->seq_kv;
  spec.head_dim = layout->head_dim;
  spec.value_dim = layout->value_dim;
  spec.q = view_of(layout->q);
  if (!layout->out_views.empty()) spec.o = view_of(layout->o);
  spec.k = view_of(layout->k);
  spec.v = view_of(layout->v);
  spec.scale = a.scale;
  spec.mask = *mask;
  spec.fill = a.fill;
  spec.fill_where_true = a.fill_where_true;
  spec.mask_scale = a.mask_scale;
  if (layout->mask.buffer >= 0) {
    spec.mask_view = view_of(layout->mask);
    spec.mask_dtype = g.node(layout->mask.buffer).dtype;
  }
  why = refuse_attention_kernel(spec);
  if (!why.empty()) return std::nullopt;
  return fold_query_groups(spec);
}

// The spec of a region the scheduler takes (InternalError otherwise: the registry asked).
AttentionSpec taken_spec(const RegionInfo& info) {
  std::string why;
  std::optional<AttentionSpec> spec = region_spec(info.graph, info.region, why);
  if (!spec) throw InternalError("the attention scheduler asked for a region it refuses: " + why);
  return *spec;
}

class AttentionScheduler final : public Scheduler {
 public:
  std::string_view name() const override { return "attention"; }
  std::optional<std::string> refusal(const RegionInfo& info,
                                     const CodegenOptions& options) const override {
    if (info.region.kind != fusion::RegionKind::attention) return "not an attention region";
    std::string why;
    if (!region_spec(info.graph, info.region, why)) {
      return fmt::format("the kernel refuses the region of %{}: {}", info.region.attention.output,
                         why);
    }
    why = refuse_attention_target(options.target);
    if (!why.empty()) return why;
    return std::nullopt;
  }
  ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const override {
    if (info.dynamic()) throw NotSizeIndependent("an attention kernel is generated for each size");
    return attention_params(taken_spec(info), options.target);
  }
  KernelBody build(const RegionInfo& info, const CodegenOptions&,
                   const ScheduleParams& params) const override {
    return attention_body(taken_spec(info), std::get<AttentionParams>(params));
  }
};

}  // namespace

const Scheduler& attention_scheduler() {
  static const AttentionScheduler s;
  return s;
}

}  // namespace fusejit::templates
