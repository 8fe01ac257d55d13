// jit/ops: composite ops, decomposed into primitives when recorded, so that the fuser sees one
// language and hand-written versions fuse the same way. f16/bf16 inputs are computed in f32 and
// the result cast back, as PyTorch does; integer inputs are computed in f32.
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "fusejit/context.h"
#include "fusejit/error.h"
#include "ir/shape.h"

namespace fusejit {

namespace {

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

// x in the dtype the composite computes in.
Tensor upcast(const Tensor& x) { return x.dtype() == DType::f32 ? x : cast(x, DType::f32); }

// The result, cast back to the input's dtype when that was a half type.
Tensor downcast(const Tensor& y, DType original) { return is_half(original) ? cast(y, original) : y; }

std::vector<int64_t> trailing_axes(const Tensor& x, int64_t count, std::string_view op) {
  if (count < 1 || count > x.rank()) {
    throw UsageError(fmt::format("{}: cannot normalize over the last {} axes of {}{} (rank {})", op,
                            count, dtype_name(x.dtype()), ir::shape_str(x.shape()), x.rank()));
  }
  std::vector<int64_t> axes;
  for (int64_t i = x.rank() - count; i < x.rank(); ++i) axes.push_back(i);
  return axes;
}

void check_param(const Tensor& x, const Tensor& p, int64_t count, std::string_view op,
                 std::string_view what) {
  if (!p.defined()) return;
  const Shape expected(x.shape().end() - count, x.shape().end());
  if (p.shape() != expected) {
    throw UsageError(fmt::format("{}: {} has shape {} but must have shape {} (the normalized dimensions "
                            "of the input {}{})",
                            op, what, ir::shape_str(p.shape()), ir::shape_str(expected),
                            dtype_name(x.dtype()), ir::shape_str(x.shape())));
  }
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
  const Tensor t = upcast(x);
  const Tensor shifted = t - max(t, {axis}, true);
  const Tensor e = exp(shifted);
  return downcast(e / sum(e, {axis}, true), x.dtype());
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  const Tensor t = upcast(x);
  const Tensor shifted = t - max(t, {axis}, true);
  return downcast(shifted - log(sum(exp(shifted), {axis}, true)), x.dtype());
}

// y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  int64_t normalized_rank) {
  const std::vector<int64_t> axes = trailing_axes(x, normalized_rank, "layer_norm");
  check_param(x, weight, normalized_rank, "layer_norm", "weight");
  check_param(x, bias, normalized_rank, "layer_norm", "bias");
  const Tensor t = upcast(x);
  const Tensor centered = t - mean(t, axes, true);
  const Tensor variance = mean(centered * centered, axes, true);
  Tensor y = centered * rsqrt(variance + eps);
  if (weight.defined()) y = y * upcast(weight);
  if (bias.defined()) y = y + upcast(bias);
  return downcast(y, x.dtype());
}

// y = x / sqrt(mean(x^2) + eps) * weight
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, int64_t normalized_rank) {
  const std::vector<int64_t> axes = trailing_axes(x, normalized_rank, "rms_norm");
  check_param(x, weight, normalized_rank, "rms_norm", "weight");
  const Tensor t = upcast(x);
  Tensor y = t * rsqrt(mean(t * t, axes, true) + eps);
  if (weight.defined()) y = y * upcast(weight);
  return downcast(y, x.dtype());
}

