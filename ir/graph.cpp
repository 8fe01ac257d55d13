// ir/graph: shape and dtype inference, and the Graph container; see graph.h.
#include "ir/graph.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/hash.h"
#include "ir/host_tensor.h"
#include "ir/shape.h"

namespace fusejit::ir {

namespace {

void check_dims(const Shape& shape, std::string_view op) {
  for (int64_t d : shape) {
    if (d < 1) {
      throw UsageError(fmt::format("{}: shape {} has a dimension of {}; every dimension must be at "
                              "least 1 (empty tensors are not supported)",
                              op, shape_str(shape), d));
    }
  }
}

void reject_bool(std::string_view op, DType d) {
  if (d == DType::boolean) {
    throw UsageError(fmt::format("{}: bool operands are not supported; cast to an integer or float "
                            "type first",
                            op));
  }
}

// n.shape = broadcast_shapes(a, b, op), reusing n.shape's memory in the common case of equal
// shapes. True when the result is `a` as it is.
bool set_broadcast(Node& n, const Shape& a, const Shape& b, std::string_view op) {
  if (a == b) {
    assign_short(n.shape, a);
    return true;
  }
  n.shape = broadcast_shapes(a, b, op);
  return false;
}

// True when the result's shape is the first operand's (said, so that infer_sized need not
// compare them).
bool infer_elementwise(const Graph& g, const NodeSpec& spec, Node& n) {
  const std::string_view name = op_name(spec.op);
  const Node& a = g.node(spec.inputs[0]);
  switch (op_kind(spec.op)) {
    case OpKind::unary:
      assign_short(n.shape, a.shape);
      if (spec.op != Op::abs && spec.op != Op::relu && spec.op != Op::neg) {
        n.dtype = is_floating(a.dtype) ? a.dtype : kDefaultFloat;
      } else {
        reject_bool(name, a.dtype);
        n.dtype = a.dtype;
      }
      return true;
    case OpKind::binary: {
      const Node& b = g.node(spec.inputs[1]);
      const bool as_first = set_broadcast(n, a.shape, b.shape, name);
      const DType t = promote(a.dtype, b.dtype);
      if (op_has(spec.op, kFloatResult)) {
        n.dtype = is_floating(t) ? t : kDefaultFloat;
      } else {
        reject_bool(name, t);
        n.dtype = t;
      }
      return as_first;
    }
    case OpKind::compare: {
      const Node& b = g.node(spec.inputs[1]);
      const bool as_first = set_broadcast(n, a.shape, b.shape, name);
      n.dtype = DType::boolean;
      return as_first;
    }
    case OpKind::select: {
      const Node& x = g.node(spec.inputs[1]);
      const Node& y = g.node(spec.inputs[2]);
      if (a.dtype != DType::boolean) {
        throw UsageError(fmt::format("where: the condition must be bool, got {}; make it with a "
                                "comparison such as gt(x, 0)",
                                type_str(a)));
      }
      n.shape = broadcast_shapes(broadcast_shapes(a.shape, x.shape, name), y.shape, name);
      n.dtype = promote(x.dtype, y.dtype);
      return false;
    }
    case OpKind::cast:
      assign_short(n.shape, a.shape);
      n.dtype = spec.dtype;
      return true;
    default:
      throw InternalError(fmt::format("infer_elementwise called for {}", name));
  }
}

void infer_reduce(const Graph& g, const NodeSpec& spec, Node& n) {
  const std::string_view name = op_name(spec.op);
  const Node& x = g.node(spec.inputs[0]);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (spec.axes.empty()) {
    throw UsageError(fmt::format("{}: no axes given for an operand of type {}; name the axes to reduce "
                            "(all of them for a full reduction)",
                            name, type_str(x)));
  }
  for (int64_t axis : spec.axes) n.axes.push_back(normalize_axis(axis, rank, name));
  std::sort(n.axes.begin(), n.axes.end());
  if (std::adjacent_find(n.axes.begin(), n.axes.end()) != n.axes.end()) {
    throw UsageError(fmt::format("{}: axes [{}] name an axis twice", name, fmt::join(spec.axes, ",")));
  }
  n.keepdim = spec.keepdim;
  for (int64_t i = 0; i < rank; ++i) {
    const bool reduced = std::binary_search(n.axes.begin(), n.axes.end(), i);
    if (!reduced) n.shape.push_back(x.shape[i]);
    else if (spec.keepdim) n.shape.push_back(1);
  }
  if (op_has(spec.op, kFloatOnly) && !is_floating(x.dtype)) {
    throw UsageError(fmt::format("{}: the operand is {}, but {} needs a floating-point operand; cast it "
                            "to f32 first",
                            name, type_str(x), name));
  }
  if (spec.op == Op::sum && !is_floating(x.dtype)) {
    n.dtype = DType::i64;  // as PyTorch: integer and bool sums accumulate in i64
  } else {
    n.dtype = x.dtype;
  }
}

// The one axis of a slice or concat, normalized.
int64_t single_axis(const NodeSpec& spec, int64_t rank, std::string_view op) {
  if (spec.axes.size() != 1) {
    throw UsageError(fmt::format("{}: takes exactly one axis, got [{}]", op,
                                 fmt::join(spec.axes, ",")));
  }
  return normalize_axis(spec.axes[0], rank, op);
}

// The canonical slice: start in range, step >= 1, the result's extent along the axis giving the
// length (the parser states it; add_slice computes it from Python's bounds).
void infer_slice(const Node& x, const NodeSpec& spec, Node& n) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = single_axis(spec, rank, "slice");
  check_dims(spec.shape, "slice");
  Shape others = spec.shape;
  if (others.size() == x.shape.size()) others[static_cast<size_t>(axis)] = x.shape[axis];
  if (others != x.shape) {
    throw UsageError(fmt::format("slice: the result {} must have the shape of the operand {} but "
                                 "along axis {}",
                                 shape_str(spec.shape), type_str(x), axis));
  }
  const int64_t extent = x.shape[axis], length = spec.shape[axis];
  const std::optional<int64_t> span = checked_mul(spec.step, length - 1);
  if (spec.step < 1 || spec.start < 0 || !span || *span >= extent - spec.start) {
    throw UsageError(fmt::format("slice: start {}, step {} and length {} do not fit axis {} of {} "
                                 "(need 0 <= start, step >= 1, start + step * (length - 1) < {})",
                                 spec.start, spec.step, length, axis, type_str(x), extent));
  }
  n.axes = {axis};
  n.shape = spec.shape;
  n.start = spec.start;
  n.step = spec.step;
}

// torch.cat: every operand has the first one's rank and extents but along the axis.
void infer_concat(const Graph& g, const NodeSpec& spec, Node& n) {
  const Node& first = g.node(spec.inputs[0]);
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  const int64_t axis = single_axis(spec, rank, "concat");
  n.axes = {axis};
  n.shape = first.shape;
  n.shape[axis] = 0;
  n.dtype = first.dtype;
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    const Node& x = g.node(spec.inputs[k]);
    Shape others = x.shape;
    if (others.size() == first.shape.size()) others[axis] = first.shape[axis];
    if (others != first.shape) {
      throw UsageError(fmt::format("concat: operand {} is {} but operand 0 is {}; along every "
                                   "axis but the concatenated one ({}) the shapes must be equal",
                                   k, type_str(x), type_str(first), axis));
    }
    if (__builtin_add_overflow(n.shape[axis], x.shape[axis], &n.shape[axis])) {
      throw UsageError(fmt::format("concat: the result's extent along axis {} overflows 64 bits",
                                   axis));
    }
    n.dtype = promote(n.dtype, x.dtype);
  }
}

