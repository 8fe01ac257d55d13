// jit/cudnn_attention: one attention forward through cuDNN's fused attention engines, described
// as cuDNN's backend graph of primitives (docs/attention/research.md §1.1, the "composite"
// lowering):
//
//   S = (Q Kᵀ) * scale [+ bias] [causal: keep where row >= col, else fill]   (f32)
//   P = exp(S - max(S)) / sum(exp(S - max(S)))      over the key axis, rounded to the I/O type
//   O = P V
//
// Kᵀ is K's descriptor with the last two dims and strides swapped (no copy). Grouped-query
// attention is K and V with fewer heads than Q; query head i reads kv head i / (hq / hk).
// The scale and the fill are by-value tensors: one graph and one plan serve every scale.
//
// Two steps, because only the second needs a GPU:
//   AttentionGraph(api, problem)  validates the problem (refusing, with the reason, what cuDNN's
//                                 fused engines cannot take) and builds and finalizes the
//                                 operation graph. No handle, no GPU: cuDNN 9.8 and later
//                                 finalize an operation graph without its HANDLE attribute
//                                 (checked on 9.19 with no GPU, where cudnnCreate fails with
//                                 NOT_INITIALIZED). Before 9.8 the graph needs a handle, so
//                                 the constructor takes one, and refuses to build without it.
//   plan(handle)                  heuristics (mode A), the first engine config whose execution
//                                 plan finalizes, and its workspace size. Runs engines'
//                                 checks against the device, and may compile kernels (slow).
//   execute(...)                  the variant pack and cudnnBackendExecute on a stream.
// A graph is used by one thread at a time (cuDNN's plans are not promised to be thread-safe).
//
// Not here: matching attention in a trace (fusion/attention.h), caching graphs per shape,
// choosing between cuDNN and a generated kernel.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusejit/dtype.h"
#include "jit/libs/cudnn_api.h"

namespace fusejit::jit::cudnn {

// A tensor of the attention in its logical order, [batch, heads, sequence, feature]: its dims,
// and its strides in elements (any memory order; the feature axis must be contiguous).
struct AttentionTensor {
  std::array<int64_t, 4> dims{};
  std::array<int64_t, 4> strides{};

  // Dense in memory in the logical order [b, h, s, d].
  static AttentionTensor contiguous(int64_t b, int64_t h, int64_t s, int64_t d);
};

enum class AttentionMaskKind {
  none,
  causal,  // top-left aligned: query i sees keys 0..i
  bias,    // an additive tensor, broadcast over batch and heads where its dims are 1
};

struct AttentionProblem {
  DType dtype = DType::bf16;  // of q, k, v, o: f16 or bf16
  AttentionTensor q;          // [b, hq, sq, d]
  AttentionTensor k;          // [b, hk, skv, d], hq a multiple of hk
  AttentionTensor v;          // [b, hk, skv, dv]
  AttentionTensor o;          // [b, hq, sq, dv]
  AttentionMaskKind mask = AttentionMaskKind::none;
  AttentionTensor bias;            // mask == bias: [b or 1, hq or 1, sq, skv]
  DType bias_dtype = DType::bf16;  // f16, bf16 or f32

  // All four dense in [b, h, s, d] order, no mask.
  static AttentionProblem contiguous(DType dtype, int64_t b, int64_t hq, int64_t hk, int64_t sq,
                                     int64_t skv, int64_t d, int64_t dv);
  // "bf16 q[2,16,1000,128] k[2,4,1000,128] v[2,4,1000,128] causal" for messages.
  std::string describe() const;
};

// Why cuDNN's fused attention cannot take `p` (mismatched dims, a zero dim, hq not a multiple
// of hk, a head dim that is not a multiple of 8 or over 256, a non-contiguous feature axis, a
// zero stride, ...), or "" when it can. Checked before any cuDNN call.
std::string refuse_attention(const AttentionProblem& p);

// The device data of one call. Every pointer 16-byte aligned.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  const void* bias = nullptr;  // when the mask is a bias
  float scale = 1.0f;          // S = Q Kᵀ * scale
  void* workspace = nullptr;   // workspace_bytes() of it; may be null when that is 0
};

class AttentionGraph {
 public:
  // Throws UsageError with refuse_attention's reason, and CudaError (cuDNN's text of the
  // failure) when cuDNN refuses a descriptor. `handle` may be null from cuDNN 9.8 on.
  AttentionGraph(std::shared_ptr<const Api> api, const AttentionProblem& problem,
                 Handle handle = nullptr);
  ~AttentionGraph();
  AttentionGraph(const AttentionGraph&) = delete;
  AttentionGraph& operator=(const AttentionGraph&) = delete;

  const AttentionProblem& problem() const { return problem_; }
  int64_t operation_count() const { return static_cast<int64_t>(ops_.size()); }

  // Finds an execution plan on `handle`'s device. Returns "" on success, otherwise why none
  // (no engine config, or each config's refusal): the caller falls back to another kernel.
  std::string plan(Handle handle);
  bool planned() const { return plan_ != nullptr; }
  int64_t workspace_bytes() const { return workspace_bytes_; }

  // O = attention(Q, K, V) on `stream`, asynchronously. Needs a successful plan().
  void execute(Handle handle, cudaStream_t stream, const AttentionArgs& args);

 private:
  Descriptor make(DescriptorType type);
  Descriptor build_tensor(int64_t id, DataType type, const std::array<int64_t, 4>& dims,
                          const std::array<int64_t, 4>& strides, bool is_virtual,
                          bool by_value = false);
  // A virtual tensor of the scores' shape, [b, hq, sq, skv].
  Descriptor virtual_scores(int64_t id, DataType type = DataType::float32);
  Descriptor add_scores(Descriptor q, Descriptor kt);
  void add_softmax_times_v(Descriptor scores, Descriptor v, Descriptor o);
  void add_pointwise(PointwiseMode mode, DataType precision, Descriptor x, Descriptor b,
                     Descriptor t, Descriptor y, int64_t axis = -1);
  void add_matmul(Descriptor a, Descriptor b, Descriptor c);
  void add_reduction(ReductionOperator op, Descriptor x, Descriptor y);
  // An operation whose operands are descriptors; a null operand is left unset.
  void add_operation(DescriptorType type,
                     std::initializer_list<std::pair<Attribute, Descriptor>> operands,
                     const char* what);
  void set(Descriptor d, Attribute a, AttributeType type, int64_t count, const void* elements,
           const char* what);
  void finalize(Descriptor d, const char* what);

  std::shared_ptr<const Api> api_;
  AttentionProblem problem_;
  float fill_ = 0.0f;                   // the causal mask's fill, by value
  std::vector<OwnedDescriptor> owned_;  // every descriptor, destroyed in reverse order
  std::vector<Descriptor> ops_;
  Descriptor graph_ = nullptr;
  bool graph_has_handle_ = false;
  Descriptor plan_ = nullptr;
  int64_t workspace_bytes_ = 0;
};

}  // namespace fusejit::jit::cudnn
