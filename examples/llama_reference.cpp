// The double-precision Llama decoder of llama_reference.h.
#include "llama_reference.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llama_reference {

namespace {

using Vec = std::vector<double>;

// y[o] = sum_i w[o, i] x[i] for a [out, in] weight.
Vec project(const Vec& w, const Vec& x, int64_t out) {
  const size_t in = x.size();
  if (w.size() != static_cast<size_t>(out) * in) throw std::logic_error("project: shapes");
  Vec y(static_cast<size_t>(out), 0.0);
  for (size_t o = 0; o < y.size(); ++o) {
    const double* row = w.data() + o * in;
    double s = 0.0;
    for (size_t i = 0; i < in; ++i) s += row[i] * x[i];
    y[o] = s;
  }
  return y;
}

Vec rms_norm(const Vec& x, const Vec& gain, double eps) {
  double squares = 0.0;
  for (double v : x) squares += v * v;
  const double scale = 1.0 / std::sqrt(squares / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * gain[i];
  return y;
}

// Rotate-half rotary embedding of each head of `t` (heads * d values) at `position`: element i
// of a head turns by position * base^(-2 (i mod d/2) / d) against its partner half a head away.
void rotate(Vec& t, int64_t d, int64_t position, double base) {
  const int64_t half = d / 2;
  for (size_t h0 = 0; h0 < t.size(); h0 += static_cast<size_t>(d)) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(position) * std::pow(base, -2.0 * double(i) / double(d));
      const double c = std::cos(angle), s = std::sin(angle);
      double& a = t[h0 + static_cast<size_t>(i)];
      double& b = t[h0 + static_cast<size_t>(i + half)];
      const double x = a, y = b;
      a = x * c - y * s;
      b = y * c + x * s;
    }
  }
}

// The attention output (heads * d) of query `q` at position p over keys/values 0..p.
Vec attend(const Shape& s, const Vec& q, const std::vector<Vec>& keys,
           const std::vector<Vec>& values) {
  const int64_t d = s.head_dim(), group = s.heads / s.kv_heads;
  Vec out(static_cast<size_t>(s.heads * d), 0.0);
  std::vector<double> score(keys.size());
  for (int64_t h = 0; h < s.heads; ++h) {
    const size_t qh = static_cast<size_t>(h * d), kh = static_cast<size_t>((h / group) * d);
    double top = -INFINITY;
    for (size_t j = 0; j < keys.size(); ++j) {
      double dot = 0.0;
      for (int64_t e = 0; e < d; ++e) dot += q[qh + size_t(e)] * keys[j][kh + size_t(e)];
      score[j] = dot / std::sqrt(double(d));
      top = std::max(top, score[j]);
    }
    double total = 0.0;
    for (double& v : score) total += (v = std::exp(v - top));
    for (size_t j = 0; j < keys.size(); ++j) {
      for (int64_t e = 0; e < d; ++e) {
        out[qh + size_t(e)] += score[j] / total * values[j][kh + size_t(e)];
      }
    }
  }
  return out;
}

Vec feed_forward(const Shape& s, const LayerWeights& y, const Vec& x) {
  const Vec gate = project(y.w1, x, s.ffn), up = project(y.w3, x, s.ffn);
  Vec mixed(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) mixed[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return project(y.w2, mixed, s.hidden);
}

// One layer at one position: the residual stream x, updated; appends the position's key and
// value to the layer's lists.
void layer_step(const Shape& s, const LayerWeights& y, int64_t position, Vec& x,
                std::vector<Vec>& keys, std::vector<Vec>& values) {
  const int64_t d = s.head_dim();
  const Vec xn = rms_norm(x, y.attn_norm, s.norm_eps);
  Vec q = project(y.wq, xn, s.heads * d), k = project(y.wk, xn, s.kv_heads * d);
  rotate(q, d, position, s.rope_base);
  rotate(k, d, position, s.rope_base);
  keys.push_back(std::move(k));
  values.push_back(project(y.wv, xn, s.kv_heads * d));
  const Vec attended = project(y.wo, attend(s, q, keys, values), s.hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] += attended[i];
  const Vec ffn = feed_forward(s, y, rms_norm(x, y.ffn_norm, s.norm_eps));
  for (size_t i = 0; i < x.size(); ++i) x[i] += ffn[i];
}

}  // namespace

std::vector<double> logits(const Weights& w, const std::vector<int64_t>& tokens, int64_t first) {
  const Shape& s = w.shape;
  std::vector<std::vector<Vec>> keys(w.layers.size()), values(w.layers.size());
  std::vector<double> out;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const size_t row = static_cast<size_t>(tokens[p] * s.hidden);
    Vec x(w.embed.begin() + static_cast<std::ptrdiff_t>(row),
          w.embed.begin() + static_cast<std::ptrdiff_t>(row + size_t(s.hidden)));
    for (size_t l = 0; l < w.layers.size(); ++l) {
      layer_step(s, w.layers[l], int64_t(p), x, keys[l], values[l]);
    }
    if (int64_t(p) < first) continue;
    const Vec scores = project(w.lm_head, rms_norm(x, w.final_norm, s.norm_eps), s.vocab);
    out.insert(out.end(), scores.begin(), scores.end());
  }
  return out;
}

void compare(const double* got, const double* want, size_t vocab, size_t token, double bound,
             Comparison& out) {
  double diff = 0.0, norm = 0.0, largest = 0.0;
  for (size_t v = 0; v < vocab; ++v) {
    diff += (got[v] - want[v]) * (got[v] - want[v]);
    norm += want[v] * want[v];
    largest = std::max(largest, std::abs(want[v]));
  }
  out.error = std::max(out.error, std::sqrt(diff / norm));
  if (got[token] < *std::max_element(got, got + vocab)) ++out.off_own_argmax;
  const auto best = static_cast<size_t>(std::max_element(want, want + vocab) - want);
  if (token == best) return;
  const double tolerance = 2.0 * bound * largest;
  ++(want[best] - want[token] <= tolerance ? out.near_ties : out.mismatches);
}

}  // namespace llama_reference
