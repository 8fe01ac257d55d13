// The normalizations as the API decomposes them into primitives, for the templates tests that
// build them by hand: softmax, log-softmax, layer norm (weight and bias), RMS norm (weight) and
// logsumexp, each over the last axis.
#pragma once

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
