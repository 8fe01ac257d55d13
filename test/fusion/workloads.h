// The seed workloads of the bench suite, built with the ir builders as the API records them, at
// test sizes; and a checker of the invariants every plan must satisfy.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fusion/dataflow.h"
#include "fusion/pipeline.h"
#include "fusion/plan.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/interp.h"
#include "ir/shape.h"
#include "support/catch.h"

namespace fusejit::fusion::test {

using ir::Graph;
using ir::NodeId;
using ir::Op;

inline constexpr int64_t R = 64, C = 256;

inline NodeId scalar(Graph& g, DType dt, double v) { return ir::add_constant(g, dt, v); }
inline NodeId bin(Graph& g, Op op, NodeId a, NodeId b) { return ir::add_binary(g, op, a, b); }
inline NodeId un(Graph& g, Op op, NodeId a) { return ir::add_unary(g, op, a); }

// relu(x * w + b), b a row vector.
inline Graph ew_chain(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C}), w = ir::add_input(g, dt, {R, C});
  const NodeId b = ir::add_input(g, dt, {C});
  g.add_output(un(g, Op::relu, bin(g, Op::add, bin(g, Op::mul, x, w), b)));
  return g;
}

// tanh(sigmoid(x * w + b) * x) * 0.5 + sqrt(abs(w - b))
inline Graph long_chain(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C}), w = ir::add_input(g, dt, {R, C});
  const NodeId b = ir::add_input(g, dt, {R, C});
  const NodeId s = un(g, Op::sigmoid, bin(g, Op::add, bin(g, Op::mul, x, w), b));
  const NodeId left = bin(g, Op::mul, un(g, Op::tanh, bin(g, Op::mul, s, x)), scalar(g, dt, 0.5));
  const NodeId right = un(g, Op::sqrt, un(g, Op::abs, bin(g, Op::sub, w, b)));
  g.add_output(bin(g, Op::add, left, right));
  return g;
}

// gelu(x + b) * w, b a row vector.
inline Graph bias_gelu(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C}), b = ir::add_input(g, dt, {C});
  const NodeId w = ir::add_input(g, dt, {R, C});
  g.add_output(bin(g, Op::mul, un(g, Op::gelu, bin(g, Op::add, x, b)), w));
  return g;
}

// sum(x * x, axis -1)
inline Graph sumsq(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C});
  g.add_output(ir::add_reduce(g, Op::sum, bin(g, Op::mul, x, x), {-1}, false));
  return g;
}

// exp(x - max(x)) / sum(exp(x - max(x))) over `axis`, written out by hand; `x` an existing node.
inline NodeId softmax_of(Graph& g, NodeId x, int64_t axis = -1) {
  const NodeId m = ir::add_reduce(g, Op::max, x, {axis}, true);
  const NodeId e = un(g, Op::exp, bin(g, Op::sub, x, m));
  const NodeId s = ir::add_reduce(g, Op::sum, e, {axis}, true);
  return bin(g, Op::div, e, s);
}

inline Graph naive_softmax(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C});
  g.add_output(softmax_of(g, x));
  return g;
}

// softmax as the API decomposes it: half types are computed in f32 and cast back.
inline Graph api_softmax(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C});
  const bool half = dt != DType::f32;
  const NodeId y = softmax_of(g, half ? ir::add_cast(g, x, DType::f32) : x);
  g.add_output(half ? ir::add_cast(g, y, dt) : y);
  return g;
}

// Mean over the last axis with keepdim: the mean op, or sum * (1/C).
inline NodeId mean_last(Graph& g, NodeId x, bool with_mean_op) {
  if (with_mean_op) return ir::add_reduce(g, Op::mean, x, {-1}, true);
  const ir::Node& n = g.node(x);
  const double inv = 1.0 / static_cast<double>(n.shape.back());
  return bin(g, Op::mul, ir::add_reduce(g, Op::sum, x, {-1}, true), scalar(g, n.dtype, inv));
}

