// templates/attention_region: the kernel of an attention region (fusion/plan.h). The region's
// layout (fusion::attention_layout: the buffers under q, k, v and the mask, with the strides
// that reach them) becomes the spec of the generated flash-attention kernel
// (templates/schedulers/attention.h); its parameters are the region's inputs, then its output.
#pragma once

#include "fusion/plan.h"
#include "templates/kernel.h"

namespace fusejit::templates {

// Throws fusejit::InternalError when the region is not an attention region the kernel takes
// (the partitioner forms only those).
Kernel generate_attention_region(const ir::Graph& g, const fusion::Region& region,
                                 const CodegenOptions& options = {});

}  // namespace fusejit::templates
