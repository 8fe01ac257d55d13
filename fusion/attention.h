// fusion/attention: finds attention written from primitives (issue 10).
//
//   out = matmul(softmax(modify(matmul(q, transpose(k)))), v)
//
// where softmax is written by hand or by the API's composite (max, sub, exp, sum, div over the
// last axis, with casts around it), and `modify` is any chain over the scores of: casts,
// multiplications or divisions by a constant (the scale), an additive mask tensor, and a
// `where` that masks with a constant fill (-inf, or any constant) under a condition that is
// either a tensor (a boolean mask input) or computed from `arange` alone. A scale may also sit
// on q or on k instead of the scores; k and v may reach the matmuls through views (a GQA head
// broadcast through reshape and expand).
//
// The matcher only reads the graph: it names the pattern's parts so that a fused kernel (the
// next step of issue 10; docs/attention/research.md) can take the whole region, and says why a
// candidate is not attention when it is not. A pattern whose intermediates (the scores, the
// probabilities) are read outside it, or are outputs, is refused: they would have to be
// written anyway.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusejit::fusion {

enum class AttentionMask {
  none,
  additive,  // scores + mask (a tensor broadcast to the scores)
  causal,    // where over an arange comparison that hides column > row (top-left aligned)
  computed,  // where over another comparison of aranges (a window, a shifted diagonal)
  boolean,   // where over a bool tensor
};

std::string_view attention_mask_name(AttentionMask m);

struct AttentionPattern {
  ir::NodeId output = -1;  // matmul(p, v)
  ir::NodeId scores = -1;  // matmul(q, kᵀ)
  ir::NodeId q = -1, k = -1, v = -1;  // the operands as the matmuls read them (k before kᵀ)
  // Where k and v come from through views only (reshape, expand, permute): the tensors a kernel
  // reads; with fewer heads than q when they are broadcast over q's heads (grouped-query).
  ir::NodeId k_source = -1, v_source = -1;
  bool kv_broadcast = false;  // an expand on the way from k_source or v_source
  double scale = 1.0;         // the product of the constant scales on the scores, q and k
  AttentionMask mask = AttentionMask::none;
  ir::NodeId mask_node = -1;  // the additive mask, the where's condition, or -1
  ir::NodeId fill = -1;       // the where's constant fill, or -1
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

}  // namespace fusejit::fusion
