// jit/context: the Context, recording and eval; see context_impl.h.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "fusejit/context.h"
#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "ir/hash.h"
#include "ir/interp.h"
#include "jit/runtime/dump.h"
#include "ir/prune.h"
#include "ir/random.h"
#include "ir/text.h"
#include "ir/shape.h"
#include "jit/api/context_impl.h"
#include "jit/runtime/executor.h"
#include "jit/runtime/kernel_cache.h"
#include "jit/api/log.h"
#include "templates/target.h"

namespace fusejit {

namespace {

// The arch FUSEJIT_DUMP writes for when there is no GPU and FUSEJIT_ARCH names none (the
// default `fusejit plan` and `fusejit warm` use too).
constexpr const char* kNoGpuDumpArch = "sm_90";

std::string no_gpu_dump_arch(const Options& options) {
  return options.arch.empty() ? kNoGpuDumpArch : options.arch;
}

// Without a GPU eval runs the CPU reference and plans nothing, yet nothing FUSEJIT_DUMP asks for
// needs a GPU to make: the trace is planned and its kernels generated as for a GPU of
// FUSEJIT_ARCH (default kNoGpuDumpArch), then dumped as a GPU eval dumps them (jit/runtime/dump.h;
// the .cu and .ptx files by the kernel cache, which keeps nothing on disk here). NVRTC runs only
// when the PTX is asked for. Every eval dumps (a GPU eval dumps on a trace-memo miss; the files of
// one trace have the same names). Dumping is a debugging aid: a failure to dump is a warning, never
// a failed eval.
void dump_without_gpu(const Options& options, spdlog::logger& log, const ir::Graph& g) {
  if (!options.dump.any()) return;
  const std::string arch = no_gpu_dump_arch(options);
  try {
    Options memory_only = options;
    memory_only.cache = CacheMode::memory;
    memory_only.require_warm = false;
    jit::KernelCache::Compiler source_only;  // empty: NVRTC
    if (!options.dump.ptx) {
      source_only = [](const templates::Kernel& k, std::string_view, const jit::CompileOptions&) {
        return jit::CompiledKernel{k.name, "", "", ""};
      };
    }
    jit::KernelCache kernels(memory_only, log, source_only, options.dump.ptx);
    const jit::KernelLoader loader{
        [](const templates::Kernel&) { return std::shared_ptr<jit::LoadedKernel>(); },
        [&](const templates::Kernel& k) { return jit::ObtainedKernel{kernels.get(k, arch)}; },
        [](const templates::Kernel& k, const jit::ObtainedKernel&) {
          auto unloaded = std::make_shared<jit::LoadedKernel>();  // no module: nothing to launch
          unloaded->kernel = k;
          return unloaded;
        }};
    const jit::Executable exe =
        jit::build_executable(fusion::make_plan(g, jit::plan_options(options)), loader,
                              jit::build_options(options, templates::target_for_arch(arch)));
    jit::dump_eval(options, g, exe, log);
  } catch (const Error& e) {
    log.warn("FUSEJIT_DUMP without a GPU: could not dump the plan and kernels for {}: {}", arch,
             e.what());
  }
}

}  // namespace

namespace detail {

void check_dims(const Shape& shape, std::string_view what) {
  for (int64_t d : shape) {
    if (d < 1) {
      throw UsageError(fmt::format("{}: shape {} has a dimension of {}; every dimension must be at "
                                   "least 1",
                                   what, ir::shape_str(shape), d));
    }
  }
}

size_t byte_size(const Shape& shape, DType dtype) {
  return static_cast<size_t>(ir::numel(shape)) * static_cast<size_t>(dtype_size(dtype));
}

ContextImpl::ContextImpl(Options opts)
    : options(std::move(opts)), log(jit::make_logger(options.log_level)) {}

const ir::HostTensor& ContextImpl::host_of(Storage& s) {
  if (s.borrowed_host) {
    s.host.bytes.resize(s.borrowed_host->bytes);
    std::memcpy(s.host.bytes.data(), s.borrowed_host->data, s.borrowed_host->bytes);
  } else if (!s.host_valid) {
    runtime->download(*s.device, s.host);
    s.host_valid = !s.device->borrowed();
  }
  return s.host;
}

void* ContextImpl::data_of(Storage& s) {
  if (s.borrowed_host) return const_cast<void*>(s.borrowed_host->data);
  if (!runtime) return const_cast<std::byte*>(host_of(s).bytes.data());
  if (!s.device) s.device = runtime->upload(s.host);
  return s.device->data();
}

ir::NodeId ContextImpl::node_of(const std::shared_ptr<TensorImpl>& tensor) {
  TensorImpl& t = *tensor;
  if (t.ctx != this) {
    throw UsageError("fusejit: an op mixes tensors of two different Contexts; create all operands of "
                "an op in the same Context");
  }
  if (!t.storage) {
    if (t.carried) {
      const std::shared_ptr<CarriedTrace> c = std::move(t.carried);
      t.node = copy_in(*c, t.node);
      t.epoch = epoch;
      pending.push_back(tensor);
    }
    if (t.epoch != epoch) {
      throw InternalError(fmt::format("pending tensor from trace epoch {} seen in epoch {}",
                                      t.epoch, epoch));
    }
    return t.node;
  }
  std::vector<ir::DynamicAxis> marks_of_t;
  for (const auto& [axis, name] : t.dynamic_axes) {
    marks_of_t.push_back({.input = 0, .axis = axis, .name = name});
  }
  return bind(t.storage, t.dtype, t.shape, marks_of_t);
}

ir::NodeId ContextImpl::bind(const std::shared_ptr<Storage>& s, DType dtype, const Shape& shape,
                             const std::vector<ir::DynamicAxis>& input_marks) {
  // A Storage belongs to the tensors of one Context, so its binding is this one.
  if (s && s->bound_epoch == epoch) return s->bound_node;
  const ir::NodeId id = ir::add_input(trace, dtype, shape);
  for (const ir::DynamicAxis& m : input_marks) {
    marks.push_back({.input = bound.size(), .axis = m.axis, .name = m.name});
  }
  bound.push_back(s);
  if (s) {
    s->bound_epoch = epoch;
    s->bound_node = id;
  }
  return id;
}

ir::NodeId ContextImpl::copy_in(CarriedTrace& c, ir::NodeId id) {
  if (c.copied_epoch != epoch) {
    c.copied.assign(c.graph.size(), -1);
    c.copied_epoch = epoch;
  }
  // The nodes `id` needs that are not copied yet, found walking back (operands come first).
  std::vector<bool> needed(static_cast<size_t>(id) + 1, false);
  needed[static_cast<size_t>(id)] = true;
  for (ir::NodeId n = id; n >= 0; --n) {
    const auto k = static_cast<size_t>(n);
    if (!needed[k] || c.copied[k] >= 0) {
      needed[k] = false;
      continue;
    }
    for (ir::NodeId in : c.graph.node(n).inputs) needed[static_cast<size_t>(in)] = true;
  }
  const std::vector<ir::NodeId>& inputs = c.graph.inputs();
  for (ir::NodeId n = 0; n <= id; ++n) {
    const auto k = static_cast<size_t>(n);
    if (!needed[k]) continue;
    const ir::Node& node = c.graph.node(n);
    if (node.op == ir::Op::input) {
      const auto input = static_cast<size_t>(
          std::find(inputs.begin(), inputs.end(), n) - inputs.begin());
      std::vector<ir::DynamicAxis> input_marks;
      for (const ir::DynamicAxis& m : c.marks) {
        if (m.input == input) input_marks.push_back(m);
      }
      c.copied[k] = bind(c.bound.at(input), node.dtype, node.shape, input_marks);
    } else {
      ir::NodeSpec spec = ir::spec_of(node);
      for (ir::NodeId& in : spec.inputs) in = c.copied[static_cast<size_t>(in)];
      c.copied[k] = trace.add(std::move(spec));
    }
  }
  return c.copied[static_cast<size_t>(id)];
}

void ContextImpl::rebind_pending(const std::shared_ptr<TensorImpl>& t, ir::NodeId id) {
  t->storage.reset();
  t->carried.reset();
  t->node = id;
  t->epoch = epoch;
  pending.push_back(t);
}

const Shape& ContextImpl::shape_of(TensorImpl& t) {
  if (t.shape_in_trace) {
    t.shape = trace.node(t.node).shape;
    t.shape_in_trace = false;
  }
  return t.shape;
}

namespace {

// The blocks of recorded tensors (a TensorImpl and its shared_ptr control block, one
// allocation), recycled per thread: recording allocates one per op and most die at the next
// op or eval, so a free list spares malloc and free their share of an op's cost. At most
// kKeep blocks wait per thread; blocks of other sizes go to the heap as usual.
class RecycledBlocks {
 public:
  static constexpr size_t kKeep = 1024;
  ~RecycledBlocks() {
    for (void* p : free_) ::operator delete(p);
  }
  void* take(size_t bytes) {
    if (bytes == size_ && !free_.empty()) {
      void* p = free_.back();
      free_.pop_back();
      return p;
    }
    return ::operator new(bytes);
  }
  void give(void* p, size_t bytes) {
    if (size_ == 0) size_ = bytes;
    if (bytes == size_ && free_.size() < kKeep) {
      free_.push_back(p);
    } else {
      ::operator delete(p);
    }
  }

