// fusion/plan: what the partitioner produces. A Plan is the optimized graph plus the regions it
// is cut into, in execution order; each region becomes one generated kernel or one library call.
// Every region says what it is, and every cut says why (FUSEJIT_DUMP=decisions prints them).
//
// What a region of each kind guarantees to code generation (D = `shape`, A = `reduce_axes`):
//
// pointwise      No reductions. Every output has exactly the shape D (an update_slice output: its
//                value has; the kernel stores each element into the destination's buffer, in
//                place, at the position its start holds; the destination is not an input). `nodes`
//                are elementwise ops, views and constants; every node reaches an output inside the
//                region, so a node has at most numel(D) elements. A node of fewer elements (a [C]
//                bias term in a [R,C] region) is evaluated inline at the broadcast index.
// reduction      Every reduce node in the region reduces an operand of shape exactly D over
//                exactly the axes A (sorted; leading, middle, trailing or all). Nodes are the
//                prologue (evaluated at points of D, feeding the reductions), the reduce nodes,
//                and the epilogue (elementwise/view nodes of the reduced values, evaluated once
//                per reduced point). Every output is reduced-shaped: D with the axes A set to 1
//                (keepdim) or removed. No value is computed from a reduction and then broadcast
//                back over A, and no reduction reads another's result, with one exception when A
//                is not trailing: an online softmax pair (fusion/online_softmax.h), a max
//                M = max(X) and sum(exp(X - M)) over the same axes, where exp(X - M) (with the
//                sub and the views broadcasting M) feeds only that sum. Code generation
//                accumulates the pair in one pass (templates: ReduceSpace::online) and never
//                evaluates exp(X - M) itself; column softmax's statistics are such a region.
// normalization  A is trailing: A = {rank-k, ..., rank-1}, so a "row" is one point of the
//                leading axes. As `reduction`, plus: values computed from reduce results may be
//                broadcast back over the row and combined with values at points of D, and
//                reductions may be chained (layer norm's mean, then variance); outputs are of
//                shape D or reduced-shaped. Every use of a reduced value reads the value of its
//                own row (checked): one block per row can read each row once. Between a reduce
//                and its uses there are only elementwise ops, broadcasts (implicit or expand),
//                reshapes that add or drop size-1 axes, and permutes that stay within the row.
//                `welford` lists the mean/variance pairs (fusion/welford.h) whose statistics
//                code generation accumulates together in one pass: the variance is not a
//                reduction of its own after the mean.
// gemm           One matmul and what its epilogue folds: one library call (one or more
//                cuBLASLt calls of one description) computing
//                D = act(alpha * (A @ B) + beta * C + bias), f32 inside, rounded once to D's dtype.
//                `inputs` are [A, B, then the bias if any, then the residual C if any], in that
//                order (an id may repeat: x @ x). Views that only transpose the matrix or
//                broadcast the batch are not copies: under a matmul operand, permutes swapping
//                the last two axes (epilogue.transpose_a/b: an odd number of them), expands that
//                keep the last two dims, reshapes that only add or drop 1s among the batch
//                dims, and under those a reshape of the buffer itself whatever its matrix (a
//                dense buffer's bytes are the reshape's value), are folded; the input is the
//                buffer under them, the views appear in `nodes` before the matmul, and
//                epilogue.batch_a/b say how the buffer's batch dims line up with the operand's
//                (with the matrix the operand's, transposed where the flag says: the call
//                reads the buffer's bytes in that shape). Batch dims broadcast as the reference's
//                matmul does (aligned from the right, 1 against any extent), on one side or both,
//                without a copy: jit/libs/gemm_call.h turns them into strided-batched calls.
//                `nodes` also hold the folded nodes (muls by constants, adds, relu or gelu_tanh; a
//                mul scaling C may come before the matmul) and the constants and views they read;
//                every folded node has the matmul's dtype and shape. `outputs` is exactly one
//                value: the last folded node, or the matmul. The bias is a buffer of N elements (N
//                = shape's last dim, shape [N] or [1,..,1,N]) broadcast over all rows and batches;
//                C has the full output shape and dtype. epilogue.refusals says why the chain
//                stopped.
// attention      out = softmax(mask(scale * (q @ kᵀ))) @ v written from primitives
//                (fusion/attention.h), as one generated kernel that never writes the scores
//                (templates/schedulers/attention.h). `attention` names the parts; `nodes` are the
//                pattern's nodes and the views between q, k, v (and the mask) and the buffers they
//                read; `inputs` are exactly [q's buffer, k's, v's, then the mask's when it has one]
//                (an id may repeat), `outputs` is the pattern's output, `shape` its shape. Formed
//                only when FUSEJIT_ATTENTION is on (PlanOptions::attention) and the kernel takes
//                the pattern (attention_layout); otherwise the pattern is planned as GEMM,
//                normalization, GEMM.
//
// Constants and views (and aranges and random sources: fusion/dataflow.h, is_view_or_constant)
// are never inputs or outputs of their own accord: they are replicated into every region that
// reads them (index arithmetic, free to recompute). A view or constant that is
// itself a graph output, or a non-transpose view feeding a matmul, is materialized by a region
// like any other value. A graph output that is a graph input is in no region: the executor copies
// the input (a decision records it).
//
// Recomputed values (fusion/recompute.h) are replicated the same way: an elementwise value that
// would be written only for other regions to read back is, when that makes the plan cheaper
// (fewer kernels or bytes moved, neither more), evaluated in every region that reads it from
// what that region reads (column softmax: the cast of x and exp(x - max) in both kernels). Such
// a value is in the `nodes` of each of those regions, in no region's inputs or outputs, and
// each region evaluating it has a decision "recompute %N in region K: ..." (fused, producer
// %N, consumer a node of region K that reads it). Reductions, matmuls, graph outputs, values
// a matmul reads or computed from a matmul's result, costly ops (ir/op.h kCostly) and values
// more than kMaxRecomputedOps elementwise ops from memory are never recomputed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/symbolic.h"

