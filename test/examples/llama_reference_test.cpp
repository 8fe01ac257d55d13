// examples/llama_reference: the double-precision decoder that `generate --check` trusts, checked
// on models whose logits follow from the weights by hand (a layer that adds nothing; attention
// that averages the values it may see), and the comparison's three verdicts.
#include <cmath>
#include <cstdint>
#include <vector>

#include "llama_reference.h"
#include "support/catch.h"

namespace lr = llama_reference;

namespace {

using Vec = std::vector<double>;

// Deterministic values in [-1, 1).
Vec values(size_t n, unsigned seed) {
  Vec v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (double& e : v) {
    x = x * 1664525u + 1013904223u;
    e = double(x >> 8) / double(1u << 23) - 1.0;
  }
  return v;
}

Vec rms_normed(const Vec& x) {
  double s = 0.0;
  for (double e : x) s += e * e;
  Vec y(x);
  for (double& e : y) e /= std::sqrt(s / double(x.size()) + 1e-5);
  return y;
}

Vec times(const Vec& w, const Vec& x, size_t out) {
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    for (size_t i = 0; i < x.size(); ++i) y[o] += w[o * x.size() + i] * x[i];
  }
  return y;
}

// One layer, hidden 8, 4 heads of 2 over 2 KV heads, ffn 6, vocab 5; every weight random.
lr::Weights small_model() {
  lr::Weights w;
  w.shape = {.layers = 1, .hidden = 8, .heads = 4, .kv_heads = 2, .ffn = 6, .vocab = 5};
  w.embed = values(5 * 8, 1);
  w.lm_head = values(5 * 8, 2);
  w.final_norm = Vec(8, 1.0);
  lr::LayerWeights y{Vec(8, 1.0), values(64, 3), values(32, 4), values(32, 5), values(64, 6),
                     Vec(8, 1.0), values(48, 7), values(48, 8), values(48, 9)};
  w.layers.push_back(y);
  return w;
}

}  // namespace

TEST_CASE("llama reference: a layer that adds nothing leaves the embedding's logits",
          "[examples][reference]") {
  lr::Weights w = small_model();
  w.layers[0].wo.assign(64, 0.0);  // attention adds nothing to the residual
  w.layers[0].w2.assign(48, 0.0);  // nor does the feed-forward
  const std::vector<int64_t> tokens{3, 1, 4, 1};
  const Vec got = lr::logits(w, tokens, 1);
  REQUIRE(got.size() == 3 * 5);
  for (size_t p = 1; p < tokens.size(); ++p) {
    const size_t t = size_t(tokens[p]);
    const Vec x(w.embed.begin() + long(t * 8), w.embed.begin() + long(t * 8 + 8));
    const Vec want = times(w.lm_head, rms_normed(x), 5);
    for (size_t v = 0; v < 5; ++v) CHECK(got[(p - 1) * 5 + v] == Approx(want[v]).epsilon(1e-12));
  }
}

TEST_CASE("llama reference: attention sees the positions up to its own, by KV group",
          "[examples][reference]") {
  // Queries of zero score every key alike: each head averages the values of positions 0..p of its
  // KV head (head h reads KV head h / 2). wo the identity, no feed-forward: the residual gains
  // that average.
  lr::Weights w = small_model();
  lr::LayerWeights& y = w.layers[0];
  y.wq.assign(64, 0.0);
  y.w2.assign(48, 0.0);
  y.wo.assign(64, 0.0);
  for (size_t i = 0; i < 8; ++i) y.wo[i * 8 + i] = 1.0;
  const std::vector<int64_t> tokens{2, 0, 4};
  const Vec got = lr::logits(w, tokens, 0);
  Vec sum(4, 0.0);  // the running sum of values: 2 KV heads of 2
  for (size_t p = 0; p < tokens.size(); ++p) {
    const size_t t = size_t(tokens[p]);
    const Vec x(w.embed.begin() + long(t * 8), w.embed.begin() + long(t * 8 + 8));
    const Vec v = times(y.wv, rms_normed(x), 4);
    for (size_t i = 0; i < 4; ++i) sum[i] += v[i];
    Vec h = x;
    for (size_t head = 0; head < 4; ++head) {
      for (size_t e = 0; e < 2; ++e) h[head * 2 + e] += sum[(head / 2) * 2 + e] / double(p + 1);
    }
    const Vec want = times(w.lm_head, rms_normed(h), 5);
    INFO("position " << p);
    for (size_t k = 0; k < 5; ++k) CHECK(got[p * 5 + k] == Approx(want[k]).epsilon(1e-12));
  }
}

TEST_CASE("llama reference: the comparison's error, mismatches and near-ties",
          "[examples][reference]") {
  // want's largest magnitude is 3: at bound 0.03 a tie's tolerance is 2 * 0.03 * 3 = 0.18.
  const Vec want{1.0, 2.0, 3.0, 2.85};
  lr::Comparison c;
  lr::compare(want.data(), want.data(), 4, 2, 0.03, c);  // identical, the argmax chosen
  CHECK(c.error == 0.0);
  CHECK(c.mismatches == 0);
  CHECK(c.near_ties == 0);
  CHECK(c.off_own_argmax == 0);
  const Vec got{1.0, 2.0, 2.84, 2.86};
  lr::compare(got.data(), want.data(), 4, 3, 0.03, c);  // 3.00 against 2.85: a near-tie
  CHECK(c.near_ties == 1);
  CHECK(c.mismatches == 0);
  CHECK(c.error ==
        Approx(std::sqrt(0.16 * 0.16 + 0.01 * 0.01) / std::sqrt(1 + 4 + 9 + 2.85 * 2.85)));
  const Vec far{1.0, 2.0, 2.7, 2.8};
  lr::compare(far.data(), Vec{1.0, 2.0, 3.0, 2.8}.data(), 4, 3, 0.03, c);  // a gap of 0.2
  CHECK(c.mismatches == 1);
  CHECK(c.off_own_argmax == 0);
  lr::compare(got.data(), want.data(), 4, 1, 0.03, c);  // 2.00 chosen where 2.86 was larger
  CHECK(c.off_own_argmax == 1);
  CHECK(c.mismatches == 2);
  CHECK(c.near_ties == 1);
}
