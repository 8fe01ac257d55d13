// The normalizations as the API decomposes them into primitives, for the templates tests that
// build them by hand: softmax, log-softmax, layer norm (weight and bias), RMS norm (weight) and
// logsumexp, each over the last axis.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace fusejit::test {

inline ir::NodeId scalar(ir::Graph& g, double v) { return add_constant(g, DType::f32, v); }

// Results keep x's dtype, as the API's composites do: statistics in f32, cast back at the end.
inline ir::NodeId softmax(ir::Graph& g, ir::NodeId x) {
  using ir::Op;
  const ir::NodeId m = add_reduce(g, Op::max, x, {-1}, true);
  const ir::NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
  const ir::NodeId s = add_reduce(g, Op::sum, e, {-1}, true);
  return add_binary(g, Op::div, e, s);
}

inline ir::NodeId log_softmax(ir::Graph& g, ir::NodeId x) {
  using ir::Op;
  const ir::NodeId m = add_reduce(g, Op::max, x, {-1}, true);
  const ir::NodeId d = add_binary(g, Op::sub, x, m);
  const ir::NodeId s = add_reduce(g, Op::sum, add_unary(g, Op::exp, d), {-1}, true);
  return add_binary(g, Op::sub, d, add_unary(g, Op::log, s));
}

inline ir::NodeId layer_norm(ir::Graph& g, ir::NodeId x, ir::NodeId w, ir::NodeId b) {
  using ir::Op;
  const DType d = g.node(x).dtype;
  const ir::NodeId xf = add_cast(g, x, DType::f32);
  const ir::NodeId mu = add_reduce(g, Op::mean, xf, {-1}, true);
  const ir::NodeId c = add_binary(g, Op::sub, xf, mu);
  const ir::NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, c, c), {-1}, true);
  const ir::NodeId r = add_unary(g, Op::rsqrt, add_binary(g, Op::add, var, scalar(g, 1e-5)));
  const ir::NodeId y =
      add_binary(g, Op::add, add_binary(g, Op::mul, add_binary(g, Op::mul, c, r), w), b);
  return add_cast(g, y, d);
}

inline ir::NodeId rms_norm(ir::Graph& g, ir::NodeId x, ir::NodeId w) {
  using ir::Op;
  const DType d = g.node(x).dtype;
  const ir::NodeId xf = add_cast(g, x, DType::f32);
  const ir::NodeId ms = add_reduce(g, Op::mean, add_binary(g, Op::mul, xf, xf), {-1}, true);
  const ir::NodeId r = add_unary(g, Op::rsqrt, add_binary(g, Op::add, ms, scalar(g, 1e-6)));
  return add_cast(g, add_binary(g, Op::mul, add_binary(g, Op::mul, xf, r), w), d);
}

// Layer norm over the trailing `rank` axes, with weight and bias when given (>= 0), as the API
// records it: statistics in f32, the result cast back to x's dtype.
inline ir::NodeId layer_norm_over(ir::Graph& g, ir::NodeId x, int64_t rank, ir::NodeId w = -1,
                                  ir::NodeId b = -1) {
  using ir::Op;
  const DType d = g.node(x).dtype;
  const int64_t n = static_cast<int64_t>(g.node(x).shape.size());
  std::vector<int64_t> axes;
  for (int64_t a = n - rank; a < n; ++a) axes.push_back(a);
  const ir::NodeId xf = d == DType::f32 ? x : add_cast(g, x, DType::f32);
  const ir::NodeId c = add_binary(g, Op::sub, xf, add_reduce(g, Op::mean, xf, axes, true));
  const ir::NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, c, c), axes, true);
  ir::NodeId y = add_binary(
      g, Op::mul, c, add_unary(g, Op::rsqrt, add_binary(g, Op::add, var, scalar(g, 1e-5))));
  if (w >= 0) y = add_binary(g, Op::mul, y, d == DType::f32 ? w : add_cast(g, w, DType::f32));
  if (b >= 0) y = add_binary(g, Op::add, y, d == DType::f32 ? b : add_cast(g, b, DType::f32));
  return d == DType::f32 ? y : add_cast(g, y, d);
}

// sum((x - mean x)^2) / (N - correction) over `axes`, as the API records var.
inline ir::NodeId variance(ir::Graph& g, ir::NodeId x, const std::vector<int64_t>& axes,
                           double correction, bool keepdim) {
  using ir::Op;
  const DType d = g.node(x).dtype;
  int64_t count = 1;
  for (int64_t a : axes) count *= g.node(x).shape[static_cast<size_t>(a)];
  const ir::NodeId xf = d == DType::f32 ? x : add_cast(g, x, DType::f32);
  const ir::NodeId c = add_binary(g, Op::sub, xf, add_reduce(g, Op::mean, xf, axes, true));
  const ir::NodeId s = add_reduce(g, Op::sum, add_binary(g, Op::mul, c, c), axes, keepdim);
  const ir::NodeId v =
      add_binary(g, Op::div, s, scalar(g, static_cast<double>(count) - correction));
  return d == DType::f32 ? v : add_cast(g, v, d);
}

// log(sum(exp(x - max x))) + max x, one value per row, in x's dtype.
inline ir::NodeId logsumexp(ir::Graph& g, ir::NodeId x) {
  using ir::Op;
  const DType d = g.node(x).dtype;
  const ir::NodeId xf = add_cast(g, x, DType::f32);
  const ir::NodeId m = add_reduce(g, Op::max, xf, {-1}, true);
  const ir::NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, xf, m));
  const ir::NodeId s = add_reduce(g, Op::sum, e, {-1}, true);
  return add_cast(g, add_binary(g, Op::add, add_unary(g, Op::log, s), m), d);
}

}  // namespace fusejit::test