void infer_view(const Graph& g, const NodeSpec& spec, Node& n) {
  const Node& x = g.node(spec.inputs[0]);
  n.dtype = x.dtype;
  switch (spec.op) {
    case Op::reshape:
      check_dims(spec.shape, "reshape");
      check_tensor_size(spec.shape, x.dtype, "reshape");
      if (numel(spec.shape) != numel(x.shape)) {
        throw UsageError(fmt::format("reshape: cannot reshape {} ({} elements) to {} ({} elements); the "
                                "element counts must match",
                                type_str(x), numel(x.shape), shape_str(spec.shape),
                                numel(spec.shape)));
      }
      n.shape = spec.shape;
      return;
    case Op::permute: {
      const size_t rank = x.shape.size();
      std::vector<int64_t> perm;
      for (int64_t a : spec.axes) perm.push_back(normalize_axis(a, static_cast<int64_t>(rank), "permute"));
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = perm.size() == rank;
      for (size_t i = 0; ok && i < rank; ++i) ok = sorted[i] == static_cast<int64_t>(i);
      if (!ok) {
        throw UsageError(fmt::format("permute: [{}] is not a permutation of the {} axes of {}",
                                fmt::join(spec.axes, ","), rank, type_str(x)));
      }
      n.axes = perm;
      for (int64_t a : perm) n.shape.push_back(x.shape[a]);
      return;
    }
    case Op::expand:
      check_dims(spec.shape, "expand");
      if (!broadcasts_to(x.shape, spec.shape)) {
        throw UsageError(fmt::format("expand: {} cannot be expanded to {}; each dimension, aligned from "
                                "the right, must be 1 or equal to the target",
                                type_str(x), shape_str(spec.shape)));
      }
      n.shape = spec.shape;
      return;
    case Op::slice:
      infer_slice(x, spec, n);
      return;
    case Op::concat:
      infer_concat(g, spec, n);
      return;
    default:
      throw InternalError(fmt::format("infer_view called for {}", op_name(spec.op)));
  }
}

