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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// The trace at the sizes it runs at. A trace with dynamic dims runs at the --dim sizes (default:
// its examples), through the plan and kernels that serve every size, as an eval at a new size
// would.
struct Workload {
  std::shared_ptr<const ir::SymbolicGraph> trace;
  ir::Bindings values;  // the dynamic dims' sizes
  ir::Graph graph;      // the trace instantiated at them
};

Workload load_workload(const RunArgs& args) {
  auto trace = std::make_shared<const ir::SymbolicGraph>(ir::parse_symbolic_file(args.path));
  ir::Bindings values = dim_values(*trace, args.dims);
  ir::Graph graph = ir::instantiate(trace->graph, trace->symbols, values);
  return {std::move(trace), std::move(values), std::move(graph)};
}

// Fresh random inputs, on the host (for the CPU reference) and uploaded.
struct Inputs {
  uint64_t seed = 0;
  std::vector<ir::HostTensor> host;
  std::vector<std::shared_ptr<jit::DeviceBuffer>> device;
};

Inputs random_inputs(jit::Runtime& runtime, const ir::Graph& g) {
  Inputs in;
  in.seed = std::random_device{}();
  in.host = jit::random_inputs(g, in.seed);
  for (const auto& t : in.host) in.device.push_back(runtime.upload(t));
  return in;
}

// What a run reports. --json: the figures as one JSON object on stdout, and nothing else there;
// otherwise a table printed as the run goes. The document is filled either way.
struct Report {
  bool json = false;
  nlohmann::ordered_json doc;

  // A line of the table (none under --json).
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (!json) fmt::print(format, std::forward<Args>(args)...);
  }
};

// For a trace with dynamic dims: its sizes, and which kernels (a variant or the register path
// per dynamic region) take them at run time.
void report_dynamic(const Workload& w, const jit::Executable& exe, Report& report) {
  const auto dynamic = std::count_if(exe.steps.begin(), exe.steps.end(),
                                     [](const jit::Step& s) { return s.outer > 0; });
  std::string names;
  for (const jit::Step& s : exe.steps) {
    if (s.outer > 0) names += fmt::format("{}{}", names.empty() ? "" : ", ", s.kernel->kernel.name);
  }
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (size_t k = 0; k < w.trace->symbols.size(); ++k) dims[w.trace->symbols[k].name] = w.values[k];
  report.doc["dynamic_dims"] = dims;
  report.doc["dynamic_kernels"] = dynamic;
  report.print("dynamic dims {}: {} of {} kernels take the sizes at run time{}\n",
               dims_text(*w.trace, w.values), dynamic, exe.plan.kernel_count(),
               names.empty() ? "" : " (" + names + ")");
}

// --check: every output against the CPU reference, from a run with the outputs poisoned with
// NaN first. Large traces are checked on sampled indices of an output axis along which they are
// separable (jit/runtime/check.h). Returns how many outputs are out of bounds.
int report_check(jit::Runtime& runtime, const jit::Executable& exe, const ir::Graph& g,
                 const Inputs& inputs, int64_t check_rows, Report& report) {
  const jit::CheckReport check =
      jit::check_outputs(g, inputs.host, jit::run_poisoned(runtime, exe, g, inputs.device),
                         check_rows, int64_t{1} << 24);
  report.print("checking {}; the CPU reference took {:.1f} s\n", check.scope,
               check.reference_seconds);
  int failures = 0;
  nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < check.errors.size(); ++i) {
    const bool pass = check.errors[i] <= check.bound;
    failures += pass ? 0 : 1;
    const std::string type = ir::type_str(g.node(g.outputs()[i]));
    outputs.push_back(
        {{"output", i}, {"type", type}, {"rel_err", check.errors[i]}, {"pass", pass}});
    report.print("check output {} {}: rel_err {:.3e} (bound {:.0e}, seed {}) {}\n", i, type,
                 check.errors[i], check.bound, inputs.seed, pass ? "PASS" : "FAIL");
  }
  report.doc["check"] = {{"passed", failures == 0},
                         {"scope", check.scope},
                         {"bound", check.bound},
                         {"seed", inputs.seed},
                         {"reference_s", check.reference_seconds},
                         {"outputs", outputs}};
  return failures;
}

// One step's row: a generated kernel's bandwidth against the copy's, a GEMM's rate, or an
// attention call's time alone.
nlohmann::ordered_json step_row(const jit::Executable& exe, const jit::Step& step, double ms,
                                double copy_bw, const Report& report) {
  const std::string label = jit::step_label(exe, step);
  if (step.kernel) {
    const double bw = static_cast<double>(jit::step_bytes(exe, step)) / (ms * 1e-3);
    const std::string_view kind = fusion::region_kind_name(step.region->kind);
    nlohmann::ordered_json j = {{"kind", std::string(kind)},
                                {"kernel", step.kernel->kernel.name},
                                {"label", label},
                                {"time_ms", ms},
                                {"gbps", bw / 1e9},
                                {"pct_of_copy", 100.0 * bw / copy_bw}};
    if (step.outer > 0) j["dynamic_outer"] = step.outer;
    report.print("  {:<14} {:<34} {:9.3f} ms  {:7.0f} GB/s  {:5.1f}% of copy{}\n", kind, label, ms,
                 bw / 1e9, 100.0 * bw / copy_bw,
                 step.outer > 0 ? fmt::format("  (dynamic, outer {})", step.outer) : "");
    return j;
  }
  if (step.attention) {
    report.print("  {:<14} {:<34} {:9.3f} ms\n", "attention", label, ms);
    return {{"kind", "attention"}, {"label", label}, {"time_ms", ms}};
  }
  const double tflops = jit::step_flops(step) / (ms * 1e-3) / 1e12;
  report.print("  {:<14} {:<34} {:9.3f} ms  {:7.1f} TFLOP/s\n", "gemm", label, ms, tflops);
  return {{"kind", "gemm"}, {"label", label}, {"time_ms", ms}, {"tflops", tflops}};
}

