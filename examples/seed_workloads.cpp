// The main example: runs every seed workload through fusejit's lazy tensor API on random data
// and shows what fusion did with it (fusejit/profile.h).
//
//   On a GPU: per workload, the generated kernels and cuBLASLt calls fused and unfused (the same
//   trace under FUSEJIT_DISABLE=fusion,epilogue), the time of each, the speedup, the bandwidth
//   against the device-to-device copy (TFLOP/s for GEMM workloads), and the error against the
//   CPU reference; then each region of the fused plan.
//   Without a GPU: eval runs the CPU reference; per workload, a checksum of the result and the
//   plan a GPU would run, fused and unfused, with a pointer to `fusejit plan`.
//
//   seed_workloads                     n = 4096 on a GPU, 256 without; GEMMs at n/2
//   seed_workloads --size N            memory-bound workloads N x N, GEMMs M = N = K = N/2
//   seed_workloads --write-traces DIR  write DIR/<workload>_<dtype>.trace at full size
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <fusejit/fusejit.h>

#include "workloads.h"

namespace fj = fusejit;

namespace {

int write_traces(const std::string& dir) {
  fj::Options options = fj::Options::from_env();
  for (const auto& w : fj::examples::seed_workloads()) {
    for (fj::DType dtype : fj::examples::workload_dtypes(w)) {
      fj::Context ctx(options);
      std::vector<fj::Tensor> in;
      for (const fj::Shape& s : w.input_shapes(fj::examples::full_size(w))) {
        in.push_back(ctx.placeholder(s, dtype));
      }
      const std::string path =
          dir + "/" + w.name + "_" + std::string(fj::dtype_name(dtype)) + ".trace";
      std::ofstream out(path);
      out << ctx.trace_text(w.build(in));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

// One workload in one dtype at one size.
struct Case {
  fj::examples::Workload workload;
  fj::DType dtype;
  int64_t size;  // n of Workload::input_shapes
  std::string name() const { return workload.name; }
  std::string dtype_name() const { return std::string(fj::dtype_name(dtype)); }
};

// Normal(0, 1) values for the inputs: one pool drawn once, each input a window of it at its own
// offset (drawing 16M fresh values per input would take longer than all the GPU work).
class RandomPool {
 public:
  explicit RandomPool(int64_t largest) {
    std::mt19937 rng(42);
    std::normal_distribution<double> normal(0.0, 1.0);
    values_.resize(static_cast<size_t>(largest + kStride * kInputs));
    for (double& v : values_) v = normal(rng);
  }
  std::vector<double> take(const fj::Shape& shape, size_t input) const {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const auto begin = values_.begin() + static_cast<std::ptrdiff_t>(kStride * (input % kInputs));
    return std::vector<double>(begin, begin + count);
  }

 private:
  static constexpr int64_t kStride = 1021, kInputs = 8;
  std::vector<double> values_;
};

// Every workload in each of its dtypes; GEMM workloads at half the size.
std::vector<Case> make_cases(int64_t n) {
  std::vector<Case> cases;
  for (const auto& w : fj::examples::seed_workloads()) {
    for (fj::DType dtype : fj::examples::workload_dtypes(w)) {
      cases.push_back(Case{w, dtype, w.gemm ? std::max<int64_t>(n / 2, 1) : n});
    }
  }
  return cases;
}

// Records the case in `ctx` on data from `pool`, or with no pool on placeholders (enough to
// plan it).
std::vector<fj::Tensor> record(fj::Context& ctx, const Case& c, const RandomPool* pool) {
  std::vector<fj::Tensor> in;
  const std::vector<fj::Shape> shapes = c.workload.input_shapes(c.size);
  for (size_t k = 0; k < shapes.size(); ++k) {
    in.push_back(pool ? ctx.from_vector(pool->take(shapes[k], k), shapes[k], c.dtype)
                      : ctx.placeholder(shapes[k], c.dtype));
  }
  return c.workload.build(in);
}

// "1+0": generated kernels + cuBLASLt calls.
std::string counts(const fj::PlanSummary& plan) {
  return std::to_string(plan.kernels) + "+" + std::to_string(plan.library_calls);
}

void print_regions(const fj::PlanSummary& plan) {
  for (const std::string& r : plan.regions) std::printf("    %s\n", r.c_str());
}

// The options of the unfused run: every op its own kernel, nothing folded into cuBLASLt.
fj::Options unfused_options() {
  fj::Options options = fj::Options::from_env();
  options.disable.fusion = true;
  options.disable.epilogue = true;
  return options;
}

// Where the fusejit tool sits next to this example in a build tree ("fusejit" elsewhere).
std::string fusejit_tool(const char* argv0) {
  const std::filesystem::path tool =
      std::filesystem::path(argv0).parent_path().parent_path() / "tools" / "fusejit";
  return std::filesystem::exists(tool) ? tool.string() : "fusejit";
}

void print_pointers(const std::string& tool, bool gpu) {
  const std::string traces = FUSEJIT_EXAMPLE_TRACES;
  std::printf("\nThe full plan of a workload, with the reason for every cut (no GPU needed):\n"
              "  %s plan %s/softmax_f32.trace\n",
              tool.c_str(), traces.c_str());
  std::printf("%s holds every workload at full size; `plan --json` is the machine-readable "
              "form.\n",
              traces.c_str());
  if (gpu) {
    std::printf("Per-kernel times of a trace: %s run --check TRACE. ", tool.c_str());
  } else {
    std::printf("On a GPU this example times every workload fused and unfused. ");
  }
  std::printf("FUSEJIT_DUMP=plan,decisions,cuda\nwrites each plan and its generated CUDA C to "
              "./fusejit_dump when it runs on a GPU.\n");
}

// Without a GPU: the CPU reference's result, and the plans a GPU would run.
int run_on_cpu(fj::Context& ctx, const std::vector<Case>& cases, const RandomPool& pool,
               int64_t n, const std::string& tool) {
  std::printf("fusejit %s: no GPU found, so eval runs the CPU reference interpreter (results, "
              "no timing).\n",
              FUSEJIT_VERSION_STRING);
  std::printf("Workloads at %lld x %lld, GEMMs at %lld^3. fused/unfused: the kernels + cuBLASLt "
              "calls a GPU would run,\nwith fusion and with FUSEJIT_DISABLE=fusion,epilogue; "
              "then each fused region.\n\n",
              static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(std::max<int64_t>(n / 2, 1)));
  std::printf("%-16s %-5s %-14s %-6s %s\n", "workload", "dtype", "checksum", "fused", "unfused");
  fj::Context unfused_ctx(unfused_options());
  int failures = 0;
  for (const Case& c : cases) {
    const std::vector<fj::Tensor> out = record(ctx, c, &pool);
    const fj::PlanSummary plan = fj::plan_summary(out);
    const fj::PlanSummary unfused = fj::plan_summary(record(unfused_ctx, c, nullptr));
    fj::eval(out);
    double checksum = 0.0;
    for (const fj::Tensor& t : out) {
      for (double v : t.to_host()) checksum += v;
    }
    const bool finite = std::isfinite(checksum);
    failures += finite ? 0 : 1;
    std::printf("%-16s %-5s %+.6e  %-6s %s%s\n", c.name().c_str(), c.dtype_name().c_str(),
                checksum, counts(plan).c_str(), counts(unfused).c_str(),
                finite ? "" : "  (non-finite values!)");
    print_regions(plan);
  }
  print_pointers(tool, false);
  return failures ? 1 : 0;
}

// What the GPU run found for one case.
struct GpuRow {
  fj::PlanSummary plan, unfused_plan;
  fj::TraceTiming time, unfused_time;
  fj::ReferenceCheck check;
};

GpuRow profile_on_gpu(fj::Context& ctx, fj::Context& unfused_ctx, const Case& c,
                      const RandomPool& pool) {
  const std::vector<fj::Tensor> out = record(ctx, c, &pool);
  const std::vector<fj::Tensor> unfused = record(unfused_ctx, c, &pool);
  GpuRow row{fj::plan_summary(out), fj::plan_summary(unfused), fj::time_trace(out),
             fj::time_trace(unfused), fj::check_against_reference(out)};
  // Evaluated as a program would, so that each Context starts the next case on an empty trace.
  fj::eval(out);
  fj::eval(unfused);
  return row;
}

// "3650 GB/s  87% of copy" for memory-bound work, "610 TFLOP/s" with GEMMs.
std::string throughput(const fj::TraceTiming& t, double copy_bytes_per_second) {
  char text[64];
  const double seconds = t.ms * 1e-3;
  if (t.flops > 0.0) {
    std::snprintf(text, sizeof text, "%.0f TFLOP/s", t.flops / seconds / 1e12);
  } else {
    const double bw = static_cast<double>(t.bytes) / seconds;
    std::snprintf(text, sizeof text, "%.0f GB/s %3.0f%% of copy", bw / 1e9,
                  100.0 * bw / copy_bytes_per_second);
  }
  return text;
}

// On a GPU: every case fused and unfused, timed, and checked against the CPU reference.
int run_on_gpu(fj::Context& ctx, const std::vector<Case>& cases, const RandomPool& pool,
               int64_t n, const std::string& tool) {
  const fj::DeviceSummary device = fj::describe_device(ctx);
  std::printf("fusejit %s on %s (%s, %d SMs): device-to-device copy %.0f GB/s\n",
              FUSEJIT_VERSION_STRING, device.name.c_str(), device.arch.c_str(), device.sm_count,
              device.copy_bytes_per_second / 1e9);
  std::printf("Workloads at %lld x %lld, GEMMs at %lld^3; times are medians of 20 runs after "
              "warm-up.\nfused/unfused: generated kernels + cuBLASLt calls, with fusion and with "
              "FUSEJIT_DISABLE=fusion,epilogue;\nthroughput: the bytes that must move (each input "
              "read once, each output written once)\nover the fused time; error: relative, "
              "against the CPU reference. Then each fused region.\n\n",
              static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(std::max<int64_t>(n / 2, 1)));
  std::printf("%-16s %-5s %-6s %-7s %9s %10s %8s  %-24s %s\n", "workload", "dtype", "fused",
              "unfused", "fused ms", "unfused ms", "speedup", "throughput", "error");
  fj::Context unfused_ctx(unfused_options());
  int failures = 0;
  for (const Case& c : cases) {
    const GpuRow r = profile_on_gpu(ctx, unfused_ctx, c, pool);
    failures += r.check.passed() ? 0 : 1;
    std::printf("%-16s %-5s %-6s %-7s %9.3f %10.3f %7.2fx  %-24s %.1e %s\n", c.name().c_str(),
                c.dtype_name().c_str(), counts(r.plan).c_str(), counts(r.unfused_plan).c_str(),
                r.time.ms, r.unfused_time.ms, r.unfused_time.ms / r.time.ms,
                throughput(r.time, device.copy_bytes_per_second).c_str(), r.check.error,
                r.check.passed() ? "ok" : "FAIL");
    print_regions(r.plan);
    std::fflush(stdout);
  }
  const fj::Context::Stats a = ctx.stats(), b = unfused_ctx.stats();
  std::printf("\nNVRTC compiled %lld kernels; %lld came from the kernel cache "
              "(FUSEJIT_CACHE_DIR).\n",
              static_cast<long long>(a.kernels_compiled + b.kernels_compiled),
              static_cast<long long>(a.kernel_cache_hits + b.kernel_cache_hits));
  if (failures) std::printf("%d workloads FAILED the check against the CPU reference\n", failures);
  print_pointers(tool, true);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t n = 0;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--write-traces") && i + 1 < argc) return write_traces(argv[++i]);
      if (!std::strcmp(argv[i], "--size") && i + 1 < argc) {
        n = std::max<int64_t>(std::stoll(argv[++i]), 2);
      } else {
        std::fprintf(stderr, "usage: %s [--size N] [--write-traces DIR]\n", argv[0]);
        return 2;
      }
    }
    fj::Context ctx;
    if (n == 0) n = ctx.has_gpu() ? 4096 : 256;
    const RandomPool pool(n * n);
    const std::vector<Case> cases = make_cases(n);
    const std::string tool = fusejit_tool(argv[0]);
    return ctx.has_gpu() ? run_on_gpu(ctx, cases, pool, n, tool)
                         : run_on_cpu(ctx, cases, pool, n, tool);
  } catch (const fj::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
