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
  // operand axis axes[i]). gather: the one axis the index tensor picks along.
  std::vector<int64_t> axes;
  bool keepdim = false;  // reduce
  double value = 0.0;    // constant (rank 0)

  bool operator==(const Node&) const = default;
};

// What a caller states to create a node; inference fills in the rest. Fields an op does not use
// must be left at their defaults.
struct NodeSpec {
  Op op = Op::input;
  std::vector<NodeId> inputs;
  DType dtype = DType::f32;  // used by input, constant, cast
  Shape shape;               // used by input, reshape, expand (the target shape), rand, randn
  std::vector<int64_t> axes; // used by reduce (any order, negatives allowed), permute, gather
  bool keepdim = false;      // used by reduce
  double value = 0.0;        // used by constant
};

class Graph {
 public:
  // Infers and appends a node; throws fusejit::Error when it is ill-formed.
  NodeId add(const NodeSpec& spec);

  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

  const std::vector<NodeId>& outputs() const { return outputs_; }
  void add_output(NodeId id);
  void set_outputs(std::vector<NodeId> ids);

  // Ids of the input nodes, in order.
  std::vector<NodeId> inputs() const;

  bool operator==(const Graph&) const = default;

 private:
  std::vector<Node> nodes_;
  std::vector<NodeId> outputs_;
};

// The spec that recreates `node` (with the same operand ids): for rebuilding graphs.
NodeSpec spec_of(const Node& node);

// Shape and dtype inference for one node of `g`; throws fusejit::Error when ill-formed.
Node infer_node(const Graph& g, const NodeSpec& spec);

// "f32[16384,16384]"
std::string type_str(const Node& node);

// Convenience builders over Graph::add, used by the API, the tests and the passes.
NodeId add_input(Graph& g, DType dtype, Shape shape);
NodeId add_constant(Graph& g, DType dtype, double value);
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
// rand (uniform [0,1)) or randn (standard normal) of `dtype` and `shape`, drawn with `key`, an
// i64[2] node holding {seed, offset} (ir/random.h): the values are data, not part of the node.
NodeId add_random(Graph& g, Op op, DType dtype, Shape shape, NodeId key);

}  // namespace fusejit::ir
