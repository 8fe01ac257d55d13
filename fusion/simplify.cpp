// fusion/simplify: see simplify.h.
#include "fusion/simplify.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "fusion/dataflow.h"
#include "fusion/partition.h"
#include "ir/host_tensor.h"
#include "ir/rebuild.h"

namespace fusejit::fusion {

namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::NodeSpec;
using ir::Op;

// The value a constant node stands for (as the reference rounds it), or nothing.
std::optional<double> constant_value(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != Op::constant) return std::nullopt;
  return ir::round_to(n.dtype, n.value);
}

// x when `spec` applied in `g` would give exactly x's dtype and shape, else nothing.
std::optional<NodeId> if_same_type(const Graph& g, const NodeSpec& spec, NodeId x) {
  const Node n = ir::infer_node(g, spec);
  const Node& xn = g.node(x);
  if (n.dtype != xn.dtype || n.shape != xn.shape) return std::nullopt;
  return x;
}

bool is_one(const std::optional<double>& c) { return c && *c == 1.0; }

// x + c == x for every x: c is -0.0, or the sum is an integer and c is 0.
bool is_additive_identity(const std::optional<double>& c, DType result) {
  return c && *c == 0.0 && (std::signbit(*c) || !is_floating(result));
}

// x - c == x for every x: c is +0.0, or the difference is an integer and c is 0.
bool is_subtractive_identity(const std::optional<double>& c, DType result) {
  return c && *c == 0.0 && (!std::signbit(*c) || !is_floating(result));
}

