// The Runtime's bounded tables on a GPU: a trace forgotten by the memo (FUSEJIT_MEMO_MAX) is
// planned again while its kernel still comes from the kernel table, and kernels forgotten by the
// kernel tables (FUSEJIT_KERNELS_MAX) are unloaded safely, even with their launches still queued.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;

namespace {

// Distinct traces of one shape (so that no dim turns dynamic): op(x * 2 + 1), and their meaning.
struct Unary {
  Tensor (*lazy)(const Tensor&);
  double (*exact)(double);
};
const std::vector<Unary>& ops() {
  static const std::vector<Unary> all = {
      {[](const Tensor& x) { return relu(x); }, [](double t) { return std::max(0.0, t); }},
      {[](const Tensor& x) { return tanh(x); }, [](double t) { return std::tanh(t); }},
      {[](const Tensor& x) { return sigmoid(x); }, [](double t) { return 1 / (1 + std::exp(-t)); }},
      {[](const Tensor& x) { return exp(x); }, [](double t) { return std::exp(t); }}};
  return all;
}

Tensor lazy(size_t op, const Tensor& x) { return ops()[op].lazy(x * 2.0 + 1.0); }

std::vector<double> inputs(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i % 17) / 8.0 - 1.0;
  return v;
}

void check_result(size_t op, const std::vector<double>& in, const std::vector<double>& out) {
  INFO("op " << op);
  REQUIRE(out.size() == in.size());
  for (size_t i : {size_t{0}, size_t{5}, in.size() / 2, in.size() - 1}) {
    CHECK(out[i] == Approx(ops()[op].exact(in[i] * 2.0 + 1.0)).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("a trace forgotten by the capped memo is planned again, its kernel reused",
          "[gpu][jit][memo]") {
  FUSEJIT_REQUIRE_GPU();
  Context ctx(Options::parse(
      {{"FUSEJIT_LOG", "error"}, {"FUSEJIT_CACHE", "memory"}, {"FUSEJIT_MEMO_MAX", "2"}}));
  const std::vector<double> in = inputs(64 * 256);
  auto eval_op = [&](size_t op) {
    const auto x = ctx.from_vector(in, {64, 256});
    check_result(op, in, lazy(op, x).to_host());
  };
  for (size_t op : {0, 1, 2}) eval_op(op);
  Context::Stats s = ctx.stats();
  CHECK(s.plans_built == 3);
  CHECK(s.kernels_compiled == 3);
  CHECK(s.trace_memo_evictions == 1);  // op 0 made room for op 2
  CHECK(s.kernel_evictions == 0);

  eval_op(2);  // still kept
  CHECK(ctx.stats().trace_memo_hits == s.trace_memo_hits + 1);
  CHECK(ctx.stats().plans_built == 3);

  eval_op(0);  // forgotten: planned again, its kernel still loaded
  const Context::Stats t = ctx.stats();
  CHECK(t.plans_built == 4);
  CHECK(t.trace_memo_hits == s.trace_memo_hits + 1);
  CHECK(t.kernels_compiled == 3);
  CHECK(t.kernel_cache_hits == s.kernel_cache_hits + 1);
  CHECK(t.trace_memo_evictions == 2);  // op 1 made room for op 0
}

TEST_CASE("kernels forgotten by the capped tables unload safely and come back from disk",
          "[gpu][jit][memo]") {
  FUSEJIT_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fusejit-memo-gpu-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"},
                              {"FUSEJIT_CACHE_DIR", dir.string()},
                              {"FUSEJIT_MEMO_MAX", "1"},
                              {"FUSEJIT_KERNELS_MAX", "1"}}));
  // Large enough that launches are still queued when the next eval forgets their kernel.
  const std::vector<double> in = inputs(size_t{1} << 22);
  const auto x = ctx.from_vector(in, {1024, 4096});
  std::vector<Tensor> results;
  for (int round = 0; round < 3; ++round) {
    for (size_t op = 0; op < ops().size(); ++op) results.push_back(lazy(op, x).eval());
  }
  for (size_t i = 0; i < results.size(); ++i) {
    check_result(i % ops().size(), in, results[i].to_host());
  }
  const Context::Stats s = ctx.stats();
  CHECK(s.kernels_compiled == static_cast<int64_t>(ops().size()));  // later rounds: from disk
  CHECK(s.plans_built == static_cast<int64_t>(results.size()));
  CHECK(s.trace_memo_evictions == static_cast<int64_t>(results.size()) - 1);
  CHECK(s.kernel_evictions == static_cast<int64_t>(results.size()) - 1);
  std::filesystem::remove_all(dir);
}
