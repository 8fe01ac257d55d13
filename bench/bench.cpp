// fusejit_bench [--torch FILE] TRACE...: times each trace's whole evaluation on the GPU (after
// warm-up, median of many runs, CUDA events) and prints it against its floor:
//   memory-bound: each graph input read once and each output written once, over the
//                 device-to-device copy bandwidth measured in this run;
//   GEMMs:        2*M*N*K per GEMM over a plain cuBLASLt GEMM's rate of that shape, measured
//                 in this run, plus the bytes the other regions must move.
// With --torch FILE (from bench/torch_bench.py run in the same device call), it also prints the
// ratio to PyTorch eager and torch.compile.
//
// fusejit_bench --overhead [--torch FILE]: the host time of recording and of a cached eval on
// tiny tensors instead (bench/overhead.cpp), next to bench/torch_overhead.py's figures.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "jit/api/log.h"
#include "jit/runtime/runtime.h"
#include "jit/runtime/timing.h"
#include "overhead.h"

using namespace fusejit;

namespace {

std::string stem(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  return name.substr(0, name.rfind('.'));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> traces;
    bench::TorchFigures torch;
    std::string torch_file;
    bool overhead = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--torch" && i + 1 < argc) torch_file = argv[++i];
      else if (a == "--overhead") overhead = true;
      else traces.push_back(a);
    }
    if (overhead) return bench::run_overhead(torch_file);
    if (!torch_file.empty()) torch = bench::read_torch(torch_file);
    std::string why;
    const auto info = jit::probe_device(&why);
    if (!info) {
      std::fprintf(stderr, "fusejit_bench: no GPU (%s)\n", why.c_str());
      return 1;
    }
    const Options options = Options::from_env();
    auto log = jit::make_logger(options.log_level);
    Context::Stats stats;
    jit::Runtime rt(*info, options, *log, stats);
    const double copy_bw = jit::copy_bandwidth(rt.device());
    std::map<std::tuple<int, int64_t, int64_t, int64_t>, double> gemm_rates;

    fmt::print("{:<28} {:>10} {:>10} {:>7} {:>10} {:>10}\n", "workload", "ms", "floor_ms",
               "x_floor", "x_eager", "x_compile");
    for (const std::string& path : traces) {
      const ir::Graph g = ir::parse_file(path);
      std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
      for (const auto& t : jit::random_inputs(g, 1234)) inputs.push_back(rt.upload(t));
      const auto exe = rt.executable_for(g);
      const jit::ExecutableTiming timing =
          jit::time_executable(*exe, inputs, rt.device(), rt.blas(), 20);

      double floor_ms = 0.0;
      int64_t gemm_free_bytes = jit::io_bytes(g);
      for (const jit::Step& step : exe->steps) {
        if (step.kernel || step.attention) continue;
        const jit::GemmProblem& p = step.gemm.problem;
        const auto key = std::tuple(static_cast<int>(p.dtype), p.m, p.n, p.k);
        if (!gemm_rates.count(key)) {
          gemm_rates[key] = jit::gemm_rate(rt.device(), rt.blas(), p.dtype, p.m, p.n, p.k);
        }
        floor_ms += jit::step_flops(step) / gemm_rates[key] * 1e3;
      }
      if (floor_ms > 0.0) {
        // GEMM traces: the GEMMs' floor plus what the generated kernels must move.
        gemm_free_bytes = 0;
        for (const jit::Step& step : exe->steps) {
          if (step.kernel) gemm_free_bytes += jit::step_bytes(*exe, step);
        }
      }
      floor_ms += static_cast<double>(gemm_free_bytes) / copy_bw * 1e3;
      const std::string name = stem(path);
      std::string eager = "-", compiled = "-";
      if (auto it = torch.find(name); it != torch.end()) {
        eager = fmt::format("{:.2f}", timing.total_ms / it->second.first);
        compiled = fmt::format("{:.2f}", timing.total_ms / it->second.second);
      }
      fmt::print("{:<28} {:>10.3f} {:>10.3f} {:>7.2f} {:>10} {:>10}\n", name, timing.total_ms,
                 floor_ms, timing.total_ms / floor_ms, eager, compiled);
      std::fflush(stdout);
    }
    fmt::print("copy bandwidth {:.0f} GB/s; x_eager/x_compile < 1 means fusejit is faster\n",
               copy_bw / 1e9);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "fusejit_bench: %s\n", e.what());
    return 1;
  }
}