 private:
  size_t size_ = 0;  // the one block size kept (allocate_shared's, fixed by the build)
  std::vector<void*> free_;
};

RecycledBlocks& recycled_blocks() {
  thread_local RecycledBlocks blocks;
  return blocks;
}

template <class T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) { return static_cast<T*>(recycled_blocks().take(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { recycled_blocks().give(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const { return true; }
};

}  // namespace

std::shared_ptr<TensorImpl> ContextImpl::record(ir::NodeSpec&& spec) {
  return pending_tensor(trace.add(std::move(spec)));
}

std::shared_ptr<TensorImpl> ContextImpl::record(ir::Op op,
                                                std::initializer_list<ir::NodeId> operands) {
  operands_only.op = op;
  ir::assign_short(operands_only.inputs, operands);
  return pending_tensor(trace.add(operands_only));
}

std::shared_ptr<TensorImpl> ContextImpl::pending_tensor(ir::NodeId id) {
  auto t = std::allocate_shared<TensorImpl>(RecyclingAllocator<TensorImpl>());
  t->ctx = this;
  t->dtype = trace.node(id).dtype;
  t->shape_in_trace = true;
  t->node = id;
  t->epoch = epoch;
  pending.push_back(t);
  return t;
}

void store_host(Storage& dst, ir::HostTensor value) {
  if (dst.borrowed_host) {  // the caller's memory: the values land there
    std::memcpy(const_cast<void*>(dst.borrowed_host->data), value.bytes.data(), value.bytes.size());
    return;
  }
  dst.host = std::move(value);
  dst.host_valid = true;
}

std::vector<ir::HostTensor> ContextImpl::host_inputs(
    const std::vector<std::shared_ptr<Storage>>& storages) {
  std::vector<ir::HostTensor> inputs;
  inputs.reserve(storages.size());
  for (const auto& s : storages) inputs.push_back(host_of(*s));
  return inputs;
}

std::vector<std::shared_ptr<jit::DeviceBuffer>> ContextImpl::device_inputs() {
  std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
  inputs.reserve(bound.size());
  for (const auto& s : bound) {
    if (!s->device) s->device = runtime->upload(s->host);
    inputs.push_back(s->device);
  }
  return inputs;
}

jit::DynamicSource ContextImpl::dynamic_source() {
  if (options.disable.dynamic) return {};
  return {&dynamic, &marks};
}

std::vector<std::shared_ptr<Storage>> ContextImpl::run_on_gpu(
    const ir::Graph& g, const std::vector<std::shared_ptr<TensorImpl>>& outs, const Into& into) {
  const std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs = device_inputs();
  std::vector<std::shared_ptr<jit::DeviceBuffer>> destinations;
  if (!into.empty()) {
    for (const auto& t : outs) {
      const auto it = into.find(t.get());
      const size_t bytes = byte_size(t->shape, t->dtype);
      destinations.push_back(
          it == into.end() ? nullptr
                           : runtime->device().borrow(it->second.data, bytes, it->second.hold));
    }
  }
  std::vector<std::shared_ptr<jit::DeviceBuffer>> buffers =
      runtime->run(g, inputs, destinations, dynamic_source());
  std::vector<std::shared_ptr<Storage>> results(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    results[i] = std::make_shared<Storage>();
    results[i]->host.dtype = outs[i]->dtype;
    results[i]->host.shape = outs[i]->shape;
    results[i]->device = std::move(buffers[i]);
  }
  return results;
}

std::vector<std::shared_ptr<Storage>> ContextImpl::run_on_cpu(
    const ir::Graph& g, const std::vector<std::shared_ptr<TensorImpl>>& outs, const Into& into) {
  dump_without_gpu(options, *log, g);
  std::vector<ir::HostTensor> values = ir::interpret(g, host_inputs(bound));
  std::vector<std::shared_ptr<Storage>> results(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (const auto it = into.find(outs[i].get()); it != into.end()) {
      std::memcpy(it->second.data, values[i].bytes.data(), values[i].bytes.size());
      ++stats.outputs_copied;
    }
    results[i] = std::make_shared<Storage>();
    results[i]->host = std::move(values[i]);
    results[i]->host_valid = true;
  }
  return results;
}

void ContextImpl::record(const ir::Graph& g) {
  // A trace with dynamic dims is saved in its symbolic form, once, so that `fusejit warm`
  // compiles the kernels that serve every size.
  std::optional<jit::DynamicMatch> match;
  if (!options.disable.dynamic) match = dynamic.match(g, marks, *log);
  const std::string path = match ? jit::record_trace(options, *match->trace, *log)
                                 : jit::record_trace(options, ir::SymbolicGraph{g, {}}, *log);
  if (!path.empty()) log->debug("recorded {}", path);
}

std::vector<std::shared_ptr<TensorImpl>> ContextImpl::held_pending() {
  std::vector<std::shared_ptr<TensorImpl>> held;
  for (const auto& t : pending) {
    if (t.use_count() > 1 && !t->storage) held.push_back(t);
  }
  for (const auto& weak : carried) {
    const std::shared_ptr<CarriedTrace> c = weak.lock();
    if (!c) continue;
    for (const auto& w : c->tensors) {
      std::shared_ptr<TensorImpl> t = w.lock();
      if (t && !t->storage && t->carried == c) held.push_back(std::move(t));
    }
  }
  return held;
}

void ContextImpl::carry_uncomputed() {
  std::shared_ptr<CarriedTrace> c;
  for (const auto& t : pending) {
    // Held by the program (a use count read as 1 is held by `pending` alone, and nothing can
    // take it again) and not computed.
    if (t.use_count() == 1 || t->storage) continue;
    if (!c) c = std::make_shared<CarriedTrace>();
    shape_of(*t);  // before the trace it is read from moves
    t->carried = c;
    c->tensors.push_back(t);
  }
  if (!c) return;
  c->graph = std::move(trace);
  c->graph.set_outputs({});
  c->bound = std::move(bound);
  c->marks = std::move(marks);
  trace = ir::Graph();
  bound.clear();
  marks.clear();
  trim(*c);
  carried.push_back(c);
}

void ContextImpl::trim(CarriedTrace& c) {
  std::vector<bool> needed(c.graph.size(), false);
  for (const auto& w : c.tensors) {
    const std::shared_ptr<TensorImpl> t = w.lock();
    if (t && !t->storage && t->carried.get() == &c) needed[static_cast<size_t>(t->node)] = true;
  }
  for (size_t n = needed.size(); n-- > 0;) {
    if (!needed[n]) continue;
    for (ir::NodeId in : c.graph.node(static_cast<ir::NodeId>(n)).inputs) {
      needed[static_cast<size_t>(in)] = true;
    }
  }
  const std::vector<ir::NodeId>& input_ids = c.graph.inputs();
  for (size_t k = 0; k < c.bound.size(); ++k) {
    if (!needed[static_cast<size_t>(input_ids[k])]) c.bound[k].reset();
  }
}

void ContextImpl::trim_carried() {
  std::erase_if(carried, [](const std::weak_ptr<CarriedTrace>& w) { return w.expired(); });
  for (const auto& weak : carried) {
    if (const std::shared_ptr<CarriedTrace> c = weak.lock()) trim(*c);
  }
}

void ContextImpl::share_written(const ir::Graph& g,
                                std::vector<std::shared_ptr<Storage>>& results) {
  for (size_t i = 0; i < results.size(); ++i) {
    const std::optional<size_t> k = g.written_input(i);
    if (!k) continue;
    const std::shared_ptr<Storage>& dst = bound.at(*k);
    if (runtime) {
      // Written in place on the device, unless eval_into asked for a copy elsewhere.
      if (results[i]->device != dst->device) continue;
      dst->host_valid = false;
    } else {
      // The CPU reference computed a new tensor: its values become the destination's (and land
      // in the caller's memory when it is wrapped).
      store_host(*dst, results[i]->host);
    }
    results[i] = dst;
  }
}

std::vector<std::shared_ptr<TensorImpl>> ContextImpl::outputs_of(
    const std::vector<std::shared_ptr<TensorImpl>>& wanted) {
  // Outputs: the tensors asked for, and no other (see context_impl.h).
  std::vector<std::shared_ptr<TensorImpl>> outs;
  for (const auto& t : wanted) {
    if (t->storage || std::find(outs.begin(), outs.end(), t) != outs.end()) continue;
    node_of(t);  // copies in one carried from an earlier trace
    outs.push_back(t);
  }
  // Every write recorded into this trace happens now, asked for or not (update_slice).
  for (const auto& t : pending) {
    if (t->storage || t->carried || trace.node(t->node).op != ir::Op::update_slice) continue;
    if (std::find(outs.begin(), outs.end(), t) == outs.end()) outs.push_back(t);
  }
  if (outs.empty()) return outs;
  for (const auto& t : outs) shape_of(*t);  // before the trace they are read from restarts

  const std::vector<ir::NodeId>& input_ids = trace.inputs();
  for (size_t k = 0; k < bound.size(); ++k) {
    if (!bound[k]) {
      throw UsageError(fmt::format("eval: the trace reads placeholder %{} ({}), which holds no data; "
                              "placeholders are for building traces (Context::trace_text), create "
                              "the tensor with from_vector or from_host to evaluate it",
                              input_ids[k], ir::type_str(trace.node(input_ids[k]))));
    }
  }
  return outs;
}

void ContextImpl::materialize(const std::vector<std::shared_ptr<TensorImpl>>& outs,
                              std::vector<std::shared_ptr<Storage>>& results) {
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i]->storage = std::move(results[i]);
    outs[i]->node = -1;
  }
  carry_uncomputed();
  trace.clear();  // keeps its capacity for the next trace (when nothing was carried)
  bound.clear();
  marks.clear();
  pending.clear();
  ++epoch;
}

void ContextImpl::let_go() {
  // Storages that only dropped temporaries read are let go, and wrapped memory let go since
  // the last eval is handed back here too (its work permitting), even when there is nothing
  // to compute (eval_all of nothing).
  trim_carried();
  if (runtime) runtime->device().run_releases();
}

void ContextImpl::eval(const std::vector<std::shared_ptr<TensorImpl>>& wanted, const Into& into) {
  let_go();
  const std::vector<std::shared_ptr<TensorImpl>> outs = outputs_of(wanted);
  if (outs.empty()) return;

  // The trace is evaluated in place: it restarts after eval anyway, and copying it would cost
  // more than the rest of a cached eval. Should the run throw, it is put back as it was.
  ir::Graph& g = trace;
  std::vector<ir::NodeId> ids;
  ids.reserve(outs.size());
  for (const auto& t : outs) ids.push_back(t->node);
  g.set_outputs(std::move(ids));
  std::vector<std::shared_ptr<Storage>> results;
  try {
    if (!options.record_dir.empty() && recorded.insert(ir::structural_hash(g)).second) record(g);
    results = runtime ? run_on_gpu(g, outs, into) : run_on_cpu(g, outs, into);
  } catch (...) {
    g.set_outputs({});
    throw;
  }

  ++stats.traces_evaluated;
  stats.outputs_computed += static_cast<int64_t>(outs.size());
  share_written(g, results);
  materialize(outs, results);
}

std::unique_ptr<ReplayState> ContextImpl::replay(
    const std::vector<std::shared_ptr<TensorImpl>>& wanted) {
  let_go();
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]->storage) {
      throw UsageError(fmt::format(
          "Replay: output {} ({}{}) is already evaluated; a replay computes pending tensors, so "
          "record the computation again and pass its result",
          i, dtype_name(wanted[i]->dtype), ir::shape_str(shape_of(*wanted[i]))));
    }
  }
  const std::vector<std::shared_ptr<TensorImpl>> outs = outputs_of(wanted);
  if (outs.empty()) throw UsageError("Replay: no outputs; pass the pending tensors it computes");
  auto state = std::make_unique<ReplayState>();
  state->ctx = this;
  ir::Graph& g = trace;
  std::vector<ir::NodeId> ids;
  for (const auto& t : outs) ids.push_back(t->node);
  g.set_outputs(std::move(ids));
  std::vector<std::shared_ptr<Storage>>& results = state->results;
  try {
    if (!options.record_dir.empty() && recorded.insert(ir::structural_hash(g)).second) record(g);
    state->bound = bound;
    if (runtime) {
      state->gpu = runtime->replay(g, device_inputs(), dynamic_source());
    } else {
      dump_without_gpu(options, *log, g);
      state->graph = g;
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (const std::optional<size_t> k = g.written_input(i)) {
        results.push_back(bound.at(*k));
        continue;
      }
      auto r = std::make_shared<Storage>();
      if (state->gpu) {
        r->host.dtype = outs[i]->dtype;
        r->host.shape = outs[i]->shape;
        r->device = state->gpu->output(i);
      } else {
        r->host = ir::HostTensor(outs[i]->dtype, outs[i]->shape);
        r->host_valid = true;  // zeros until the first run
      }
      results.push_back(std::move(r));
    }
  } catch (...) {
    g.set_outputs({});
    throw;
  }
  std::vector<std::shared_ptr<Storage>> taken = results;
  materialize(outs, taken);
  for (const auto& t : wanted) state->outputs.emplace_back(t);
  return state;
}

}  // namespace detail