namespace fusejit::fusion {

using ir::NodeId;

enum class RegionKind {
  pointwise,      // elementwise ops and views over one iteration space, possibly several outputs
  reduction,      // one or more reductions over the same axes, with prologue and epilogue
  normalization,  // a reduction broadcast back against its own input: one pass over each row
  gemm,           // a cuBLASLt call (matmul plus what its epilogue absorbs)
  attention,      // softmax(mask(q kᵀ * scale)) v as one fused kernel (fusion/attention.h)
};

// "pointwise", "reduction", "normalization", "gemm", "attention".
std::string_view region_kind_name(RegionKind kind);

// The most rows of A (M, with every batch dim folded in) of a GEMM whose i8 weights the call
// dequantizes (GemmEpilogue::int8_b): templates::kGemvMaxRows, the skinny-GEMM kernel's limit.
inline constexpr int64_t kInt8GemmMaxRows = 16;

// What a cuBLASLt epilogue absorbs of a GEMM's elementwise tail (fusion/epilogue.h):
//   D = act(alpha * (A @ B) + beta * C + bias)
struct GemmEpilogue {
  NodeId bias = -1;      // a buffer of N elements along the output's last dim, or -1
  NodeId residual = -1;  // C, a buffer of the output's shape, added through beta, or -1
  double alpha = 1.0;
  double beta = 0.0;
  enum class Activation { none, relu, gelu_tanh } activation = Activation::none;
  bool transpose_a = false;  // a permute feeding the GEMM, folded into a layout flag
  bool transpose_b = false;
  // The batch dims of the buffers A and B as the matmul's operands present them: the operand's
  // batch dims (all but the last two), 1 where a folded expand broadcasts the buffer. A dim
  // other than 1 is the operand's extent, and the buffer holds those dims contiguously in order.
  Shape batch_a, batch_b;
  // Weight-only int8: B is an i8 buffer that the matmul reads through a cast to its dtype (the
  // cast is part of the call: dataflow.h, kInt8GemmMaxRows), and `scale`, a buffer of N
  // elements of the output's dtype or -1, multiplies the product before C and the bias:
  //   D = act(alpha * (A @ B) * scale + beta * C + bias)
  // The skinny-GEMM kernel runs such a call (jit/libs/gemm_call.h), dequantizing as it reads.
  bool int8_b = false;
  NodeId scale = -1;
  std::vector<std::string> refusals;  // what was considered and why it could not fold
};

// "none", "relu", "gelu_tanh".
std::string_view activation_name(GemmEpilogue::Activation activation);

// A mean M = mean(X) and a variance, sum or mean of (X - M)^2 over the same axes, that one
// reduction accumulates together (fusion/welford.h).
struct WelfordPair {
  NodeId mean = -1;
  NodeId variance = -1;
  bool operator==(const WelfordPair&) const = default;
};

// How an attention's scores are masked (fusion/attention.h).
enum class AttentionMask {
  none,
  additive,  // scores + mask (a tensor broadcast to the scores)
  causal,    // where over an arange comparison that hides column > row (top-left aligned)
  computed,  // where over another comparison of aranges (a window, a shifted diagonal)
  boolean,   // where over a bool tensor
};

// The parts of an attention region, by node id of the plan's graph, and the constants folded
// out of the pattern. With S = q kᵀ (f32), the scores the softmax reads are
//   none      S * scale
//   additive  S * scale + mask * mask_scale
//   causal    S * scale where column <= row, else fill
//   boolean   S * scale where (mask != 0) != fill_where_true, else fill
// (mask_scale: the scales applied after the mask; fill is already multiplied by them).
struct AttentionRegion {
  NodeId q = -1, k = -1, v = -1;  // the operands as the matmuls read them (k before kᵀ)
  bool k_transposed = false;      // `k` is kᵀ itself (AttentionPattern::k_transposed)
  NodeId scores = -1;             // matmul(q, kᵀ)
  NodeId output = -1;             // matmul(p, v)
  // What the region writes: `output` (-1 says the same), or the last of the permutes and
  // reshapes after it (output_views, fusion/attention.h), written through their strides so
  // that no kernel copies the output into that layout.
  NodeId written = -1;
  AttentionMask mask = AttentionMask::none;
  NodeId mask_node = -1;  // additive: the added tensor; boolean: the where's condition
  double scale = 1.0;
  double mask_scale = 1.0;
  double fill = 0.0;
  bool fill_where_true = true;
};

struct Region {
  RegionKind kind = RegionKind::pointwise;
  // Nodes computed by this region, in topological order (ascending ids). Constants and views
  // that a region reads are included in every region that uses them (they cost nothing to
  // recompute), and so are recomputed elementwise values (see below). Inputs of the graph are
  // never in `nodes`.
  std::vector<NodeId> nodes;
  // Values read from device memory: graph inputs and other regions' outputs. Ascending ids,
  // except for gemm regions (see above).
  std::vector<NodeId> inputs;
  // Values written to device memory: graph outputs and values later regions read. Ascending ids.
  std::vector<NodeId> outputs;
  // The iteration space D: the outputs' shape (pointwise), the reduced operands' shape
  // (reduction, normalization), the matmul's result shape (gemm).
  Shape shape;
  // reduction, normalization: the reduced axes of `shape`, sorted; empty otherwise.
  std::vector<int64_t> reduce_axes;
  GemmEpilogue epilogue;  // gemm regions only
  // normalization: the mean/variance pairs accumulated in one pass (fusion/welford.h), by
  // ascending variance id; empty otherwise.
  std::vector<WelfordPair> welford;
  AttentionRegion attention;  // attention regions only
};

// One "why": a cut between regions, a fusion that was refused, or one that was made. Producer
// and consumer are node ids of the plan's graph (-1 where there is none).
struct Decision {
  NodeId producer = -1;
  NodeId consumer = -1;
  bool fused = false;
  std::string reason;
};

struct Plan {
  ir::Graph graph;              // the optimized graph; regions index into it
  std::vector<Region> regions;  // in a valid execution order
  std::vector<Decision> decisions;

  int kernel_count() const;        // regions that are generated kernels
  int library_call_count() const;  // gemm regions
};

// A plan made on a symbolic graph (ir/symbolic.h), at sizes: its graph instantiated, every shape
// a region states decoded; node ids, regions and decisions are kept. Throws fusejit::Error when
// the graph is ill-formed at those sizes.
Plan instantiate_plan(const Plan& plan, const std::vector<ir::Symbol>& symbols,
                      const ir::Bindings& values);

}  // namespace fusejit::fusion
