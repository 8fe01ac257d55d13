// fusejit/profile: what fusion makes of a computation and what it costs, for a program that
// wants to show or check it (examples/seed_workloads prints it for every workload).
//
// Each function takes pending tensors (recorded, not yet evaluated) of one Context and looks at
// the trace that would compute them, as eval would (every pending tensor of the Context that is
// not among them is left out), without materializing them: they stay pending, and a later eval
// computes them as usual. The plan needs no GPU; timing, checking and the device need one.
//
//   fusejit::PlanSummary plan = fusejit::plan_summary({y});       // 1 kernel, 0 library calls
//   fusejit::TraceTiming t = fusejit::time_trace({y});             // GPU: median ms, bytes
//   fusejit::ReferenceCheck c = fusejit::check_against_reference({y});
//
// The same plan, in full, is what `fusejit plan TRACE` prints for Context::trace_text({y}).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusejit/context.h"
#include "fusejit/export.h"
#include "fusejit/tensor.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

// The fusion plan of the trace that computes `outputs`, under their Context's options (a
// Context made with FUSEJIT_DISABLE=fusion shows the unfused plan). Needs no GPU, and no data:
// placeholders do.
struct PlanSummary {
  int kernels = 0;        // generated CUDA kernels
  int library_calls = 0;  // cuBLASLt calls (GEMM regions, each with what its epilogue folds)
  // One line per region, in execution order: its kind and ops, or its cuBLASLt call:
  //   "normalization: max sub exp sum div"
  //   "gemm: cublasLt 256x256x256 bf16+bias+relu"
  std::vector<std::string> regions;
};
PlanSummary plan_summary(const std::vector<Tensor>& outputs);

// The same plan in full, as text: what `fusejit plan` prints for Context::trace_text(outputs)
// (each region with its nodes as trace lines, the decisions with the reason for each cut, the
// cuBLASLt calls), for a program that shows it (the Python package's plan() and explain()).
// Needs no GPU and no data.
std::string plan_text(const std::vector<Tensor>& outputs);

// The GPU of `ctx`, and its device-to-device copy bandwidth, measured now (a 1 GiB copy, median
// of 20): the ceiling a memory-bound kernel's bandwidth is compared with. Throws
// fusejit::UsageError when `ctx` has no GPU.
struct DeviceSummary {
  std::string name;                  // "NVIDIA H200"
  std::string arch;                  // "sm_90"
  int sm_count = 0;
  double copy_bytes_per_second = 0;  // bytes read + written per second
};
DeviceSummary describe_device(Context& ctx);

// The trace that computes `outputs`, run on the GPU: `warmup` untimed runs, then the median of
// `iters` runs timed with CUDA events. Where a run moves less than twice the GPU's L2, the runs
// take their inputs from device copies in turn, so that none reads what the run before left in
// the L2. Throws fusejit::UsageError without a GPU, or when an output is not pending or the
// trace reads a placeholder.
struct TraceTiming {
  double ms = 0.0;     // median time of one run
  int64_t bytes = 0;   // the floor: each input read once, each output written once
  double flops = 0.0;  // GEMM flops (2*M*N*K per GEMM); 0 without GEMMs
};
TraceTiming time_trace(const std::vector<Tensor>& outputs, int iters = 20, int warmup = 3);

// The trace that computes `outputs`, run once more on the GPU with its outputs poisoned with NaN
// first, and compared with the CPU reference interpreter on the same inputs by
// ||out - ref|| / ||ref|| (docs/design.md: 1e-5 for f32, 1e-2 through f16/bf16 storage; NaN never
// passes). A trace with a GEMM or more than 2^20 elements in a value is compared on
// `sample_rows` indices of an axis it is separable along (rows of a row-wise trace), so that the
// reference stays fast. Throws as time_trace does.
struct ReferenceCheck {
  double error = 0.0;  // the largest relative error over the outputs
  double bound = 0.0;
  std::string scope;   // "every element" or "16 sampled indices of axis 0 (of 4096)"
  bool passed() const { return error <= bound; }
};
ReferenceCheck check_against_reference(const std::vector<Tensor>& outputs,
                                       int64_t sample_rows = 16);

}  // namespace fusejit
FUSEJIT_PUBLIC_END