void infer_matmul(const Graph& g, const NodeSpec& spec, Node& n) {
  const Node& a = g.node(spec.inputs[0]);
  const Node& b = g.node(spec.inputs[1]);
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    throw UsageError(fmt::format("matmul: operands {} and {} must both have rank 2 or more; reshape a "
                            "vector to [1,K] or [K,1]",
                            type_str(a), type_str(b)));
  }
  if (a.dtype != b.dtype) {
    throw UsageError(fmt::format("matmul: operand dtypes differ ({} and {}); cast one operand so both "
                            "are f32, f16 or bf16",
                            type_str(a), type_str(b)));
  }
  if (!is_floating(a.dtype)) {
    throw UsageError(fmt::format("matmul: {} operands are not supported ({} and {}); use f32, f16 or "
                            "bf16",
                            dtype_name(a.dtype), type_str(a), type_str(b)));
  }
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  const int64_t kb = b.shape[b.shape.size() - 2], nn = b.shape.back();
  if (k != kb) {
    throw UsageError(fmt::format("matmul: inner dimensions differ: {} @ {} (K = {} vs {}); the last "
                            "dimension of the left operand must equal the second-to-last of the "
                            "right",
                            type_str(a), type_str(b), k, kb));
  }
  const Shape batch_a(a.shape.begin(), a.shape.end() - 2);
  const Shape batch_b(b.shape.begin(), b.shape.end() - 2);
  n.shape = broadcast_shapes(batch_a, batch_b, "matmul (batch dimensions)");
  n.shape.push_back(m);
  n.shape.push_back(nn);
  n.dtype = a.dtype;
}

// torch.gather: idx has x's rank and an integer dtype; along every other axis it is no longer
// than x (it reads a corner of x there); the result has idx's shape and x's dtype.
void infer_gather(const Graph& g, const NodeSpec& spec, Node& n) {
  const Node& x = g.node(spec.inputs[0]);
  const Node& idx = g.node(spec.inputs[1]);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (spec.axes.size() != 1) {
    throw UsageError(fmt::format("gather: takes exactly one axis, got [{}]; write axes=[a]",
                                 fmt::join(spec.axes, ",")));
  }
  if (!is_integral(idx.dtype)) {
    throw UsageError(fmt::format("gather: the index operand is {}; indices must be i32 or i64 "
                                 "(cast them first)",
                                 type_str(idx)));
  }
  if (rank == 0 || static_cast<int64_t>(idx.shape.size()) != rank) {
    throw UsageError(fmt::format("gather: the index operand {} must have the rank of the data "
                                 "operand {} (at least 1); use index_select for a 1-D index",
                                 type_str(idx), type_str(x)));
  }
  const int64_t axis = normalize_axis(spec.axes[0], rank, "gather");
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis && idx.shape[d] > x.shape[d]) {
      throw UsageError(fmt::format("gather: along axis {} the index operand {} is longer than the "
                                   "data operand {}; every axis but {} must be at most as long",
                                   d, type_str(idx), type_str(x), axis));
    }
  }
  n.axes = {axis};
  n.shape = idx.shape;
  n.dtype = x.dtype;
}