// (x - mean) * rsqrt(mean((x - mean)^2) + eps) * weight + bias, over the last axis.
inline NodeId layer_norm_of(Graph& g, NodeId x, NodeId weight, NodeId bias, bool with_mean_op) {
  const DType dt = g.node(x).dtype;
  const NodeId xc = bin(g, Op::sub, x, mean_last(g, x, with_mean_op));
  const NodeId var = mean_last(g, bin(g, Op::mul, xc, xc), with_mean_op);
  const NodeId rstd = un(g, Op::rsqrt, bin(g, Op::add, var, scalar(g, dt, 1e-5)));
  return bin(g, Op::add, bin(g, Op::mul, bin(g, Op::mul, xc, rstd), weight), bias);
}

inline Graph layernorm(DType dt, bool with_mean_op, Shape shape = {R, C}) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, shape);
  const NodeId w = ir::add_input(g, dt, {shape.back()}), b = ir::add_input(g, dt, {shape.back()});
  g.add_output(layer_norm_of(g, x, w, b, with_mean_op));
  return g;
}

// x * rsqrt(mean(x * x) + eps) * weight
inline Graph rmsnorm(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C}), w = ir::add_input(g, dt, {C});
  const NodeId ms = mean_last(g, bin(g, Op::mul, x, x), true);
  const NodeId r = un(g, Op::rsqrt, bin(g, Op::add, ms, scalar(g, dt, 1e-6)));
  g.add_output(bin(g, Op::mul, bin(g, Op::mul, x, r), w));
  return g;
}

// s = x + y; out = layer_norm(s); both are outputs.
inline Graph add_layernorm(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, C}), y = ir::add_input(g, dt, {R, C});
  const NodeId w = ir::add_input(g, dt, {C}), b = ir::add_input(g, dt, {C});
  const NodeId s = bin(g, Op::add, x, y);
  g.add_output(s);
  g.add_output(layer_norm_of(g, s, w, b, true));
  return g;
}

// relu(x @ w + b)
inline Graph gemm_bias_relu(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, 128}), w = ir::add_input(g, dt, {128, C});
  const NodeId b = ir::add_input(g, dt, {C});
  g.add_output(un(g, Op::relu, bin(g, Op::add, ir::add_matmul(g, x, w), b)));
  return g;
}

// gelu_tanh(x @ w + b)
inline Graph gemm_bias_gelu(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, 128}), w = ir::add_input(g, dt, {128, C});
  const NodeId b = ir::add_input(g, dt, {C});
  g.add_output(un(g, Op::gelu_tanh, bin(g, Op::add, ir::add_matmul(g, x, w), b)));
  return g;
}

// (x @ w1) * (x @ w2)
inline Graph two_gemm_mul(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, 128}), w1 = ir::add_input(g, dt, {128, C});
  const NodeId w2 = ir::add_input(g, dt, {128, C});
  g.add_output(bin(g, Op::mul, ir::add_matmul(g, x, w1), ir::add_matmul(g, x, w2)));
  return g;
}

// layer_norm(x @ w + b) without weight and bias, as the API records it: half types are
// normalized in f32 and cast back.
inline Graph gemm_layernorm(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, 128}), w = ir::add_input(g, dt, {128, C});
  const NodeId b = ir::add_input(g, dt, {C});
  const NodeId y = bin(g, Op::add, ir::add_matmul(g, x, w), b);
  const bool half = dt != DType::f32;
  const NodeId t = half ? ir::add_cast(g, y, DType::f32) : y;
  const NodeId xc = bin(g, Op::sub, t, mean_last(g, t, true));
  const NodeId var = mean_last(g, bin(g, Op::mul, xc, xc), true);
  const NodeId rstd = un(g, Op::rsqrt, bin(g, Op::add, var, scalar(g, DType::f32, 1e-5)));
  const NodeId out = bin(g, Op::mul, xc, rstd);
  g.add_output(half ? ir::add_cast(g, out, dt) : out);
  return g;
}

