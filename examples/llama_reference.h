// A Llama decoder in double precision on the host, written without fusejit: the reference that
// `generate --check` holds fusejit's logits against. The weights are the model's own (bf16 values,
// exact in double); every product, sum and nonlinearity is computed in double, nothing rounded.
// Plain loops: meant for small configs (the tiny one of the tests), not for 8B.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llama_reference {

struct Shape {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  double rope_base = 10000.0, norm_eps = 1e-5;
  int64_t head_dim() const { return hidden / heads; }
};

// Row-major host copies. Projections are [out, in] (as torch's Linear and fj::linear keep them).
struct LayerWeights {
  std::vector<double> attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2;
};

struct Weights {
  Shape shape;
  std::vector<double> embed, final_norm, lm_head;  // [vocab, hidden], [hidden], [vocab, hidden]
  std::vector<LayerWeights> layers;
};

// The logits [tokens.size() - first, vocab] at positions first .. tokens.size() - 1 of one
// sequence, each position attending to itself and every earlier one (causal), rotate-half rotary
// embeddings, grouped-query heads (query head h reads KV head h / (heads / kv_heads)), RMS norms,
// a SwiGLU feed-forward.
std::vector<double> logits(const Weights& w, const std::vector<int64_t>& tokens, int64_t first);

// Logits of one step held against another computation's (the reference's, or a rerun's),
// accumulated over steps.
struct Comparison {
  double error = 0.0;          // the largest ||got - want|| / ||want|| so far
  int64_t mismatches = 0;      // greedy tokens want's argmax beats by more than a tie's tolerance
  int64_t near_ties = 0;       // ... by less: the two computations' rounding can order them apart
  int64_t off_own_argmax = 0;  // greedy tokens below the largest of the logits they came from
};

// Adds one step of `vocab` logits and the greedy `token` chosen from `got` to `out`. The bound is
// relative: on the error, and on each logit's move, as a fraction of want's largest magnitude,
// so a tie's tolerance is twice bound times that: two logits moved toward each other.
void compare(const double* got, const double* want, size_t vocab, size_t token, double bound,
             Comparison& out);

}  // namespace llama_reference