// rand, randn: the shape and dtype are stated; the operand is the generator's key, an i64[2]
// input holding {seed, offset}, whose values the kernel loads at run time (ir/random.h). An
// input, so that every kernel that draws reads it from memory wherever the draw is evaluated.
void infer_random(const Graph& g, const NodeSpec& spec, Node& n) {
  const std::string_view name = op_name(spec.op);
  check_dims(spec.shape, name);
  if (!is_floating(spec.dtype)) {
    throw UsageError(fmt::format("{}: dtype {} is not supported; random values are f32, f16 or "
                                 "bf16 (cast the result for another type)",
                                 name, dtype_name(spec.dtype)));
  }
  const Node& key = g.node(spec.inputs[0]);
  if (key.op != Op::input || key.dtype != DType::i64 || key.shape != Shape{2}) {
    throw UsageError(fmt::format("{}: the key operand %{} is {} {}; it must be an i64[2] input "
                                 "holding {{seed, offset}} (Context::rand makes one from host "
                                 "values)",
                                 name, spec.inputs[0], op_name(key.op), type_str(key)));
  }
  n.dtype = spec.dtype;
  n.shape = spec.shape;
}

// update_slice(dst, src, start) axis=a: dst is data (an input: its buffer is written in place),
// src has dst's dtype and shape but along a, where it is at most as long; start is one integer
// (i32 or i64), a position known at run time (ir::update_start says where the write lands).
void infer_update(const Graph& g, const NodeSpec& spec, Node& n) {
  const Node& dst = g.node(spec.inputs[0]);
  const Node& src = g.node(spec.inputs[1]);
  const Node& start = g.node(spec.inputs[2]);
  if (spec.axes.size() != 1) {
    throw UsageError(fmt::format("update_slice: takes exactly one axis, got [{}]; write axis=a",
                                 fmt::join(spec.axes, ",")));
  }
  if (dst.op != Op::input) {
    throw UsageError(fmt::format(
        "update_slice: the destination %{} is computed ({} {}); the write lands in place, so the "
        "destination must be data (an input: a tensor holding values, e.g. from Context::wrap or "
        "an evaluated result); evaluate it first",
        spec.inputs[0], op_name(dst.op), type_str(dst)));
  }
  const int64_t rank = static_cast<int64_t>(dst.shape.size());
  if (rank == 0 || static_cast<int64_t>(src.shape.size()) != rank) {
    throw UsageError(
        fmt::format("update_slice: the value {} must have the rank of the "
                    "destination {} (at least 1)",
                    type_str(src), type_str(dst)));
  }
  const int64_t axis = normalize_axis(spec.axes[0], rank, "update_slice");
  for (int64_t d = 0; d < rank; ++d) {
    const auto k = static_cast<size_t>(d);
    if (d == axis ? src.shape[k] > dst.shape[k] : src.shape[k] != dst.shape[k]) {
      throw UsageError(fmt::format(
          "update_slice: the value {} does not fit the destination {} along axis {}; it must "
          "match every axis but {}, and be at most as long along {} (expand or slice it first)",
          type_str(src), type_str(dst), d, axis, axis));
    }
  }
  if (src.dtype != dst.dtype) {
    throw UsageError(
        fmt::format("update_slice: the value is {} but the destination is {}; cast "
                    "the value to {} first",
                    type_str(src), type_str(dst), dtype_name(dst.dtype)));
  }
  if (!is_integral(start.dtype) || numel(start.shape) != 1) {
    throw UsageError(
        fmt::format("update_slice: the start %{} is {}; it must be one i32 or i64 "
                    "value (shape [] or [1])",
                    spec.inputs[2], type_str(start)));
  }
  n.axes = {axis};
  n.shape = dst.shape;
  n.dtype = dst.dtype;
}