// gelu_tanh(x @ w1 + b1) @ w2 + b2
inline Graph mlp(DType dt) {
  Graph g;
  const NodeId x = ir::add_input(g, dt, {R, 128}), w1 = ir::add_input(g, dt, {128, C});
  const NodeId b1 = ir::add_input(g, dt, {C});
  const NodeId w2 = ir::add_input(g, dt, {C, 128}), b2 = ir::add_input(g, dt, {128});
  const NodeId h = un(g, Op::gelu_tanh, bin(g, Op::add, ir::add_matmul(g, x, w1), b1));
  g.add_output(bin(g, Op::add, ir::add_matmul(g, h, w2), b2));
  return g;
}

inline bool contains(const std::vector<NodeId>& v, NodeId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

// What every plan must satisfy: regions in execution order, each input available when read,
// every graph output written exactly once, nothing but views, constants and recomputed
// elementwise values in two regions (a recomputed value is written by none, is no costly op,
// and each region evaluating it says so in a decision), constants never read from memory,
// every decision explained.
inline void check_plan(const Plan& plan) {
  const Graph& g = plan.graph;
  std::set<NodeId> available;
  for (NodeId in : g.inputs()) available.insert(in);
  std::vector<int> computed_in(g.size(), 0), written_by(g.size(), 0);
  for (const Region& r : plan.regions) {
    INFO("region of kind " << region_kind_name(r.kind) << " ending at %" << r.nodes.back());
    // Closed: every operand of a node the region evaluates is evaluated there or read.
    for (NodeId id : r.nodes) {
      const ir::Node& n = g.node(id);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const NodeId in = n.inputs[k];
        const bool transposed = n.op == Op::permute && r.kind == RegionKind::gemm;
        if (n.op == Op::update_slice && k == 0) {  // the buffer written in place, not read
          CHECK(g.node(in).op == Op::input);
          CHECK_FALSE(contains(r.inputs, in));
        } else if (!transposed) {
          CHECK((contains(r.nodes, in) || contains(r.inputs, in)));
        }
      }
      if (ir::op_kind(n.op) == ir::OpKind::reduce) {
        CHECK((r.kind == RegionKind::reduction || r.kind == RegionKind::normalization));
        CHECK(g.node(n.inputs[0]).shape == r.shape);
        CHECK(n.axes == r.reduce_axes);
      }
      if (n.op == Op::matmul) CHECK(r.kind == RegionKind::gemm);
    }
    if (r.kind == RegionKind::normalization) {
      const int64_t rank = static_cast<int64_t>(r.shape.size());
      const int64_t k = static_cast<int64_t>(r.reduce_axes.size());
      for (int64_t i = 0; i < k; ++i) CHECK(r.reduce_axes[static_cast<size_t>(i)] == rank - k + i);
    }
    if (r.kind == RegionKind::reduction) {
      for (NodeId out : r.outputs)
        CHECK(ir::numel(g.node(out).shape) * [&] {
          int64_t n = 1;
          for (int64_t a : r.reduce_axes) n *= r.shape[static_cast<size_t>(a)];
          return n;
        }() == ir::numel(r.shape));
    }
    for (NodeId in : r.inputs) {
      INFO("region input %" << in);
      CHECK(available.count(in) == 1);
      CHECK(g.node(in).op != Op::constant);
      if (r.kind != RegionKind::gemm) CHECK_FALSE(contains(r.nodes, in));
    }
    CHECK(std::is_sorted(r.nodes.begin(), r.nodes.end()));
    for (NodeId id : r.nodes) {
      const ir::Node& n = g.node(id);
      CHECK(n.op != Op::input);
      if (!fusion::detail::is_view_or_constant(n)) ++computed_in[static_cast<size_t>(id)];
    }
    CHECK_FALSE(r.outputs.empty());
    for (NodeId out : r.outputs) {
      INFO("region output %" << out);
      CHECK(contains(r.nodes, out));
      ++written_by[static_cast<size_t>(out)];
      available.insert(out);
    }
    if (r.kind == RegionKind::pointwise) {
      // The iteration space is an output's shape, the largest of several (a sweep each).
      bool named = false;
      for (NodeId out : r.outputs) {
        const Shape& s = ir::computed_shape(g, out);
        CHECK(ir::numel(s) <= ir::numel(r.shape));
        named = named || s == r.shape;
      }
      CHECK(named);
    }
  }
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("node %" << i);
    CHECK(written_by[i] <= 1);
    if (computed_in[i] <= 1) continue;
    const ir::Node& n = g.node(static_cast<NodeId>(i));
    CHECK(ir::is_elementwise(n.op));
    CHECK_FALSE(ir::op_has(n.op, ir::kCostly));
    CHECK(written_by[i] == 0);
    const std::string said = "recompute %" + std::to_string(i) + " in region ";
    const auto says = [&](const Decision& d) {
      return d.fused && d.producer == static_cast<NodeId>(i) && d.reason.rfind(said, 0) == 0;
    };
    CHECK(std::count_if(plan.decisions.begin(), plan.decisions.end(), says) == computed_in[i]);
  }
  for (NodeId out : g.outputs()) {
    INFO("graph output %" << out);
    if (g.node(out).op != Op::input) CHECK(written_by[static_cast<size_t>(out)] == 1);
  }
  for (const Decision& d : plan.decisions) CHECK_FALSE(d.reason.empty());
}

