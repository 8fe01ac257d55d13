#include "jit/runtime/replay_run.h"

#include <algorithm>
#include <exception>
#include <utility>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit::jit {

ReplayRun::ReplayRun(std::shared_ptr<const Executable> exe,
                     const std::vector<std::shared_ptr<DeviceBuffer>>& inputs, Device& device)
    : exe_(std::move(exe)), values_(fixed_buffers(*exe_, inputs, device)) {
  // cuDNN attention steps share one workspace, held as long as the buffers: a captured graph
  // keeps the address.
  if (const int64_t bytes = attention_workspace_bytes(*exe_); bytes > 0) {
    scratch_.attention_workspace = device.allocate(static_cast<size_t>(bytes));
  }
}

ReplayRun::~ReplayRun() {
  // An instantiated graph still running is freed once it completes.
  if (exec_) cudaGraphExecDestroy(exec_);
}

const std::shared_ptr<DeviceBuffer>& ReplayRun::output(size_t i) const {
  return values_[static_cast<size_t>(exe_->plan.graph.outputs().at(i))];
}

bool ReplayRun::capture(Device& device, Blas& blas) {
  cudaStream_t stream = device.stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FUSEJIT_CUDA(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) {
    why_not_ = "the stream was being captured by its owner";
    return false;
  }
  if (const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
      e != cudaSuccess) {
    cudaGetLastError();
    why_not_ = fmt::format("the stream cannot be captured ({})", cudaGetErrorString(e));
    return false;
  }
  cudaGraph_t graph = nullptr;
  try {
    run_fixed(*exe_, values_, device, blas, scratch_);
  } catch (const std::exception& e) {
    // Something in the steps cannot be captured: end the capture (the stream is as it was) and
    // launch one by one from now on, where a real error shows again.
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    why_not_ = fmt::format("a step failed while it was captured ({})", e.what());
    return false;
  }
  if (const cudaError_t e = cudaStreamEndCapture(stream, &graph); e != cudaSuccess || !graph) {
    cudaGetLastError();
    why_not_ = fmt::format("the capture failed ({})", cudaGetErrorString(e));
    return false;
  }
  const cudaError_t e = cudaGraphInstantiateWithFlags(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    exec_ = nullptr;
    why_not_ =
        fmt::format("the captured graph could not be instantiated ({})", cudaGetErrorString(e));
    return false;
  }
  return true;
}

bool ReplayRun::run(Device& device, Blas& blas) {
  ++runs_;
  // The first run loads what the driver loads at a kernel's first launch, outside any capture.
  if (!exec_ && (runs_ == 1 || !why_not_.empty() || !capture(device, blas))) {
    run_fixed(*exe_, values_, device, blas, scratch_);
    return false;
  }
  FUSEJIT_CUDA(cudaGraphLaunch(exec_, device.stream()));
  return true;
}

}  // namespace fusejit::jit
