// fusejit_bench --overhead: the host time fusejit adds around tiny kernels, where launch
// overhead is all there is (the targets: recording <= 100 ns per op, a cached 10-op eval
// <= 5 us). Figures are medians of wall-clock time on the calling thread; the GPU work is waited
// for between iterations, untimed, so that only what the host spends in the call is counted:
//   record      recording a 10-op elementwise chain on 1,024 floats, per op
//   eval        a cached eval of that chain (one fused kernel)
//   eval N      a cached eval of an N-op chain planned one kernel per op (FUSEJIT_DISABLE=fusion),
//               launched one by one and replayed as a CUDA graph
// With no GPU only the recording and the CPU side of the trace memo (hash, compare, copy of the
// recorded trace) are measured. With --torch FILE (bench/torch_overhead.py's output, run in the
// same device call) PyTorch eager and torch.compile figures are printed next to them.
#include "overhead.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "fusejit/fusejit.h"
#include "ir/hash.h"
#include "jit/api/context_impl.h"

namespace fusejit::bench {

namespace {

constexpr int kIters = 2000;
constexpr int64_t kElems = 1024;

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds of `timed`, with `untimed` run after each call.
double median_us(const std::function<void()>& timed, const std::function<void()>& untimed) {
  std::vector<double> us;
  for (int i = 0; i < kIters + kIters / 10; ++i) {
    const auto t0 = Clock::now();
    timed();
    const auto t1 = Clock::now();
    untimed();
    if (i >= kIters / 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return median(us);
}

// The chain of bench/torch_overhead.py: `ops` ops, alternating unary ops and a binary op with x.
Tensor chain(const Tensor& x, int ops) {
  Tensor y = x;
  for (int i = 0; i < ops; ++i) {
    switch (i % 10) {
      case 0: y = exp(y); break;
      case 1: y = y * x; break;
      case 2: y = tanh(y); break;
      case 3: y = y + x; break;
      case 4: y = sigmoid(y); break;
      case 5: y = y - x; break;
      case 6: y = relu(y); break;
      case 7: y = y * x; break;
      case 8: y = sin(y); break;
      default: y = y + x; break;
    }
  }
  return y;
}

Tensor input(Context& ctx) {
  return ctx.from_vector(std::vector<float>(static_cast<size_t>(kElems), 0.5f), {kElems});
}

struct Row {
  std::string name;
  double us = 0.0;
  std::string unit = "us";
};

// Recording, per op, and (on a GPU) the cached eval of the 10-op chain.
void measure_chain(std::vector<Row>& rows) {
  Context ctx;
  const Tensor x = input(ctx);
  Tensor y;
  const double record = median_us([&] { y = chain(x, 10); }, [&] {
    y.eval();
    y = Tensor();
  });
  rows.push_back({"record 10-op chain, per op", record * 1e3 / 10, "ns"});
  // The same ops recorded ten chains at a time between evals: what an op costs once the eval
  // before it (on a GPU, the driver's launch path) no longer has the caches.
  std::vector<Tensor> ys(10);
  const double record_batch = median_us([&] {
    for (Tensor& t : ys) t = chain(x, 10);
  }, [&] {
    for (size_t k = 0; k + 1 < ys.size(); ++k) ys[k] = Tensor();
    ys.back().eval();
    ys.back() = Tensor();
  });
  rows.push_back({"record 100 ops between evals, per op", record_batch * 1e3 / 100, "ns"});
  if (!ctx.has_gpu()) return;
  y = chain(x, 10);  // the recording loop above left y empty
  const double eval = median_us([&] { y.eval(); }, [&] {
    ctx.synchronize();
    y = chain(x, 10);
  });
  rows.push_back({"eval 10-op chain (1 kernel)", eval});
}

// A cached eval of an `ops`-op chain planned one kernel per op, graphs on or off.
double unfused_eval_us(int ops, bool graphs) {
  Options options = Options::from_env();
  options.disable.fusion = true;
  options.disable.graphs = !graphs;
  options.graph_min_launches = 1;
  Context ctx(options);
  const Tensor x = input(ctx);
  Tensor y = chain(x, ops);
  return median_us([&] { y.eval(); }, [&] {
    ctx.synchronize();
    y = chain(x, ops);
  });
}

// The CPU side of a memo hit on the recorded 10-op chain: what eval spends before launching.
void measure_memo_pieces(std::vector<Row>& rows) {
  Options options = Options::from_env();
  Context ctx(options);
  const Tensor x = input(ctx);
  const Tensor y = chain(x, 10);
  ir::Graph g = ctx.impl().trace;
  g.set_outputs({y.impl()->node});
  const ir::Graph memo = g;
  uint64_t sink = 0;
  auto time = [&](const char* name, const std::function<void()>& fn) {
    rows.push_back({name, median_us(fn, [] {}) * 1e3, "ns"});
  };
  time("  hash (kept while recording)", [&] { sink += ir::structural_hash(g); });
  time("  hash (recomputed)", [&] { sink += ir::recompute_structural_hash(g); });
  time("  compare with the memo's trace", [&] { sink += g == memo ? 1 : 0; });
  time("  copy the trace", [&] { sink += ir::Graph(g).size(); });
  if (sink == 42) fmt::print("\n");  // keeps the work observable
}

}  // namespace

TorchFigures read_torch(const std::string& path) {
  std::map<std::string, std::pair<double, double>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string name;
    double eager = 0, compiled = 0;
    if (s >> name >> eager >> compiled) out[name] = {eager, compiled};
  }
  return out;
}

int run_overhead(const std::string& torch_file) {
  std::vector<Row> rows;
  measure_chain(rows);
  measure_memo_pieces(rows);
  Context probe;
  if (probe.has_gpu()) {
    for (int ops : {2, 3, 10}) {
      rows.push_back({fmt::format("eval {}-op chain, {} kernels, launched", ops, ops),
                      unfused_eval_us(ops, false)});
      rows.push_back({fmt::format("eval {}-op chain, {} kernels, graph", ops, ops),
                      unfused_eval_us(ops, true)});
    }
  }
  const auto torch = torch_file.empty() ? TorchFigures{} : read_torch(torch_file);
  fmt::print("{:<40} {:>10}\n", "host time (median)", "fusejit");
  for (const Row& r : rows) fmt::print("{:<40} {:>7.2f} {}\n", r.name, r.us, r.unit);
  for (const auto& [name, t] : torch) {
    fmt::print("torch {:<34} eager {:.2f} us, compile {:.2f} us\n", name, t.first, t.second);
  }
  return 0;
}

}  // namespace fusejit::bench