// The ops a region evaluates, constants left out.
inline std::vector<std::string> op_names(const Plan& plan, const Region& r) {
  std::vector<std::string> names;
  for (NodeId id : r.nodes) {
    const Op op = plan.graph.node(id).op;
    if (op != Op::constant) names.emplace_back(ir::op_name(op));
  }
  return names;
}

// Some decision is `fused` and its reason contains `reason_part`.
inline bool any_decision(const Plan& plan, bool fused, const std::string& reason_part) {
  for (const Decision& d : plan.decisions) {
    if (d.fused == fused && d.reason.find(reason_part) != std::string::npos) return true;
  }
  return false;
}

inline int count_kind(const Plan& plan, RegionKind kind) {
  return static_cast<int>(std::count_if(plan.regions.begin(), plan.regions.end(),
                                        [&](const Region& r) { return r.kind == kind; }));
}

using Memory = std::map<NodeId, ir::HostTensor>;

inline ir::HostTensor as_f32(const ir::HostTensor& t) {
  ir::HostTensor f(DType::f32, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) f.set(i, t.get(i));
  return f;
}

// What the executor makes of a gemm region, computed from its description alone, never from the
// nodes it folded: the buffers inputs[0] and inputs[1] (with the batch dims batch_a/batch_b and
// transposed where the flags say), the bias and residual buffers the epilogue names, and
//   D = act(alpha * (A @ B) * scale + beta * C + bias)
// (scale only with int8 weights, B then the i8 buffer under the cast the call does) with A @ B
// accumulated in f32 (the reference's matmul in f32) and the epilogue in double,
// rounded once to D's dtype: what cuBLASLt does with its f32 compute type. It also checks the
// layout the executor relies on: exactly one matmul, inputs [A, B, bias?, residual?], one output
// of the matmul's dtype and shape, a bias of N elements, a residual of the output's shape.
// `magnitude`, when given, receives per element |alpha * acc| + |beta * C| + |bias|.
inline ir::HostTensor gemm_call(const Plan& plan, const Region& r, const Memory& memory,
                                std::vector<double>* magnitude = nullptr) {
  const Graph& g = plan.graph;
  const GemmEpilogue& e = r.epilogue;
  std::vector<NodeId> matmuls;
  for (NodeId id : r.nodes) {
    if (g.node(id).op == Op::matmul) matmuls.push_back(id);
  }
  REQUIRE(matmuls.size() == 1);
  const ir::Node& mm = g.node(matmuls[0]);
  std::vector<NodeId> want_inputs;
  for (int k = 0; k < 2; ++k) {
    // Down the folded views (in the region's nodes) to the buffer; they transpose the matrix an
    // odd number of times exactly where the flag says.
    NodeId operand = mm.inputs[static_cast<size_t>(k)];
    bool transposed = false;
    while (contains(r.nodes, operand) && ir::op_kind(g.node(operand).op) == ir::OpKind::view) {
      transposed = transposed != (g.node(operand).op == Op::permute);
      operand = g.node(operand).inputs[0];
    }
    if (k == 1 && e.int8_b) {  // int8 weights: the buffer under the cast the call does
      REQUIRE(g.node(operand).op == Op::cast);
      operand = g.node(operand).inputs[0];
      REQUIRE(g.node(operand).dtype == DType::i8);
    }
    REQUIRE(transposed == (k == 0 ? e.transpose_a : e.transpose_b));
    const Shape& operand_shape = g.node(mm.inputs[static_cast<size_t>(k)]).shape;
    REQUIRE((k == 0 ? e.batch_a : e.batch_b).size() == operand_shape.size() - 2);
    want_inputs.push_back(operand);
  }
  if (e.scale >= 0) want_inputs.push_back(e.scale);
  if (e.bias >= 0) want_inputs.push_back(e.bias);
  if (e.residual >= 0) want_inputs.push_back(e.residual);
  REQUIRE(r.inputs == want_inputs);
  if (e.scale >= 0) REQUIRE(e.int8_b);
  REQUIRE(r.outputs.size() == 1);
  const ir::Node& out = g.node(r.outputs[0]);
  REQUIRE(out.shape == mm.shape);
  REQUIRE(out.dtype == mm.dtype);
  if (e.residual < 0) REQUIRE(e.beta == 0.0);

  // A @ B in f32.
  Graph sub;
  std::vector<NodeId> operands;
  std::vector<ir::HostTensor> feed;
  for (int k = 0; k < 2; ++k) {
    const ir::HostTensor& buf = memory.at(r.inputs[static_cast<size_t>(k)]);
    NodeId v = ir::add_input(sub, DType::f32, buf.shape);
    // The buffer's batch dims as the operand presents them, 1 where it is broadcast, then the
    // operand's matrix as it lies in memory (swapped where the call transposes it): the call
    // reads the buffer's bytes in that shape (a reshape of a buffer folds, whatever its matrix).
    Shape layout = k == 0 ? e.batch_a : e.batch_b;
    const Shape& operand = g.node(mm.inputs[static_cast<size_t>(k)]).shape;
    Shape matrix(operand.end() - 2, operand.end());
    if (k == 0 ? e.transpose_a : e.transpose_b) std::swap(matrix[0], matrix[1]);
    layout.insert(layout.end(), matrix.begin(), matrix.end());
    v = ir::add_reshape(sub, v, layout);
    if (k == 0 ? e.transpose_a : e.transpose_b) {
      std::vector<int64_t> perm;
      for (size_t a = 0; a < layout.size(); ++a) perm.push_back(static_cast<int64_t>(a));
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      v = ir::add_permute(sub, v, perm);
    }
    operands.push_back(v);
    feed.push_back(as_f32(buf));
  }
  // A batch dim that both buffers broadcast is the same matrix for every index.
  sub.add_output(ir::add_expand(sub, ir::add_matmul(sub, operands[0], operands[1]), out.shape));
  const ir::HostTensor acc = ir::interpret(sub, feed).at(0);
  REQUIRE(acc.shape == out.shape);

  const int64_t n = out.shape.back();
  const ir::HostTensor* bias = e.bias >= 0 ? &memory.at(e.bias) : nullptr;
  const ir::HostTensor* c = e.residual >= 0 ? &memory.at(e.residual) : nullptr;
  const ir::HostTensor* scale = e.scale >= 0 ? &memory.at(e.scale) : nullptr;
  if (scale) {
    REQUIRE(scale->numel() == n);
    REQUIRE(scale->dtype == out.dtype);
  }
  if (bias) {
    REQUIRE(bias->numel() == n);
    REQUIRE(bias->dtype == out.dtype);
  }
  if (c) {
    REQUIRE(c->shape == out.shape);
    REQUIRE(c->dtype == out.dtype);
  }
  ir::HostTensor d(out.dtype, out.shape);
  if (magnitude) magnitude->assign(static_cast<size_t>(d.numel()), 0.0);
  for (int64_t i = 0; i < d.numel(); ++i) {
    double v = e.alpha * acc.get(i) * (scale ? scale->get(i % n) : 1.0);
    double mag = std::abs(v);
    if (c) v += e.beta * c->get(i), mag += std::abs(e.beta * c->get(i));
    if (bias) v += bias->get(i % n), mag += std::abs(bias->get(i % n));
    if (magnitude) (*magnitude)[static_cast<size_t>(i)] = mag;
    switch (e.activation) {
      case GemmEpilogue::Activation::none:
        break;
      case GemmEpilogue::Activation::relu:
        v = v < 0 ? 0.0 : v;
        break;
      case GemmEpilogue::Activation::gelu_tanh:
        v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
        break;
    }
    d.set(i, v);
  }
  return d;
}

