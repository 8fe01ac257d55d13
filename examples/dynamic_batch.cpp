// Dynamic shapes: a server-like loop that evaluates the same program (an RMS norm with a
// residual, then a SiLU gate) at a new batch size on every request, and shows that one plan and
// one kernel serve them all (docs/dynamic-shapes.md).
//
//   dynamic_batch                   batch sizes 1..60 (automatic: the batch dim becomes dynamic
//                                   once it is seen taking a second value)
//   dynamic_batch --mark            the batch dim marked dynamic (Context::mark_dynamic) from the
//                                   first request on; sizes 2..61
//   dynamic_batch --hidden H        hidden size (default 1024)
//
// It prints what the Context did (plans built, kernels compiled, memo hits, executables made
// from the dynamic plan) and the largest error against a plain host computation. Run with
// FUSEJIT_RECORD_DIR=DIR and then `fusejit warm DIR`: the recorded traces spell the batch dim
// symbolically, so warming compiles the kernel that serves every size once.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fusejit/fusejit.h>

namespace fj = fusejit;

namespace {

// rms_norm(x) * w + x, then x * sigmoid(x): what the program computes, on the host.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w,
                              int64_t rows, int64_t hidden) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) ss += double(x[r * hidden + h]) * x[r * hidden + h];
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-6);
    for (int64_t h = 0; h < hidden; ++h) {
      const double v = x[r * hidden + h] * inv * w[h] + x[r * hidden + h];
      out[r * hidden + h] = v / (1.0 + std::exp(-v));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool mark = false;
  int64_t hidden = 1024;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mark") == 0) mark = true;
    else if (std::strcmp(argv[i], "--hidden") == 0 && i + 1 < argc) hidden = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: dynamic_batch [--mark] [--hidden H]\n");
      return 2;
    }
  }
  try {
    fj::Context ctx;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> w(static_cast<size_t>(hidden));
    for (float& v : w) v = normal(rng);
    const fj::Tensor weight = ctx.from_vector(w, {hidden});

    double worst = 0;
    const int64_t first = mark ? 2 : 1;
    for (int64_t batch = first; batch < first + 60; ++batch) {
      std::vector<float> x(static_cast<size_t>(batch * hidden));
      for (float& v : x) v = normal(rng);
      const fj::Tensor input = ctx.from_vector(x, {batch, hidden});
      if (mark) ctx.mark_dynamic(input, 0, "B");
      const fj::Tensor y = fj::rms_norm(input, weight) + input;
      const std::vector<double> got = fj::silu(y).to_host();
      const std::vector<double> want = reference(x, w, batch, hidden);
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
      }
    }
    const fj::Context::Stats s = ctx.stats();
    std::printf("%s: 60 batch sizes from %lld, hidden %lld (%s)\n",
                ctx.has_gpu() ? "GPU" : "no GPU, the CPU reference", static_cast<long long>(first),
                static_cast<long long>(hidden), mark ? "batch dim marked dynamic" : "automatic");
    std::printf("evals: %lld  plans built: %lld  kernels compiled: %lld  kernel cache hits: %lld  "
                "memo hits: %lld  dynamic instances: %lld\n",
                static_cast<long long>(s.traces_evaluated), static_cast<long long>(s.plans_built),
                static_cast<long long>(s.kernels_compiled),
                static_cast<long long>(s.kernel_cache_hits),
                static_cast<long long>(s.trace_memo_hits),
                static_cast<long long>(s.dynamic_instances));
    std::printf("largest error against the host computation: %.2e\n", worst);
    return worst < 1e-4 ? 0 : 1;
  } catch (const fj::Error& e) {
    std::fprintf(stderr, "dynamic_batch: %s\n", e.what());
    return 1;
  }
}