// sum((x - mean)^2) / (N - correction) over `axes` (all when empty).
Tensor var(const Tensor& x, std::vector<int64_t> axes, double correction, bool keepdim) {
  if (!is_floating(x.dtype())) {
    throw UsageError(fmt::format("var: the operand is {}{}, but var needs a floating-point operand; "
                            "cast it to f32 first",
                            dtype_name(x.dtype()), ir::shape_str(x.shape())));
  }
  if (axes.empty()) {
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  }
  int64_t n = 1;
  for (int64_t a : axes) n *= x.shape()[static_cast<size_t>(ir::normalize_axis(a, x.rank(), "var"))];
  const Tensor t = upcast(x);
  const Tensor centered = t - mean(t, axes, true);
  const Tensor y = sum(centered * centered, axes, keepdim) / (static_cast<double>(n) - correction);
  return downcast(y, x.dtype());
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (weight.rank() != 2) {
    throw UsageError(fmt::format("linear: weight {}{} must be 2-D [out_features, in_features]",
                            dtype_name(weight.dtype()), ir::shape_str(weight.shape())));
  }
  if (x.rank() < 1 || weight.shape()[1] != x.shape().back()) {
    throw UsageError(fmt::format("linear: weight {}{} has {} in_features but the input {}{} has {} (its "
                            "last dimension); weight is [out_features, in_features]",
                            dtype_name(weight.dtype()), ir::shape_str(weight.shape()),
                            weight.shape()[1], dtype_name(x.dtype()), ir::shape_str(x.shape()),
                            x.rank() ? x.shape().back() : 0));
  }
  Tensor y = matmul(x, transpose(weight, 0, 1));
  if (bias.defined()) {
    if (bias.shape() != Shape{weight.shape()[0]}) {
      throw UsageError(fmt::format("linear: bias {}{} must have shape [{}] (out_features)",
                              dtype_name(bias.dtype()), ir::shape_str(bias.shape()),
                              weight.shape()[0]));
    }
    y = y + bias;
  }
  return y;
}

Tensor addcmul(const Tensor& x, const Tensor& a, const Tensor& b, double value) {
  if (value == 1.0) return x + a * b;
  return x + value * a * b;
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  if (!lo && !hi) throw UsageError("clamp: give a lower bound, an upper bound, or both");
  if (lo && hi && *lo > *hi) {
    throw UsageError(fmt::format("clamp: the lower bound {} is above the upper bound {}", *lo, *hi));
  }
  // A bound takes x's dtype category, as a Python scalar does: a float tensor's dtype; an
  // integer tensor's for an integral bound, else f32 (and the result promotes to f32).
  const auto bound = [&](double v) {
    const bool integral = std::trunc(v) == v;
    const DType d = is_floating(x.dtype())              ? x.dtype()
                    : is_integral(x.dtype()) && integral ? x.dtype()
                    : integral                           ? DType::i64
                                                         : DType::f32;
    return x.context().scalar(v, d);
  };
  Tensor y = x;
  if (lo) y = maximum(y, bound(*lo));
  if (hi) y = minimum(y, bound(*hi));
  return y;
}

// gather with `index` laid along `axis` and broadcast over the other axes: a view, so the
// index is loaded inside the consumer's kernel.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  if (index.rank() != 1) {
    throw UsageError(fmt::format("index_select: the index {}{} must be 1-D; use gather for an index "
                                 "of x's rank",
                                 dtype_name(index.dtype()), ir::shape_str(index.shape())));
  }
  if (x.rank() == 0) throw UsageError("index_select: x is a scalar; it has no axis to select along");
  const size_t a = static_cast<size_t>(ir::normalize_axis(axis, x.rank(), "index_select"));
  Shape along(x.shape().size(), 1);
  along[a] = index.shape()[0];
  Shape out = x.shape();
  out[a] = index.shape()[0];
  return gather(x, static_cast<int64_t>(a), expand(reshape(index, along), out));
}

Tensor embedding(const Tensor& table, const Tensor& ids) {
  if (table.rank() != 2) {
    throw UsageError(fmt::format("embedding: the table {}{} must be 2-D [rows, dim]",
                                 dtype_name(table.dtype()), ir::shape_str(table.shape())));
  }
  Shape out = ids.shape();
  out.push_back(table.shape()[1]);
  return reshape(index_select(table, 0, reshape(ids, {ids.numel()})), std::move(out));
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw UsageError(fmt::format("dropout: p = {} is not a probability; give p in [0, 1]", p));
  }
  if (!is_floating(x.dtype())) {
    throw UsageError(fmt::format("dropout: x is {}{}; dropout needs a floating-point tensor",
                                 dtype_name(x.dtype()), ir::shape_str(x.shape())));
  }
  if (p == 0.0) return x;
  if (p == 1.0) return x * 0.0;  // NaN and inf become NaN, as in torch
  Context& ctx = x.context();
  const Tensor keep = lt(ctx.rand(x.shape(), seed, offset), ctx.scalar(1.0 - p));
  const Tensor kept = upcast(x) * (1.0 / (1.0 - p));
  return downcast(where(keep, kept, ctx.scalar(0.0)), x.dtype());
}

