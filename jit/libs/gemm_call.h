// jit/gemm_call: how a gemm region maps onto cuBLASLt calls: the problem (sizes, layouts,
// epilogue, batch count and strides) and the element offsets of each call. Pure: it reads the
// plan and touches no GPU, so that tests can check it anywhere; the executor launches what it
// describes.
//
// Batch dims broadcast as in the reference interpreter: each operand's batch dims (all but its
// last two) are aligned from the right against the output's, and each is either the output's
// extent or 1 (the same matrix for every index there). The operands here are the buffers
// cuBLASLt reads (fusion's gemm region inputs), which may sit under folded views: a transpose of
// the last two axes, an expand of batch dims, a reshape adding or dropping leading 1s. Each keeps
// that right-aligned correspondence, so the buffer's own shape says how it is indexed. Broadcast
// is never a copy:
//
// - The output's batch dims of extent > 1 are cut into groups: maximal runs of adjacent dims
//   along which each operand either has all of the extents (it steps through contiguous
//   matrices, one stride) or none of them (stride 0). A run of dims where A is broadcast and B
//   is not is one group; [B,1] against [1,H] gives two.
// - One strided-batched cuBLASLt call covers one group: batch count = the group's extent, the
//   stride of each operand = its matrix size times the product of its later batch extents (0
//   where it is broadcast), the output's likewise (C, the residual, has the output's layout; the
//   bias is shared by every batch).
// - The largest group is the call's batch; the calls loop over the other groups' indices, one
//   strided call per outer index, at the offsets each operand's layout gives. So A[8,1,M,K] @
//   B[1,16,K,N] is 8 calls of batch 16 (A stride 0, B stride K*N, D stride M*N), never a
//   materialized expand and never 128 separate GEMMs.
// - A call that starts inside a buffer is only as aligned as its offset: the problem's
//   alignment says so, so that cuBLASLt's heuristic picks an algorithm that works there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusion/plan.h"
#include "ir/shape.h"
#include "jit/libs/blas.h"
#include "templates/schedulers/gemv.h"

namespace fusejit::jit {

// Where one call starts, in elements from the start of each buffer (C's offset is D's).
struct GemmOffsets {
  int64_t a = 0, b = 0, d = 0;
  bool operator==(const GemmOffsets&) const = default;
};

// The batch structure shared by all calls of one GEMM.
struct GemmBatches {
  int64_t batch = 1;                                 // batch count of each call
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;  // elements between batches; 0 broadcasts
  std::vector<GemmOffsets> calls;                    // one entry per call, at least one
};

// Splits the output's batch dims `out` over strided-batched calls (see above). `a` and `b` are
// the operands' batch dims, of any rank up to out's, each dim 1 or out's (aligned from the
// right); size_a/b/d are the elements of one matrix of A, B and D.
GemmBatches split_batches(const Shape& out, const Shape& a, const Shape& b, int64_t size_a,
                          int64_t size_b, int64_t size_d);

// Everything needed to launch one gemm region.
struct GemmCall {
  GemmProblem problem;  // its batch count and strides are those of each call
  // The buffers, as node ids of the plan graph (-1 when absent): A, B, bias, residual C, and D.
  ir::NodeId a = -1, b = -1, bias = -1, residual = -1, d = -1;
  std::vector<GemmOffsets> calls;  // at least one
  // Weight-only int8 (fusion::GemmEpilogue::int8_b): B is i8, dequantized as it is read, and
  // `scale` (-1: none) multiplies A @ B per output column. Only the skinny-GEMM kernel runs it.
  bool int8_b = false;
  ir::NodeId scale = -1;
};

// The region's calls: its batch dims split by split_batches, then a batch that shares B and
// whose A and D matrices follow one another folded into M (one GEMM of batch x M rows).
GemmCall describe_gemm_call(const fusion::Plan& plan, const fusion::Region& region,
                            bool allow_tf32);

// The skinny-GEMM kernel's spec for a call it takes and `mode` gives it (CodegenOptions::gemv):
// one unbatched call at offset 0, whose every buffer is 16-byte aligned, that
// templates::refuse_gemv takes (M of 1..16, weights [N, K]), and for GemvMode::large one row of
// bf16/f16 against at least templates::kGemvLargeMinWeights weights; else nothing, and `why`
// says why not. A call with int8 weights is the kernel's whatever the mode (cuBLASLt does not
// take it).
std::optional<templates::GemvSpec> gemv_spec(const GemmCall& call, GemvMode mode,
                                             std::string* why = nullptr);
// Its kernel's arguments, in generate_gemv's order: A (with a prologue, the inputs of the region
// computing A), B, [scale], [bias], [C], D.
std::vector<ir::NodeId> gemv_arguments(const GemmCall& call,
                                       const fusion::Region* producer = nullptr);
// The skinny-GEMM kernel a run generates for the call under `codegen` (its gemv mode, target
// and grid dependency), its params gemv_arguments; nothing, and `why`, where cuBLASLt runs it.
// With `producer` (a region of `graph` that absorb_prologues, jit/libs/prologue.h, merged into
// the call's region), the kernel computes A from it (templates::GemvPrologue); with `consumer`
// (one that absorb_epilogues merged), it evaluates that region at its store
// (templates::GemvEpilogue), and the call's D is that region's output. The executor and
// `fusejit warm` both make it here, so that a warmed cache holds the kernel a run asks for.
std::optional<templates::Kernel> gemv_kernel(const GemmCall& call,
                                             const templates::CodegenOptions& codegen,
                                             std::string* why = nullptr,
                                             const ir::Graph* graph = nullptr,
                                             const fusion::Region* producer = nullptr,
                                             const fusion::Region* consumer = nullptr);

// "cublasLt 512x512x64 x16 (8 calls) bf16+bias+relu": M x N x K, the batch count of each call,
// how many calls (when more than one), the dtype and what the epilogue adds ("gemm ...
// bf16+int8_weights+scale" for int8 weights, which cuBLASLt does not run).
std::string gemm_call_label(const GemmCall& call);

}  // namespace fusejit::jit
