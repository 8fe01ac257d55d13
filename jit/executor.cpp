// jit/executor: see executor.h.
#include "jit/executor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/cuda_check.h"
#include "jit/parallel.h"

namespace fusejit::jit {

namespace {

using ir::NodeId;

size_t byte_size(const ir::Node& n) {
  return static_cast<size_t>(ir::numel(n.shape)) * static_cast<size_t>(dtype_size(n.dtype));
}

// The caller buffers that regions can write graph outputs into directly, by node id (RunOptions::
// outputs says when); the others get their values by a copy at the end of the run.
std::vector<std::shared_ptr<DeviceBuffer>> direct_outputs(
    const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    const std::vector<std::shared_ptr<DeviceBuffer>>& into) {
  std::vector<std::shared_ptr<DeviceBuffer>> direct(g.size());
  const std::vector<NodeId>& outs = g.outputs();
  for (size_t i = 0; i < into.size() && i < outs.size(); ++i) {
    const auto& buf = into[i];
    const auto id = static_cast<size_t>(outs[i]);
    if (!buf || direct[id] || buf->bytes() != byte_size(g.node(outs[i])) ||
        !is_aligned(buf->data()) || g.node(outs[i]).op == ir::Op::input) {
      continue;
    }
    const bool aliases_input = std::any_of(inputs.begin(), inputs.end(), [&](const auto& in) {
      return in && in->overlaps(buf->data(), buf->bytes());
    });
    if (!aliases_input) direct[id] = buf;
  }
  return direct;
}

// Fills `outs` (one buffer per graph output) from `values`, copying into the caller's buffers
// that no region wrote directly.
std::vector<std::shared_ptr<DeviceBuffer>> collect_outputs(
    const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& values,
    const RunOptions& options, Device& device) {
  const std::vector<std::shared_ptr<DeviceBuffer>>* into = options.outputs;
  std::vector<std::shared_ptr<DeviceBuffer>> outs;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const NodeId id = g.outputs()[i];
    const auto& value = values[static_cast<size_t>(id)];
    if (!value) throw InternalError(fmt::format("output %{} was not computed by any region", id));
    const auto& dst = into && i < into->size() ? (*into)[i] : nullptr;
    if (!dst || dst == value) {
      outs.push_back(dst ? dst : value);
      continue;
    }
    if (dst->bytes() != value->bytes()) {
      throw InternalError(fmt::format("output %{} is {} bytes, its destination {}", id,
                                      value->bytes(), dst->bytes()));
    }
    FUSEJIT_CUDA(cudaMemcpyAsync(dst->data(), value->data(), value->bytes(),
                                 cudaMemcpyDeviceToDevice, device.stream()));
    if (options.outputs_copied) ++*options.outputs_copied;
    outs.push_back(dst);
  }
  return outs;
}

}  // namespace

LoadedKernel::~LoadedKernel() {
  if (module && driver) driver->module_unload(module);
}

std::vector<std::shared_ptr<LoadedKernel>> load_kernels(
    const std::vector<templates::Kernel>& kernels, const KernelLoader& loader, int threads) {
  std::vector<std::shared_ptr<LoadedKernel>> out(kernels.size());
  std::vector<size_t> missing;  // kernels to obtain, first occurrences only
  std::map<std::string_view, size_t> first;  // by source
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i].name.empty()) continue;  // no kernel here (a gemm step)
    if (!first.emplace(kernels[i].source, i).second) continue;
    out[i] = loader.find(kernels[i]);
    if (!out[i]) missing.push_back(i);
  }
  std::vector<std::optional<ObtainedKernel>> obtained(missing.size());
  parallel_for(missing.size(), threads,
               [&](size_t m) { obtained[m] = loader.obtain(kernels[missing[m]]); });
  for (size_t m = 0; m < missing.size(); ++m) {
    out[missing[m]] = loader.load(kernels[missing[m]], *obtained[m]);
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!kernels[i].name.empty()) out[i] = out[first.at(kernels[i].source)];
  }
  return out;
}

Executable build_executable(fusion::Plan plan, const KernelLoader& loader,
                            const BuildOptions& options) {
  Executable exe;
  exe.plan = std::move(plan);
  const fusion::Plan& p = exe.plan;
  exe.steps.resize(p.regions.size());
  std::vector<templates::Kernel> kernels(p.regions.size());
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const fusion::Region& r = p.regions[i];
    Step& step = exe.steps[i];
    step.region = &r;
    if (r.kind == fusion::RegionKind::gemm) {
      step.gemm = describe_gemm_call(p, r, options.allow_tf32);
    } else {
      kernels[i] = templates::generate(p.graph, r, options.codegen);
    }
  }
  const auto loaded = load_kernels(kernels, loader, options.compile_threads);
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (loaded[i]) exe.steps[i].kernel = loaded[i];
  }
  // Release each intermediate after the last step that reads it; graph outputs are kept.
  std::vector<int> last_use(p.graph.size(), -1);
  for (size_t i = 0; i < p.regions.size(); ++i) {
    for (NodeId id : p.regions[i].inputs) last_use[static_cast<size_t>(id)] = static_cast<int>(i);
  }
  for (NodeId id : p.graph.outputs()) last_use[static_cast<size_t>(id)] = -1;
  for (NodeId id : p.graph.inputs()) last_use[static_cast<size_t>(id)] = -1;
  for (size_t id = 0; id < last_use.size(); ++id) {
    if (last_use[id] >= 0) exe.steps[static_cast<size_t>(last_use[id])].release.push_back(
        static_cast<NodeId>(id));
  }
  return exe;
}

