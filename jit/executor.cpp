// jit/executor: see executor.h.
#include "jit/executor.h"

#include <array>
#include <optional>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/cuda_check.h"

namespace fusejit::jit {

namespace {

using ir::NodeId;

size_t byte_size(const ir::Node& n) {
  return static_cast<size_t>(ir::numel(n.shape)) * static_cast<size_t>(dtype_size(n.dtype));
}

// Batch dims of `shape` (all but the last two), left-padded with 1 to `rank`.
Shape batch_dims(const Shape& shape, size_t rank) {
  Shape b(shape.begin(), shape.end() - 2);
  b.insert(b.begin(), rank - b.size(), 1);
  return b;
}

// Fills the GEMM description of a gemm region.
void describe_gemm(const fusion::Plan& plan, const fusion::Region& r, Step& step,
                   const BuildOptions& options) {
  const ir::Graph& g = plan.graph;
  const ir::Node* mm = nullptr;
  for (NodeId id : r.nodes) {
    if (g.node(id).op == ir::Op::matmul) mm = &g.node(id);
  }
  if (!mm || r.outputs.size() != 1) {
    throw InternalError("gemm region without exactly one matmul and one output");
  }
  const fusion::GemmEpilogue& ep = r.epilogue;
  const ir::Node& a = g.node(mm->inputs[0]);
  const ir::Node& b = g.node(mm->inputs[1]);
  const ir::Node& out = g.node(r.outputs[0]);
  step.a = ep.transpose_a ? a.inputs[0] : mm->inputs[0];
  step.b = ep.transpose_b ? b.inputs[0] : mm->inputs[1];
  step.bias = ep.bias;
  step.residual = ep.residual;

  GemmProblem& p = step.gemm;
  p.dtype = mm->dtype;
  p.m = a.shape[a.shape.size() - 2];
  p.k = a.shape.back();
  p.n = b.shape.back();
  p.transpose_a = ep.transpose_a;
  p.transpose_b = ep.transpose_b;
  p.has_bias = ep.bias >= 0;
  p.has_residual = ep.residual >= 0;
  p.alpha = ep.alpha;
  p.beta = ep.beta;
  p.allow_tf32 = options.allow_tf32;
  using A = fusion::GemmEpilogue::Activation;
  p.activation = ep.activation == A::relu        ? GemmProblem::Activation::relu
                 : ep.activation == A::gelu_tanh ? GemmProblem::Activation::gelu_tanh
                                                 : GemmProblem::Activation::none;

  // Batches: one strided-batched call when each operand's batch dims are either all of the
  // output's or none (stride 0); otherwise one call per output batch.
  const size_t rank = out.shape.size() - 2;
  const Shape ob = batch_dims(out.shape, rank);
  const Shape ab = batch_dims(a.shape, rank), bb = batch_dims(b.shape, rank);
  p.batch = ir::numel(ob);
  const int64_t size_a = p.m * p.k, size_b = p.k * p.n, size_d = p.m * p.n;
  auto stride_of = [&](const Shape& sb, int64_t size) -> std::optional<int64_t> {
    if (ir::numel(sb) == 1) return 0;
    if (sb == ob) return size;
    return std::nullopt;
  };
  const auto sa = stride_of(ab, size_a), sb = stride_of(bb, size_b);
  p.stride_d = size_d;
  if (sa && sb) {
    p.stride_a = *sa;
    p.stride_b = *sb;
    return;
  }
  const std::vector<int64_t> a_strides = ir::contiguous_strides(ab);
  const std::vector<int64_t> b_strides = ir::contiguous_strides(bb);
  for (int64_t i = 0; i < p.batch; ++i) {
    int64_t rest = i, off_a = 0, off_b = 0;
    for (size_t d = rank; d-- > 0;) {
      const int64_t idx = rest % ob[d];
      rest /= ob[d];
      if (ab[d] != 1) off_a += idx * a_strides[d];
      if (bb[d] != 1) off_b += idx * b_strides[d];
    }
    step.batch_offsets.push_back({off_a * size_a, off_b * size_b, i * size_d});
  }
  p.batch = 1;
  p.stride_a = p.stride_b = p.stride_d = 0;
}

}  // namespace

LoadedKernel::~LoadedKernel() {
  if (module && driver) driver->module_unload(module);
}

Executable build_executable(fusion::Plan plan, const KernelLoader& load,
                            const BuildOptions& options) {
  Executable exe;
  exe.plan = std::move(plan);
  const fusion::Plan& p = exe.plan;
  exe.steps.resize(p.regions.size());
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const fusion::Region& r = p.regions[i];
    Step& step = exe.steps[i];
    step.region = &r;
    if (r.kind == fusion::RegionKind::gemm) {
      describe_gemm(p, r, step, options);
    } else {
      step.kernel = load(templates::generate(p.graph, r, options.codegen));
    }
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
      buf = device.allocate(byte_size(g.node(id)));
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
      const int64_t grid = templates::launch_grid(k, device.info().sm_count);
      FUSEJIT_DRIVER(drv, launch_kernel, step.kernel->function, static_cast<unsigned>(grid), 1, 1,
                     static_cast<unsigned>(k.block), 1, 1, static_cast<unsigned>(k.shared_bytes),
                     device.stream(), args.data(), nullptr);
    } else {
      const void* bias = step.bias >= 0 ? ptr(step.bias) : nullptr;
      const void* residual = step.residual >= 0 ? ptr(step.residual) : nullptr;
      auto* a = static_cast<const char*>(ptr(step.a));
      auto* b = static_cast<const char*>(ptr(step.b));
      auto* d = static_cast<char*>(ptr(r.outputs[0]));
      if (step.batch_offsets.empty()) {
        blas.gemm(step.gemm, a, b, bias, residual, d);
      } else {
        const int64_t elem = dtype_size(step.gemm.dtype);
        for (const auto& [oa, ob, od] : step.batch_offsets) {
          blas.gemm(step.gemm, a + oa * elem, b + ob * elem, bias,
                    residual ? static_cast<const char*>(residual) + od * elem : nullptr,
                    d + od * elem);
        }
      }
    }
    if (options.step_events) {
      FUSEJIT_CUDA(cudaEventRecord((*options.step_events)[s].second, device.stream()));
    }
    for (NodeId id : step.release) values[static_cast<size_t>(id)].reset();
  }

  std::vector<std::shared_ptr<DeviceBuffer>> outs;
  for (NodeId id : g.outputs()) {
    if (!values[static_cast<size_t>(id)]) {
      throw InternalError(fmt::format("output %{} was not computed by any region", id));
    }
    outs.push_back(values[static_cast<size_t>(id)]);
  }
  return outs;
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
  const GemmProblem& p = step.gemm;
  const double calls = step.batch_offsets.empty() ? 1.0 : static_cast<double>(step.batch_offsets.size());
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
         static_cast<double>(p.batch) * calls;
}

std::string step_label(const Executable& exe, const Step& step) {
  if (step.kernel) return step.kernel->kernel.name;
  const GemmProblem& p = step.gemm;
  std::string epilogue;
  if (p.has_bias) epilogue += "+bias";
  if (p.activation == GemmProblem::Activation::relu) epilogue += "+relu";
  if (p.activation == GemmProblem::Activation::gelu_tanh) epilogue += "+gelu_tanh";
  if (p.has_residual) epilogue += "+residual";
  (void)exe;
  return fmt::format("cublasLt {}x{}x{}{} {}{}", p.m, p.n, p.k,
                     p.batch > 1 ? fmt::format(" x{}", p.batch) : "", dtype_name(p.dtype), epilogue);
}

}  // namespace fusejit::jit
