// jit/graph_replay: a cached plan's kernel launches replayed as one CUDA graph, so that a plan of
// several small kernels costs the host one graph launch instead of one launch per kernel.
//
// The graph is built once per Executable, node by node from the launches (no stream capture, so
// nothing else queued on the caller's stream can slip into it), each kernel after the one
// before. Buffer addresses change between evals (pool allocations, caller memory): before each
// launch, the nodes whose pointer arguments differ from the ones they hold are updated in the
// instantiated graph (cuGraphExecKernelNodeSetParams), which affects only later launches, never
// one already queued. Which plans replay, and when not, is the executor's decision
// (jit/runtime/executor.h, RunOptions::graph_min_launches).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "jit/runtime/driver.h"

namespace fusejit::jit {

// One kernel launch: the function, its launch shape, and its arguments, which are pointers:
// args[i] points at pointers[first + i] of the run's pointer array (count of them).
struct KernelLaunch {
  CUfunction function = nullptr;
  unsigned grid = 1, block = 1, shared_bytes = 0;
  size_t first = 0, count = 0;
  bool programmatic = false;  // templates::Kernel::programmatic (a stream launch honours it)
};

class GraphReplay {
 public:
  // The graph of `launches` in order, holding `pointers` (the run's pointer array) now. `args`
  // is the array of argument addresses: args[i] == &pointers[i].
  GraphReplay(const Driver& driver, std::span<const KernelLaunch> launches,
              std::span<void* const> pointers, void** args);
  ~GraphReplay();
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;

  // Queues the graph on `stream` with `pointers` (the layout of construction), after updating
  // the nodes whose pointers changed since the last launch. Returns how many were updated.
  size_t launch(const Driver& driver, std::span<const KernelLaunch> launches,
                std::span<void* const> pointers, void** args, cudaStream_t stream);

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<CUgraphNode> nodes_;  // per launch
  std::vector<void*> held_;         // the pointers the instantiated nodes hold
};

// The driver's description of `launch` with its arguments at `args` + launch.first.
CUDA_KERNEL_NODE_PARAMS kernel_node_params(const KernelLaunch& launch, void** args);

}  // namespace fusejit::jit
