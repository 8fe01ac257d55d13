// Pointwise sweeps whose element count is not a multiple of the vector width: a vector body and
// a scalar tail. Every kernel is compiled by NVRTC for sm_90, and its body also runs on the CPU
// (emulate/pointwise_shim.h) against the reference interpreter, with each output poisoned and
// guarded past its end, so that the tail is checked element by element without a GPU: counts
// k * V + r for every r, counts below V, 1, several blocks, and rows of odd length read through
// a broadcast.
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ir/interp.h"
#include "ir/op.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::has;
using fusejit::test::kernel_text;
using fusion::RegionKind;

namespace {

// out = x * w + b: x and w [rows, cols], b [cols], broadcast along the rows when rows > 1.
Graph multiply_add(DType d, int64_t rows, int64_t cols) {
  Graph g;
  const NodeId x = add_input(g, d, {rows, cols});
  const NodeId w = add_input(g, d, {rows, cols});
  const NodeId b = add_input(g, d, {cols});
  g.add_output(add_binary(g, Op::add, add_binary(g, Op::mul, x, w), b));
  return g;
}

struct TailCase {
  DType dtype;
  int64_t rows, cols;
  int v;  // the full vector width of dtype
  Graph graph;
  templates::Kernel kernel;
  bool must_fail = false;  // the kernel of a count one shorter: its last element stays poisoned
};

std::string label(const TailCase& c) {
  return fmt::format("{} [{}, {}]{}", dtype_name(c.dtype), c.rows, c.cols,
                     c.must_fail ? " (kernel one element short)" : "");
}

std::vector<TailCase> tail_cases() {
  std::vector<TailCase> cases;
  for (const auto& [d, v] : {std::pair{DType::f32, 4}, std::pair{DType::bf16, 8}}) {
    for (int r = 0; r < v; ++r) cases.push_back({d, 1, 3 * v + r, v, {}, {}});  // k * V + r
    for (int n = 1; n < v; ++n) cases.push_back({d, 1, n, v, {}, {}});          // below V
    cases.push_back({d, 1, 2 * 256 * v + 3, v, {}, {}});  // several blocks, then the tail
    // Rows of odd length: b is read per lane, x and w still by whole vectors.
    for (int64_t cols : {5, 37, 1001}) cases.push_back({d, 3, cols, v, {}, {}});
  }
  cases.push_back({DType::f32, 1, 3 * 4 + 3, 4, {}, {}, true});
  for (TailCase& c : cases) {
    c.graph = multiply_add(c.dtype, c.rows, c.cols);
    const Graph made = c.must_fail ? multiply_add(c.dtype, c.rows, c.cols - 1) : c.graph;
    INFO(label(c));
    c.kernel = test::compile_graph(made, RegionKind::pointwise);
  }
  return cases;
}

// Elements past the output's end, which must keep kGuardValue (exact in every dtype).
constexpr int64_t kGuard = 64;
constexpr double kGuardValue = -3.0;

struct Outcome {
  int64_t poisoned = 0;   // output elements left NaN (never written)
  int64_t guards = 0;     // guard elements overwritten
  double rel_l2 = 0;      // ||out - ref|| / ||ref|| over the written elements
};

Outcome run_case(void* so, const TailCase& c, uint32_t seed) {
  using Entry = void (*)(void* const*, int);
  auto entry = reinterpret_cast<Entry>(dlsym(so, ("run_" + c.kernel.name).c_str()));
  REQUIRE(entry != nullptr);
  std::vector<HostTensor> in = test::random_inputs(c.graph, seed);
  const HostTensor ref = interpret(c.graph, in).at(0);
  // The output, poisoned with NaN, then kGuard more elements of a known pattern.
  const int64_t n = ref.numel();
  HostTensor out(c.dtype, {n + kGuard});
  for (int64_t i = 0; i < n; ++i) out.set(i, std::nan(""));
  for (int64_t i = n; i < n + kGuard; ++i) out.set(i, kGuardValue);
  std::vector<void*> args;
  for (HostTensor& t : in) args.push_back(t.bytes.data());
  args.push_back(out.bytes.data());
  for (void* p : args) REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0);  // the launch contract
  entry(args.data(), static_cast<int>(c.kernel.work_blocks));
  Outcome o;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(out.get(i))) {
      ++o.poisoned;
      continue;
    }
    diff += std::pow(out.get(i) - ref.get(i), 2);
    norm += std::pow(ref.get(i), 2);
  }
  for (int64_t i = n; i < n + kGuard; ++i) o.guards += out.get(i) != kGuardValue ? 1 : 0;
  o.rel_l2 = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  return o;
}

}  // namespace

