// jit/attention_call: an attention region (fusion/plan.h) run by cuDNN's fused attention
// (jit/libs/cudnn_attention.h) instead of the generated kernel, with FUSEJIT_ATTENTION=cudnn.
//
//   cudnn_problem       the region's layout (fusion::attention_layout) as cuDNN's problem, or
//                       why cuDNN cannot take it (a boolean mask, a scaled mask, a causal fill
//                       that is not -inf, broadcast q or o, grouped heads that k and v do not
//                       share, what refuse_attention refuses). No GPU needed.
//   plan_attention_call builds and plans cuDNN's graph on the session's device; nothing (and
//                       why) when no engine takes it: the caller generates the kernel instead.
//   run_attention_call  the variant pack on the device's stream, with a workspace of the pool.
//
// A session (the loaded library and one handle) serves one Runtime; its calls are serialized
// by the Context's lock, as executables' runs are.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fusion/plan.h"
#include "jit/libs/cudnn_api.h"
#include "jit/libs/cudnn_attention.h"
#include "jit/runtime/device.h"

namespace fusejit::jit {

struct CudnnSession {
  std::shared_ptr<const cudnn::Api> api;
  std::unique_ptr<cudnn::CudnnHandle> handle;
};

struct AttentionCall {
  std::shared_ptr<CudnnSession> session;
  std::unique_ptr<cudnn::AttentionGraph> graph;  // planned
  ir::NodeId q = -1, k = -1, v = -1, bias = -1, out = -1;  // buffers, by node id
  float scale = 1.0f;
  std::string label;  // "cuDNN attention bf16 q[...] ..." for step labels
};

// The problem of an attention region as cuDNN takes it, or nothing and why (in `why`).
std::optional<cudnn::AttentionProblem> cudnn_problem(const ir::Graph& g,
                                                     const fusion::Region& region,
                                                     std::string* why = nullptr);

// cuDNN's planned graph for the region, or null and why: refused, no engine config plans, or
// a cuDNN call failed on the way (the generated kernel then runs the region).
std::shared_ptr<AttentionCall> plan_attention_call(const ir::Graph& g,
                                                   const fusion::Region& region,
                                                   const std::shared_ptr<CudnnSession>& session,
                                                   std::string* why = nullptr);

// Runs the call: `buffer(id)` gives the device pointer of a node's buffer; the workspace comes
// from the device's pool and goes back to it (stream-ordered) when the call is queued.
void run_attention_call(const AttentionCall& call, Device& device,
                        const std::function<void*(ir::NodeId)>& buffer);

}  // namespace fusejit::jit
