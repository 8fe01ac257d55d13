// ir/interp: the CPU reference interpreter, the executable meaning of every op and the oracle
// for every GPU test. It evaluates each node in double precision and rounds its result to the
// node's storage dtype (bf16/f16 rounding as the GPU does it); reductions accumulate in double.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusejit::ir {

// Evaluates `g` on `inputs` (one per input node, in order, of matching dtype and shape) and
// returns one tensor per output, in order. Throws fusejit::Error when the inputs do not match.
std::vector<HostTensor> interpret(const Graph& g, const std::vector<HostTensor>& inputs);

}  // namespace fusejit::ir
