// jit/attention_call: see attention_call.h.
#include "jit/libs/attention_call.h"

#include <cmath>

#include <fmt/format.h>

#include "fusejit/dtype.h"
#include "fusejit/error.h"
#include "fusion/attention.h"

namespace fusejit::jit {

namespace {

struct Refused {
  std::string why;
};
[[noreturn]] void refuse(std::string why) { throw Refused{std::move(why)}; }

// cuDNN's tensor for a view of [b, h, s, d] whose heads are `heads`: size-1 dims get the stride
// of the dims after them (any positive stride reads the same element there).
cudnn::AttentionTensor tensor(const fusion::AttentionView& v, std::array<int64_t, 4> dims,
                              const char* what, DType dtype) {
  // cuDNN's kernels want 16-byte aligned tensors; buffers are, a slice into one may not be.
  if ((v.offset * dtype_size(dtype)) % 16 != 0) {
    refuse(
        fmt::format("{} starts {} bytes into its buffer (a slice); cuDNN reads tensors at "
                    "16-byte aligned addresses",
                    what, v.offset * dtype_size(dtype)));
  }
  cudnn::AttentionTensor t{dims, v.strides};
  int64_t dense = 1;
  for (int a = 3; a >= 0; --a) {
    if (dims[a] == 1) t.strides[a] = dense;
    if (dims[a] > 1 && t.strides[a] == 0) {
      refuse(fmt::format("{} is broadcast along axis {}; cuDNN reads only strided tensors", what,
                         a));
    }
    dense *= dims[a];
  }
  return t;
}

// The region's problem; `layout` gets the region's layout (where its operands start).
cudnn::AttentionProblem problem_of(const ir::Graph& g, const fusion::Region& r,
                                   fusion::AttentionLayout& layout) {
  const fusion::AttentionRegion& a = r.attention;
  std::string why;
  const std::optional<fusion::AttentionLayout> l = fusion::attention_layout(g, a, &why);
  if (!l) refuse(why);
  layout = *l;
  if (l->q.head_group != 1) refuse("q's heads are read in groups");
  if (l->k.head_group != l->v.head_group) refuse("k and v are read in different head groups");
  const int64_t hk = l->heads / l->k.head_group;
  cudnn::AttentionProblem p;
  p.dtype = g.node(a.q).dtype;
  p.q = tensor(l->q, {l->batch, l->heads, l->seq_q, l->head_dim}, "q", p.dtype);
  p.k = tensor(l->k, {l->batch, hk, l->seq_kv, l->head_dim}, "k", p.dtype);
  p.v = tensor(l->v, {l->batch, hk, l->seq_kv, l->value_dim}, "v", p.dtype);
  p.o = l->out_views.empty()
            ? cudnn::AttentionTensor::contiguous(l->batch, l->heads, l->seq_q, l->value_dim)
            : tensor(l->o, {l->batch, l->heads, l->seq_q, l->value_dim}, "o", p.dtype);
  switch (a.mask) {
    case fusion::AttentionMask::none:
      break;
    case fusion::AttentionMask::causal:
      if (!(std::isinf(a.fill) && a.fill < 0)) {
        refuse(fmt::format("the causal fill is {}, and cuDNN's causal mask drops the keys", a.fill));
      }
      p.mask = cudnn::AttentionMaskKind::causal;
      break;
    case fusion::AttentionMask::additive: {
      if (a.mask_scale != 1.0) refuse("the mask is scaled after it is added");
      p.mask = cudnn::AttentionMaskKind::bias;
      const auto& s = l->mask.strides;
      const std::array<int64_t, 4> dims = {s[0] == 0 ? 1 : l->batch, s[1] == 0 ? 1 : l->heads,
                                           l->seq_q, l->seq_kv};
      p.bias_dtype = g.node(l->mask.buffer).dtype;
      p.bias = tensor(l->mask, dims, "the mask", p.bias_dtype);
      break;
    }
    case fusion::AttentionMask::boolean:
      refuse("a boolean mask");
    case fusion::AttentionMask::computed:
      refuse("a mask computed from positions");
  }
  if (std::string w = cudnn::refuse_attention(p); !w.empty()) refuse(w);
  return p;
}

// The session's graph of `p`, planned now if it is new; null and why when cuDNN cannot plan it.
std::shared_ptr<cudnn::AttentionGraph> planned_graph(CudnnSession& session,
                                                     const cudnn::AttentionProblem& p,
                                                     std::string* why) {
  const std::string key = p.describe();
  const std::lock_guard lock(session.mutex);
  auto found = session.planned.find(key);
  if (found == session.planned.end()) {
    if (session.planned.size() >= CudnnSession::kMaxPlanned) {
      std::erase_if(session.planned, [](const auto& entry) {
        return entry.second.graph == nullptr || entry.second.graph.use_count() == 1;
      });
    }
    CudnnSession::Planned made;
    // A cuDNN call that fails while building or planning (an engine that rejects the device, a
    // library older than its header says) leaves the region to the generated kernel, as a
    // refusal does.
    try {
      auto graph = std::make_shared<cudnn::AttentionGraph>(session.api, p, session.handle->get());
      made.refused = graph->plan(session.handle->get());
      if (made.refused.empty()) made.graph = std::move(graph);
    } catch (const Error& e) {
      made.refused = e.what();
    }
    ++session.plans_made;
    found = session.planned.emplace(key, std::move(made)).first;
  }
  if (!found->second.graph && why != nullptr) *why = found->second.refused;
  return found->second.graph;
}

// problem_of, or nothing and why (in `why`, when given).
std::optional<cudnn::AttentionProblem> try_problem(const ir::Graph& g, const fusion::Region& region,
                                                   std::string* why,
                                                   fusion::AttentionLayout& layout) {
  if (region.kind != fusion::RegionKind::attention) {
    throw InternalError("cudnn_problem: not an attention region");
  }
  try {
    return problem_of(g, region, layout);
  } catch (const Refused& e) {
    if (why != nullptr) *why = e.why;
    return std::nullopt;
  }
}

}  // namespace

std::optional<cudnn::AttentionProblem> cudnn_problem(const ir::Graph& g,
                                                     const fusion::Region& region,
                                                     std::string* why) {
  fusion::AttentionLayout layout;
  return try_problem(g, region, why, layout);
}

std::shared_ptr<AttentionCall> plan_attention_call(const ir::Graph& g,
                                                   const fusion::Region& region,
                                                   const std::shared_ptr<CudnnSession>& session,
                                                   std::string* why) {
  fusion::AttentionLayout l;
  const std::optional<cudnn::AttentionProblem> p = try_problem(g, region, why, l);
  if (!p) return nullptr;
  auto call = std::make_shared<AttentionCall>();
  call->session = session;
  call->graph = planned_graph(*session, *p, why);
  if (!call->graph) return nullptr;
  const fusion::AttentionRegion& a = region.attention;
  call->q = region.inputs.at(0);
  call->k = region.inputs.at(1);
  call->v = region.inputs.at(2);
  call->bias = a.mask == fusion::AttentionMask::additive ? region.inputs.at(3) : -1;
  call->out = region.outputs.at(0);
  const int64_t elem = dtype_size(p->dtype);
  call->q_offset = l.q.offset * elem;
  call->k_offset = l.k.offset * elem;
  call->v_offset = l.v.offset * elem;
  if (call->bias >= 0) call->bias_offset = l.mask.offset * dtype_size(p->bias_dtype);
  call->scale = static_cast<float>(a.scale);
  call->label = "cuDNN attention " + p->describe();
  return call;
}

void run_attention_call(const AttentionCall& call, Device& device,
                        const std::function<void*(ir::NodeId)>& buffer, void* workspace) {
  std::shared_ptr<DeviceBuffer> pooled;
  if (!workspace && call.graph->workspace_bytes() > 0) {
    pooled = device.allocate(static_cast<size_t>(call.graph->workspace_bytes()));
    workspace = pooled->data();
  }
  const cudnn::Api& api = *call.session->api;
  const cudnn::Handle handle = call.session->handle->get();
  api.check(api.set_stream(handle, device.stream()), "cudnnSetStream");
  cudnn::AttentionArgs args;
  const auto at = [&](ir::NodeId id, int64_t offset) {
    return static_cast<void*>(static_cast<char*>(buffer(id)) + offset);
  };
  args.q = at(call.q, call.q_offset);
  args.k = at(call.k, call.k_offset);
  args.v = at(call.v, call.v_offset);
  args.o = buffer(call.out);
  args.bias = call.bias >= 0 ? at(call.bias, call.bias_offset) : nullptr;
  args.scale = call.scale;
  args.workspace = workspace;
  call.graph->execute(handle, device.stream(), args);
}

}  // namespace fusejit::jit