std::vector<std::shared_ptr<DeviceBuffer>> run_executable(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device, Blas& blas, const RunOptions& options) {
  const ir::Graph& g = exe.plan.graph;
  std::vector<std::shared_ptr<DeviceBuffer>> values(g.size());
  const std::vector<NodeId> input_ids = g.inputs();
  if (input_ids.size() != inputs.size()) {
    throw InternalError(fmt::format("executable has {} inputs, {} bound", input_ids.size(),
                                    inputs.size()));
  }
  for (size_t k = 0; k < inputs.size(); ++k) values[static_cast<size_t>(input_ids[k])] = inputs[k];
  const std::vector<std::shared_ptr<DeviceBuffer>> direct =
      options.outputs ? direct_outputs(g, inputs, *options.outputs)
                      : std::vector<std::shared_ptr<DeviceBuffer>>(g.size());

  const Driver& drv = device.driver();
  std::vector<void*> pointers;
  std::vector<void*> args;
  if (options.step_events) {
    auto& events = *options.step_events;
    while (events.size() < exe.steps.size()) {
      cudaEvent_t start, stop;
      FUSEJIT_CUDA(cudaEventCreate(&start));
      FUSEJIT_CUDA(cudaEventCreate(&stop));
      events.emplace_back(start, stop);
    }
  }
  for (size_t s = 0; s < exe.steps.size(); ++s) {
    const Step& step = exe.steps[s];
    const fusion::Region& r = *step.region;
    for (NodeId id : r.outputs) {
      auto& buf = values[static_cast<size_t>(id)];
      buf = direct[static_cast<size_t>(id)] ? direct[static_cast<size_t>(id)]
                                            : device.allocate(byte_size(g.node(id)));
      if (options.poison_outputs) {
        FUSEJIT_CUDA(cudaMemsetAsync(buf->data(), 0xFF, buf->bytes(), device.stream()));
      }
    }
    if (options.step_events) {
      FUSEJIT_CUDA(cudaEventRecord((*options.step_events)[s].first, device.stream()));
    }
    auto ptr = [&](NodeId id) -> void* {
      const auto& buf = values[static_cast<size_t>(id)];
      if (!buf) throw InternalError(fmt::format("%{} read before it was computed", id));
      return buf->data();
    };
    if (step.kernel) {
      const templates::Kernel& k = step.kernel->kernel;
      pointers.clear();
      args.clear();
      for (NodeId id : k.params) pointers.push_back(ptr(id));
      for (void*& p : pointers) args.push_back(&p);
      // Cluster kernels carry their cluster shape in the CUBIN (__cluster_dims__), so the plain
      // launch below launches clusters; the grid must hold whole clusters.
      const int64_t grid = templates::launch_grid(k, device.info().sm_count);
      if (grid % std::max(k.cluster, 1) != 0) {
        throw InternalError(fmt::format("kernel {}: grid of {} blocks is not a whole number of "
                                        "clusters of {}", k.name, grid, k.cluster));
      }
      FUSEJIT_DRIVER(drv, launch_kernel, step.kernel->function, static_cast<unsigned>(grid), 1, 1,
                     static_cast<unsigned>(k.block), 1, 1, static_cast<unsigned>(k.shared_bytes),
                     device.stream(), args.data(), nullptr);
    } else {
      // One strided-batched call per outer batch index (jit/gemm_call.h); C is laid out as D.
      const GemmCall& c = step.gemm;
      const int64_t elem = dtype_size(c.problem.dtype);
      const void* bias = c.bias >= 0 ? ptr(c.bias) : nullptr;
      auto* residual = c.residual >= 0 ? static_cast<const char*>(ptr(c.residual)) : nullptr;
      auto* a = static_cast<const char*>(ptr(c.a));
      auto* b = static_cast<const char*>(ptr(c.b));
      auto* d = static_cast<char*>(ptr(c.d));
      for (const GemmOffsets& o : c.calls) {
        blas.gemm(c.problem, a + o.a * elem, b + o.b * elem, bias,
                  residual ? residual + o.d * elem : nullptr, d + o.d * elem);
      }
    }
    if (options.step_events) {
      FUSEJIT_CUDA(cudaEventRecord((*options.step_events)[s].second, device.stream()));
    }
    for (NodeId id : step.release) values[static_cast<size_t>(id)].reset();
  }

  return collect_outputs(g, values, options, device);
}

int64_t step_bytes(const Executable& exe, const Step& step) {
  const ir::Graph& g = exe.plan.graph;
  int64_t bytes = 0;
  for (NodeId id : step.region->inputs) bytes += static_cast<int64_t>(byte_size(g.node(id)));
  for (NodeId id : step.region->outputs) bytes += static_cast<int64_t>(byte_size(g.node(id)));
  return bytes;
}

double step_flops(const Step& step) {
  if (step.kernel) return 0.0;
  const GemmProblem& p = step.gemm.problem;
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
         static_cast<double>(p.batch) * static_cast<double>(step.gemm.calls.size());
}

std::string step_label(const Executable& exe, const Step& step) {
  (void)exe;
  if (step.kernel) return step.kernel->kernel.name;
  return gemm_call_label(step.gemm);
}

}  // namespace fusejit::jit
