// jit/executor: see executor.h.
#include "jit/runtime/executor.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/libs/prologue.h"
#include "jit/runtime/cuda_check.h"
#include "jit/runtime/parallel.h"

namespace fusejit::jit {

namespace {

using ir::NodeId;

size_t byte_size(const ir::Node& n) {
  return static_cast<size_t>(ir::numel(n.shape)) * static_cast<size_t>(dtype_size(n.dtype));
}

// The input whose buffer `id` is written into in place (an update_slice's destination), or -1.
NodeId written_in_place(const ir::Graph& g, NodeId id) {
  const ir::Node& n = g.node(id);
  return n.op == ir::Op::update_slice ? n.inputs[0] : -1;
}

// The caller buffers that regions can write graph outputs into directly, by node id (RunOptions::
// outputs says when); the others get their values by a copy at the end of the run.
void direct_outputs(const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                    const std::vector<std::shared_ptr<DeviceBuffer>>& into,
                    std::vector<std::shared_ptr<DeviceBuffer>>& direct) {
  const std::vector<NodeId>& outs = g.outputs();
  for (size_t i = 0; i < into.size() && i < outs.size(); ++i) {
    const auto& buf = into[i];
    const auto id = static_cast<size_t>(outs[i]);
    // An update is written into its destination, in place, and copied from there.
    if (!buf || direct[id] || buf->bytes() != byte_size(g.node(outs[i])) ||
        !is_aligned(buf->data()) || g.node(outs[i]).op == ir::Op::input ||
        written_in_place(g, outs[i]) >= 0) {
      continue;
    }
    const bool aliases_input = std::any_of(inputs.begin(), inputs.end(), [&](const auto& in) {
      return in && in->overlaps(buf->data(), buf->bytes());
    });
    if (!aliases_input) direct[id] = buf;
  }
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
  if (!module || !device) return;
  const DeviceGuard guard(device->info().ordinal);
  cudaStreamSynchronize(device->stream());  // a destructor: a failure shows in the next call
  device->driver().module_unload(module);
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

namespace {

// With CodegenOptions::gemv: the skinny-GEMM kernel for gemm region i where it takes the call
// (its arguments in the kernel's params), and a decision saying which runs the region.
void plan_gemv(fusion::Plan& plan, size_t i, const GemmCall& call,
               const templates::CodegenOptions& codegen, templates::Kernel& kernel,
               const fusion::Region* producer, const fusion::Region* consumer) {
  std::string why;
  std::optional<templates::Kernel> made =
      gemv_kernel(call, codegen, &why, &plan.graph, producer, consumer);
  if (!made && (producer || consumer)) {  // absorb_regions merged them for this kernel only
    throw InternalError(fmt::format(
        "region {}: a prologue or epilogue region without the gemv kernel: {}", i, why));
  }
  if (!made && call.int8_b) {
    // The plan keeps int8 weights only for calls the kernel takes; sizes that changed since
    // (a dynamic dim) can leave it one it does not.
    throw UsageError(fmt::format(
        "region {}: a GEMM with int8 weights ({}) that the skinny-GEMM kernel, the only one that "
        "reads int8 weights, does not take: {}. Cast the weights to the activations' dtype "
        "first, or keep this GEMM at most {} rows",
        i, gemm_call_label(call), why, fusion::kInt8GemmMaxRows));
  }
  if (made) kernel = std::move(*made);
  // FUSEJIT_GEMV=auto says where it runs the kernel, not where it leaves cuBLASLt (most GEMMs).
  if (!made && codegen.gemv == GemvMode::large) return;
  plan.decisions.push_back(
      {call.a, call.d, made.has_value(),
       made ? fmt::format("region {} runs the generated gemv kernel ({})", i, kernel.schedule)
            : fmt::format("region {}: not the gemv kernel ({}); cuBLASLt runs it", i, why)});
}

}  // namespace

Executable build_executable(fusion::Plan plan, const KernelLoader& loader,
                            const BuildOptions& options, const PrebuiltKernel& prebuilt) {
  Executable exe;
  exe.plan = std::move(plan);
  // Prologues and epilogue regions change which regions there are: before the steps point at
  // them. (A dynamic plan's kernels, `prebuilt`, are by region index: its regions stay as
  // planned.)
  const AbsorbedRegions absorbed =
      prebuilt ? AbsorbedRegions{} : absorb_regions(exe.plan, options.codegen, options.allow_tf32);
  const std::map<size_t, fusion::Region>& producers = absorbed.producers;
  const std::map<size_t, fusion::Region>& consumers = absorbed.consumers;
  const fusion::Plan& p = exe.plan;
  exe.steps.resize(p.regions.size());
  std::vector<templates::Kernel> kernels(p.regions.size());
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const fusion::Region& r = p.regions[i];
    Step& step = exe.steps[i];
    step.region = &r;
    if (r.kind == fusion::RegionKind::gemm) {
      step.gemm = describe_gemm_call(p, r, options.allow_tf32);
      const auto producer = producers.find(i);
      const auto consumer = consumers.find(i);
      if (options.codegen.gemv != GemvMode::off || step.gemm.int8_b)
        plan_gemv(exe.plan, i, step.gemm, options.codegen, kernels[i],
                  producer == producers.end() ? nullptr : &producer->second,
                  consumer == consumers.end() ? nullptr : &consumer->second);
    } else if (r.kind == fusion::RegionKind::attention && options.cudnn) {
      std::string why;
      step.attention = plan_attention_call(p.graph, r, options.cudnn, &why);
      exe.plan.decisions.push_back(
          {r.attention.scores, r.attention.output, step.attention != nullptr,
           step.attention ? fmt::format("region {} runs on {}", i, step.attention->label)
                          : fmt::format("region {}: not on cuDNN ({}); the generated kernel "
                                        "runs it", i, why)});
      if (!step.attention) kernels[i] = templates::generate(p.graph, r, options.codegen);
    } else if (!prebuilt || !prebuilt(i, step)) {
      kernels[i] = templates::generate(p.graph, r, options.codegen);
    }
  }
  const auto loaded = load_kernels(kernels, loader, options.compile_threads);
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (!loaded[i]) continue;
    exe.steps[i].kernel = loaded[i];
    exe.steps[i].arguments = std::move(kernels[i].params);
  }
  assign_releases(exe);
  return exe;
}

std::string range_name(const ir::Graph& g, const fusion::Region& r) {
  constexpr size_t kMaxOps = 8;
  std::string name = fmt::format("fj {}:", fusion::region_kind_name(r.kind));
  std::vector<ir::Op> seen;
  for (NodeId id : r.nodes) {
    const ir::Op op = g.node(id).op;
    const ir::OpKind kind = ir::op_kind(op);
    if (kind == ir::OpKind::view || (kind == ir::OpKind::source && op != ir::Op::arange)) continue;
    if (std::find(seen.begin(), seen.end(), op) != seen.end()) continue;
    if (seen.size() == kMaxOps) {
      name += " ...";
      break;
    }
    seen.push_back(op);
    name += ' ';
    name += ir::op_name(op);
  }
  return name;
}

void assign_releases(Executable& exe) {
  const fusion::Plan& p = exe.plan;
  for (Step& step : exe.steps) step.range = range_name(p.graph, *step.region);

  // What a graph replay sizes itself by (replays_as_graph, run_graph).
  for (const Step& step : exe.steps) {
    if (step.kernel) {
      ++exe.kernel_steps;
      exe.kernel_params += step.arguments.size() + (step.kernel->kernel.dynamic ? 1 : 0) +
                           step.runtime_extents.size();
    }
    for (NodeId id : step.region->outputs) {
      if (written_in_place(p.graph, id) < 0) exe.output_bytes += byte_size(p.graph.node(id));
    }
  }
  exe.graph_range = fmt::format("fj graph: {} kernels", exe.kernel_steps);
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
}

namespace {

// The launch of a kernel step, its pointer arguments appended to scratch.pointers.
KernelLaunch prepare_launch(const Step& step, RunScratch& scratch, int sm_count) {
  const templates::Kernel& k = step.kernel->kernel;
  // Cluster kernels carry their cluster shape in the CUBIN (__cluster_dims__), so a plain
  // launch (or graph node) launches clusters; the grid must hold whole clusters.
  const int64_t grid = templates::launch_grid(k, sm_count, step.outer, step.row_length);
  if (grid % std::max(k.cluster, 1) != 0) {
    throw InternalError(fmt::format("kernel {}: grid of {} blocks is not a whole number of "
                                    "clusters of {}", k.name, grid, k.cluster));
  }
  KernelLaunch l{.function = step.kernel->function,
                 .grid = static_cast<unsigned>(grid),
                 .block = static_cast<unsigned>(k.block),
                 .shared_bytes = static_cast<unsigned>(k.shared_bytes),
                 .first = scratch.pointers.size(),
                 .count = step.arguments.size() + (k.dynamic ? 1 : 0) + step.runtime_extents.size(),
                 .programmatic = k.programmatic};
  for (NodeId id : step.arguments) {
    const auto& buf = scratch.values[static_cast<size_t>(id)];
    if (!buf) throw InternalError(fmt::format("%{} read before it was computed", id));
    scratch.pointers.push_back(buf->data());
  }
  // A dynamic kernel's trailing `long long fj_outer` travels in a slot of the argument array:
  // the slot's 8 bytes are the value (launch_grid above has checked its range).
  if (k.dynamic) {
    scratch.pointers.push_back(std::bit_cast<void*>(static_cast<long long>(step.outer)));
  }
  // Then its runtime extents: `int fj_e<k>` reads the low 4 bytes of its slot (little-endian),
  // `unsigned long long fj_m<k>` all 8.
  if (step.runtime_extents.size() != 2 * k.runtime_extents.size()) {
    throw InternalError(fmt::format("kernel {}: {} runtime extent arguments for {} extents", k.name,
                                    step.runtime_extents.size(), k.runtime_extents.size()));
  }
  for (uint64_t slot : step.runtime_extents) scratch.pointers.push_back(std::bit_cast<void*>(slot));
  return l;
}

// args[i] = &pointers[i], once the pointers are all in place (the vector no longer grows).
void point_args(RunScratch& scratch) {
  scratch.args.resize(scratch.pointers.size());
  for (size_t i = 0; i < scratch.pointers.size(); ++i) scratch.args[i] = &scratch.pointers[i];
}

// Gives each output of `step` its buffer: the caller's (direct), a new one of the pool, or for
// an update its destination's (written in place, and never poisoned: it holds data).
void allocate_outputs(const Step& step, const ir::Graph& g, RunScratch& scratch, Device& device,
                      bool poison) {
  for (NodeId id : step.region->outputs) {
    auto& buf = scratch.values[static_cast<size_t>(id)];
    if (const NodeId dst = written_in_place(g, id); dst >= 0) {
      buf = scratch.values[static_cast<size_t>(dst)];
      continue;
    }
    const auto& direct = scratch.direct[static_cast<size_t>(id)];
    buf = direct ? direct : device.allocate(byte_size(g.node(id)));
    if (poison) FUSEJIT_CUDA(cudaMemsetAsync(buf->data(), 0xFF, buf->bytes(), device.stream()));
  }
}

// One strided-batched cuBLASLt call per outer batch index (jit/libs/gemm_call.h); C is laid out as
// D.
void run_gemm(const GemmCall& c, const RunScratch& scratch, Blas& blas) {
  auto ptr = [&](NodeId id) -> char* {
    const auto& buf = scratch.values[static_cast<size_t>(id)];
    if (!buf) throw InternalError(fmt::format("%{} read before it was computed", id));
    return static_cast<char*>(buf->data());
  };
  const int64_t elem = dtype_size(c.problem.dtype);
  const void* bias = c.bias >= 0 ? ptr(c.bias) : nullptr;
  const char* residual = c.residual >= 0 ? ptr(c.residual) : nullptr;
  const char* a = ptr(c.a);
  const char* b = ptr(c.b);
  char* d = ptr(c.d);
  for (const GemmOffsets& o : c.calls) {
    blas.gemm(c.problem, a + o.a * elem, b + o.b * elem, bias,
              residual ? residual + o.d * elem : nullptr, d + o.d * elem);
  }
}

void record_event(const RunOptions& options, size_t step, bool stop, cudaStream_t stream) {
  if (!options.step_events) return;
  const auto& pair = (*options.step_events)[step];
  FUSEJIT_CUDA(cudaEventRecord(stop ? pair.second : pair.first, stream));
}

// An NVTX range for the host-side launch of a step (Nsight Systems shows it on the CPU
// timeline and projects it onto the GPU work it launched; Nsight Compute names kernels by it).
// Without a tool attached, NVTX3's calls are a no-op through a pointer (a few nanoseconds).
struct NvtxRange {
  explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// One kernel on `stream`. A programmatic kernel may be scheduled while the grid ahead of it
// finishes (it waits for that grid in its first statement: templates::wait_for_grid).
void launch(const Driver& drv, const KernelLaunch& l, cudaStream_t stream, void** args) {
  if (!l.programmatic) {
    FUSEJIT_DRIVER(drv, launch_kernel, l.function, l.grid, 1, 1, l.block, 1, 1, l.shared_bytes,
                   stream, args, nullptr);
    return;
  }
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = l.grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = l.block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = l.shared_bytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  FUSEJIT_DRIVER(drv, launch_kernel_ex, &config, l.function, args, nullptr);
}

// Queues step `s` of `exe` on the device's stream, its buffers already in scratch.values.
void run_step(const Executable& exe, size_t s, Device& device, Blas& blas, RunScratch& scratch) {
  const Step& step = exe.steps[s];
  const NvtxRange range(step.range);
  if (step.kernel) {
    scratch.pointers.clear();
    const KernelLaunch l = prepare_launch(step, scratch, device.info().sm_count);
    point_args(scratch);
    launch(device.driver(), l, device.stream(), scratch.args.data());
  } else if (step.attention) {
    run_attention_call(
        *step.attention, device,
        [&](NodeId id) {
          const auto& buf = scratch.values[static_cast<size_t>(id)];
          if (!buf) throw InternalError(fmt::format("%{} read before it was computed", id));
          return buf->data();
        },
        scratch.attention_workspace ? scratch.attention_workspace->data() : nullptr);
  } else {
    run_gemm(step.gemm, scratch, blas);
  }
}

// The steps one at a time, each intermediate released after its last reader.
void run_steps(const Executable& exe, Device& device, Blas& blas, const RunOptions& options,
               RunScratch& scratch) {
  const ir::Graph& g = exe.plan.graph;
  for (size_t s = 0; s < exe.steps.size(); ++s) {
    const Step& step = exe.steps[s];
    allocate_outputs(step, g, scratch, device, options.poison_outputs);
    record_event(options, s, false, device.stream());
    run_step(exe, s, device, blas, scratch);
    record_event(options, s, true, device.stream());
    for (NodeId id : step.release) scratch.values[static_cast<size_t>(id)].reset();
  }
}

bool replays_as_graph(const Executable& exe, const RunOptions& options) {
  return options.graph_min_launches > 0 && !options.step_events && !options.poison_outputs &&
         exe.kernel_steps == exe.steps.size() &&
         exe.kernel_steps >= static_cast<size_t>(options.graph_min_launches) &&
         exe.output_bytes <= kGraphMaxBytes;
}

// Every step's buffers first, then the whole plan as one graph launch; the intermediates are
// released (stream-ordered, after the graph) when the run ends.
void run_graph(const Executable& exe, Device& device, const RunOptions& options,
               RunScratch& scratch) {
  const ir::Graph& g = exe.plan.graph;
  scratch.pointers.clear();
  scratch.pointers.reserve(exe.kernel_params);
  scratch.launches.clear();
  for (const Step& step : exe.steps) {
    allocate_outputs(step, g, scratch, device, false);
    scratch.launches.push_back(prepare_launch(step, scratch, device.info().sm_count));
  }
  point_args(scratch);
  const NvtxRange range(exe.graph_range);
  if (!exe.graph) {
    exe.graph = std::make_unique<GraphReplay>(device.driver(), scratch.launches, scratch.pointers,
                                              scratch.args.data());
  }
  exe.graph->launch(device.driver(), scratch.launches, scratch.pointers, scratch.args.data(),
                    device.stream());
  if (options.graph_launches) ++*options.graph_launches;
}

void create_events(const Executable& exe, const RunOptions& options) {
  if (!options.step_events) return;
  auto& events = *options.step_events;
  while (events.size() < exe.steps.size()) {
    cudaEvent_t start, stop;
    FUSEJIT_CUDA(cudaEventCreate(&start));
    FUSEJIT_CUDA(cudaEventCreate(&stop));
    events.emplace_back(start, stop);
  }
}

// Sizes the scratch's per-node lists to g (empty) and binds g's inputs to `inputs`.
void bind_inputs(const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                 RunScratch& scratch) {
  const std::vector<NodeId>& input_ids = g.inputs();
  if (input_ids.size() != inputs.size()) {
    throw InternalError(
        fmt::format("executable has {} inputs, {} bound", input_ids.size(), inputs.size()));
  }
  scratch.values.assign(g.size(), nullptr);
  scratch.direct.assign(g.size(), nullptr);
  for (size_t k = 0; k < inputs.size(); ++k) {
    scratch.values[static_cast<size_t>(input_ids[k])] = inputs[k];
  }
}

// Empties the scratch's buffer lists however the run ends, keeping their capacity.
struct ScratchRelease {
  RunScratch& scratch;
  ~ScratchRelease() {
    scratch.values.clear();
    scratch.direct.clear();
  }
};

}  // namespace

std::vector<std::shared_ptr<DeviceBuffer>> run_executable(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device, Blas& blas, const RunOptions& options) {
  const ir::Graph& g = exe.plan.graph;
  RunScratch own;
  RunScratch& scratch = options.scratch ? *options.scratch : own;
  const ScratchRelease release{scratch};
  bind_inputs(g, inputs, scratch);
  if (options.outputs) direct_outputs(g, inputs, *options.outputs, scratch.direct);
  create_events(exe, options);
  if (replays_as_graph(exe, options)) {
    run_graph(exe, device, options, scratch);
  } else {
    run_steps(exe, device, blas, options, scratch);
  }
  return collect_outputs(g, scratch.values, options, device);
}

BufferSlots buffer_slots(const fusion::Plan& plan) {
  const ir::Graph& g = plan.graph;
  const size_t n = g.size();
  // Each region output's storage: itself, or for an update the storage it is written into.
  std::vector<NodeId> storage(n);
  for (size_t id = 0; id < n; ++id) storage[id] = static_cast<NodeId>(id);
  for (const fusion::Region& r : plan.regions) {
    for (NodeId id : r.outputs) {
      if (const NodeId dst = written_in_place(g, id); dst >= 0) {
        storage[static_cast<size_t>(id)] = storage[static_cast<size_t>(dst)];
      }
    }
  }
  // The last region that reads each storage through any of its nodes; kept to the end (never
  // free) when one of them is a graph output.
  constexpr int kKept = std::numeric_limits<int>::max();
  std::vector<int> last(n, -1);
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const fusion::Region& r = plan.regions[i];
    for (NodeId id : r.inputs) last[static_cast<size_t>(storage[static_cast<size_t>(id)])] = int(i);
    // An output nobody reads is free after its own region.
    for (NodeId id : r.outputs) {
      int& l = last[static_cast<size_t>(storage[static_cast<size_t>(id)])];
      l = std::max(l, int(i));
    }
  }
  for (NodeId id : g.outputs()) last[static_cast<size_t>(storage[static_cast<size_t>(id)])] = kKept;