Context::Context() : Context(Options::from_env()) {}
Context::Context(Options options) : Context(std::move(options), Placement{}) {}
Context::Context(Options options, Placement placement)
    : impl_(std::make_unique<detail::ContextImpl>(std::move(options))) {
  impl_->owner = this;
  for (const std::string& w : impl_->options.warnings) impl_->log->warn("{}", w);
  std::string why;
  if (placement.device == Placement::kCpu) {
    if (placement.stream) {
      throw UsageError(
          "Placement: a stream was given with device Placement::kCpu (the CPU "
          "reference); pass no stream, or a GPU ordinal");
    }
    impl_->log->info("Placement::kCpu: eval runs the CPU reference interpreter");
    return;
  }
  if (auto info = jit::probe_device(&why, placement.device)) {
    impl_->runtime = std::make_unique<jit::Runtime>(*info, impl_->options, *impl_->log,
                                                    impl_->stats, placement.stream);
  } else if (placement.stream) {
    throw UsageError(fmt::format("Placement: a stream was given but there is no GPU ({}); pass "
                                 "no stream to run on the CPU reference",
                                 why));
  } else {
    // Once per process, at warn level: CPU results from a machine meant to have a GPU (a broken
    // driver) must not pass unnoticed, and a CPU-only program should not hear it per Context.
    static std::atomic<bool> announced{false};
    if (!announced.exchange(true)) {
      impl_->log->warn("no GPU ({}): eval runs the CPU reference interpreter (slow; results as "
                       "the GPU would give them within fusejit's error bounds)",
                       why);
    } else {
      impl_->log->info("no GPU ({}): eval runs the CPU reference", why);
    }
    if (impl_->options.dump.any()) {
      impl_->log->info("no GPU: FUSEJIT_DUMP writes the plan and kernels of each eval as for {} "
                       "(FUSEJIT_ARCH)",
                       no_gpu_dump_arch(impl_->options));
    }
  }
}
Context::~Context() = default;

