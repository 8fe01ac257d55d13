// The approximate math of f16/bf16-output kernels (device/fj_math.cuh, docs/numerics.md),
// measured on the GPU element by element: each approximate op, on inputs swept over its useful
// range, must land within one unit in the last place of the stored dtype of the correctly
// rounded result (the CPU reference computes in double and rounds once). Tagged [gpu].
#include <cmath>

#include <fmt/format.h>

#include "ir/graph.h"
#include "ir/interp.h"
#include "jit/runtime/check.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;
using ir::NodeId;
using ir::Op;

namespace {

// The distance between `got` and `want` in units of the dtype's spacing at `want` (f16
// subnormals count in units of the smallest subnormal).
double ulps(DType dtype, double got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : INFINITY;
  // Results under 2^-100 may flush to zero (gelu_tanh's far negative tail, where e^(-2u)
  // overflows a step early in the fast exponential); docs/numerics.md says so.
  if (got == 0.0 && std::fabs(want) < 0x1p-100) return 0.0;
  if (std::isinf(want) || std::isinf(got)) return got == want ? 0.0 : INFINITY;
  const int mantissa = dtype == DType::bf16 ? 7 : 10;
  const int min_exp = dtype == DType::bf16 ? -126 : -14;
  const int e = want == 0.0 ? min_exp : std::max(min_exp, std::ilogb(want));
  return std::fabs(got - want) / std::ldexp(1.0, e - mantissa);
}

// Runs `g` (its inputs filled by `fill`) on the GPU and returns the largest ulp distance of
// its one output from the reference.
template <class Fill>
double worst_ulps(const ir::Graph& g, Fill fill) {
  jit::Runtime& rt = *testing::gpu_runtime();
  std::vector<ir::HostTensor> host;
  for (NodeId id : g.inputs()) {
    host.emplace_back(g.node(id).dtype, g.node(id).shape);
    for (int64_t i = 0; i < host.back().numel(); ++i)
      host.back().set(i, fill(host.size() - 1, i, host.back().numel()));
  }
  std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
  for (const auto& t : host) inputs.push_back(rt.upload(t));
  const auto exe = rt.executable_for(g);
  const auto outs = jit::run_executable(*exe, inputs, rt.device(), rt.blas(),
                                        jit::RunOptions{.poison_outputs = true});
  rt.device().synchronize();
  const ir::HostTensor ref = ir::interpret(g, host)[0];
  ir::HostTensor got(ref.dtype, ref.shape);
  rt.download(*outs[0], got);
  double worst = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    worst = std::max(worst, ulps(ref.dtype, got.get(i), ref.get(i)));
  return worst;
}

}  // namespace

TEST_CASE("approximate math stays within one ulp of f16 and bf16", "[gpu][jit][numerics]") {
  FUSEJIT_REQUIRE_GPU();
  constexpr int64_t kCount = 1 << 16;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (Op op : {Op::exp, Op::sigmoid, Op::silu, Op::gelu_tanh, Op::tanh, Op::div}) {
      ir::Graph g;
      const NodeId x = ir::add_input(g, dtype, {kCount});
      const NodeId y = ir::add_input(g, dtype, {kCount});
      g.add_output(op == Op::div ? ir::add_binary(g, op, x, y) : ir::add_unary(g, op, x));
      // x sweeps [-12, 12) (exp stays finite in f16 up to 11); divisors are away from zero.
      const double worst = worst_ulps(g, [](size_t input, int64_t i, int64_t n) {
        const double t = -12.0 + 24.0 * static_cast<double>(i) / static_cast<double>(n);
        return input == 0 ? t : std::copysign(0.25 + std::fabs(t), t);
      });
      INFO(fmt::format("{} {}: worst {:.2f} ulp", ir::op_name(op), dtype_name(dtype), worst));
      CHECK(worst <= 1.0);
    }
  }
}
