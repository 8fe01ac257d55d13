// jit/driver: the few CUDA driver API functions fusejit needs (loading modules, launching
// kernels, putting them into CUDA graphs). libcuda is never linked: a binary must start on a machine with no GPU driver. The
// functions are looked up through the runtime (cudaGetDriverEntryPointByVersion) at first GPU
// use.
#pragma once

#include <cuda.h>

namespace fusejit::jit {

struct Driver {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void**, void**) = nullptr;
  // Launches with attributes: programmatic stream serialization (templates::Kernel::programmatic).
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  // CUDA graphs of driver-API kernels (jit/runtime/graph_replay.h); the graph itself is the
  // runtime's.
  CUresult (*graph_add_kernel_node)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                    const CUDA_KERNEL_NODE_PARAMS*) = nullptr;
  CUresult (*graph_exec_kernel_node_set_params)(CUgraphExec, CUgraphNode,
                                                const CUDA_KERNEL_NODE_PARAMS*) = nullptr;

  // Looks every function up; throws fusejit::Error when the driver lacks one.
  static Driver load();

  void check(CUresult status, const char* call) const;
};

}  // namespace fusejit::jit

// FUSEJIT_DRIVER(driver, launch_kernel(...)): calls and checks a driver function.
#define FUSEJIT_DRIVER(drv, fn, ...) (drv).check((drv).fn(__VA_ARGS__), #fn)