// The first position of the largest value along `axis`: min over the positions where x equals
// the row's max (NaN, which max keeps, counts as the largest: its positions are the hits when
// there is one, as torch.argmax picks it). One normalization kernel: the max, then the min of
// the hits' positions over the same row.
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  if (x.rank() == 0) throw UsageError("argmax: x is a scalar; it has no axis to search along");
  if (x.dtype() == DType::boolean) {
    throw UsageError("argmax: x is bool; cast it to an integer or float dtype first");
  }
  const int64_t a = ir::normalize_axis(axis, x.rank(), "argmax");
  const int64_t extent = x.shape()[static_cast<size_t>(a)];
  Context& ctx = x.context();
  Shape along(static_cast<size_t>(x.rank()), 1);
  along[static_cast<size_t>(a)] = extent;
  const Tensor position = reshape(ctx.arange(0, static_cast<double>(extent), 1, DType::i64), along);
  const Tensor none = ctx.scalar(static_cast<double>(extent), DType::i64);
  const Tensor largest = max(x, {a}, true);
  const Tensor hit = where(ne(x, x), position, where(eq(x, largest), position, none));
  return min(hit, {a}, keepdim);
}

// Gumbel-max: argmax(logits / t + g), g = -log(-log(u)) for u uniform per element, is a draw
// from softmax(logits / t) along the axis. u comes from Context::rand(seed, offset), so the
// draw is a pure function of (seed, offset, position), the same on the GPU and the CPU
// reference, and a new seed or offset per step compiles nothing.
namespace {

// sample's checks of its operands (either form).
void check_sample(const Tensor& logits, double temperature) {
  if (!is_floating(logits.dtype())) {
    throw UsageError(
        fmt::format("sample: the logits are {}{}; sampling needs floating-point "
                    "logits",
                    dtype_name(logits.dtype()), ir::shape_str(logits.shape())));
  }
  if (!(temperature >= 0.0) || std::isinf(temperature)) {
    throw UsageError(
        fmt::format("sample: temperature {} is not a finite number >= 0 (0 picks the "
                    "largest logit)",
                    temperature));
  }
}

// argmax(logits / temperature - log(-log(u))): a draw from softmax(logits / temperature).
Tensor gumbel_max(const Tensor& logits, double temperature, const Tensor& u, int64_t axis) {
  const Tensor gumbel = -log(-log(u));
  return argmax(upcast(logits) * (1.0 / temperature) + gumbel, axis);
}

}  // namespace

Tensor sample(const Tensor& logits, double temperature, uint64_t seed, uint64_t offset,
              int64_t axis) {
  check_sample(logits, temperature);
  if (temperature == 0.0) return argmax(logits, axis);
  return gumbel_max(logits, temperature, logits.context().rand(logits.shape(), seed, offset), axis);
}

Tensor sample(const Tensor& logits, double temperature, const Tensor& key, int64_t axis) {
  check_sample(logits, temperature);
  if (temperature == 0.0) return argmax(logits, axis);
  return gumbel_max(logits, temperature, logits.context().rand(logits.shape(), key), axis);
}

