// templates/schedulers/attention_kernel: what the two halves of the attention kernel share
// (internal to templates): the schedule that attention.cpp decides from an AttentionSpec
// (plan_attention) and the kernel that attention_kernel.cpp builds from both on the kernel IR.
#pragma once

#include <cstdint>

#include "templates/kir/kir.h"
#include "templates/schedulers/attention.h"

namespace fusejit::templates {

inline constexpr int kAttentionThreads = 128;  // a block: 4 warps
inline constexpr int kAttentionRows = 64;      // query rows per work item, 16 per warp

struct AttentionSchedule {
  int block_n = 64;              // keys per tile
  int k_pitch = 0, v_pitch = 0;  // shared row pitch, elements
  int k_vec = 1, v_vec = 1;      // elements per global load when staging (8, 2 or 1)
  bool q_pairs = false;          // q's feature pairs are 4-byte aligned
  int64_t q_tiles = 0, kv_tiles = 0, work = 0;
  bool skip_above_diagonal = false;  // causal with fill -inf: key tiles past the diagonal add 0
  int shared_bytes = 0;
};

inline bool has_mask_tensor(const AttentionSpec& s) {
  return s.mask == AttentionMaskKind::additive || s.mask == AttentionMaskKind::boolean;
}

// The kernel for `spec` under `schedule`, named kKernelNameToken (assemble_kernel names it).
kir::Function build_attention_kernel(const AttentionSpec& spec, const AttentionSchedule& schedule);

}  // namespace fusejit::templates
