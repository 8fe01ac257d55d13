// fusion/dataflow: what the partitioner knows about each node before it cuts the graph: which
// nodes need a home region ("compute" nodes), which are free to replicate (views, constants),
// and who reads whom once free nodes are looked through. Internal to the partitioner.
#pragma once

#include <vector>

#include "fusion/plan.h"
#include "ir/graph.h"

namespace fusejit::fusion::detail {

enum class NodeRole {
  dead,     // no output needs it
  input,    // a graph input: read from memory, never in a region
  free,     // a view or constant (is_view_or_constant): replicated into every region that reads it
  compute,  // elementwise, reduce, or a view/constant that must be written to memory
  gemm,     // a matmul: a library call of its own
};

// A matmul's operands as cuBLASLt reads them: the buffers, and the free views between each
// buffer and the matmul that cost no copy: permutes swapping the last two axes (a transpose,
// folded into a layout flag), expands of batch dims only (a batch stride of 0), and reshapes
// that only add or drop 1s among the batch dims (unsqueeze, squeeze); under them, a reshape of
// the buffer itself, whatever its matrix (the buffer's bytes in the reshape's shape).
struct GemmOperands {
  NodeId a = -1, b = -1;
  std::vector<NodeId> views_a, views_b;  // the folded views, from the matmul down to the buffer
  bool transpose_a = false, transpose_b = false;  // an odd number of folded transposes
  // The buffer's batch dims as the matmul's operand presents them: the operand's batch dims,
  // with 1 where a folded expand broadcasts (GemmEpilogue::batch_a/b).
  Shape batch_a, batch_b;
  // B is `b`, an i8 buffer, under a cast to the matmul's dtype that the call does as it reads
  // (GemmEpilogue::int8_b): weights [N, K] read transposed, unbatched, and at most
  // kInt8GemmMaxRows rows of A, the calls the skinny-GEMM kernel takes. Otherwise the cast is
  // a kernel's and B the bf16 (or f16, f32) weights it writes.
  bool int8_b = false;
};

struct Dataflow {
  const ir::Graph* graph = nullptr;
  std::vector<NodeRole> role;
  std::vector<bool> graph_output;
  // Why a view or constant is compute: "" when it is not (or is not a view/constant).
  std::vector<std::string> materialized;
  // For compute and gemm nodes: the inputs and compute/gemm nodes they read, looking through
  // free nodes; sorted, unique.
  std::vector<std::vector<NodeId>> reads;
  // For input, compute and gemm nodes: the compute and gemm nodes that read them; sorted.
  std::vector<std::vector<NodeId>> readers;
  std::vector<GemmOperands> gemm;  // indexed by node id; meaningful for gemm nodes

  const ir::Node& node(NodeId id) const { return graph->node(id); }
  NodeRole role_of(NodeId id) const { return role[static_cast<size_t>(id)]; }
  bool is_free(NodeId id) const { return role_of(id) == NodeRole::free; }
};

// `recomputed` (indexed by node id; may be empty): elementwise nodes to treat as free, evaluated
// again in every region that reads them (fusion/recompute.h). A graph output or a matmul
// operand among them is still written by a region.
Dataflow analyze(const ir::Graph& g, const std::vector<bool>& recomputed = {});

// True for what costs nothing to evaluate again where it is read, and so is replicated into
// every region that reads it (NodeRole::free): views, constants, aranges (start + step *
// position) and random sources (rand, randn: a pure function of the element's position and of
// the two values of their key input). An arange read by several regions (the candidate positions
// of a sampling search, read by each of its rounds) would otherwise be a kernel of its own.
bool is_view_or_constant(const ir::Node& n);

// True when `perm` swaps the last two axes and keeps the others.
bool is_last_two_swap(const std::vector<int64_t>& perm);

// True when the view `n` of `in` is one cuBLASLt reads through without a copy (see GemmOperands):
// it keeps the last two axes (or swaps them) and only broadcasts, adds or drops batch dims.
bool is_batch_view(const ir::Node& n, const ir::Node& in);

// The nodes a region made of `members` (compute nodes, sorted) evaluates: the members and the
// free nodes they read, ascending.
std::vector<NodeId> region_nodes(const Dataflow& df, const std::vector<NodeId>& members);
// The members written to memory: graph outputs and values read by non-members; ascending.
std::vector<NodeId> region_outputs(const Dataflow& df, const std::vector<NodeId>& members);
// What the members read from memory: non-member inputs and compute/gemm nodes; ascending.
std::vector<NodeId> region_inputs(const Dataflow& df, const std::vector<NodeId>& members);

}  // namespace fusejit::fusion::detail
