// fusejit run [--check] [--iters N] TRACE: runs a trace on the GPU on fresh random inputs,
// prints each step's time and achieved bandwidth (or GEMM rate) next to the device-to-device
// copy bandwidth measured in the same run, and with --check compares every output with the CPU
// reference (outputs poisoned with NaN before the checked run).
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/interp.h"
#include "ir/shape.h"
#include "ir/text.h"
#include "jit/check.h"
#include "jit/cuda_check.h"
#include "jit/log.h"
#include "jit/runtime.h"
#include "jit/timing.h"
#include "tools/commands.h"

namespace fusejit::tools {


int run_command(const Args& args) {
  bool check = false;
  int iters = 20;
  int64_t check_rows = 64;
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--check") check = true;
    else if (args[i] == "--iters" && i + 1 < args.size()) iters = std::max(1, std::stoi(args[++i]));
    else if (args[i] == "--check-rows" && i + 1 < args.size()) check_rows = std::max(2, std::stoi(args[++i]));
    else if (!args[i].empty() && args[i][0] == '-') throw UsageError("run: unknown option " + args[i] + "; usage: fusejit run [--check] [--iters N] TRACE");
    else if (path.empty()) path = args[i];
    else throw UsageError("run: one trace at a time");
  }
  if (path.empty()) throw UsageError("run: no trace given; usage: fusejit run [--check] TRACE");

  const ir::Graph g = ir::parse_file(path);
  std::string why;
  const auto info = jit::probe_device(&why);
  if (!info) throw UsageError("run: no GPU: " + why + "; `fusejit plan` works without one");
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
  const auto exe = runtime.executable_for(g);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  fmt::print("trace {}  ({} kernels, {} library calls; planned and compiled in {:.1f} ms)\n", path,
             exe->plan.kernel_count(), exe->plan.library_call_count(), build_ms);

  int failures = 0;
  if (check) {
    jit::RunOptions poison{.poison_outputs = true};
    const auto outs = jit::run_executable(*exe, inputs, device, runtime.blas(), poison);
    device.synchronize();
    std::vector<ir::HostTensor> got;
    for (ir::NodeId id : g.outputs()) {
      ir::HostTensor t;
      t.dtype = g.node(id).dtype;
      t.shape = g.node(id).shape;
      runtime.download(*outs[got.size()], t);
      got.push_back(std::move(t));
    }
    // Large traces are checked on sampled indices of an output axis along which they are
    // separable: rows of a row-wise trace, columns of a column reduction, rows of a transpose's
    // result (the reference on all of a 16384x16384 trace or an 8192^3 GEMM would take minutes).
    int64_t elements = 0;
    bool has_gemm = false;
    for (const ir::Node& n : g.nodes()) {
      elements = std::max(elements, ir::numel(n.shape));
      has_gemm = has_gemm || n.op == ir::Op::matmul;
    }
    std::optional<jit::RowSlice> slice;
    if (elements > (int64_t{1} << 24) || has_gemm) slice = jit::slice_rows(g, check_rows);
    std::vector<ir::HostTensor> ref;
    const auto ref_start = std::chrono::steady_clock::now();
    if (slice) {
      ref = ir::interpret(slice->graph, jit::slice_inputs(*slice, host_inputs));
      for (auto& t : got) t = jit::take_slice(t, slice->output_axis, slice->rows);
      fmt::print("checking {} sampled indices of axis {} (of {})", slice->rows.size(),
                 slice->output_axis,
                 g.node(g.outputs()[0]).shape[static_cast<size_t>(slice->output_axis)]);
    } else {
      ref = ir::interpret(g, host_inputs);
      fmt::print("checking every element");
    }
    fmt::print("; the CPU reference took {:.1f} s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - ref_start).count());
    const double bound = jit::error_bound(g);
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = jit::relative_error(got[i], ref[i]);
      const bool pass = err <= bound;
      failures += pass ? 0 : 1;
      fmt::print("check output {} {}: rel_err {:.3e} (bound {:.0e}, seed {}) {}\n", i,
                 ir::type_str(g.node(g.outputs()[i])), err, bound, seed, pass ? "PASS" : "FAIL");
    }
  }

  // Timing: warm-up, then the median of `iters` runs, per step.
  const jit::ExecutableTiming timing =
      jit::time_executable(*exe, inputs, device, runtime.blas(), iters);
  const double copy_bw = jit::copy_bandwidth(device);
  // The floor: each graph input read once, each output written once.
  int64_t total_bytes = 0;
  for (ir::NodeId id : g.inputs()) total_bytes += static_cast<int64_t>(ir::numel(g.node(id).shape)) * dtype_size(g.node(id).dtype);
  for (ir::NodeId id : g.outputs()) total_bytes += static_cast<int64_t>(ir::numel(g.node(id).shape)) * dtype_size(g.node(id).dtype);
  const double total_ms = timing.total_ms;
  for (size_t s = 0; s < exe->steps.size(); ++s) {
    const jit::Step& step = exe->steps[s];
    const double ms = timing.step_ms[s];
    const int64_t bytes = jit::step_bytes(*exe, step);
    if (step.kernel) {
      const double bw = static_cast<double>(bytes) / (ms * 1e-3);
      fmt::print("  {:<14} {:<34} {:9.3f} ms  {:7.0f} GB/s  {:5.1f}% of copy\n",
                 fusion::region_kind_name(step.region->kind), jit::step_label(*exe, step), ms,
                 bw / 1e9, 100.0 * bw / copy_bw);
    } else {
      fmt::print("  {:<14} {:<34} {:9.3f} ms  {:7.1f} TFLOP/s\n", "gemm",
                 jit::step_label(*exe, step), ms, jit::step_flops(step) / (ms * 1e-3) / 1e12);
    }
  }
  const double bw = static_cast<double>(total_bytes) / (total_ms * 1e-3);
  fmt::print("total {:.3f} ms, {:.0f} GB/s of necessary traffic ({:.1f}% of the {:.0f} GB/s device-to-device copy)"
             "\n",
             total_ms, bw / 1e9, 100.0 * bw / copy_bw, copy_bw / 1e9);
  fmt::print("RESULT {} check={} time_ms={:.4f} gbps={:.0f} copy_gbps={:.0f} pct={:.1f}\n", path,
             check ? (failures ? "FAIL" : "pass") : "skipped", total_ms, bw / 1e9, copy_bw / 1e9,
             100.0 * bw / copy_bw);
  return failures ? 1 : 0;
}

}  // namespace fusejit::tools
