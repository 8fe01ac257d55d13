// fusion/epilogue: which of a GEMM's elementwise consumers fold into its cuBLASLt call,
//   D = act(alpha * (A @ B) + beta * C + bias)
// Internal to the partitioner, which makes each matmul and what folds into it one gemm region.
//
// Starting at the matmul, the chain follows the single reader of the value computed so far and
// folds, in the order cuBLASLt applies them: multiplications by a scalar constant (alpha); adds of
// a bias (a buffer of shape [N] or [1,..,1,N], N the output's last dim, broadcast only along the
// leading axes) and of a residual C (a buffer of the output's full shape, or such a buffer times a
// scalar constant, which becomes beta), in either order, one of each; then one activation, relu or
// gelu_tanh. Every folded node has the matmul's dtype and shape. The chain stops at the first
// reader that does not fold, with the reason; and where the value so far is a graph output or is
// read by more than one node, since that value must then be written as it is.
#pragma once

#include <vector>

#include "fusion/dataflow.h"
#include "fusion/partition.h"
#include "fusion/plan.h"

namespace fusejit::fusion::detail {

struct EpilogueMatch {
  // What folded (bias, residual, alpha, beta, activation), the transpose flags from the
  // dataflow, and the refusal that ended the chain, if any.
  GemmEpilogue epilogue;
  // The compute nodes the call computes besides the matmul, ascending. All come after the
  // matmul except a `mul` that scales the residual (beta), which may come before it.
  std::vector<NodeId> folded;
  // The value the call writes: the last node of the chain, or the matmul itself.
  NodeId output = -1;
  // Producer/consumer pairs the chain considered, with the reason: each fold (fused), the cut
  // after the last folded value, and the bias or residual read from memory (a cut). Graph inputs
  // read are not listed, as elsewhere in the partitioner.
  std::vector<Decision> decisions;
};

// The epilogue of every matmul, indexed by node id (empty for other nodes). Matmuls are matched
// in ascending order, and a node folds into one call at most: an add of two GEMM results folds
// into the first matmul's call, which then reads the second as its residual.
std::vector<EpilogueMatch> match_epilogues(const Dataflow& df, const PartitionOptions& options);

}  // namespace fusejit::fusion::detail
