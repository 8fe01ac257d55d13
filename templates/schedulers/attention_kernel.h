// templates/schedulers/attention_kernel: what the pieces of the attention kernel share (internal
// to templates): the parameters that attention.cpp decides from an AttentionSpec and the target
// (attention_params: AttentionParams, registry.h), the kernel that attention_kernel.cpp builds
// from both on the kernel IR, and the KernelBody that generate.cpp's assemble_kernel turns into
// a Kernel, for a region (attention_region.cpp, the registry's attention scheduler) as for a
// spec (generate_attention).
#pragma once

#include <cstdint>
#include <string>

#include "templates/builders.h"
#include "templates/kir/kir.h"
#include "templates/schedulers/attention.h"
#include "templates/schedulers/registry.h"

namespace fusejit::templates {

// A block: 4 warps of 16 query rows each (1 warp where there are at most 16 query rows).
inline constexpr int kAttentionThreads = 128;

inline bool has_mask_tensor(const AttentionSpec& s) {
  return s.mask == AttentionMaskKind::additive || s.mask == AttentionMaskKind::boolean;
}

// Why the kernel cannot run on `target` ("" when it can): it needs sm_80's mma.
std::string refuse_attention_target(const Target& target);

// The kernel's parameters for `spec` (taken: refuse_attention_kernel) on `target`.
AttentionParams attention_params(const AttentionSpec& spec, const Target& target);

// The kernel for `spec` under `params`, named kKernelNameToken (assemble_kernel names it).
kir::Function build_attention_kernel(const AttentionSpec& spec, const AttentionParams& params);

// That kernel with its device helpers (KernelBody::helpers) and launch shape: block
// params.block, work_blocks params.work, static shared memory only.
KernelBody attention_body(const AttentionSpec& spec, const AttentionParams& params);

}  // namespace fusejit::templates