void infer_arange(const NodeSpec& spec, Node& n) {
  check_dims(spec.shape, "arange");
  if (spec.shape.size() != 1) {
    throw UsageError(fmt::format("arange: the result {} must have rank 1",
                                 shape_str(spec.shape)));
  }
  if (spec.dtype == DType::boolean) {
    throw UsageError("arange: a bool arange is not supported; use an integer or float dtype");
  }
  n.shape = spec.shape;
}

}  // namespace

std::string arity_str(Op op) {
  return op_arity(op) == kVariadic ? std::string("one or more") : std::to_string(op_arity(op));
}

std::string type_str(const Node& node) {
  return fmt::format("{}{}", dtype_name(node.dtype), shape_str(node.shape));
}

namespace {

// infer_node into `n`, a node whose lists are empty (memory kept, see Graph::Spare), but for the
// operand list, which the caller copies or moves into the node. True when the result's shape is
// known to be its first operand's.
bool infer_fields(const Graph& g, const NodeSpec& spec, Node& n) {
  const std::string_view name = op_name(spec.op);
  if (!arity_ok(spec.op, spec.inputs.size())) {
    throw UsageError(fmt::format("{}: takes {} operand(s), got {}", name, arity_str(spec.op),
                                 spec.inputs.size()));
  }
  for (NodeId id : spec.inputs) {
    if (id < 0 || static_cast<size_t>(id) >= g.size()) {
      throw UsageError(fmt::format("{}: operand %{} does not exist (the trace has {} nodes so far; an "
                              "operand must be defined before its use)",
                              name, id, g.size()));
    }
  }
  n.op = spec.op;
  switch (op_kind(spec.op)) {
    case OpKind::source:
      n.dtype = spec.dtype;
      if (spec.op == Op::input) {
        check_dims(spec.shape, "input");
        n.shape = spec.shape;
      } else if (spec.op == Op::arange) {
        infer_arange(spec, n);
      } else {
        if (!std::isfinite(spec.value) && !is_floating(spec.dtype)) {
          throw UsageError(fmt::format("const: {} is not a valid {} value", spec.value,
                                  dtype_name(spec.dtype)));
        }
        n.value = spec.value;
        if (spec.dtype == DType::boolean || is_integral(spec.dtype)) {
          const bool exact = static_cast<double>(spec.integer) == spec.value;
          n.integer = exact ? wrap_integer(spec.dtype, spec.integer)
                            : round_to_integer(spec.dtype, spec.value);
          n.value = static_cast<double>(n.integer);
        }
      }
      return false;
    case OpKind::reduce:
      infer_reduce(g, spec, n);
      return false;
    case OpKind::view:
      infer_view(g, spec, n);
      return false;
    case OpKind::matmul:
      infer_matmul(g, spec, n);
      return false;
    case OpKind::gather:
      infer_gather(g, spec, n);
      return false;
    case OpKind::random:
      infer_random(g, spec, n);
      return false;
    case OpKind::update:
      infer_update(g, spec, n);
      return false;
    default:
      return infer_elementwise(g, spec, n);
  }
}

// infer_fields, and the result within the size limit (ir/shape.h): every node of a graph is.
void infer_sized(const Graph& g, const NodeSpec& spec, Node& n) {
  const bool as_first = infer_fields(g, spec, n);
  if (!spec.inputs.empty()) {
    // Of its first operand's shape and no wider a dtype, it is within the limit as that
    // operand is: the common case (an elementwise op), decided without counting elements.
    const Node& first = g.node(spec.inputs[0]);
    if ((as_first || n.shape == first.shape) && dtype_size(n.dtype) <= dtype_size(first.dtype)) {
      return;
    }
  }
  if (!within_size_limit(n.shape, n.dtype)) {
    check_tensor_size(n.shape, n.dtype, fmt::format("{} (node %{})", op_name(spec.op), g.size()));
  }
}

}  // namespace

