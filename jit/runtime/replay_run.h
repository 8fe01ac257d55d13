// jit/replay_run: one Executable run again and again on the same buffers (fusejit::Replay), as
// one CUDA graph launch from its second run on, GEMMs included.
//
// Every region output has a buffer for the ReplayRun's lifetime (executor.h, fixed_buffers),
// shared only with outputs computed after its last reader (buffer_slots; the buffer sized for
// the largest of them), so the addresses a run uses never change and the ReplayRun holds about
// an eval's peak. The first run queues the steps one by one: the driver loads kernels on their
// first launch and cuBLASLt has its algorithms already (picked when the plan was built), so that
// nothing the capture cannot hold happens in it later. The second run captures the steps from
// the stream (cudaStreamBeginCapture, thread local) into a graph, instantiates it and launches
// it; every later run is that one launch. cuDNN attention steps are captured like kernels, with
// one workspace the ReplayRun holds. Nothing on a stream that something else is capturing is
// captured (the steps go into that capture); a capture the driver refuses, or a step that throws
// while captured, falls back to launches one by one, and says why (a step that fails outside
// capture too throws then).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "jit/runtime/executor.h"

namespace fusejit::jit {

class ReplayRun {
 public:
  ReplayRun(std::shared_ptr<const Executable> exe,
            const std::vector<std::shared_ptr<DeviceBuffer>>& inputs, Device& device);
  ~ReplayRun();
  ReplayRun(const ReplayRun&) = delete;
  ReplayRun& operator=(const ReplayRun&) = delete;

  // Queues one run on the device's stream. Returns true when it was a graph launch.
  bool run(Device& device, Blas& blas);

  // The buffer of the graph's output i (an update's: its destination's).
  const std::shared_ptr<DeviceBuffer>& output(size_t i) const;
  size_t outputs() const { return exe_->plan.graph.outputs().size(); }
  // Why runs are launched one by one (empty while a graph is possible or made).
  const std::string& why_not_graph() const { return why_not_; }
  const Executable& executable() const { return *exe_; }

 private:
  // Captures the steps into exec_; false (and why_not_ set) when the driver refuses.
  bool capture(Device& device, Blas& blas);

  std::shared_ptr<const Executable> exe_;
  std::vector<std::shared_ptr<DeviceBuffer>> values_;  // per node
  RunScratch scratch_;
  cudaGraphExec_t exec_ = nullptr;
  int64_t runs_ = 0;
  std::string why_not_;
};

}  // namespace fusejit::jit