const Options& Context::options() const { return impl_->options; }

bool Context::has_gpu() const { return impl_->runtime != nullptr; }

bool Context::gpu_available(int device, std::string* why) {
  if (device == Placement::kCpu) {
    if (why) *why = "device Placement::kCpu is the CPU reference";
    return false;
  }
  try {
    return jit::probe_device(why, device).has_value();
  } catch (const UsageError& e) {
    if (why) *why = e.what();
    return false;
  }
}

Context::Stats Context::stats() const {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  return impl_->stats;
}

void Context::eval_all() {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  impl_->eval(impl_->held_pending());
}

namespace {

Tensor materialized(detail::ContextImpl& ctx, ir::HostTensor host) {
  auto t = std::make_shared<detail::TensorImpl>();
  t->ctx = &ctx;
  t->dtype = host.dtype;
  t->shape = host.shape;
  t->storage = std::make_shared<detail::Storage>(detail::Storage{std::move(host), true, nullptr});
  return Tensor(std::move(t));
}

void check_count(size_t count, const Shape& shape, std::string_view what) {
  detail::check_dims(shape, what);
  if (static_cast<int64_t>(count) != ir::numel(shape)) {
    throw UsageError(fmt::format("{}: {} values given for shape {}, which holds {}", what, count,
                            ir::shape_str(shape), ir::numel(shape)));
  }
}

}  // namespace

