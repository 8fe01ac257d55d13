// jit/runtime: see runtime.h.
#include "jit/runtime/runtime.h"

#include <algorithm>
#include <chrono>
#include <string_view>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "ir/hash.h"
#include "ir/shape.h"
#include "jit/runtime/cuda_check.h"
#include "jit/runtime/dump.h"
#include "jit/runtime/nvrtc.h"
#include "jit/runtime/parallel.h"
#include "templates/arch.h"

namespace fusejit::jit {

fusion::PlanOptions plan_options(const Options& options) {
  fusion::PlanOptions p;
  p.passes = !options.disable.passes;
  p.fusion = !options.disable.fusion;
  p.epilogue = !options.disable.epilogue;
  p.sweeps = !options.disable.sweeps;
  p.attention = options.attention != AttentionMode::off;
  return p;
}

BuildOptions build_options(const Options& options, const templates::Target& target) {
  BuildOptions b;
  b.codegen.vectorize = !options.disable.vectorize;
  b.codegen.rounding = options.rounding;
  b.codegen.gemv = options.gemv;
  b.codegen.gemv_prologue = options.gemv_prologue;
  b.codegen.gemv_epilogue = options.gemv_epilogue;
  b.codegen.gemv_ring = options.gemv_ring;
  b.codegen.grid_dependency = options.pdl == PdlMode::all && target.cc >= 90;
  b.codegen.gemv_grid_dependency = options.pdl == PdlMode::gemv && target.cc >= 90;
  b.codegen.target = target;
  b.codegen.keep_kir = options.dump.kir;
  b.allow_tf32 = options.allow_tf32;
  b.compile_threads = default_compile_threads();
  return b;
}

Runtime::Runtime(const DeviceInfo& info, const Options& options, spdlog::logger& log,
                 Context::Stats& stats, cudaStream_t stream)
    : options_(options),
      log_(log),
      stats_(stats),
      kernel_cache_(options, log),
      device_(std::make_shared<Device>(info, stream)),
      kernels_(static_cast<size_t>(options.kernels_max)),
      memo_(static_cast<size_t>(options.memo_max)),
      dynamic_(static_cast<size_t>(options.memo_max)) {
  const DeviceGuard guard(info.ordinal);
  blas_ = std::make_unique<Blas>(*device_);
  target_arch_ = info.arch();
  const std::vector<std::string> known = supported_archs();
  if (std::find(known.begin(), known.end(), target_arch_) == known.end() && !known.empty()) {
    target_arch_ = templates::parse_arch(known.back()).compute();
    log_.warn("NVRTC {} does not know {}; kernels are compiled to PTX for {} and JIT-compiled by "
              "the driver",
              nvrtc_version_string(), info.arch(), target_arch_);
  }
  log_.info("running on {} ({}, {} SMs)", info.name, info.arch(), info.sm_count);
}

Runtime::~Runtime() {
  const DeviceGuard guard(device_->info().ordinal);
  memo_.clear();
  dynamic_.clear();
  kernels_.clear();
  blas_.reset();
  device_.reset();
}

std::shared_ptr<LoadedKernel> Runtime::find_loaded(const templates::Kernel& k) {
  if (const std::shared_ptr<LoadedKernel>* kept = kernels_.get(k.source)) {
    ++stats_.kernel_cache_hits;
    log_.debug("kernel {}: already loaded in this Context", k.name);
    return *kept;
  }
  return nullptr;
}

namespace {

// Host time past which an eval that planned nothing still gets a FUSEJIT_LOG=debug line: a
// cached eval costs microseconds per step launched (bench/RESULTS.md, "Host overhead").
constexpr double kSlowEvalMs = 5.0;

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

ObtainedKernel Runtime::obtain(const templates::Kernel& k) {
  // Memory, then the disk store, then NVRTC (FUSEJIT_REQUIRE_WARM makes that last step an
  // error). A GPU newer than this NVRTC knows gets PTX for the newest arch NVRTC does know,
  // which the driver compiles for the GPU when the module loads. Runs on compile threads: it
  // touches only the (thread-safe) kernel cache.
  ObtainedKernel o;
  const auto start = std::chrono::steady_clock::now();
  o.compiled = kernel_cache_.get(k, target_arch_, &o.outcome);
  o.obtain_ms = milliseconds_since(start);
  return o;
}

std::shared_ptr<LoadedKernel> Runtime::load(const templates::Kernel& k, const ObtainedKernel& o) {
  const CompiledKernel& compiled = o.compiled;
  if (o.outcome == KernelCache::Outcome::compiled) ++stats_.kernels_compiled;
  else ++stats_.kernel_cache_hits;
  const auto start = std::chrono::steady_clock::now();
  auto loaded = std::make_shared<LoadedKernel>();
  loaded->kernel = k;
  loaded->device = device_;
  const Driver& drv = device_->driver();
  const std::string& image = compiled.cubin.empty() ? compiled.ptx : compiled.cubin;
  FUSEJIT_DRIVER(drv, module_load_data, &loaded->module, image.data());
  FUSEJIT_DRIVER(drv, module_get_function, &loaded->function, loaded->module, k.name.c_str());
  if (k.shared_bytes > 48 * 1024) {
    FUSEJIT_DRIVER(drv, func_set_attribute, loaded->function,
                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.shared_bytes);
  }
  // Where each kernel came from and what it cost: the memory or disk cache, or NVRTC.
  log_.debug("kernel {}: {} ({}) in {:.2f} ms, loaded in {:.2f} ms", k.name,
             o.outcome == KernelCache::Outcome::compiled ? "NVRTC" : "kernel cache",
             outcome_name(o.outcome), o.obtain_ms, milliseconds_since(start));
  const int64_t evicted = kernels_.evictions();
  kernels_.insert(k.source, loaded);
  stats_.kernel_evictions += kernels_.evictions() - evicted;
  return loaded;
}

std::shared_ptr<const Executable> Runtime::executable_for(const ir::Graph& g,
                                                         const DynamicSource& source) {
  const DeviceGuard guard(device_->info().ordinal);  // modules load into the current device
  const bool memo = !options_.disable.memo;
  const uint64_t hash = memo ? ir::structural_hash(g) : 0;
  if (memo) {
    if (std::shared_ptr<const Executable> kept = memo_.lookup(g, hash)) {
      ++stats_.trace_memo_hits;
      return kept;
    }
  }
  if (source.dims && !options_.disable.dynamic) {
    static const std::vector<ir::DynamicAxis> kNoMarks;
    if (auto match = source.dims->match(g, source.marks ? *source.marks : kNoMarks, log_)) {
      return executable_for(g, *match);
    }
  }
  // The host time of a plan the memo did not have, by phase (the kernels' own lines say where
  // each came from): what a process's first evals cost before any kernel runs.
  const auto start = std::chrono::steady_clock::now();
  fusion::Plan plan = fusion::make_plan(g, plan_options(options_));
  ++stats_.plans_built;
  const double planned_ms = milliseconds_since(start);
  const bool attention = std::any_of(plan.regions.begin(), plan.regions.end(), [](const auto& r) {
    return r.kind == fusion::RegionKind::attention;
  });
  const BuildOptions build = build_options_here(attention);
  const double setup_ms = milliseconds_since(start) - planned_ms;
  const int64_t cudnn_plans = build.cudnn ? build.cudnn->plans_made : 0;
  auto exe = std::make_shared<const Executable>(build_executable(std::move(plan), loader(), build));
  log_.debug(
      "plan of {} nodes, {} steps: planned in {:.2f} ms, libraries set up in {:.2f} ms, "
      "built (kernels loaded, library calls planned{}) in {:.2f} ms",
      g.size(), exe->steps.size(), planned_ms, setup_ms,
      build.cudnn ? fmt::format(", {} cuDNN attention graphs planned",
                                build.cudnn->plans_made - cudnn_plans)
                  : std::string(),
      milliseconds_since(start) - planned_ms - setup_ms);
  return remember(g, hash, std::move(exe));
}

BuildOptions Runtime::build_options_here(bool attention) {
  BuildOptions b = build_options(options_, device_->info().target());
  // cuDNN is loaded (hundreds of ms) only once a plan has an attention region to give it.
  if (options_.attention != AttentionMode::cudnn || !attention) return b;
  if (!cudnn_tried_) {
    cudnn_tried_ = true;
    const auto start = std::chrono::steady_clock::now();
    cudnn::CudnnLibrary lib = cudnn::load_cudnn(options_.cudnn_path);
    if (!lib) {
      log_.info("attention: no cuDNN ({}); the generated kernel runs attention", lib.unavailable);
    } else {
      try {
        auto session = std::make_shared<CudnnSession>();
        session->handle = std::make_unique<cudnn::CudnnHandle>(lib.api);
        session->api = std::move(lib.api);
        cudnn_ = std::move(session);
        log_.info("attention: cuDNN {} from {} (loaded, with a handle, in {:.0f} ms)",
                  cudnn_->api->version_text(), cudnn_->api->path, milliseconds_since(start));
      } catch (const Error& e) {
        log_.warn("attention: no cuDNN handle ({}); the generated kernel runs attention", e.what());
      }
    }
  }
  b.cudnn = cudnn_;
  return b;
}

std::shared_ptr<const Executable> Runtime::executable_for(const ir::Graph& g,
                                                         const DynamicMatch& match) {
  const DeviceGuard guard(device_->info().ordinal);
  const BuildOptions build = build_options_here(false);  // dynamic plans fuse no attention
  DynamicEntry* entry = dynamic_.get(match.trace.get());
  if (!entry) {
    auto dyn = std::make_shared<DynamicExecutable>(
        plan_dynamic(*match.trace, plan_options(options_), build.codegen));
    ++stats_.plans_built;
    entry = &dynamic_.insert(match.trace.get(), DynamicEntry{match.trace, std::move(dyn)});
  }
  ++stats_.dynamic_instances;
  auto exe = std::make_shared<const Executable>(
      instantiate_executable(*entry->executable, match.values, loader(), build));
  return remember(g, options_.disable.memo ? 0 : ir::structural_hash(g), std::move(exe));
}

KernelLoader Runtime::loader() {
  return KernelLoader{
      [this](const templates::Kernel& k) { return find_loaded(k); },
      [this](const templates::Kernel& k) { return obtain(k); },
      [this](const templates::Kernel& k, const ObtainedKernel& o) { return load(k, o); }};
}

std::shared_ptr<const Executable> Runtime::remember(const ir::Graph& g, uint64_t hash,
                                                    std::shared_ptr<const Executable> exe) {
  dump_eval(options_, g, *exe, log_);
  if (!options_.disable.memo) stats_.trace_memo_evictions += memo_.insert(g, hash, exe);
  return exe;
}

std::vector<std::shared_ptr<DeviceBuffer>> Runtime::run(
    const ir::Graph& g, const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
    const std::vector<std::shared_ptr<DeviceBuffer>>& into, const DynamicSource& source) {
  const DeviceGuard guard(device_->info().ordinal);
  device_->run_releases();
  const auto start = std::chrono::steady_clock::now();
  const int64_t plans = stats_.plans_built, blas_plans = blas_->plans_cached();
  const std::shared_ptr<const Executable> exe = executable_for(g, source);
  const double found_ms = milliseconds_since(start);
  // Kernels and GEMM plans assume kBufferAlignment; caller memory may have less (a view at an
  // offset): read a copy of it.
  const bool aligned = std::all_of(inputs.begin(), inputs.end(),
                                   [](const auto& buf) { return is_aligned(buf->data()); });
  std::vector<std::shared_ptr<DeviceBuffer>> copies;
  if (!aligned) {
    copies = inputs;
    for (auto& buf : copies) {
      if (is_aligned(buf->data())) continue;
      ++stats_.inputs_realigned;
      auto copy = device_->allocate(buf->bytes());
      FUSEJIT_CUDA(cudaMemcpyAsync(copy->data(), buf->data(), buf->bytes(),
                                   cudaMemcpyDeviceToDevice, device_->stream()));
      buf = std::move(copy);
    }
  }
  RunOptions options;
  if (!into.empty()) options.outputs = &into;
  options.outputs_copied = &stats_.outputs_copied;
  // A graph is built once per Executable: worth it only when the memo keeps the Executable.
  if (!options_.disable.graphs && !options_.disable.memo) {
    options.graph_min_launches = options_.graph_min_launches;
  }
  options.graph_launches = &stats_.graph_launches;
  options.scratch = &scratch_;
  std::vector<std::shared_ptr<DeviceBuffer>> outs =
      run_executable(*exe, aligned ? inputs : copies, *device_, *blas_, options);
  if (!aligned) write_back(g, inputs, copies, outs);
  // An eval that planned, or that cost the host more than a cached one should, says where its
  // host time went: getting its executable (the memo, or a plan: its own line above) and
  // queueing the steps (the first run of a plan also picks cuBLASLt's algorithms and makes the
  // driver load kernels on their first launch).
  const double total_ms = milliseconds_since(start);
  if (stats_.plans_built != plans || total_ms >= kSlowEvalMs) {
    log_.debug(
        "eval of {} nodes, {} steps: {:.2f} ms of host time: {:.2f} ms to its executable ({}), "
        "{:.2f} ms queueing the steps ({} cuBLASLt algorithms chosen)",
        g.size(), exe->steps.size(), total_ms, found_ms,
        stats_.plans_built != plans ? "a plan built" : "no plan built", total_ms - found_ms,
        blas_->plans_cached() - blas_plans);
  }
  return outs;
}

std::unique_ptr<ReplayRun> Runtime::replay(const ir::Graph& g,
                                           const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                                           const DynamicSource& source) {
  const DeviceGuard guard(device_->info().ordinal);
  device_->run_releases();
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!is_aligned(inputs[k]->data())) {
      throw UsageError(fmt::format(
          "Replay: input %{} ({}) is caller memory at {}, which is not {}-byte aligned; a replay "
          "reads its inputs in place at every run: wrap an aligned buffer, or copy it in with "
          "from_host",
          g.inputs()[k], ir::type_str(g.node(g.inputs()[k])), inputs[k]->data(), kBufferAlignment));
    }
  }
  return std::make_unique<ReplayRun>(executable_for(g, source), inputs, *device_);
}