// The machine epsilon of a floating dtype (the gap between 1 and the next value).
inline double epsilon(DType dt) {
  switch (dt) {
    case DType::bf16:
      return 0x1p-7;
    case DType::f16:
      return 0x1p-10;
    default:
      return 0x1p-23;
  }
}

// How far a gemm region's call (gemm_call) is from what its folded nodes computed (`nodes`, the
// region's output), as the largest |call - nodes| over the elements in units of
// epsilon(dtype) * (|alpha * acc| + |beta * C| + |bias| + |nodes|). Both sum the same terms; the
// nodes round after each step (at most ~5 roundings of half an epsilon each, through an activation
// whose slope is at most 1.13) and the call once, so a correct description stays under 4 units
// everywhere, including where the sum nearly cancels (where a norm-wise error would hide a wrong
// activation or sign). A NaN or an infinity in one and not the other is infinitely far.
inline double epilogue_error(const Plan& plan, const Region& r, const Memory& memory) {
  const ir::HostTensor& nodes = memory.at(r.outputs.at(0));
  std::vector<double> magnitude;
  const ir::HostTensor call = gemm_call(plan, r, memory, &magnitude);
  const double eps = epsilon(nodes.dtype);
  double worst = 0;
  for (int64_t i = 0; i < nodes.numel(); ++i) {
    const double a = call.get(i), b = nodes.get(i);
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    const double scale = eps * (magnitude[static_cast<size_t>(i)] + std::abs(b));
    worst = std::max(worst, std::abs(a - b) / std::max(scale, 1e-300));
  }
  return worst;
}
inline constexpr double kEpilogueUnits = 4.0;