Node infer_node(const Graph& g, const NodeSpec& spec) {
  Node n;
  infer_sized(g, spec, n);
  n.inputs = spec.inputs;
  return n;
}

NodeSpec spec_of(const Node& n) {
  return NodeSpec{.op = n.op, .inputs = n.inputs, .dtype = n.dtype, .shape = n.shape,
                  .axes = n.axes, .keepdim = n.keepdim, .value = n.value, .integer = n.integer, .start = n.start,
                  .step = n.step};
}

NodeId Graph::add(const NodeSpec& spec) {
  Node n = spare_.take();
  infer_sized(*this, spec, n);
  assign_short(n.inputs, spec.inputs);
  return append(std::move(n));
}

NodeId Graph::add(NodeSpec&& spec) {
  Node n = spare_.take();
  infer_sized(*this, spec, n);
  n.inputs = std::move(spec.inputs);
  return append(std::move(n));
}

NodeId Graph::append(Node&& n) {
  const auto id = static_cast<NodeId>(nodes_.size());
  hashes_.push_back(node_hash(n, hashes_, n.op == Op::input ? inputs_.size() : 0));
  if (n.op == Op::input) inputs_.push_back(id);
  nodes_.push_back(std::move(n));
  return id;
}

void Graph::clear() {
  spare_.keep(nodes_);
  nodes_.clear();
  outputs_.clear();
  inputs_.clear();
  hashes_.clear();
}

Node Graph::Spare::take() {
  if (nodes_.empty()) return Node{};
  Node n = std::move(nodes_.back());
  nodes_.pop_back();
  return n;
}

void Graph::Spare::keep(std::vector<Node>& nodes) {
  // Enough for a trace of this many nodes to be recorded again without allocating; a larger
  // one allocates for the rest as any graph does.
  constexpr size_t kMaxSpare = 4096;
  for (Node& n : nodes) {
    if (nodes_.size() == kMaxSpare) return;
    n.shape.clear();
    n.inputs.clear();
    n.axes.clear();
    nodes_.push_back(Node{.shape = std::move(n.shape), .inputs = std::move(n.inputs),
                          .axes = std::move(n.axes)});
  }
}

void Graph::add_output(NodeId id) {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size()) {
    throw UsageError(fmt::format("output: %{} does not exist (the trace has {} nodes)", id,
                            nodes_.size()));
  }
  outputs_.push_back(id);
}

std::optional<size_t> Graph::written_input(size_t i) const {
  const Node& n = node(outputs_.at(i));
  if (n.op != Op::update_slice) return std::nullopt;
  const auto it = std::find(inputs_.begin(), inputs_.end(), n.inputs[0]);
  if (it == inputs_.end()) return std::nullopt;
  return static_cast<size_t>(it - inputs_.begin());
}

void Graph::set_outputs(std::vector<NodeId> ids) {
  outputs_.clear();
  for (NodeId id : ids) add_output(id);
}

NodeId add_input(Graph& g, DType dtype, Shape shape) {
  return g.add({.op = Op::input, .dtype = dtype, .shape = std::move(shape)});
}
NodeId add_constant(Graph& g, DType dtype, double value) {
  return g.add({.op = Op::constant, .dtype = dtype, .value = value});
}