  BufferSlots s;
  s.slot.assign(n, -1);
  std::multimap<size_t, int> free;                             // bytes -> slot
  std::vector<std::vector<NodeId>> ends(plan.regions.size());  // storages free after region i
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    for (NodeId id : plan.regions[i].outputs) {
      const auto k = static_cast<size_t>(id);
      if (storage[k] != id) {  // an update: its destination's storage (an input's: none)
        s.slot[k] = s.slot[static_cast<size_t>(storage[k])];
        continue;
      }
      // The smallest free slot that holds it, else the largest free one, grown to hold it.
      const size_t bytes = byte_size(g.node(id));
      auto it = free.lower_bound(bytes);
      if (it == free.end() && !free.empty()) it = std::prev(free.end());
      if (it != free.end()) {
        s.slot[k] = it->second;
        size_t& held = s.bytes[static_cast<size_t>(it->second)];
        held = std::max(held, bytes);
        free.erase(it);
      } else {
        s.slot[k] = static_cast<int>(s.bytes.size());
        s.bytes.push_back(bytes);
      }
      if (last[k] != kKept) ends[static_cast<size_t>(last[k])].push_back(id);
    }
    for (NodeId id : ends[i]) {
      const int slot = s.slot[static_cast<size_t>(id)];
      free.emplace(s.bytes[static_cast<size_t>(slot)], slot);
    }
  }
  return s;
}