namespace {

// Rounds of the threshold search, each splitting the row's interval into kBins: after 4 rounds
// of 256 the interval is (max - min) / 2^32 wide, below the spacing of f32 values of the
// logits' magnitudes.
constexpr int kSearchRounds = 4;
constexpr int kBins = 256;

// Per row of x (the last axis; shape [..., 1]): the largest threshold t found by the search such
// that sum(weight * (x >= t)) >= target, weight [..., V] or empty (1 per element), target a
// number or [..., 1]. Each round counts the weight at or above kBins evenly spaced candidates
// between the current bounds, then keeps the interval of the last candidate that still reaches
// the target (the first always does: it is the row's min, or the bound kept before, where the
// weight was already reached).
// How it is written decides its kernels (a round is two: the count, then the candidates that
// reached the target, counted):
//   - the count is a column reduction: the row as a column [..., V, 1] against the candidates
//     as a row [..., 1, kBins], summed over V. A block then loads each logit once and tests it
//     against a tile of candidates; summed along the row instead ([..., kBins, V] over V), each
//     candidate's block read the whole row again, kBins times the row's bytes a round;
//   - the bounds and the step keep the shape of the reductions that give them ([..., 1], as the
//     counts' sum with keepdim), so that their updates are those reductions' epilogues, not
//     kernels of one element each;
//   - the candidates' positions are an arange, an index computed where it is read.
Tensor search_threshold(const Tensor& x, const Tensor& weight, const Tensor& target) {
  Context& ctx = x.context();
  const Tensor column = unsqueeze(x, -1);  // [..., V, 1]
  const Tensor w = weight.defined() ? unsqueeze(weight, -1) : Tensor();
  const Tensor position = ctx.arange(0, kBins, 1);  // [kBins]
  // The bounds of the finite logits (an earlier filter's -inf are never kept): two reductions
  // of x alone, siblings that one kernel computes; a row of -inf only gets lo = top = -inf.
  const Tensor top = max(x, {-1}, true);
  const Tensor finite_min =
      min(where(eq(x, ctx.scalar(-INFINITY)), ctx.scalar(INFINITY), x), {-1}, true);
  Tensor lo = minimum(finite_min, top);  // [..., 1]
  Tensor step = (top - lo) * (1.0 / kBins);
  for (int round = 0; round < kSearchRounds; ++round) {
    const Tensor t = unsqueeze(lo + step * position, -2);            // [..., 1, kBins]
    const Tensor above = cast(ge(column, t), DType::f32);            // [..., V, kBins]
    const Tensor mass = sum(w.defined() ? above * w : above, {-2});  // [..., kBins]
    const Tensor reached = ge(mass, target);
    // (At least 0: fewer finite logits than the target keep them all.)
    const Tensor last = maximum(sum(cast(reached, DType::f32), {-1}, true) - 1.0, ctx.scalar(0.0));
    lo = lo + step * last;
    step = step * (1.0 / kBins);
  }
  return lo;
}

Tensor keep_at_or_above(const Tensor& logits, const Tensor& threshold) {
  const Tensor x = upcast(logits);
  const Tensor kept = where(ge(x, threshold), x, logits.context().scalar(-INFINITY));
  return downcast(kept, logits.dtype());
}

void check_logits(const Tensor& logits, std::string_view op) {
  if (!is_floating(logits.dtype()) || logits.rank() == 0) {
    throw UsageError(
        fmt::format("{}: the logits are {}{}; it needs floating-point logits with "
                    "a vocabulary axis (the last)",
                    op, dtype_name(logits.dtype()), ir::shape_str(logits.shape())));
  }
}

}  // namespace

// The k largest logits of each row kept, the others -inf: every logit at or above the row's
// k-th largest value (ties with it are kept too, as a pivot comparison keeps them).
Tensor top_k_filter(const Tensor& logits, int64_t k) {
  check_logits(logits, "top_k_filter");
  if (k < 1) throw UsageError(fmt::format("top_k_filter: k = {} keeps nothing; give k >= 1", k));
  if (k >= logits.shape().back()) return logits;
  const Tensor x = upcast(logits);
  return keep_at_or_above(logits, search_threshold(x, Tensor(), x.context().scalar(double(k))));
}

// The smallest set of largest logits whose softmax mass reaches p kept, the others -inf.
Tensor top_p_filter(const Tensor& logits, double p) {
  check_logits(logits, "top_p_filter");
  if (!(p > 0.0 && p <= 1.0)) {
    throw UsageError(fmt::format("top_p_filter: p = {} is not in (0, 1]", p));
  }
  if (p == 1.0) return logits;
  const Tensor x = upcast(logits);
  return keep_at_or_above(logits, search_threshold(x, softmax(x, -1), x.context().scalar(p)));
}

}  // namespace fusejit
