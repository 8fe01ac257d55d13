// jit/profile: fusejit/profile.h, over the Context's own trace and runtime. Owns reading a
// pending computation out of its Context (as eval would run it) without materializing it; the
// planning, timing and checking themselves are the machinery of `fusejit plan` and `fusejit run`
// (fusion/pipeline.h, jit/runtime/timing.h, jit/runtime/check.h).
#include "fusejit/profile.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "ir/host_tensor.h"
#include "ir/prune.h"
#include "ir/shape.h"
#include "ir/text.h"
#include "jit/api/context_impl.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/plan_text.h"
#include "jit/runtime/check.h"
#include "jit/runtime/timing.h"

namespace fusejit {

namespace {

// The trace that computes some pending tensors, as eval builds it: the Context's trace with
// those tensors as its outputs. The Context stays locked while this is alive.
struct PendingTrace {
  detail::ContextImpl& ctx;
  std::unique_lock<detail::ContextMutex> lock;
  ir::Graph graph;
};

detail::ContextImpl& context_of(const std::vector<Tensor>& outputs, std::string_view what) {
  if (outputs.empty()) throw UsageError(fmt::format("{}: no tensors given", what));
  for (const Tensor& t : outputs) {
    if (!t.defined()) throw UsageError(fmt::format("{}: an output is an empty Tensor handle", what));
    if (t.impl()->ctx != outputs.front().impl()->ctx) {
      throw UsageError(fmt::format("{}: the tensors belong to different Contexts; profile the "
                                   "computations of each Context separately",
                                   what));
    }
  }
  return *outputs.front().impl()->ctx;
}

PendingTrace pending_trace(const std::vector<Tensor>& outputs, std::string_view what) {
  detail::ContextImpl& ctx = context_of(outputs, what);
  std::unique_lock<detail::ContextMutex> lock(ctx.mutex);
  std::vector<ir::NodeId> ids;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const detail::TensorImpl& t = *outputs[i].impl();
    if (t.storage) {
      throw UsageError(fmt::format("{}: output {} ({}{}) is already computed; profile tensors "
                                   "before eval or to_host computes them",
                                   what, i, dtype_name(t.dtype), ir::shape_str(t.shape)));
    }
    ids.push_back(ctx.node_of(outputs[i].impl()));  // copies in one carried from an earlier trace
  }
  PendingTrace p{ctx, std::move(lock), ctx.trace};
  p.graph.set_outputs(ids);
  return p;
}

// The device buffers that feed the trace's inputs, uploaded once as eval does.
std::vector<std::shared_ptr<jit::DeviceBuffer>> device_inputs(PendingTrace& p,
                                                              std::string_view what) {
  if (!p.ctx.runtime) {
    throw UsageError(fmt::format("{}: this Context has no GPU (eval runs the CPU reference); "
                                 "plan_summary shows what would run on one",
                                 what));
  }
  const std::vector<ir::NodeId> input_ids = p.graph.inputs();
  std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
  for (size_t k = 0; k < p.ctx.bound.size(); ++k) {
    const std::shared_ptr<detail::Storage>& s = p.ctx.bound[k];
    if (!s) {
      throw UsageError(fmt::format("{}: the trace reads placeholder %{} ({}), which holds no "
                                   "data; create it with from_vector or from_host to run it",
                                   what, input_ids[k], ir::type_str(p.graph.node(input_ids[k]))));
    }
    if (!s->device) s->device = p.ctx.runtime->upload(s->host);
    inputs.push_back(s->device);
  }
  return inputs;
}

// "normalization: max sub exp sum div": what the region computes, without the constants and
// views it reads (index arithmetic, not work); a region of views alone moves data into a new
// layout: "pointwise: copy (permute reshape)".
std::string region_line(const fusion::Plan& plan, const fusion::Region& region,
                        bool allow_tf32) {
  std::string line(fusion::region_kind_name(region.kind));
  line += ':';
  if (region.kind == fusion::RegionKind::gemm) {
    return line + ' ' + jit::gemm_call_label(jit::describe_gemm_call(plan, region, allow_tf32));
  }
  std::string work, views;
  for (ir::NodeId id : region.nodes) {
    const ir::Op op = plan.graph.node(id).op;
    const ir::OpKind kind = ir::op_kind(op);
    if (kind == ir::OpKind::source) continue;
    std::string& to = kind == ir::OpKind::view ? views : work;
    to += ' ';
    to += ir::op_name(op);
  }
  if (work.empty() && !views.empty()) return line + " copy (" + views.substr(1) + ")";
  return line + work;
}

}  // namespace

