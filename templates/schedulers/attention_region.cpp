// templates/attention_region: see attention_region.h.
#include "templates/schedulers/attention_region.h"

#include <string>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/attention.h"
#include "templates/schedulers/attention.h"

namespace fusejit::templates {

namespace {

AttentionView view_of(const fusion::AttentionView& v) {
  return AttentionView{.strides = v.strides, .head_group = v.head_group};
}

AttentionMaskKind mask_kind(fusion::AttentionMask m) {
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
  throw InternalError("generate_attention_region: a computed mask reached code generation");
}

}  // namespace

Kernel generate_attention_region(const ir::Graph& g, const fusion::Region& region,
                                 const CodegenOptions& options) {
  if (region.kind != fusion::RegionKind::attention) {
    throw InternalError(fmt::format("generate_attention_region: a {} region",
                                    fusion::region_kind_name(region.kind)));
  }
  const fusion::AttentionRegion& a = region.attention;
  std::string why;
  const std::optional<fusion::AttentionLayout> layout = fusion::attention_layout(g, a, &why);
  if (!layout) {
    throw InternalError(fmt::format("generate_attention_region: the region of %{} was planned "
                                    "and its layout is now refused: {}",
                                    a.output, why));
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
  spec.k = view_of(layout->k);
  spec.v = view_of(layout->v);
  spec.scale = a.scale;
  spec.mask = mask_kind(a.mask);
  spec.fill = a.fill;
  spec.fill_where_true = a.fill_where_true;
  spec.mask_scale = a.mask_scale;
  if (layout->mask.buffer >= 0) {
    spec.mask_view = view_of(layout->mask);
    spec.mask_dtype = g.node(layout->mask.buffer).dtype;
  }
  const std::string refused = refuse_attention_kernel(spec);
  if (!refused.empty()) {
    throw InternalError(fmt::format("generate_attention_region: the kernel refuses the region "
                                    "of %{} that the partitioner formed: {}",
                                    a.output, refused));
  }
  Kernel k = generate_attention(spec, options.target);
  k.params = region.inputs;
  k.params.insert(k.params.end(), region.outputs.begin(), region.outputs.end());
  return k;
}

}  // namespace fusejit::templates
