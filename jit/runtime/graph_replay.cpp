// jit/graph_replay: see graph_replay.h.
#include "jit/runtime/graph_replay.h"

#include <algorithm>

#include "fusejit/error.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

CUDA_KERNEL_NODE_PARAMS kernel_node_params(const KernelLaunch& launch, void** args) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = launch.function;
  p.gridDimX = launch.grid;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = launch.block;
  p.blockDimY = p.blockDimZ = 1;
  p.sharedMemBytes = launch.shared_bytes;
  p.kernelParams = args + launch.first;
  return p;
}

GraphReplay::GraphReplay(const Driver& driver, std::span<const KernelLaunch> launches,
                         std::span<void* const> pointers, void** args)
    : held_(pointers.begin(), pointers.end()) {
  FUSEJIT_CUDA(cudaGraphCreate(&graph_, 0));
  try {
    nodes_.resize(launches.size());
    for (size_t i = 0; i < launches.size(); ++i) {
      const CUDA_KERNEL_NODE_PARAMS p = kernel_node_params(launches[i], args);
      const CUgraphNode* after = i == 0 ? nullptr : &nodes_[i - 1];
      FUSEJIT_DRIVER(driver, graph_add_kernel_node, &nodes_[i], graph_, after, i == 0 ? 0 : 1,
                     &p);
    }
    FUSEJIT_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  } catch (...) {
    cudaGraphDestroy(graph_);
    throw;
  }
}

GraphReplay::~GraphReplay() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

size_t GraphReplay::launch(const Driver& driver, std::span<const KernelLaunch> launches,
                           std::span<void* const> pointers, void** args, cudaStream_t stream) {
  if (launches.size() != nodes_.size() || pointers.size() != held_.size()) {
    throw InternalError("graph replay: the launches differ from the ones the graph was built of");
  }
  size_t updated = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    const KernelLaunch& l = launches[i];
    const auto now = pointers.subspan(l.first, l.count);
    const auto held = held_.begin() + static_cast<std::ptrdiff_t>(l.first);
    if (std::equal(now.begin(), now.end(), held)) continue;
    const CUDA_KERNEL_NODE_PARAMS p = kernel_node_params(l, args);
    FUSEJIT_DRIVER(driver, graph_exec_kernel_node_set_params, exec_, nodes_[i], &p);
    std::copy(now.begin(), now.end(), held);
    ++updated;
  }
  FUSEJIT_CUDA(cudaGraphLaunch(exec_, stream));
  return updated;
}

}  // namespace fusejit::jit
