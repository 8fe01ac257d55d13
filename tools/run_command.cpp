// fusejit run [--check] [--check-rows R] [--iters N] [--dim NAME=VALUE]... [--static] TRACE: runs
// a trace on the GPU on fresh random inputs, prints each step's time and achieved bandwidth (or
// GEMM rate) next to the device-to-device copy bandwidth measured in the same run, and with
// --check compares every output with the CPU reference (outputs poisoned with NaN before the
// checked run). --json prints the same as one JSON object on stdout (docs/cli.md has its keys).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/file_io.h"
#include "fusejit/error.h"
#include "ir/shape.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "jit/runtime/cuda_check.h"
#include "jit/api/log.h"
#include "jit/runtime/runtime.h"
#include "jit/runtime/timing.h"
#include "tools/commands.h"

namespace fusejit::tools {

namespace {

struct RunArgs {
  bool check = false;
  int iters = 20;
  int64_t check_rows = 64;
  std::vector<std::string> dims;
  bool specialize = false;  // --static
  bool json = false;
  std::string path;
};

constexpr int64_t kMaxIters = 1000000;
constexpr int64_t kMaxCheckRows = int64_t{1} << 24;

int run(const RunArgs& args) {
  const bool check = args.check;
  const int iters = args.iters;
  const int64_t check_rows = args.check_rows;
  const std::string& path = args.path;
  const std::vector<std::string>& dims = args.dims;
  const bool specialize = args.specialize;

  // A trace with dynamic dims runs at the --dim sizes (default: its examples), through the plan
  // and kernels that serve every size, as an eval at a new size would.
  const auto trace = std::make_shared<const ir::SymbolicGraph>(ir::parse_symbolic_file(path));
  const ir::Bindings values = dim_values(*trace, dims);
  const ir::Graph g = ir::instantiate(trace->graph, trace->symbols, values);
  std::string why;
  const auto info = jit::probe_device(&why);
  if (!info) throw Error("no GPU: " + why + "; `fusejit plan` works without one");
  const Options options = options_from_env();
  auto log = jit::make_logger(options.log_level);
  Context::Stats stats;
  jit::Runtime runtime(*info, options, *log, stats);
  jit::Device& device = runtime.device();

  const uint64_t seed = std::random_device{}();
  const std::vector<ir::HostTensor> host_inputs = jit::random_inputs(g, seed);
  std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
  for (const auto& t : host_inputs) inputs.push_back(runtime.upload(t));

  const auto t0 = std::chrono::steady_clock::now();
  // --static: the trace at these sizes compiled for them alone, to compare with the dynamic run.
  const auto exe = trace->symbols.empty() || specialize
                       ? runtime.executable_for(g)
                       : runtime.executable_for(g, jit::DynamicMatch{trace, values});
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // --json: the same figures as one JSON object on stdout, and nothing else there.
  nlohmann::ordered_json doc;
  const std::string shown_path = cache::display_path(path);
  doc["trace"] = shown_path;
  doc["kernels"] = exe->plan.kernel_count();
  doc["library_calls"] = exe->plan.library_call_count();
  doc["build_ms"] = build_ms;
  if (!args.json) {
    fmt::print("trace {}  ({} kernels, {} library calls; planned and compiled in {:.1f} ms)\n",
               shown_path, exe->plan.kernel_count(), exe->plan.library_call_count(), build_ms);
  }
  if (!trace->symbols.empty() && !specialize) {
    const auto dynamic = std::count_if(exe->steps.begin(), exe->steps.end(),
                                       [](const jit::Step& s) { return s.outer > 0; });
    std::string names;  // which variant or register path each dynamic region launches
    for (const jit::Step& s : exe->steps) {
      if (s.outer > 0) {
        names += fmt::format("{}{}", names.empty() ? "" : ", ", s.kernel->kernel.name);
      }
    }
    nlohmann::ordered_json dims = nlohmann::ordered_json::object();
    for (size_t k = 0; k < trace->symbols.size(); ++k) dims[trace->symbols[k].name] = values[k];
    doc["dynamic_dims"] = dims;
    doc["dynamic_kernels"] = dynamic;
    if (!args.json) {
      fmt::print("dynamic dims {}: {} of {} kernels take the sizes at run time{}\n",
                 dims_text(*trace, values), dynamic, exe->plan.kernel_count(),
                 names.empty() ? "" : " (" + names + ")");
    }
  }

  int failures = 0;
  if (check) {
    // Large traces are checked on sampled indices of an output axis along which they are
    // separable (jit/runtime/check.h).
    const jit::CheckReport report = jit::check_outputs(
        g, host_inputs, jit::run_poisoned(runtime, *exe, g, inputs), check_rows, int64_t{1} << 24);
    if (!args.json) {
      fmt::print("checking {}; the CPU reference took {:.1f} s\n", report.scope,
                 report.reference_seconds);
    }
    nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
    for (size_t i = 0; i < report.errors.size(); ++i) {
      const bool pass = report.errors[i] <= report.bound;
      failures += pass ? 0 : 1;
      const std::string type = ir::type_str(g.node(g.outputs()[i]));
      outputs.push_back(
          {{"output", i}, {"type", type}, {"rel_err", report.errors[i]}, {"pass", pass}});
      if (!args.json) {
        fmt::print("check output {} {}: rel_err {:.3e} (bound {:.0e}, seed {}) {}\n", i, type,
                   report.errors[i], report.bound, seed, pass ? "PASS" : "FAIL");
      }
    }
    doc["check"] = {{"passed", failures == 0},
                    {"scope", report.scope},
                    {"bound", report.bound},
                    {"seed", seed},
                    {"reference_s", report.reference_seconds},
                    {"outputs", outputs}};
  } else {
    doc["check"] = nullptr;  // not asked for (--check)
  }

  // Timing: warm-up, then the median of `iters` runs, per step.
  const jit::ExecutableTiming timing =
      jit::time_executable(*exe, inputs, device, runtime.blas(), iters);
  const double copy_bw = jit::copy_bandwidth(device);
  const int64_t total_bytes = jit::io_bytes(g);
  const double total_ms = timing.total_ms;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (size_t s = 0; s < exe->steps.size(); ++s) {
    const jit::Step& step = exe->steps[s];
    const double ms = timing.step_ms[s];
    const int64_t bytes = jit::step_bytes(*exe, step);
    const std::string label = jit::step_label(*exe, step);
    nlohmann::ordered_json j;
    if (step.kernel) {
      const double bw = static_cast<double>(bytes) / (ms * 1e-3);
      j = {{"kind", std::string(fusion::region_kind_name(step.region->kind))},
           {"kernel", step.kernel->kernel.name},
           {"label", label},
           {"time_ms", ms},
           {"gbps", bw / 1e9},
           {"pct_of_copy", 100.0 * bw / copy_bw}};
      if (step.outer > 0) j["dynamic_outer"] = step.outer;
      if (!args.json) {
        fmt::print("  {:<14} {:<34} {:9.3f} ms  {:7.0f} GB/s  {:5.1f}% of copy{}\n",
                   fusion::region_kind_name(step.region->kind), label, ms, bw / 1e9,
                   100.0 * bw / copy_bw,
                   step.outer > 0 ? fmt::format("  (dynamic, outer {})", step.outer) : "");
      }
    } else if (step.attention) {
      j = {{"kind", "attention"}, {"label", label}, {"time_ms", ms}};
      if (!args.json) fmt::print("  {:<14} {:<34} {:9.3f} ms\n", "attention", label, ms);
    } else {
      const double tflops = jit::step_flops(step) / (ms * 1e-3) / 1e12;
      j = {{"kind", "gemm"}, {"label", label}, {"time_ms", ms}, {"tflops", tflops}};
      if (!args.json) {
        fmt::print("  {:<14} {:<34} {:9.3f} ms  {:7.1f} TFLOP/s\n", "gemm", label, ms, tflops);
      }
    }
    steps.push_back(std::move(j));
  }
  const double bw = static_cast<double>(total_bytes) / (total_ms * 1e-3);
  const char* result = check ? (failures ? "FAIL" : "pass") : "skipped";
  doc["steps"] = std::move(steps);
  doc["total"] = {{"time_ms", total_ms},
                  {"gbps", bw / 1e9},
                  {"copy_gbps", copy_bw / 1e9},
                  {"pct_of_copy", 100.0 * bw / copy_bw},
                  {"iters", iters}};
  doc["result"] = result;
  if (args.json) {
    // Names and labels may hold any byte a trace file holds: replaced, never a parse error.
    fmt::print("{}\n", doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  } else {
    fmt::print(
        "total {:.3f} ms, {:.0f} GB/s of necessary traffic ({:.1f}% of the {:.0f} GB/s "
        "device-to-device copy)\n",
        total_ms, bw / 1e9, 100.0 * bw / copy_bw, copy_bw / 1e9);
    fmt::print("RESULT {} check={} time_ms={:.4f} gbps={:.0f} copy_gbps={:.0f} pct={:.1f}\n",
               shown_path, result, total_ms, bw / 1e9, copy_bw / 1e9, 100.0 * bw / copy_bw);
  }
  return failures ? 1 : 0;
}

}  // namespace

Command add_run_command(CLI::App& tool) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* app = tool.add_subcommand(
      "run",
      "Run a trace on the GPU on fresh random inputs; print each kernel's time and achieved "
      "GB/s or TFLOP/s next to the device-to-device copy bandwidth. Exits 1 when --check finds "
      "an output out of bounds.");
  app->add_flag("--check", args->check,
                "compare every output with the CPU reference (outputs poisoned with NaN first; "
                "large traces on sampled indices of an output axis they are separable along)");
  app->add_option("--check-rows", args->check_rows,
                  "indices sampled along that axis when the trace is large (default 64)")
      ->type_name(number_type("R", 2, kMaxCheckRows))
      ->check(whole_number(2, kMaxCheckRows));
  app->add_option("--iters", args->iters,
                  "timed runs of each step after warm-up; the median is reported (default 20)")
      ->type_name(number_type("N", 1, kMaxIters))
      ->check(whole_number(1, kMaxIters));
  add_dim_option(*app, args->dims);
  app->add_flag("--static", args->specialize,
                "for a trace with dynamic dims: compile it for the --dim sizes alone, to compare "
                "with the kernels that serve every size");
  app->add_flag("--json", args->json,
                "print one JSON object on stdout instead of the table: the trace, the check "
                "(per output rel_err, bound, pass), each step's time_ms and gbps or tflops, and "
                "the total");
  app->add_option("TRACE", args->path, "the trace file")->type_name("FILE")->required();
  return {app, [args] { return run(*args); }};
}

}  // namespace fusejit::tools