Tensor Context::from_vector(const std::vector<double>& values, Shape shape, DType dtype) {
  check_count(values.size(), shape, "from_vector");
  ir::HostTensor host(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) host.set(static_cast<int64_t>(i), values[i]);
  return materialized(*impl_, std::move(host));
}

Tensor Context::from_vector(const std::vector<float>& values, Shape shape, DType dtype) {
  return from_vector(std::vector<double>(values.begin(), values.end()), std::move(shape), dtype);
}

Tensor Context::from_host(const void* data, size_t bytes, Shape shape, DType dtype) {
  const size_t elem = static_cast<size_t>(dtype_size(dtype));
  if (bytes % elem != 0) {
    throw UsageError(fmt::format("from_host: {} bytes is not a whole number of {} elements ({} bytes "
                            "each)",
                            bytes, dtype_name(dtype), elem));
  }
  check_count(bytes / elem, shape, "from_host");
  ir::HostTensor host(dtype, std::move(shape));
  std::memcpy(host.bytes.data(), data, bytes);
  return materialized(*impl_, std::move(host));
}

void Context::mark_dynamic(const Tensor& input, int64_t axis, std::string name) {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  if (!input.defined() || input.impl()->ctx != impl_.get()) {
    throw UsageError("mark_dynamic: the tensor must be a tensor of this Context");
  }
  detail::TensorImpl& t = *input.impl();
  if (!t.storage) {
    throw UsageError("mark_dynamic: the tensor is computed by the current trace; mark the inputs "
                     "it is computed from (tensors holding data)");
  }
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  if (axis < -rank || axis >= rank) {
    throw UsageError(fmt::format("mark_dynamic: axis {} is out of range for shape {}", axis,
                                 ir::shape_str(t.shape)));
  }
  if (axis < 0) axis += rank;
  if (name.empty()) name = fmt::format("d{}", axis);
  const bool valid = std::isalpha(static_cast<unsigned char>(name[0])) &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                     });
  if (!valid) {
    throw UsageError(fmt::format("mark_dynamic: name '{}' must be a letter followed by letters, "
                                 "digits or _ (it is spelled so in traces)",
                                 name));
  }
  auto& axes = t.dynamic_axes;
  const auto same = [&](const auto& a) { return a.first == axis; };
  axes.erase(std::remove_if(axes.begin(), axes.end(), same), axes.end());
  axes.emplace_back(axis, std::move(name));
}