PlanSummary plan_summary(const std::vector<Tensor>& outputs) {
  PendingTrace p = pending_trace(outputs, "plan_summary");
  const Options& options = p.ctx.options;
  const fusion::Plan plan = fusion::make_plan(p.graph, jit::plan_options(options));
  PlanSummary summary;
  summary.kernels = plan.kernel_count();
  summary.library_calls = plan.library_call_count();
  for (const fusion::Region& r : plan.regions) {
    summary.regions.push_back(region_line(plan, r, options.allow_tf32));
  }
  return summary;
}

std::string plan_text(const std::vector<Tensor>& outputs) {
  PendingTrace p = pending_trace(outputs, "plan_text");
  // The trace as trace_text prints it (only what the outputs need, numbered from 0), so that
  // the text is the CLI's for that trace.
  const ir::Graph trace = ir::prune(p.graph, p.graph.outputs());
  const fusion::Plan plan = fusion::make_plan(trace, jit::plan_options(p.ctx.options));
  return jit::plan_text(plan, p.ctx.options.allow_tf32, p.ctx.options.gemv,
                        p.ctx.options.gemv_prologue, p.ctx.options.gemv_ring,
                        p.ctx.options.gemv_epilogue);
}

DeviceSummary describe_device(Context& ctx) {
  detail::ContextImpl& impl = ctx.impl();
  const std::lock_guard<detail::ContextMutex> lock(impl.mutex);
  if (!impl.runtime) {
    throw UsageError("describe_device: this Context has no GPU (eval runs the CPU reference)");
  }
  jit::Device& device = impl.runtime->device();
  const jit::DeviceInfo& info = device.info();
  const jit::DeviceGuard guard(info.ordinal);  // the caller's current device is restored
  return DeviceSummary{info.name, info.arch(), info.sm_count, jit::copy_bandwidth(device)};
}

TraceTiming time_trace(const std::vector<Tensor>& outputs, int iters, int warmup) {
  PendingTrace p = pending_trace(outputs, "time_trace");
  const auto inputs = device_inputs(p, "time_trace");
  jit::Runtime& runtime = *p.ctx.runtime;
  const jit::DeviceGuard guard(runtime.device().info().ordinal);
  const auto exe = runtime.executable_for(p.graph);
  const jit::ExecutableTiming timing = jit::time_executable(
      *exe, inputs, runtime.device(), runtime.blas(), std::max(1, iters), std::max(0, warmup));
  TraceTiming t;
  t.ms = timing.total_ms;
  t.bytes = jit::io_bytes(p.graph);
  for (const jit::Step& step : exe->steps) t.flops += jit::step_flops(step);
  return t;
}

ReferenceCheck check_against_reference(const std::vector<Tensor>& outputs, int64_t sample_rows) {
  PendingTrace p = pending_trace(outputs, "check_against_reference");
  const auto inputs = device_inputs(p, "check_against_reference");
  jit::Runtime& runtime = *p.ctx.runtime;
  const jit::DeviceGuard guard(runtime.device().info().ordinal);
  std::vector<ir::HostTensor> host_inputs;
  for (const auto& s : p.ctx.bound) host_inputs.push_back(p.ctx.host_of(*s));
  const auto exe = runtime.executable_for(p.graph);
  const jit::CheckReport report =
      jit::check_outputs(p.graph, host_inputs, jit::run_poisoned(runtime, *exe, p.graph, inputs),
                         std::max<int64_t>(2, sample_rows), int64_t{1} << 20);
  ReferenceCheck check;
  check.bound = report.bound;
  check.scope = report.scope;
  for (double e : report.errors) check.error = std::max(check.error, e);
  return check;
}

}  // namespace fusejit