std::optional<NodeId> simplify_binary(const Graph& g, const NodeSpec& spec) {
  const NodeId a = spec.inputs[0], b = spec.inputs[1];
  const std::optional<double> ca = constant_value(g, a), cb = constant_value(g, b);
  const DType result = ir::infer_node(g, spec).dtype;
  switch (spec.op) {
    case Op::mul:
      if (is_one(cb)) return if_same_type(g, spec, a);
      if (is_one(ca)) return if_same_type(g, spec, b);
      return std::nullopt;
    case Op::div:
      if (is_one(cb)) return if_same_type(g, spec, a);
      return std::nullopt;
    case Op::add:
      if (is_additive_identity(cb, result)) return if_same_type(g, spec, a);
      if (is_additive_identity(ca, result)) return if_same_type(g, spec, b);
      return std::nullopt;
    case Op::sub:
      if (is_subtractive_identity(cb, result)) return if_same_type(g, spec, a);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool is_identity_permutation(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// A slice of a slice along the same axis is one slice: element k is x's
// start + step * (inner start + inner step * k). A slice of the whole axis is its operand.
std::optional<NodeId> simplify_slice(const Graph& g, NodeSpec& spec) {
  const Node& x = g.node(spec.inputs[0]);
  // A slice of one element never applies its step, which may be any size: make it 1, so that
  // neither the fold below nor the kernel's index arithmetic multiplies by it.
  const bool single = spec.shape[static_cast<size_t>(spec.axes[0])] == 1;
  if (single) spec.step = 1;
  if (x.op == Op::slice && x.axes == spec.axes) {
    // Both products fit: the outer slice's last element lies inside the inner one.
    spec.start = x.start + x.step * spec.start;
    if (!single) spec.step *= x.step;
    spec.inputs[0] = x.inputs[0];
  }
  if (g.node(spec.inputs[0]).shape == spec.shape) return spec.inputs[0];
  return std::nullopt;
}

// A concat of more than kMaxConcatOperands operands reads them through concats of at most that
// many each (added to `out`), level by level: the same values, in nodes the partitioner can
// place in separate kernels. Dtype promotion is a join, so grouping does not change it.
void split_concat(Graph& out, NodeSpec& spec) {
  while (spec.inputs.size() > kMaxConcatOperands) {
    std::vector<NodeId> groups;
    for (size_t k = 0; k < spec.inputs.size(); k += kMaxConcatOperands) {
      const auto first = spec.inputs.begin() + static_cast<std::ptrdiff_t>(k);
      const auto last = spec.inputs.begin() +
                        static_cast<std::ptrdiff_t>(std::min(k + kMaxConcatOperands,
                                                             spec.inputs.size()));
      groups.push_back(out.add({.op = Op::concat, .inputs = {first, last}, .axes = spec.axes}));
    }
    spec.inputs = std::move(groups);
  }
}

// True when permutation `perm` of a value of shape `shape` keeps the axes of extent other than 1
// in their order: it moves only 1s, and the elements keep their row-major positions.
bool moves_only_ones(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t a : perm) {
    if (shape[static_cast<size_t>(a)] == 1) continue;
    if (a < last) return false;
    last = a;
  }
  return true;
}

// What `spec` becomes: an existing node (returned), or a cheaper spec (rewritten in place).
// Returns nothing when the node is to be added, possibly rewritten.
std::optional<NodeId> simplify_node(const Graph& g, NodeSpec& spec) {
  if (ir::op_kind(spec.op) == ir::OpKind::binary) return simplify_binary(g, spec);
  switch (spec.op) {
    case Op::neg: {
      const Node& x = g.node(spec.inputs[0]);
      if (x.op == Op::neg) return x.inputs[0];
      return std::nullopt;
    }
    case Op::cast:
      if (g.node(spec.inputs[0]).dtype == spec.dtype) return spec.inputs[0];
      return std::nullopt;
    case Op::reshape: {
      const Node& x = g.node(spec.inputs[0]);
      if (x.op == Op::reshape) {
        spec.inputs[0] = x.inputs[0];
      }
      if (g.node(spec.inputs[0]).shape == spec.shape) return spec.inputs[0];
      return std::nullopt;
    }
    case Op::expand:
      if (g.node(spec.inputs[0]).shape == spec.shape) return spec.inputs[0];
      return std::nullopt;
    case Op::slice:
      return simplify_slice(g, spec);
    case Op::concat:  // of one operand: that operand (its dtype is the result's)
      if (spec.inputs.size() == 1) return spec.inputs[0];
      return std::nullopt;
    case Op::permute: {
      const Node& x = g.node(spec.inputs[0]);
      if (x.op == Op::permute) {
        // Result axis i is x's axis spec.axes[i], which is x's operand's axis x.axes[...].
        std::vector<int64_t> composed;
        for (int64_t a : spec.axes) composed.push_back(x.axes[static_cast<size_t>(a)]);
        spec.axes = std::move(composed);
        spec.inputs[0] = x.inputs[0];
      }
      // Normalize negative axes before testing for the identity.
      const Node& operand = g.node(spec.inputs[0]);
      std::vector<int64_t> perm = spec.axes;
      for (int64_t& a : perm) {
        if (a < 0) a += static_cast<int64_t>(operand.shape.size());
      }
      if (is_identity_permutation(perm)) return spec.inputs[0];
      // Moving only axes of extent 1 leaves every element where it was: a reshape, which then
      // joins the reshapes around it (a decode step's heads [1, 32, 1, 128] back into a row of
      // [1, 1, 32, 128] is no copy, and a GEMM reads it in place). A swap of the last two axes
      // stays what it is: a GEMM folds it as a layout flag, and the attention pattern is kᵀ.
      if (!detail::is_last_two_swap(perm) && moves_only_ones(operand.shape, perm)) {
        Shape permuted;
        for (int64_t a : perm) permuted.push_back(operand.shape[static_cast<size_t>(a)]);
        spec = {.op = Op::reshape, .inputs = {spec.inputs[0]}, .shape = std::move(permuted)};
        return simplify_node(g, spec);
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

ir::Graph simplify(ir::Graph g) {
  ir::Rebuilt simpler = ir::rebuild(g, [](NodeId, NodeSpec spec, Graph& out) {
    if (spec.op == Op::concat) split_concat(out, spec);
    if (const std::optional<NodeId> same = simplify_node(out, spec)) return *same;
    return out.add(std::move(spec));
  });
  return simpler.changed ? std::move(simpler.graph) : g;
}

}  // namespace fusejit::fusion