struct Totals {
  double ms = 0.0;       // the whole executable, median
  double bw = 0.0;       // its necessary traffic (io_bytes) per second
  double copy_bw = 0.0;  // the device-to-device copy's, measured in the same run
};

// Timing: warm-up, then the median of `iters` runs, per step and in all.
Totals report_steps(jit::Runtime& runtime, const jit::Executable& exe, const ir::Graph& g,
                    const Inputs& inputs, int iters, Report& report) {
  const jit::ExecutableTiming timing =
      jit::time_executable(exe, inputs.device, runtime.device(), runtime.blas(), iters);
  const double copy_bw = jit::copy_bandwidth(runtime.device());
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (size_t s = 0; s < exe.steps.size(); ++s) {
    steps.push_back(step_row(exe, exe.steps[s], timing.step_ms[s], copy_bw, report));
  }
  const auto bytes = static_cast<double>(jit::io_bytes(g));
  const double bw = bytes / (timing.total_ms * 1e-3);
  if (timing.input_sets > 1) {
    report.print(
        "timed over {} copies of the inputs in turn: a run's {:.1f} MB would otherwise "
        "be read partly from the {:.0f} MB L2 the run before filled\n",
        timing.input_sets, bytes / 1e6,
        static_cast<double>(runtime.device().info().l2_bytes) / 1e6);
  }
  report.doc["steps"] = std::move(steps);
  report.doc["total"] = {
      {"time_ms", timing.total_ms},          {"gbps", bw / 1e9}, {"copy_gbps", copy_bw / 1e9},
      {"pct_of_copy", 100.0 * bw / copy_bw}, {"iters", iters},   {"input_sets", timing.input_sets}};
  return {timing.total_ms, bw, copy_bw};
}

// The last lines: the total and the RESULT line, or the JSON document.
void finish(const Report& report, const std::string& shown_path, const Totals& t,
            const char* result) {
  if (report.json) {
    // Names and labels may hold any byte a trace file holds: replaced, never a parse error.
    fmt::print("{}\n",
               report.doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    return;
  }
  fmt::print(
      "total {:.3f} ms, {:.0f} GB/s of necessary traffic ({:.1f}% of the {:.0f} GB/s "
      "device-to-device copy)\n",
      t.ms, t.bw / 1e9, 100.0 * t.bw / t.copy_bw, t.copy_bw / 1e9);
  fmt::print("RESULT {} check={} time_ms={:.4f} gbps={:.0f} copy_gbps={:.0f} pct={:.1f}\n",
             shown_path, result, t.ms, t.bw / 1e9, t.copy_bw / 1e9, 100.0 * t.bw / t.copy_bw);
}

int run(const RunArgs& args) {
  const Workload w = load_workload(args);
  std::string why;
  const auto info = jit::probe_device(&why);
  if (!info) throw Error("no GPU: " + why + "; `fusejit plan` works without one");
  const Options options = options_from_env();
  auto log = jit::make_logger(options.log_level);
  Context::Stats stats;
  jit::Runtime runtime(*info, options, *log, stats);
  const Inputs inputs = random_inputs(runtime, w.graph);

  const auto t0 = std::chrono::steady_clock::now();
  // --static: the trace at these sizes compiled for them alone, to compare with the dynamic run.
  const bool dynamic = !w.trace->symbols.empty() && !args.specialize;
  const auto exe = dynamic ? runtime.executable_for(w.graph, jit::DynamicMatch{w.trace, w.values})
                           : runtime.executable_for(w.graph);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  Report report{.json = args.json};
  const std::string shown_path = cache::display_path(args.path);
  report.doc["trace"] = shown_path;
  report.doc["kernels"] = exe->plan.kernel_count();
  report.doc["library_calls"] = exe->plan.library_call_count();
  report.doc["build_ms"] = build_ms;
  report.print("trace {}  ({} kernels, {} library calls; planned and compiled in {:.1f} ms)\n",
               shown_path, exe->plan.kernel_count(), exe->plan.library_call_count(), build_ms);
  if (dynamic) report_dynamic(w, *exe, report);

  int failures = 0;
  if (args.check) {
    failures = report_check(runtime, *exe, w.graph, inputs, args.check_rows, report);
  } else {
    report.doc["check"] = nullptr;  // not asked for (--check)
  }
  const Totals totals = report_steps(runtime, *exe, w.graph, inputs, args.iters, report);
  const char* result = args.check ? (failures ? "FAIL" : "pass") : "skipped";
  report.doc["result"] = result;
  finish(report, shown_path, totals, result);
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
