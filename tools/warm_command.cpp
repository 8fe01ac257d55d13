// fusejit warm [--arch sm_90,sm_80] [--cache-dir D] [--jobs N] [--ptx] PATH...: compiles every
// kernel of the traces (files, or folders searched recursively for *.trace) into the disk cache,
// with or without a GPU, so that a run (FUSEJIT_REQUIRE_WARM=1, say) finds them all.
//
// Each trace is planned and its kernels generated exactly as a run would (the same
// FUSEJIT_DISABLE options); kernels shared by several traces are compiled once, all traces'
// kernels on N threads at once (--jobs, -j; default one per hardware thread). Kernels run
// through jit::KernelCache, so concurrent warms into one directory compile each kernel once;
// one whose lock another process holds is put off until the rest are done. --ptx keeps each
// kernel's PTX next to its CUBIN (an arch named compute_XX gives PTX only, for GPUs newer than
// this NVRTC knows).
//
// Output: progress on stderr while it works (tools/progress.h: a bar on a terminal, plain lines
// otherwise); on stdout, one line per trace, then exactly one line
// `compiled: N  cached: M  failed: K` over distinct (kernel, arch) pairs; K also counts traces
// that could not be read or planned. The exit status is 1 when K > 0. A kernel that could not
// be written is a failure; one evicted again because the cache's cap
// (FUSEJIT_CACHE_MAX_MB) is smaller than what was warmed is not: the cap wins, as in any run,
// and a line on stderr says how many went.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/api/log.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/prologue.h"
#include "jit/runtime/device.h"
#include "jit/runtime/dynamic.h"
#include "jit/runtime/kernel_cache.h"
#include "jit/runtime/nvrtc.h"
#include "jit/runtime/parallel.h"
#include "jit/runtime/runtime.h"
#include "templates/arch.h"
#include "templates/kernel.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace fusejit::tools {

namespace {

namespace fs = std::filesystem;

struct WarmArgs {
  std::vector<std::string> archs;
  std::string cache_dir;
  int jobs = 0;  // 0: one per hardware thread
  bool ptx = false;
  std::vector<std::string> paths;
};

// More compile threads than this is a typo, not a machine.
constexpr int64_t kMaxJobs = 1024;

// --arch, else FUSEJIT_ARCH, else the GPU's, else sm_90. Each must be one this NVRTC targets.
std::vector<std::string> target_archs(const WarmArgs& w, const Options& options) {
  std::vector<std::string> archs = w.archs;
  if (archs.empty() && !options.arch.empty()) archs.push_back(options.arch);
  if (archs.empty()) {
    const auto device = jit::probe_device();
    archs.push_back(device ? device->arch() : "sm_90");
  }
  // A bad --arch is a usage error; a bad FUSEJIT_ARCH one of the environment.
  auto bad_arch = [&](const std::string& arch, const std::string& why) {
    if (w.archs.empty()) {
      throw Error(fmt::format("FUSEJIT_ARCH={}: {}", cache::printable(arch), why));
    }
    throw BadArguments(fmt::format("--arch {}: {}", cache::printable(arch), why));
  };
  const std::vector<std::string> supported = jit::supported_archs();
  for (const std::string& arch : archs) {
    templates::Arch parsed;
    try {
      parsed = templates::parse_arch(arch);
    } catch (const Error& e) {
      bad_arch(arch, e.what());
    }
    if (std::find(supported.begin(), supported.end(), parsed.sm()) == supported.end()) {
      std::string list;
      for (const std::string& s : supported) list += (list.empty() ? "" : ", ") + s;
      bad_arch(arch, fmt::format("NVRTC {} cannot target {}; it targets {}",
                                 jit::nvrtc_version_string(), cache::printable(arch), list));
    }
  }
  return archs;
}

// The trace files named: files as given, folders searched recursively for *.trace (sorted).
std::vector<std::string> trace_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->path().extension() == ".trace" && it->is_regular_file(ec))
          found.push_back(it->path().string());
      }
      if (ec) {
        throw UsageError(
            fmt::format("cannot read folder {}: {}", cache::display_path(p), ec.message()));
      }
      if (found.empty()) {
        throw UsageError(fmt::format("no *.trace files under {}", cache::display_path(p)));
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      throw UsageError(fmt::format("{}: no such file or folder", cache::display_path(p)));
    }
  }
  // A trace named twice (a file and its folder, say) is warmed once.
  std::vector<std::string> unique;
  std::vector<fs::path> seen;
  for (const std::string& f : files) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(f, ec);
    if (ec) canonical = f;
    if (std::find(seen.begin(), seen.end(), canonical) != seen.end()) continue;
    seen.push_back(std::move(canonical));
    unique.push_back(f);
  }
  return unique;
}