NodeId add_integer_constant(Graph& g, DType dtype, int64_t value) {
  return g.add({.op = Op::constant, .dtype = dtype, .value = static_cast<double>(value),
                .integer = value});
}
NodeId add_unary(Graph& g, Op op, NodeId x) { return g.add({.op = op, .inputs = {x}}); }
NodeId add_binary(Graph& g, Op op, NodeId a, NodeId b) {
  return g.add({.op = op, .inputs = {a, b}});
}
NodeId add_where(Graph& g, NodeId cond, NodeId a, NodeId b) {
  return g.add({.op = Op::where, .inputs = {cond, a, b}});
}
NodeId add_cast(Graph& g, NodeId x, DType dtype) {
  return g.add({.op = Op::cast, .inputs = {x}, .dtype = dtype});
}
NodeId add_reduce(Graph& g, Op op, NodeId x, std::vector<int64_t> axes, bool keepdim) {
  return g.add({.op = op, .inputs = {x}, .axes = std::move(axes), .keepdim = keepdim});
}
NodeId add_reshape(Graph& g, NodeId x, Shape shape) {
  return g.add({.op = Op::reshape, .inputs = {x}, .shape = std::move(shape)});
}
NodeId add_permute(Graph& g, NodeId x, std::vector<int64_t> perm) {
  return g.add({.op = Op::permute, .inputs = {x}, .axes = std::move(perm)});
}
NodeId add_expand(Graph& g, NodeId x, Shape shape) {
  return g.add({.op = Op::expand, .inputs = {x}, .shape = std::move(shape)});
}
NodeId add_matmul(Graph& g, NodeId a, NodeId b) {
  return g.add({.op = Op::matmul, .inputs = {a, b}});
}

NodeId add_gather(Graph& g, NodeId x, int64_t axis, NodeId idx) {
  return g.add({.op = Op::gather, .inputs = {x, idx}, .axes = {axis}});
}
const Shape& computed_shape(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return n.op == Op::update_slice ? g.node(n.inputs[1]).shape : n.shape;
}

NodeId add_update_slice(Graph& g, NodeId dst, NodeId src, int64_t axis, NodeId start) {
  return g.add({.op = Op::update_slice, .inputs = {dst, src, start}, .axes = {axis}});
}
NodeId add_random(Graph& g, Op op, DType dtype, Shape shape, NodeId key) {
  return g.add({.op = op, .inputs = {key}, .dtype = dtype, .shape = std::move(shape)});
}
NodeSpec slice_spec(const Graph& g, NodeId x, int64_t axis, int64_t start, int64_t stop,
                    int64_t step) {
  const Node& xn = g.node(x);
  const int64_t rank = static_cast<int64_t>(xn.shape.size());
  const int64_t a = normalize_axis(axis, rank, "slice");
  const int64_t extent = xn.shape[a];
  if (step < 1) {
    throw UsageError(fmt::format("slice: step {} along axis {} of {}; the step must be at least 1 "
                                 "(negative steps, which reverse, are not supported)",
                                 step, axis, type_str(xn)));
  }
  // Python's rules: negatives count from the end, then both bounds clamp to [0, extent].
  auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + extent : i, int64_t{0}, extent); };
  const int64_t lo = clamp(start), hi = clamp(stop);
  if (hi <= lo) {
    throw UsageError(fmt::format("slice: [{}:{}:{}] of axis {} of {} is empty (empty tensors are "
                                 "not supported)",
                                 start, stop, step, axis, type_str(xn)));
  }
  Shape shape = xn.shape;
  shape[a] = 1 + (hi - lo - 1) / step;  // ceil((hi - lo) / step), without overflow
  // One element: the step is never applied; 1 keeps every product with it small.
  const int64_t canonical_step = shape[a] == 1 ? 1 : step;
  return {.op = Op::slice, .inputs = {x}, .shape = std::move(shape), .axes = {a}, .start = lo,
          .step = canonical_step};
}
NodeId add_slice(Graph& g, NodeId x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  return g.add(slice_spec(g, x, axis, start, stop, step));
}
NodeId add_concat(Graph& g, std::vector<NodeId> xs, int64_t axis) {
  return g.add({.op = Op::concat, .inputs = std::move(xs), .axes = {axis}});
}
NodeId add_arange(Graph& g, int64_t n, DType dtype) {
  return g.add({.op = Op::arange, .dtype = dtype, .shape = {n}});
}

std::optional<Op> parse_op(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOpTable[i].name == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

}  // namespace fusejit::ir
