// jit/attention_call: an attention region (fusion/plan.h) run by cuDNN's fused attention
// (jit/libs/cudnn_attention.h) instead of the generated kernel, with FUSEJIT_ATTENTION=cudnn.
//
//   cudnn_problem       the region's layout (fusion::attention_layout) as cuDNN's problem, or
//                       why cuDNN cannot take it (a boolean mask, a scaled mask, a causal fill
//                       that is not -inf, broadcast q or o, grouped heads that k and v do not
//                       share, what refuse_attention refuses). No GPU needed.
//   plan_attention_call builds and plans cuDNN's graph on the session's device; nothing (and
//                       why) when no engine takes it: the caller generates the kernel instead.
//   run_attention_call  the variant pack on the device's stream, with a workspace of the pool
//                       or the caller's.
//
// A session (the loaded library and one handle) serves one Runtime; its calls are serialized
// by the Context's lock, as executables' runs are. It plans each problem once: a plan costs
// tens of milliseconds (cuDNN's heuristics and its engines' checks against the device), and the
// 32 layers of a Llama-3-8B prefill are 32 regions of one problem, so calls share the graph.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
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

  // A problem's planned graph, or why none plans (then `graph` is null).
  struct Planned {
    std::shared_ptr<cudnn::AttentionGraph> graph;
    std::string refused;
  };
  // Past this many problems, those no call holds any more are forgotten (a model whose
  // sequence length changes every call would otherwise grow the map without end).
  static constexpr size_t kMaxPlanned = 256;
  std::mutex mutex;                        // guards what follows
  std::map<std::string, Planned> planned;  // by AttentionProblem::describe()
  int64_t plans_made = 0;                  // graphs built and planned (not served from `planned`)
};

struct AttentionCall {
  std::shared_ptr<CudnnSession> session;
  std::shared_ptr<cudnn::AttentionGraph> graph;  // planned, shared by calls of one problem
  ir::NodeId q = -1, k = -1, v = -1, bias = -1, out = -1;  // buffers, by node id
  // Where each operand starts in its buffer, in bytes (slices read in place: q, k and v of one
  // fused projection are one buffer at three offsets).
  int64_t q_offset = 0, k_offset = 0, v_offset = 0, bias_offset = 0;
  float scale = 1.0f;
  std::string label;  // "cuDNN attention bf16 q[...] ..." for step labels
};

// The problem of an attention region as cuDNN takes it, or nothing and why (in `why`).
std::optional<cudnn::AttentionProblem> cudnn_problem(const ir::Graph& g,
                                                     const fusion::Region& region,
                                                     std::string* why = nullptr);

// cuDNN's planned graph for the region, or null and why: refused, no engine config plans, or
// a cuDNN call failed on the way (the generated kernel then runs the region). A problem the
// session planned before is served from its map, graph or refusal alike.
std::shared_ptr<AttentionCall> plan_attention_call(const ir::Graph& g,
                                                   const fusion::Region& region,
                                                   const std::shared_ptr<CudnnSession>& session,
                                                   std::string* why = nullptr);

// Runs the call: `buffer(id)` gives the device pointer of a node's buffer. The workspace is
// `workspace` when given (at least call.graph->workspace_bytes(), used by nothing else while the
// call runs: a CUDA graph's capture needs a fixed one), else a buffer of the device's pool that
// goes back to it (stream-ordered) once the call is queued.
void run_attention_call(const AttentionCall& call, Device& device,
                        const std::function<void*(ir::NodeId)>& buffer, void* workspace = nullptr);

}  // namespace fusejit::jit
