// fusejit_compile_bench [--arch sm_90] [--repeat R] [--jobs N] [--ptx] [--per-kernel]
//                       [--nvrtc-option OPT]... TRACE...:
// NVRTC compile latency with a cold cache, on the CPU (no GPU, no kernel cache at all: every
// kernel goes straight to jit::compile with the options the runtime uses).
//
// Each trace is planned and its kernels generated for the arch as `fusejit warm` does; kernels
// shared by several traces are compiled once. Each distinct kernel is compiled R times (default
// 3) on one thread and its fastest time kept, measured twice: as this thread's CPU time (what
// NVRTC costs, steady on a shared machine) and as wall time. Then, with --jobs N > 1, every
// kernel once more on N threads at a time (jit::parallel_for, as a plan or `fusejit warm`
// compiles): the wall time of the whole set.
//
// Output: with --per-kernel, one line per kernel; then one summary line per measure:
//   cpu ms per kernel: median 41.2  max 88.0  total 901.3  (19 kernels, 1 thread)
// Benchmarks report; they do not fail. bench/RESULTS.md ("Compile latency") keeps the figures.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/runtime/nvrtc.h"
#include "jit/runtime/parallel.h"
#include "jit/runtime/runtime.h"

using namespace fusejit;

namespace {

constexpr const char* kUsage =
    "usage: fusejit_compile_bench [--arch sm_90] [--repeat R] [--jobs N] [--ptx] [--per-kernel] "
    "[--nvrtc-option OPT]... TRACE...";

struct BenchArgs {
  std::string arch = "sm_90";
  int repeat = 3;
  int jobs = 1;
  bool ptx = false;
  bool per_kernel = false;
  std::vector<std::string> extra;  // NVRTC options added to fusejit's own, to measure them
  std::vector<std::string> traces;
};

int positive(const std::string& option, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 6 || std::stoi(text) < 1) {
    throw UsageError(fmt::format("{} {}: expected a whole number, at least 1", option, text));
  }
  return std::stoi(text);
}

BenchArgs parse_args(int argc, char** argv) {
  BenchArgs b;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value; {}", a, kUsage));
      return argv[++i];
    };
    if (a == "--arch") b.arch = value();
    else if (a == "--repeat") b.repeat = positive(a, value());
    else if (a == "--jobs" || a == "-j") b.jobs = positive(a, value());
    else if (a == "--ptx") b.ptx = true;
    else if (a == "--per-kernel") b.per_kernel = true;
    else if (a == "--nvrtc-option") b.extra.push_back(value());
    else if (!a.empty() && a[0] == '-') throw UsageError(fmt::format("unknown option {}; {}", a, kUsage));
    else b.traces.push_back(a);
  }
  if (b.traces.empty()) throw UsageError(fmt::format("no traces given; {}", kUsage));
  jit::compile_flags(b.arch);  // throws for a malformed arch
  return b;
}

// The distinct kernels of the traces, generated for `arch` as a run on that arch would.
std::vector<templates::Kernel> distinct_kernels(const BenchArgs& b, const Options& options) {
  std::vector<templates::Kernel> kernels;
  std::map<std::string, bool> seen;
  const jit::BuildOptions build = jit::build_options(options, templates::target_for_arch(b.arch));
  for (const std::string& path : b.traces) {
    const fusion::Plan plan = fusion::make_plan(ir::parse_file(path), jit::plan_options(options));
    for (const fusion::Region& region : plan.regions) {
      if (region.kind == fusion::RegionKind::gemm) continue;
      templates::Kernel k = templates::generate(plan.graph, region, build.codegen);
      if (seen.emplace(k.source, true).second) kernels.push_back(std::move(k));
    }
  }
  return kernels;
}

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double wall_ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

struct Timing {
  double cpu_ms = 0, wall_ms = 0;
};

// The fastest of `repeat` compiles, by CPU time and by wall time (each its own minimum).
Timing time_compile(const templates::Kernel& k, const BenchArgs& b) {
  Timing best{1e30, 1e30};
  for (int r = 0; r < b.repeat; ++r) {
    const double cpu0 = thread_cpu_ms();
    const auto wall0 = std::chrono::steady_clock::now();
    jit::compile(k, b.arch, {.ptx = b.ptx, .extra = b.extra});
    best.wall_ms = std::min(best.wall_ms, wall_ms_since(wall0));
    best.cpu_ms = std::min(best.cpu_ms, thread_cpu_ms() - cpu0);
  }
  return best;
}

void print_summary(const char* what, std::vector<double> ms, const std::string& tail) {
  std::sort(ms.begin(), ms.end());
  double total = 0;
  for (double m : ms) total += m;
  const double median = ms.size() % 2 ? ms[ms.size() / 2]
                                      : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  fmt::print("{} ms per kernel: median {:.1f}  max {:.1f}  total {:.1f}  ({})\n", what, median,
             ms.back(), total, tail);
}

int run(const BenchArgs& b) {
  const Options options = Options::from_env();
  const std::vector<templates::Kernel> kernels = distinct_kernels(b, options);
  if (kernels.empty()) throw UsageError("the traces have no generated kernels (only GEMMs)");
  fmt::print("{} traces, {} distinct kernels, {} ({}), NVRTC {}, best of {}\n", b.traces.size(),
             kernels.size(), b.arch, b.ptx ? "CUBIN and PTX" : "CUBIN", jit::nvrtc_version_string(),
             b.repeat);
  std::vector<double> cpu, wall;
  for (const templates::Kernel& k : kernels) {
    const Timing t = time_compile(k, b);
    cpu.push_back(t.cpu_ms);
    wall.push_back(t.wall_ms);
    if (b.per_kernel) {
      fmt::print("  {:<40} {:>6.1f} KB source  cpu {:>7.1f} ms  wall {:>7.1f} ms\n", k.name,
                 static_cast<double>(k.source.size()) / 1024.0, t.cpu_ms, t.wall_ms);
    }
  }
  const std::string count = fmt::format("{} kernels, 1 thread", kernels.size());
  print_summary("cpu ", cpu, count);
  print_summary("wall", wall, count);
  if (b.jobs > 1) {
    const auto start = std::chrono::steady_clock::now();
    jit::parallel_for(kernels.size(), b.jobs, [&](size_t i) {
      jit::compile(kernels[i], b.arch, {.ptx = b.ptx, .extra = b.extra});
    });
    fmt::print("wall ms for all {} kernels on {} threads: {:.1f}\n", kernels.size(), b.jobs,
               wall_ms_since(start));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusejit_compile_bench: error: %s\n", e.what());
    return 1;
  }
}