// One (kernel, arch) to obtain; traces that share it share the job.
struct Job {
  templates::Kernel kernel;
  std::string arch;
  enum class State { pending, compiled, cached, failed } state = State::pending;
  std::string error;
};

struct TraceWork {
  std::string path;
  int kernels = 0;
  int library_calls = 0;
  std::vector<size_t> jobs;
  std::string error;  // could not be read, planned or generated
};

// Counts the jobs done and the traces whose every job is done, for the progress display.
class Tracker {
 public:
  Tracker(const std::vector<TraceWork>& traces, size_t jobs, Progress& progress)
      : traces_of_job_(jobs), remaining_(traces.size()), progress_(progress) {
    for (size_t t = 0; t < traces.size(); ++t) {
      for (size_t j : traces[t].jobs) traces_of_job_[j].push_back(t);
      remaining_[t] = static_cast<int>(traces[t].jobs.size());
      traces_done_ += remaining_[t] == 0;  // failed to plan, or GEMMs only
    }
    progress_.update(traces_done_, 0);
  }
  void job_done(size_t job) {
    std::lock_guard lock(mutex_);
    ++jobs_done_;
    for (size_t t : traces_of_job_[job]) traces_done_ += --remaining_[t] == 0;
    progress_.update(traces_done_, jobs_done_);
  }

 private:
  std::vector<std::vector<size_t>> traces_of_job_;
  std::vector<int> remaining_;  // per trace: its jobs not done yet
  int traces_done_ = 0, jobs_done_ = 0;
  Progress& progress_;
  std::mutex mutex_;
};

// Runs every job on `threads` threads: first without waiting on other processes' locks, then
// the put-off ones, waiting.
void run_jobs(std::vector<Job>& jobs, jit::KernelCache& cache, int threads, Tracker& tracker) {
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (const bool wait : {false, true}) {
    std::mutex deferred_mutex;
    std::vector<size_t> deferred;
    jit::parallel_for(order.size(), threads, [&](size_t n) {
      Job& job = jobs[order[n]];
      try {
        jit::KernelCache::Outcome how{};
        std::optional<jit::CompiledKernel> got;
        if (wait)
          got = cache.get(job.kernel, job.arch, &how);
        else
          got = cache.try_get(job.kernel, job.arch, &how);
        if (!got) {
          std::lock_guard lock(deferred_mutex);
          deferred.push_back(order[n]);
          return;
        }
        job.state = how == jit::KernelCache::Outcome::compiled ? Job::State::compiled
                                                               : Job::State::cached;
      } catch (const std::exception& e) {
        job.state = Job::State::failed;
        job.error = e.what();
      }
      tracker.job_done(order[n]);
    });
    std::sort(deferred.begin(), deferred.end());
    order = std::move(deferred);
  }
}

