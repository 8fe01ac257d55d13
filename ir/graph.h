// ir/graph: the trace. A Graph is a list of Nodes in topological order (a node's operands are
// always earlier nodes) plus the list of output ids. Inputs are `input` nodes, numbered by
// their order of appearance.
//
// Nodes are small values: everything that defines a node is in its fields, so two nodes are
// equal exactly when their fields are, and hashing never looks at pointers or positions other
// than operand ids.
//
// Graph::add is the only way in: it runs shape and dtype inference on the node the caller
// describes and throws fusejit::Error (naming the op, the shapes and the fix) when the node is
// ill-formed. A Graph built through it is valid by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusejit/dtype.h"
#include "ir/op.h"

namespace fusejit::ir {

using NodeId = int32_t;

struct Node {
  Op op = Op::input;
  DType dtype = DType::f32;  // result dtype
  Shape shape;               // result shape
  std::vector<NodeId> inputs;
  // reduce: the reduced axes, sorted ascending. permute: the permutation (result axis i is
  // operand axis axes[i]). slice, concat: the one axis they work along (non-negative);
  // gather: the one axis the index tensor picks along.
  std::vector<int64_t> axes;
  bool keepdim = false;  // reduce
  double value = 0.0;    // constant (rank 0); of an integral or bool dtype, `integer` as a double
  int64_t integer = 0;   // constant of an integral or bool dtype: its exact value (i32 wrapped)
  // slice: result element k along axes[0] is operand element start + k * step (0 <= start <
  // the operand's extent, step >= 1, the last element in range); the length is the result's.
  int64_t start = 0;
  int64_t step = 1;

  bool operator==(const Node&) const = default;
};

// What a caller states to create a node; inference fills in the rest. Fields an op does not use
// must be left at their defaults.
struct NodeSpec {
  Op op = Op::input;
  std::vector<NodeId> inputs;
  DType dtype = DType::f32;  // used by input, constant, cast, arange
  Shape shape;               // used by input, reshape, expand, slice, arange, rand, randn (the
                             // result shape)
  std::vector<int64_t> axes; // used by reduce (any order, negatives allowed), permute, gather,
                             // slice and concat (one axis, negative allowed)
  bool keepdim = false;      // used by reduce
  double value = 0.0;        // used by constant
  // Used by a constant of an integral or bool dtype, whose exact value it is when `value` is its
  // nearest double (as spec_of and add_integer_constant give); else `value` is converted as a
  // cast would (truncated, wrapped). So a double alone still states such a constant.
  int64_t integer = 0;
  int64_t start = 0;         // used by slice (already in range: see add_slice for Python's)
  int64_t step = 1;          // used by slice
};

class Graph {
 public:
  // Infers and appends a node; throws fusejit::Error when it is ill-formed. The rvalue form
  // moves the operand list into the node instead of copying it (recording an op).
  NodeId add(const NodeSpec& spec);
  NodeId add(NodeSpec&& spec);

  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

  const std::vector<NodeId>& outputs() const { return outputs_; }
  void add_output(NodeId id);
  void set_outputs(std::vector<NodeId> ids);

  // Empties the graph, keeping its memory for the next one (a Context's next trace): the
  // nodes' shape and operand lists too, which the next trace's nodes take over, so that
  // recording the same program again allocates nothing.
  void clear();

  // Ids of the input nodes, in order.
  const std::vector<NodeId>& inputs() const { return inputs_; }

  // Where output `i` writes, when it is an update_slice of an input: that input's position in
  // inputs() (the buffer a caller bound, which the write lands in). nullopt for any other output.
  std::optional<size_t> written_input(size_t i) const;

  // Per node, its structural hash (ir/hash.h's node_hash), kept as nodes are added so that
  // hashing a recorded trace costs nothing more at eval.
  const std::vector<uint64_t>& node_hashes() const { return hashes_; }

  // The hashes first: they tell two different graphs apart quickest.
  bool operator==(const Graph& other) const {
    return hashes_ == other.hashes_ && outputs_ == other.outputs_ && nodes_ == other.nodes_;
  }

 private:
  std::vector<Node> nodes_;
  std::vector<NodeId> outputs_;
  std::vector<NodeId> inputs_;
  std::vector<uint64_t> hashes_;

