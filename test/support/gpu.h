// GPU test support: a shared Runtime when a GPU is present, and the differential check of a
// graph (GPU with poisoned outputs against the CPU reference on fresh random inputs).
// Tests tagged [gpu] begin with FUSEJIT_REQUIRE_GPU(), which skips them (FUSEJIT_SKIP: reported
// as skipped, not passed), saying why, when no GPU is present.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"

namespace fusejit::testing {

// The process-wide test runtime, or null (with the reason) when there is no GPU. `rounding`
// picks one of two runtimes: FUSEJIT_ROUNDING=store (the default) or node.
jit::Runtime* gpu_runtime(std::string* why = nullptr, Rounding rounding = Rounding::store);

struct GpuCheck {
  bool pass = false;
  double worst_error = 0.0;
  double bound = 0.0;
  std::vector<double> errors;  // per output: ||out - ref|| / ||ref||
  std::string detail;  // per-output errors, the seed and the trace, for failure messages
};

// Runs `g` on the GPU (outputs poisoned with NaN first) and compares each output with the CPU
// reference within jit::error_bound(g).
GpuCheck check_on_gpu(const ir::Graph& g, uint64_t seed, Rounding rounding = Rounding::store);
// The same on the given inputs (one per graph input, in order); `what` names them in `detail`.
GpuCheck check_on_gpu(const ir::Graph& g, const std::vector<ir::HostTensor>& inputs,
                      const std::string& what, Rounding rounding = Rounding::store);

// Whether `g`'s outputs on these inputs move by more than half the f16/bf16 bound when its
// f16/bf16 intermediates are kept in f32 instead of rounded at every node (the reference's way):
// a graph that cancels or feeds a large value to sin. Its result then depends on where rounding
// happens, so only FUSEJIT_ROUNDING=node can be held to the reference's bound on it.
bool rounding_sensitive(const ir::Graph& g, const std::vector<ir::HostTensor>& inputs);

}  // namespace fusejit::testing

#define FUSEJIT_REQUIRE_GPU()                                                \
  do {                                                                       \
    std::string fusejit_why;                                                 \
    if (!::fusejit::testing::gpu_runtime(&fusejit_why)) {                    \
      FUSEJIT_SKIP("no GPU (" << fusejit_why << ")");                        \
    }                                                                        \
  } while (0)