void Runtime::run_replay(ReplayRun& replay) {
  const DeviceGuard guard(device_->info().ordinal);
  ++stats_.replay_runs;
  if (replay.run(*device_, *blas_)) ++stats_.replay_graph_launches;
}

void Runtime::write_back(const ir::Graph& g,
                         const std::vector<std::shared_ptr<DeviceBuffer>>& inputs,
                         const std::vector<std::shared_ptr<DeviceBuffer>>& copies,
                         std::vector<std::shared_ptr<DeviceBuffer>>& outs) {
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const std::optional<size_t> k = g.written_input(i);
    if (!k || *k >= inputs.size() || copies[*k] == inputs[*k] || outs[i] != copies[*k]) continue;
    FUSEJIT_CUDA(cudaMemcpyAsync(inputs[*k]->data(), copies[*k]->data(), inputs[*k]->bytes(),
                                 cudaMemcpyDeviceToDevice, device_->stream()));
    outs[i] = inputs[*k];
  }
}

void Runtime::copy(void* dst, const void* src, size_t bytes) {
  const DeviceGuard guard(device_->info().ordinal);
  FUSEJIT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, device_->stream()));
}

void Runtime::require_device_pointer(const void* ptr, std::string_view what) {
  const DeviceGuard guard(device_->info().ordinal);
  cudaPointerAttributes attr{};
  FUSEJIT_CUDA(cudaPointerGetAttributes(&attr, ptr));
  const int ordinal = device_->info().ordinal;
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice) {
    throw UsageError(fmt::format("{}: {} is host memory, but this Context runs on GPU {}: pass "
                                 "device memory of that GPU (cudaMalloc, a framework's CUDA "
                                 "tensor), or copy host data in with from_host",
                                 what, ptr, ordinal));
  }
  if (attr.device != ordinal) {
    throw UsageError(fmt::format("{}: {} is memory of GPU {}, but this Context runs on GPU {}; "
                                 "create the Context with Placement{{.device = {}}}",
                                 what, ptr, attr.device, ordinal, attr.device));
  }
}

std::shared_ptr<DeviceBuffer> Runtime::upload(const ir::HostTensor& host) {
  const DeviceGuard guard(device_->info().ordinal);
  auto buf = device_->allocate(host.bytes.size());
  FUSEJIT_CUDA(cudaMemcpyAsync(buf->data(), host.bytes.data(), host.bytes.size(),
                               cudaMemcpyHostToDevice, device_->stream()));
  return buf;
}

void Runtime::download(const DeviceBuffer& buffer, ir::HostTensor& host) {
  const DeviceGuard guard(device_->info().ordinal);
  host.bytes.resize(static_cast<size_t>(ir::numel(host.shape)) *
                    static_cast<size_t>(dtype_size(host.dtype)));
  FUSEJIT_CUDA(cudaMemcpyAsync(host.bytes.data(), buffer.data(), host.bytes.size(),
                               cudaMemcpyDeviceToHost, device_->stream()));
  device_->synchronize();
}

}  // namespace fusejit::jit
