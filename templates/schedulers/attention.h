// templates/attention: the fused attention forward kernel (FlashAttention-2 on mma.sync tensor
// cores) for one attention problem, described by shape, strides and mask rather than by a region
// of the graph: fusion/attention.h finds the pattern, its caller fills in an AttentionSpec.
//
//   out[b,h,i,:] = sum_j softmax_j(S[b,h,i,j]) v[b,h/hg,j,:]
//   S[b,h,i,j]   = scale * (q[b,h,i,:] . k[b,h/hg,j,:]), then the mask (below), in f32
//
// The kernel obeys kernel.h's launch contract but for its arguments: device pointers q, k, v,
// [mask], o, each read (o written) through its view. Not here: the backward pass,
// dropout, and the dispatch that decides when to use this kernel.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fusejit/dtype.h"
#include "templates/kernel.h"
#include "templates/target.h"

namespace fusejit::templates {

// A logical [batch, head, seq, feature] view of a buffer, in elements.
struct AttentionView {
  std::array<int64_t, 4> strides{};  // per logical axis; 0 broadcasts along it
  int64_t head_group = 1;  // logical head h reads the buffer's head h / head_group (GQA k, v)
  int64_t offset = 0;      // the buffer element of [0, 0, 0, 0] (a slice of a wider buffer)
};

enum class AttentionMaskKind { none, causal, additive, boolean };
// "none", "causal", "additive", "boolean".
std::string_view attention_mask_name(AttentionMaskKind m);

struct AttentionSpec {
  DType dtype = DType::bf16;  // q, k, v and o: f16 or bf16
  int64_t batch = 1, heads = 1, seq_q = 1, seq_kv = 1, head_dim = 64, value_dim = 64;
  AttentionView q, k, v;
  // Where o is written: dense [batch, heads, seq_q, value_dim] when empty, else through this
  // view (the permute after an attention, written by its kernel: [b, s, h, d] rows); head_group
  // 1, offset 0, the feature axis contiguous, the other strides even (pairs are stored).
  std::optional<AttentionView> o;
  double scale = 1.0;     // S = (q . k) * scale, in f32
  AttentionMaskKind mask = AttentionMaskKind::none;
  // additive: S += mask_scale * mask[b,h,i,j]   (mask dtype f16, bf16 or f32)
  // boolean:  S = (mask[b,h,i,j] != 0) == fill_where_true ? fill : S   (mask dtype bool)
  // causal:   S = fill where j > i (top-left aligned: query i sees keys 0..i)
  AttentionView mask_view;  // strides over [b, h, i, j]; head_group unused
  DType mask_dtype = DType::f32;
  double mask_scale = 1.0;
  double fill = -INFINITY;  // causal and boolean
  bool fill_where_true = true;  // boolean
};

// Why the generated kernel cannot take `spec` ("" when it can).
std::string refuse_attention_kernel(const AttentionSpec& spec);

// Grouped-query decode with the query heads of a KV head folded into query rows: where k and v
// share a head_group G > 1 and seq_q is at most 16, the largest g dividing G with g * seq_q <= 16
// query heads of each KV head become the rows of one head (row j * seq_q + i is head h * g + j,
// query i), so that one work item reads each key once for all of them. The memory read and
// written is the same ([b, h, seq_q] rows of q, the mask and o are [b, h / g, g * seq_q] rows); a
// spec whose layout or mask cannot be read that way (a causal mask; seq_q > 1 with q's, the
// mask's or o's head stride other than seq_q times its query stride) comes back unchanged, as does
// one with nothing to fold. generate_attention and the attention scheduler fold every spec they
// take.
AttentionSpec fold_query_groups(const AttentionSpec& spec);

// The kernel for `spec`; throws fusejit::InternalError when refused. Kernel::params is left
// empty (the caller fills in node ids); the launch arguments are device pointers in the order
// q, k, v, [mask when additive or boolean], o, and nothing else. Kernel::name starts
// "fj_attention_". Block 128 threads; work_blocks = batch * heads * ceil(seq_q / 64).
// What follows kKernelMarker calls only the helpers of device/fj_attention.cuh and a few CUDA
// builtins (see that file), so that a host shim can run it (the CPU emulation test).
Kernel generate_attention(const AttentionSpec& spec, const Target& target = {});

}  // namespace fusejit::templates