// The kernels a run of `trace` compiles for `arch` (for a trace with dynamic dims: the kernels
// that serve every size, and the other regions' at its example sizes), and its library calls.
std::vector<templates::Kernel> trace_kernels(const ir::SymbolicGraph& trace,
                                             const Options& options, const std::string& arch,
                                             int& library_calls) {
  // Kernels are sized for their arch's per-SM limits (the table of known archs, which holds what
  // those GPUs report), so each arch gets its own source.
  const jit::BuildOptions build = jit::build_options(options, templates::target_for_arch(arch));
  if (!trace.symbols.empty()) {
    const jit::DynamicPlan dp = jit::plan_dynamic(trace, jit::plan_options(options), build.codegen);
    library_calls = dp.plan.library_call_count();
    return jit::kernels_at(dp, ir::examples(trace.symbols), build.codegen);
  }
  fusion::Plan plan = fusion::make_plan(trace.graph, jit::plan_options(options));
  library_calls = plan.library_call_count();
  // As build_executable: the regions a skinny GEMM computes as its prologue, or at its store,
  // are no kernels.
  const jit::AbsorbedRegions absorbed = jit::absorb_regions(plan, build.codegen, build.allow_tf32);
  const std::map<size_t, fusion::Region>& producers = absorbed.producers;
  const std::map<size_t, fusion::Region>& consumers = absorbed.consumers;
  std::vector<templates::Kernel> kernels;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const fusion::Region& region = plan.regions[i];
    if (region.kind != fusion::RegionKind::gemm) {
      kernels.push_back(templates::generate(plan.graph, region, build.codegen));
      continue;
    }
    // cuBLASLt compiles nothing, but the generated skinny-GEMM kernel takes some calls
    // (FUSEJIT_GEMV): the one a run would build.
    const jit::GemmCall call = jit::describe_gemm_call(plan, region, build.allow_tf32);
    const auto producer = producers.find(i);
    const auto consumer = consumers.find(i);
    if (auto k = jit::gemv_kernel(call, build.codegen, nullptr, &plan.graph,
                                  producer == producers.end() ? nullptr : &producer->second,
                                  consumer == consumers.end() ? nullptr : &consumer->second)) {
      kernels.push_back(std::move(*k));
      --library_calls;  // a kernel now, not cuBLASLt's call
    }
  }
  return kernels;
}

// Plans each trace and generates its kernels as a run would, keeping one job per distinct
// (kernel, arch) in `jobs`; a trace that cannot be read, planned or generated carries its error.
std::vector<TraceWork> plan_traces(const std::vector<std::string>& files,
                                   const std::vector<std::string>& archs, const Options& options,
                                   const jit::KernelCache& cache, std::vector<Job>& jobs) {
  std::map<std::string, size_t> job_by_key;
  std::vector<TraceWork> traces;
  for (const std::string& file : files) {
    TraceWork t{file};
    try {
      const ir::SymbolicGraph trace = ir::parse_symbolic_file(file);
      for (const std::string& arch : archs) {
        std::vector<templates::Kernel> kernels =
            trace_kernels(trace, options, arch, t.library_calls);
        t.kernels = static_cast<int>(kernels.size());
        for (templates::Kernel& k : kernels) {
          auto [it, fresh] = job_by_key.emplace(cache.key(k, arch).hex(), jobs.size());
          if (fresh) jobs.push_back(Job{std::move(k), arch});
          if (std::find(t.jobs.begin(), t.jobs.end(), it->second) == t.jobs.end()) {
            t.jobs.push_back(it->second);
          }
        }
      }
    } catch (const std::exception& e) {
      t.error = e.what();
    }
    traces.push_back(std::move(t));
  }
  return traces;
}

// A kernel that could not be written did not warm. One written (or found) and then evicted
// to keep the cache under its cap did: the cap wins, the least recently used entries go, as in
// any run, and the count of those is reported (returned) instead of failing the warm.
int check_on_disk(std::vector<Job>& jobs, const jit::KernelCache& cache) {
  int evicted = 0;
  for (Job& job : jobs) {
    if (job.state == Job::State::failed) continue;
    const cache::KernelKey key = cache.key(job.kernel, job.arch);
    // A regular file, not just a name: a directory at the entry's path is not warm.
    if (cache.disk()->contains(key)) continue;
    if (!cache.disk()->was_not_stored(key)) {
      ++evicted;
      continue;
    }
    job.state = Job::State::failed;
    job.error = fmt::format("not in {} after warming: writing it failed",
                            cache::display_path(cache.disk()->config().dir));
  }
  return evicted;
}

