// jit/timing: timing on the device with CUDA events, for `fusejit run` and the benchmark:
// warm-up first, then the median of many runs, each enqueued whole behind a gate before the GPU
// starts it (so that short kernels are timed back to back, not at the host's launch rate); and
// the two ceilings every figure is compared with, measured in the same process: device-to-device
// copy bandwidth and a plain cuBLASLt GEMM's rate.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/libs/blas.h"
#include "jit/runtime/device.h"
#include "jit/runtime/executor.h"
#include "ir/graph.h"

namespace fusejit::jit {

// Bytes read + written per second by a 1 GiB device-to-device copy (median of 20).
double copy_bandwidth(Device& device);

// FLOP/s of a plain cuBLASLt GEMM (no epilogue) of this size and dtype (median of 10).
double gemm_rate(Device& device, Blas& blas, DType dtype, int64_t m, int64_t n, int64_t k);

// The floor's bytes for `g`: each graph input read once, each output written once.
int64_t io_bytes(const ir::Graph& g);

struct ExecutableTiming {
  double total_ms = 0.0;            // median of whole runs
  std::vector<double> step_ms;      // median per step
  int input_sets = 1;               // the copies of the inputs the runs rotated through
};

// How many sets of inputs timed runs rotate through, so that a run does not find its inputs in
// the L2 where the run before left them. A run that moves `run_bytes` (inputs read, outputs
// written) of at least twice the L2 evicts itself: 1. A smaller one gets enough sets that the runs
// between two uses of a set move twice the L2, as far as `spare_bytes` of device memory holds
// the copies, and at most 64 sets in all. A decode step's attention reads a KV cache of 33.6 MB
// (one sequence, 8k keys) after hundreds of MB of weights: timed back to back on one buffer, it
// would read part of it from the H100's 50 MB L2 instead.
int rotation_sets(int64_t run_bytes, int64_t l2_bytes, int64_t spare_bytes);

// Times `exe` on `inputs`: `warmup` untimed runs, then the medians of `iters` runs. The runs
// rotate through rotation_sets() sets of inputs: `inputs`, then device copies of them.
ExecutableTiming time_executable(const Executable& exe,
                                 const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                                 Device& device, Blas& blas, int iters, int warmup = 3);

}  // namespace fusejit::jit