Tensor Context::placeholder(Shape shape, DType dtype) {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  Tensor t(impl_->record({.op = ir::Op::input, .dtype = dtype, .shape = std::move(shape)}));
  impl_->bound.push_back(nullptr);
  return t;
}

std::string Context::trace_text(const std::vector<Tensor>& outputs) {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  std::vector<ir::NodeId> ids;
  for (const Tensor& t : outputs) {
    if (!t.defined() || t.impl()->ctx != impl_.get()) {
      throw UsageError("trace_text: every output must be a tensor of this Context");
    }
    ids.push_back(impl_->node_of(t.impl()));
  }
  return ir::print(ir::prune(impl_->trace, ids));
}

Tensor Context::scalar(double value, DType dtype) {
  // An integer the dtype cannot hold is a mistake, not a value to wrap (as torch.full says).
  const auto out_of_range = [&](double lo, double hi) {
    return std::isnan(value) || value < lo || value > hi;
  };
  if ((dtype == DType::i32 && out_of_range(-0x1p31, 0x1p31 - 1)) ||
      (dtype == DType::i64 && out_of_range(-0x1p63, 0x1p63 - 1024))) {
    throw UsageError(fmt::format("scalar: {} is out of range for {} ({} to {})", value,
                                 dtype_name(dtype), dtype == DType::i32 ? "-2^31" : "-2^63",
                                 dtype == DType::i32 ? "2^31 - 1" : "2^63 - 1"));
  }
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  return Tensor(impl_->record({.op = ir::Op::constant, .dtype = dtype, .value = value}));
}