TEST_CASE("pointwise: any count takes whole vectors and a scalar tail", "[templates][pointwise]") {
  for (const auto& [d, v] : {std::pair{DType::f32, 4}, std::pair{DType::bf16, 8}}) {
    for (int64_t n : {int64_t{3} * v, int64_t{3} * v + 1, int64_t{3} * v + v - 1, int64_t{1},
                      int64_t{v} - 1, int64_t{100000007}}) {
      INFO(dtype_name(d) << " [" << n << "]");
      const Graph g = multiply_add(d, 1, n);
      const templates::Kernel k =
          templates::generate(g, test::whole_graph_region(g, RegionKind::pointwise));
      const std::string text = kernel_text(k);
      const int64_t tail = n % v;
      CHECK(test::schedule_field(k, "vector_widths") == fmt::format("[{}]", n >= v ? v : 1));
      CHECK(has(text, "fj_load_vec(") == (n >= v));
      // The sweep's loops: over the vectors, then over the last `tail` elements one per thread.
      const std::vector<int64_t> loops =
          test::loop_bounds(test::kernel_ir(g, RegionKind::pointwise).fn, "t");
      CHECK(loops == (n < v      ? std::vector<int64_t>{n}
                      : tail > 0 ? std::vector<int64_t>{n / v, tail}
                                 : std::vector<int64_t>{n / v}));
      if (n >= v && tail > 0) {
        CHECK(has(text, fmt::format("t < {}; t +=", n / v)));  // the vectors
        CHECK(has(text, fmt::format("t < {}; t +=", tail)));   // the tail
        CHECK(has(text, fmt::format("= {} + t;", n / v * v)));  // tail element i
      }
      // A block per 256 vectors; below V, a block per 256 elements.
      CHECK(k.work_blocks == (n >= v ? n / v + 255 : n + 255) / 256);
    }
  }
}

TEST_CASE("pointwise tails: the generated bodies, emulated on the CPU, match the reference",
          "[templates][pointwise]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  const std::vector<TailCase> cases = tail_cases();
  std::string src = fmt::format("#include \"{}/pointwise_shim.h\"\n", FUSEJIT_EMULATE_DIR);
  for (const TailCase& c : cases) src += test::emulated_kernel(c.kernel, src);
  void* so = test::open_shared_object(src, "pointwise-emulation");
  int checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const TailCase& c = cases[i];
    INFO(label(c) << "\n" << kernel_text(c.kernel));
    const Outcome o = run_case(so, c, static_cast<uint32_t>(100 + i));
    if (c.must_fail) {
      CHECK(o.poisoned == 1);
      continue;
    }
    CHECK(o.poisoned == 0);
    CHECK(o.guards == 0);
    CHECK(o.rel_l2 <= (c.dtype == DType::f32 ? 1e-6 : 1e-2));
    ++checked;
  }
  CHECK(checked == (2 * 4 + 3) + (2 * 8 + 3));  // per dtype: 2V - 1 + 1 + 3
  auto misaligned = reinterpret_cast<long (*)()>(dlsym(so, "fj_emu_misaligned"));
  REQUIRE(misaligned != nullptr);
  CHECK(misaligned() == 0);  // every vector access was aligned to its word
  dlclose(so);
}