std::vector<std::shared_ptr<DeviceBuffer>> fixed_buffers(
    const Executable& exe, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    Device& device) {
  const ir::Graph& g = exe.plan.graph;
  RunScratch scratch;
  bind_inputs(g, inputs, scratch);
  const BufferSlots slots = buffer_slots(exe.plan);
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  for (size_t bytes : slots.bytes) buffers.push_back(device.allocate(bytes));
  for (const Step& step : exe.steps) {
    for (NodeId id : step.region->outputs) {
      const auto k = static_cast<size_t>(id);
      if (const NodeId dst = written_in_place(g, id); dst >= 0) {
        scratch.values[k] = scratch.values[static_cast<size_t>(dst)];
      } else {
        scratch.values[k] = buffers.at(static_cast<size_t>(slots.slot[k]));
      }
    }
  }
  for (NodeId id : g.outputs()) {
    if (!scratch.values[static_cast<size_t>(id)]) {
      throw InternalError(fmt::format("output %{} was not computed by any region", id));
    }
  }
  return std::move(scratch.values);
}

void run_fixed(const Executable& exe, std::vector<std::shared_ptr<DeviceBuffer>>& values,
               Device& device, Blas& blas, RunScratch& scratch) {
  if (values.size() != exe.plan.graph.size()) {
    throw InternalError(fmt::format("fixed run of {} buffers for a graph of {} nodes",
                                    values.size(), exe.plan.graph.size()));
  }
  // The buffers are swapped in and back out: the scratch's own list keeps its capacity, and no
  // buffer's count changes.
  std::swap(scratch.values, values);
  struct SwapBack {
    RunScratch& scratch;
    std::vector<std::shared_ptr<DeviceBuffer>>& values;
    ~SwapBack() { std::swap(scratch.values, values); }
  } const back{scratch, values};
  for (size_t s = 0; s < exe.steps.size(); ++s) run_step(exe, s, device, blas, scratch);
}

int64_t attention_workspace_bytes(const Executable& exe) {
  int64_t bytes = 0;
  for (const Step& step : exe.steps) {
    if (step.attention) bytes = std::max(bytes, step.attention->graph->workspace_bytes());
  }
  return bytes;
}

int64_t step_bytes(const Executable& exe, const Step& step) {
  const ir::Graph& g = exe.plan.graph;
  int64_t bytes = 0;
  for (NodeId id : step.region->inputs) bytes += static_cast<int64_t>(byte_size(g.node(id)));
  for (NodeId id : step.region->outputs) {
    // An update writes only its value's elements.
    const Shape& written = ir::computed_shape(g, id);
    bytes += ir::numel(written) * dtype_size(g.node(id).dtype);
  }
  return bytes;
}

double step_flops(const Step& step) {
  if (step.kernel || step.attention) return 0.0;
  const GemmProblem& p = step.gemm.problem;
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
         static_cast<double>(p.batch) * static_cast<double>(step.gemm.calls.size());
}

std::string step_label(const Executable& exe, const Step& step) {
  (void)exe;
  if (step.kernel) return step.kernel->kernel.name;
  if (step.attention) return step.attention->label;
  return gemm_call_label(step.gemm);
}

}  // namespace fusejit::jit
