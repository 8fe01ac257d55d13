// fusion/attention: finds attention written from primitives.
//
//   out = matmul(softmax(modify(matmul(q, transpose(k)))), v)
//
// where softmax is written by hand or by the API's composite (max, sub, exp, sum, div over the
// last axis, with casts around it), and `modify` is any chain over the scores of: casts,
// multiplications or divisions by a constant (the scale), an additive mask tensor, and a
// `where` that masks with a constant fill (-inf, or any constant) under a condition that is
// either a tensor (a boolean mask input) or computed from `arange` alone (causal when it is
// col > row on positions exact in every dtype they pass through: bf16 holds the integers up to
// 256, f16 up to 2048). A scale may also sit
// on q or on k instead of the scores; k and v may reach the matmuls through views (a GQA head
// broadcast through reshape and expand).
//
// The matcher only reads the graph: it names the pattern's parts so that a fused kernel
// (docs/attention/research.md) can take the whole region, and says why a
// candidate is not attention when it is not. A pattern whose intermediates (the scores, the
// probabilities) are read outside it, or are outputs, is refused: they would have to be
// written anyway.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion {

std::string_view attention_mask_name(AttentionMask m);

struct AttentionPattern {
  ir::NodeId output = -1;  // matmul(p, v)
  ir::NodeId scores = -1;  // matmul(q, kᵀ)
  ir::NodeId q = -1, k = -1, v = -1;  // the operands as the matmuls read them (k before kᵀ)
  // k is kᵀ itself: the matmul reads a permute that is not a plain swap of the last two axes
  // (k's own permute composed with the transpose by the graph passes).
  bool k_transposed = false;
  // Where k and v come from through views only (reshape, expand, permute): the tensors a kernel
  // reads; with fewer heads than q when they are broadcast over q's heads (grouped-query).
  ir::NodeId k_source = -1, v_source = -1;
  bool kv_broadcast = false;  // an expand on the way from k_source or v_source
  double scale = 1.0;         // the product of the constant scales on the scores, q and k
  AttentionMask mask = AttentionMask::none;
  ir::NodeId mask_node = -1;  // the additive mask, the where's condition, or -1
  ir::NodeId fill = -1;       // the where's constant fill, or -1
  // The product of the scales applied after the mask (mask * mask_scale is what is added; a
  // where's fill becomes fill * mask_scale), and the where's fill value times it.
  double mask_scale = 1.0;
  double fill_value = 0.0;
  bool fill_where_true = true;  // where(c, fill, scores): the fill goes where c holds
  // Every node from the scores matmul to the output (ids ascending), which a fused region
  // would take; the scale constants on q or k are not among them.
  std::vector<ir::NodeId> nodes;
  int64_t seq_q = 0, seq_kv = 0, head_dim = 0, value_dim = 0;

  // "softmax(q kᵀ * 0.125, causal) v: q bf16[8,16,2048,128], k ..., v ..." for plans and logs.
  std::string describe(const ir::Graph& g) const;
};

// The attention pattern whose output is `node`, or nothing and why not (in `why`, when given).
std::optional<AttentionPattern> match_attention(const ir::Graph& g, ir::NodeId node,
                                                std::string* why = nullptr);

// Every attention pattern of `g`, in output order.
std::vector<AttentionPattern> find_attention(const ir::Graph& g);

// The parts of the pattern as an attention region names them (fusion/plan.h).
AttentionRegion attention_region(const AttentionPattern& p);

// The largest head dim (of q and k, and of v) the fused kernel takes; head dims are multiples
// of 16 (templates/schedulers/attention.h).
inline constexpr int64_t kMaxAttentionHeadDim = 128;

// One operand of a fused attention as the kernel reads it: element [b, h, i, j] of the logical
// operand is buffer element offset + b*s0 + (h / head_group)*s1 + i*s2 + j*s3 (a stride of 0
// broadcasts). The offset comes from slices among the views (q, k and v sliced out of one fused
// projection are three views of its buffer, read in place).
struct AttentionView {
  ir::NodeId buffer = -1;
  std::array<int64_t, 4> strides{};
  int64_t head_group = 1;
  int64_t offset = 0;
};

// How the fused kernel reads an attention region: the scores' batch dims folded into [batch,
// heads], and each operand's buffer with the strides that reach it through its views.
struct AttentionLayout {
  int64_t batch = 1, heads = 1, seq_q = 0, seq_kv = 0, head_dim = 0, value_dim = 0;
  AttentionView q, k, v;
  AttentionView mask;              // additive and boolean masks; buffer -1 otherwise
  std::vector<ir::NodeId> views;   // the view nodes between the operands and their buffers
  // Where the output [b, h, i, d] is written: buffer AttentionRegion::written (the output
  // itself, dense, when that is -1), through the views between them (out_views, ascending).
  AttentionView o;
  std::vector<ir::NodeId> out_views;
};

// The permutes and reshapes after `output` that its kernel could write through: the longest
// chain in which each is the only reader of the one before, and neither the output nor any of
// them but the last is a graph output (ascending ids; empty when there is none).
std::vector<ir::NodeId> output_views(const ir::Graph& g, ir::NodeId output);

// The views it reads through are reshapes, expands, permutes and slices (a slice moves the
// view's offset and scales its axis' stride by the step); the output is written through the
// region's `written` views, which must reach it with strides (its last axis contiguous).
// The layout, or nothing and why not (in `why`, when given): a view that no strides express
// (a reshape that would need a modulo, a slice of an axis broadcast in groups), a q, k or v whose
// last axis is not contiguous, a dtype other than f16 or bf16, head dims not multiples of 16 or
// over kMaxAttentionHeadDim, a mask the kernel does not compute (AttentionMask::computed, which
// includes a causal comparison of positions that round in their dtype) or whose dtype it does not
// read, a mask read through a cast that rounds it or broadcast over an inner head axis, and a mask
// that broadcasts the scores q kᵀ themselves to more batch entries, query rows or keys than q and k
// have. A mask that broadcasts over any axis of the scores is read by strides (0 along its
// broadcast axes).
std::optional<AttentionLayout> attention_layout(const ir::Graph& g, const AttentionRegion& a,
                                                std::string* why = nullptr);

}  // namespace fusejit::fusion