namespace {

// A draw reads its (seed, offset) from a key tensor made here, bound as an input like any host
// data (16 bytes uploaded at eval): the trace, its plan and its kernels are the same for every
// seed and offset (ir/random.h). The node is inferred on a scratch graph first, so that a bad
// shape or dtype throws before the key is bound into the trace.
Tensor draw(detail::ContextImpl& ctx, ir::Op op, Shape shape, const Tensor& key, DType dtype) {
  const char* name = op == ir::Op::rand ? "rand" : "randn";
  if (!key.defined()) {
    throw UsageError(
        fmt::format("{}: the key is an empty Tensor handle; pass an i64 tensor of "
                    "shape [2] holding {{seed, offset}}",
                    name));
  }
  if (key.impl()->ctx != &ctx) {
    throw UsageError(fmt::format("{}: the key belongs to another Context", name));
  }
  ir::Graph scratch;
  ir::add_random(scratch, op, dtype, shape, ir::add_input(scratch, DType::i64, {2}));
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  if (key.dtype() != DType::i64 || key.shape() != Shape{2}) {
    throw UsageError(fmt::format("{}: the key is {}{}; it must be i64[2], holding {{seed, offset}}",
                                 name, dtype_name(key.dtype()), ir::shape_str(key.shape())));
  }
  return Tensor(ctx.record(
      {.op = op, .inputs = {ctx.node_of(key.impl())}, .dtype = dtype, .shape = std::move(shape)}));
}

Tensor draw(detail::ContextImpl& ctx, ir::Op op, Shape shape, uint64_t seed, uint64_t offset,
            DType dtype) {
  Tensor key;
  {
    const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
    key = materialized(ctx, ir::random_key(seed, offset));
  }
  return draw(ctx, op, std::move(shape), key, dtype);
}

}  // namespace