  // Nodes of the graph before the last clear(), their lists emptied but their memory kept: add
  // infers a new node into one of them. A copy of the graph starts without any.
  class Spare {
   public:
    Spare() = default;
    Spare(const Spare&) {}
    Spare(Spare&&) noexcept = default;
    Spare& operator=(const Spare&) { return *this; }
    Spare& operator=(Spare&&) noexcept = default;
    ~Spare() = default;
    // A node to infer into: a kept one, or a new one.
    Node take();
    // Keeps `nodes` (moved from), up to a bound.
    void keep(std::vector<Node>& nodes);

   private:
    std::vector<Node> nodes_;
  };
  Spare spare_;

  // Hashes and appends an inferred node.
  NodeId append(Node&& n);
};

// to = from, for the short lists of nodes (shapes, operands) copied into a list that usually
// has the memory already (a kept node's, see Graph::Spare): vector assignment goes through
// memmove, whose call costs more than copying a few elements.
template <class T, class List>
void assign_short(std::vector<T>& to, const List& from) {
  to.clear();
  for (const auto& v : from) to.push_back(v);
}

// The elements a kernel computes for `id`: an update_slice's value, which is all it writes (the
// rest of its destination stays as it is, in place); any other node's own shape.
const Shape& computed_shape(const Graph& g, NodeId id);

// The spec that recreates `node` (with the same operand ids): for rebuilding graphs.
NodeSpec spec_of(const Node& node);

// Shape and dtype inference for one node of `g`; throws fusejit::Error when ill-formed.
Node infer_node(const Graph& g, const NodeSpec& spec);

// "2", or "one or more" for a variadic op: for errors about operand counts.
std::string arity_str(Op op);

// "f32[16384,16384]"
std::string type_str(const Node& node);

// Convenience builders over Graph::add, used by the API, the tests and the passes.
NodeId add_input(Graph& g, DType dtype, Shape shape);
NodeId add_constant(Graph& g, DType dtype, double value);
// An integral or bool constant of exactly `value` (wrapped to i32, or != 0 for bool).
NodeId add_integer_constant(Graph& g, DType dtype, int64_t value);
NodeId add_unary(Graph& g, Op op, NodeId x);
NodeId add_binary(Graph& g, Op op, NodeId a, NodeId b);
NodeId add_where(Graph& g, NodeId cond, NodeId a, NodeId b);
NodeId add_cast(Graph& g, NodeId x, DType dtype);
NodeId add_reduce(Graph& g, Op op, NodeId x, std::vector<int64_t> axes, bool keepdim);
NodeId add_reshape(Graph& g, NodeId x, Shape shape);
NodeId add_permute(Graph& g, NodeId x, std::vector<int64_t> perm);
NodeId add_expand(Graph& g, NodeId x, Shape shape);
NodeId add_matmul(Graph& g, NodeId a, NodeId b);
// gather(x, idx) along `axis` (torch.gather): result[p] = x[p with p[axis] = idx[p]].
NodeId add_gather(Graph& g, NodeId x, int64_t axis, NodeId idx);
// update_slice(dst, src, start) along `axis`: dst (an input) with src written at positions
// [p, p + n) of the axis, n = src's extent there and p the position `start` (an integer node of
// one element) holds when the trace runs (ir::update_start). The write lands in dst's buffer.
NodeId add_update_slice(Graph& g, NodeId dst, NodeId src, int64_t axis, NodeId start);
// rand (uniform [0,1)) or randn (standard normal) of `dtype` and `shape`, drawn with `key`, an
// i64[2] node holding {seed, offset} (ir/random.h): the values are data, not part of the node.
NodeId add_random(Graph& g, Op op, DType dtype, Shape shape, NodeId key);
// x[start:stop:step] along `axis`, with Python's and PyTorch's bounds: negative start and stop
// count from the end, both are clamped to the axis; step >= 1. An empty result is an error.
NodeId add_slice(Graph& g, NodeId x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1);
// The canonical spec of that slice (for recording it elsewhere); throws as add_slice does.
NodeSpec slice_spec(const Graph& g, NodeId x, int64_t axis, int64_t start, int64_t stop,
                    int64_t step);
// The operands joined along `axis` (torch.cat): equal shapes but along the axis, dtypes promoted.
NodeId add_concat(Graph& g, std::vector<NodeId> xs, int64_t axis);
// [0, 1, ..., n-1] of `dtype` (not bool).
NodeId add_arange(Graph& g, int64_t n, DType dtype);

}  // namespace fusejit::ir