int warm(const WarmArgs& w) {
  const auto start = std::chrono::steady_clock::now();
  Options options = options_from_env();
  options.require_warm = false;  // compiling is the point
  if (!w.cache_dir.empty()) options.cache_dir = w.cache_dir;
  if (options.cache != CacheMode::on) {
    throw UsageError(
        fmt::format("FUSEJIT_CACHE={} keeps nothing on disk, so there is nothing to "
                    "warm; unset it or set it to on",
                    options.cache == CacheMode::off ? "off" : "memory"));
  }
  const std::vector<std::string> archs = target_archs(w, options);
  const std::vector<std::string> files = trace_files(w.paths);

  auto log = jit::make_logger(options.log_level);
  jit::KernelCache cache(options, *log, {}, w.ptx);
  if (!cache.disk()->writable()) {
    throw UsageError(fmt::format(
        "the cache directory '{}' is {}; name a writable one with "
        "--cache-dir or FUSEJIT_CACHE_DIR",
        cache::display_path(options.cache_dir), cache::access_name(cache.disk()->access())));
  }

  // Plan and generate everything first (fast), then compile what is missing.
  std::vector<Job> jobs;
  const std::vector<TraceWork> traces = plan_traces(files, archs, options, cache, jobs);
  const int threads =
      w.jobs > 0 ? w.jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  Progress progress(stderr, Progress::stderr_is_terminal(), "fusejit warm",
                    static_cast<int>(traces.size()), static_cast<int>(jobs.size()));
  Tracker tracker(traces, jobs.size(), progress);
  run_jobs(jobs, cache, threads, tracker);
  progress.finish();
  const int evicted = check_on_disk(jobs, cache);

  std::string arch_list;
  for (const std::string& a : archs) arch_list += (arch_list.empty() ? "" : ",") + a;
  int failed_traces = 0;
  for (const TraceWork& t : traces) {
    if (!t.error.empty()) {
      ++failed_traces;
      fmt::print("{}: failed: {}\n", cache::display_path(t.path), t.error);
      continue;
    }
    int compiled = 0, cached = 0, failed = 0;
    for (size_t j : t.jobs) {
      compiled += jobs[j].state == Job::State::compiled;
      cached += jobs[j].state == Job::State::cached;
      failed += jobs[j].state == Job::State::failed;
    }
    fmt::print("{}: {} kernel{}, {} library call{}; {}: {} compiled, {} cached, {} failed\n",
               cache::display_path(t.path), t.kernels, t.kernels == 1 ? "" : "s", t.library_calls,
               t.library_calls == 1 ? "" : "s", arch_list, compiled, cached, failed);
  }
  int compiled = 0, cached = 0, failed = failed_traces;
  for (const Job& job : jobs) {
    compiled += job.state == Job::State::compiled;
    cached += job.state == Job::State::cached;
    if (job.state == Job::State::failed) {
      ++failed;
      fmt::print(stderr, "fusejit warm: kernel {} for {} failed: {}\n", job.kernel.name, job.arch,
                 job.error);
    }
  }
  if (evicted > 0) {
    fmt::print(stderr,
               "fusejit warm: {} of the kernels were evicted again to keep {} under its cap "
               "({} MB); raise FUSEJIT_CACHE_MAX_MB to keep them all\n",
               evicted, cache::display_path(options.cache_dir),
               cache.disk()->config().max_bytes >> 20);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{} traces, {} distinct kernels for {} into {} in {:.1f} s ({} threads)\n",
             files.size(), jobs.size() / archs.size(), arch_list,
             cache::display_path(options.cache_dir), seconds, threads);
  fmt::print("compiled: {}  cached: {}  failed: {}\n", compiled, cached, failed);
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace

Command add_warm_command(CLI::App& tool) {
  auto args = std::make_shared<WarmArgs>();
  CLI::App* app = tool.add_subcommand(
      "warm",
      "Compile every kernel of the traces into the disk cache, with or without a GPU, showing "
      "progress on stderr; ends with `compiled: N  cached: M  failed: K` on stdout and exits 1 "
      "when K > 0.");
  app->add_option("--arch", args->archs,
                  "target archs, comma-separated or repeated (default: FUSEJIT_ARCH, else the "
                  "GPU's, else sm_90); compute_XX gives PTX only")
      ->type_name("ARCH[,ARCH...]")
      ->delimiter(',')
      ->allow_extra_args(false);
  app->add_option("--cache-dir", args->cache_dir,
                  "the cache directory to fill (default: FUSEJIT_CACHE_DIR)")
      ->type_name("D");
  app->add_option("-j,--jobs", args->jobs,
                  "compile on N threads (default: one per hardware thread)")
      ->type_name(number_type("N", 1, kMaxJobs))
      ->check(whole_number(1, kMaxJobs));
  app->add_flag("--ptx", args->ptx, "keep each kernel's PTX next to its CUBIN");
  app->add_option("PATH", args->paths, "trace files, or folders searched for *.trace")
      ->type_name("FILE|DIR")
      ->required();
  return {app, [args] { return warm(*args); }};
}

}  // namespace fusejit::tools