Tensor Context::rand(Shape shape, const Tensor& key, DType dtype) {
  return draw(*impl_, ir::Op::rand, std::move(shape), key, dtype);
}

Tensor Context::randn(Shape shape, const Tensor& key, DType dtype) {
  return draw(*impl_, ir::Op::randn, std::move(shape), key, dtype);
}

Tensor Context::rand(Shape shape, uint64_t seed, uint64_t offset, DType dtype) {
  return draw(*impl_, ir::Op::rand, std::move(shape), seed, offset, dtype);
}

Tensor Context::randn(Shape shape, uint64_t seed, uint64_t offset, DType dtype) {
  return draw(*impl_, ir::Op::randn, std::move(shape), seed, offset, dtype);
}

Tensor Context::zeros(Shape shape, DType dtype) { return full(std::move(shape), 0.0, dtype); }
Tensor Context::ones(Shape shape, DType dtype) { return full(std::move(shape), 1.0, dtype); }

Tensor Context::arange(double start, double stop, double step, DType dtype) {
  const double count = step == 0.0 ? 0.0 : std::ceil((stop - start) / step);
  if (!(count >= 1.0) || !std::isfinite(count)) {
    throw UsageError(fmt::format("arange: [{}, {}) with step {} is empty (or the step is 0); "
                                 "empty tensors are not supported",
                                 start, stop, step));
  }
  const bool integral = std::trunc(start) == start && std::trunc(step) == step;
  if (!is_floating(dtype) && !integral) {
    throw UsageError(fmt::format("arange: start {} and step {} must be whole numbers for {}; use "
                                 "a float dtype",
                                 start, step, dtype_name(dtype)));
  }
  // 2^63 elements cannot be counted; an integer arange whose positions or values leave the
  // dtype's range would wrap (torch refuses both).
  if (count >= 0x1p63) {
    throw UsageError(fmt::format("arange: [{}, {}) with step {} has {:g} elements, more than a "
                                 "tensor can hold; use a larger step or a smaller range",
                                 start, stop, step, count));
  }
  if (dtype == DType::i32 || dtype == DType::i64) {
    const double top = dtype == DType::i32 ? 0x1p31 : 0x1p63;
    const double last = start + (count - 1.0) * step;
    auto outside = [top](double v) { return v < -top || v >= top; };
    if (outside(start) || outside(last) || (count - 1.0) * std::fabs(step) >= top) {
      throw UsageError(fmt::format("arange: [{}, {}) with step {} reaches {:.0f}, outside the "
                                   "range of {}; use i64 or a float dtype",
                                   start, stop, step, last, dtype_name(dtype)));
    }
  }
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  // Positions in the compute type (f32 for float dtypes), then start + i * step, then the dtype.
  const DType compute = is_floating(dtype) ? DType::f32 : dtype;
  Tensor t(impl_->record({.op = ir::Op::arange, .dtype = compute,
                          .shape = {static_cast<int64_t>(count)}}));
  if (step != 1.0) t = t * scalar(step, compute);
  if (start != 0.0) t = t + scalar(start, compute);
  return compute == dtype ? t : cast(t, dtype);
}

Tensor Context::full(Shape shape, double value, DType dtype) {
  Tensor s = scalar(value, dtype);
  if (shape.empty()) return s;
  return expand(s, std::move(shape));
}

}  // namespace fusejit