// Runs the plan region by region on the CPU reference: each region becomes a graph of its own
// whose inputs are the region's inputs, fed from what earlier regions wrote. Returns the graph
// outputs (and, when asked, every value written). A region that reads something not yet written,
// or computes with something it neither evaluates nor reads, fails here.
//
// Gemm regions are run twice on the same inputs. The nodes they hold are run by the reference
// like any region's (each node rounded to its dtype, as the original graph is), which is what
// flows on, so the plan's results are compared exactly with the graph's. And gemm_call computes
// what the executor computes from the region's description (one rounding at the end), which must
// agree with the nodes element by element to within a few roundings (epilogue_error): this is
// what checks that the epilogue (bias, residual, alpha, beta, activation, transposes, the order
// of the inputs) says what the folded nodes do.
inline std::vector<ir::HostTensor> run_plan(const Plan& plan,
                                            const std::vector<ir::HostTensor>& inputs,
                                            Memory* written = nullptr) {
  const Graph& g = plan.graph;
  Memory memory;
  const std::vector<NodeId> input_ids = g.inputs();
  for (size_t k = 0; k < input_ids.size(); ++k) memory[input_ids[k]] = inputs[k];
  for (const Region& r : plan.regions) {
    Graph sub;
    std::map<NodeId, NodeId> local;
    std::vector<ir::HostTensor> feed;
    // An update's destination is not read but written in place: the region's update sees the
    // buffer as it is now, and leaves its result there for the regions after it (as the
    // executor does), so a region reading the buffer after the write would see the new values.
    std::vector<NodeId> leaves = r.inputs;
    for (NodeId id : r.nodes) {
      if (g.node(id).op == Op::update_slice) leaves.push_back(g.node(id).inputs[0]);
    }
    for (NodeId in : leaves) {
      if (local.count(in) != 0) continue;
      REQUIRE(memory.count(in) == 1);
      local[in] = ir::add_input(sub, g.node(in).dtype, g.node(in).shape);
      feed.push_back(memory.at(in));
    }
    for (NodeId id : r.nodes) {
      ir::NodeSpec spec = ir::spec_of(g.node(id));
      for (NodeId& in : spec.inputs) {
        REQUIRE(local.count(in) == 1);
        in = local.at(in);
      }
      local[id] = sub.add(spec);
    }
    for (NodeId out : r.outputs) sub.add_output(local.at(out));
    const std::vector<ir::HostTensor> results = ir::interpret(sub, feed);
    for (size_t k = 0; k < r.outputs.size(); ++k) {
      memory[r.outputs[k]] = results[k];
      const ir::Node& out = g.node(r.outputs[k]);
      if (out.op == Op::update_slice) memory[out.inputs[0]] = results[k];
    }
    if (r.kind == RegionKind::gemm) {
      INFO("gemm region writing %" << r.outputs.at(0));
      CHECK(epilogue_error(plan, r, memory) <= kEpilogueUnits);
    }
  }
  if (written) *written = memory;
  std::vector<ir::HostTensor> outputs;
  for (NodeId out : g.outputs()) {
    REQUIRE(memory.count(out) == 1);
    outputs.push_back(memory.at(out));
  }
  return outputs;
}

inline std::vector<ir::HostTensor> random_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<ir::HostTensor> inputs;
  for (NodeId id : g.inputs()) {
    ir::HostTensor t(g.node(id).dtype, g.node(id).shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// The plan, run region by region, gives exactly what the reference gives for the original
// graph (the passes are exact, and each region computes the same nodes in the same dtypes).
inline void check_plan_computes(const Graph& original, const Plan& plan) {
  const std::vector<ir::HostTensor> inputs = random_inputs(original, 7);
  const std::vector<ir::HostTensor> want = ir::interpret(original, inputs);
  const std::vector<ir::HostTensor> got = run_plan(plan, inputs);
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO("output " << k);
    REQUIRE(got[k].shape == want[k].shape);
    REQUIRE(got[k].dtype == want[k].dtype);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < want[k].numel(); ++i) {
      const double a = got[k].get(i), b = want[k].get(i);
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

// The plan of `g`, checked: its invariants (check_plan) and, run region by region on the CPU
// reference, exactly the graph's results (check_plan_computes).
inline Plan plan_of(const Graph& g, PlanOptions options = {}) {
  Plan plan = make_plan(g, options);
  check_plan(plan);
  check_plan_computes(g, plan);
  return plan;
}

}  // namespace fusejit::fusion::test
