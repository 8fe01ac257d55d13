// Dynamic kernels on the GPU: one kernel from generate_dynamic, run through an Executable
// built by hand at outer extents from 1 to its max_outer (Step::outer), with poisoned outputs,
// against the CPU reference of the graph at each size.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/interp.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "jit/runtime/dynamic.h"
#include "jit/runtime/nvrtc.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/symbolic_graph.h"

using namespace fusejit;
using namespace fusejit::ir;

using fusejit::testing::outer_extent;
using fusejit::testing::plan_at;
using fusejit::testing::GraphAtSizes;

namespace {

std::shared_ptr<jit::LoadedKernel> load(jit::Runtime& rt, const templates::Kernel& k) {
  const jit::CompiledKernel c = jit::compile(k, rt.device().info().arch());
  auto loaded = std::make_shared<jit::LoadedKernel>();
  loaded->kernel = k;
  loaded->device = rt.shared_device();
  const jit::Driver& drv = rt.device().driver();
  FUSEJIT_DRIVER(drv, module_load_data, &loaded->module, c.cubin.data());
  FUSEJIT_DRIVER(drv, module_get_function, &loaded->function, loaded->module, k.name.c_str());
  return loaded;
}

// The region's dynamic kernel built at sizes a, run at every size of `sizes` (each with outer
// extent at most a's) against the reference. With `row_path` k >= 1 (and symbols aligned to
// `alignment`), its k-th register path instead, at the sizes whose row it takes; false when the
// region has no such path.
bool require_dynamic_match(const GraphAtSizes& build, const std::vector<int64_t>& a,
                           const std::vector<std::vector<int64_t>>& sizes, int row_path = 0,
                           const std::vector<int64_t>& alignment = {}) {
  jit::Runtime& rt = *testing::gpu_runtime();
  const fusion::Plan pa = plan_at(build, a);
  REQUIRE(pa.kernel_count() == 1);
  REQUIRE(pa.library_call_count() == 0);
  templates::CodegenOptions options;
  options.target = rt.device().info().target();
  std::string why;
  const templates::DynamicSizes at{
      .outer = outer_extent(a), .symbols = a, .alignment = alignment, .row_path = row_path};
  const auto k = templates::generate_dynamic(pa.graph, pa.regions.front(), at, options, &why);
  if (row_path > 1 && !k) return false;
  INFO("refused: " << why);
  REQUIRE(k.has_value());
  const auto loaded = load(rt, *k);
  int ran = 0;
  for (const std::vector<int64_t>& size : sizes) {
    // A path runs only at the row lengths a plan launches it for (jit::dynamic_kernel_at):
    // those past the path before it, whose first vectors it reads unguarded.
    const int64_t length = k->max_row_length > 0 ? k->row_length.value(size) : 0;
    if (k->max_row_length > 0 && (length > k->max_row_length || length < k->min_row_length)) {
      continue;
    }
    bool aligned = true;
    for (size_t s = 0; s < alignment.size(); ++s) aligned = aligned && size[s] % alignment[s] == 0;
    if (!aligned) continue;
    ++ran;
    jit::Executable exe;
    exe.plan = plan_at(build, size);
    REQUIRE(exe.plan.regions.size() == 1);
    REQUIRE(exe.plan.regions.front().nodes == pa.regions.front().nodes);
    jit::Step step;
    step.region = &exe.plan.regions.front();
    step.kernel = loaded;
    step.arguments = k->params;
    step.outer = outer_extent(size);
    step.row_length = length;  // as a plan launches (0: not a register path)
    step.runtime_extents = jit::runtime_arguments(*k, size);
    exe.steps.push_back(step);
    const Graph& g = exe.plan.graph;
    const std::vector<HostTensor> host = jit::random_inputs(g, 7);
    std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
    for (const HostTensor& t : host) inputs.push_back(rt.upload(t));
    const std::vector<HostTensor> got = jit::run_poisoned(rt, exe, g, inputs);
    const std::vector<HostTensor> ref = interpret(g, host);
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = jit::relative_error(got[i], ref[i]);
      INFO(fmt::format("outer {} (sizes {}), output {}: rel_err {:.3e}\n{}", step.outer,
                       fmt::join(size, "x"), i, err, print(g)));
      CHECK(err <= jit::error_bound(g));  // NaN (an element never written) fails
    }
  }
  CHECK(ran > 0);  // every kernel ran at some size
  return true;
}

}  // namespace

TEST_CASE("dynamic kernels match the reference at every outer extent", "[gpu][jit][dynamic]") {
  FUSEJIT_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> one = {{1}, {2}, {7}, {60}, {4099}};
  SECTION("a pointwise chain with a broadcast weight") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::bf16, {s[0], 1024});
          const NodeId w = add_input(g, DType::bf16, {1024});
          g.set_outputs({add_unary(g, Op::relu, add_binary(g, Op::mul, x, w))});
        },
        {4099}, one);
  }
  SECTION("a reshape within the outer block, two symbols") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], s[1], 256});
          const NodeId b = add_input(g, DType::f32, {256});
          const NodeId flat = add_reshape(g, x, {s[0] * s[1], 256});
          g.set_outputs({add_unary(g, Op::tanh, add_binary(g, Op::add, flat, b))});
        },
        {131, 67}, {{1, 1}, {2, 1}, {1, 7}, {3, 20}, {60, 2}, {131, 67}});
  }
  SECTION("softmax over narrow rows (several rows per block)") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], 24});
          const NodeId m = add_reduce(g, Op::max, x, {-1}, true);
          const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
          g.set_outputs({add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {-1}, true))});
        },
        {4099}, one);
  }
  SECTION("RMS norm over rows of 4096, bf16") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::bf16, {s[0], 4096});
          const NodeId w = add_input(g, DType::bf16, {4096});
          const NodeId xf = add_cast(g, x, DType::f32);
          const NodeId ms = add_reduce(g, Op::mean, add_binary(g, Op::mul, xf, xf), {-1}, true);
          const NodeId eps = add_constant(g, DType::f32, 1e-6);
          const NodeId r = add_unary(g, Op::rsqrt, add_binary(g, Op::add, ms, eps));
          const NodeId y = add_binary(g, Op::mul, add_binary(g, Op::mul, xf, r), w);
          g.set_outputs({add_cast(g, y, DType::bf16)});
        },
        {4099}, one);
  }
  const std::vector<std::vector<int64_t>> two = {{1, 1}, {2, 1}, {1, 7}, {3, 20}, {60, 2},
                                                 {5, 1000}, {131, 67}};
  SECTION("a table broadcast over one symbol of two (a runtime modulo)") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::bf16, {s[0], s[1], 256});
          const NodeId pos = add_input(g, DType::bf16, {s[1], 256});
          g.set_outputs({add_binary(g, Op::add, x, pos)});
        },
        {131, 67}, two);
  }
  SECTION("a permute that moves a dynamic axis inward (runtime divisions)") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], s[1], 4, 32});
          g.set_outputs({add_unary(g, Op::exp, add_permute(g, x, {0, 2, 1, 3}))});
        },
        {131, 67}, two);
  }
  SECTION("a dynamic dim in the middle (a runtime division)") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {3, s[0], 64});
          const NodeId w = add_input(g, DType::f32, {3, 1, 64});
          g.set_outputs({add_binary(g, Op::mul, x, w)});
        },
        {4099}, one);
  }
  // A row length given at launch: the kernel that loops over the row, then each register path
  // (a kernel of its own, jit::DynamicPlan::paths) at the lengths it holds, of the kernel for
  // every length (scalars: rows up to 64, 128, 256, 512, 1,024, 2,048, 4,096, 6,144 and
  // 16,384) and of the variant for lengths that are multiples of 8 (16-byte vectors: also rows
  // of 128 and 256 on 16 and 32 threads, and up to 12,288 on 512 and 32,768 on 1,024).
  const std::vector<std::vector<int64_t>> lengths = {
      {1, 1},     {3, 7},     {4000, 3},  {60, 1000}, {5, 1024}, {2, 1025}, {3, 2048},
      {1, 4097},  {2, 8192},  {1, 8193},  {2, 20000}, {131, 67}, {40, 8},   {33, 64},
      {100, 128}, {7, 136},   {9, 256},   {3, 264},   {2, 4096}, {1, 4104}, {3, 12001},
      {1, 12000}, {2, 16384}, {1, 16385}, {1, 32768}, {1, 32769}};
  const auto every_path = [&](const GraphAtSizes& build) {
    require_dynamic_match(build, {257, 8209}, lengths);
    for (int path = 1; require_dynamic_match(build, {257, 8209}, lengths, path);) {
      ++path;
    }
    require_dynamic_match(build, {257, 8 * 1031}, lengths, 0, {1, 8});
    for (int path = 1; require_dynamic_match(build, {257, 8 * 1031}, lengths, path, {1, 8});) {
      ++path;
    }
  };
  SECTION("softmax over a row length given at launch") {
    every_path([](Graph& g, const std::vector<int64_t>& s) {
      const NodeId x = add_input(g, DType::f32, {s[0], s[1]});
      const NodeId m = add_reduce(g, Op::max, x, {-1}, true);
      const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
      g.set_outputs({add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {-1}, true))});
    });
  }
  SECTION("a bf16 layer norm over a row length given at launch (mean and variance paired)") {
    every_path(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_cast(g, add_input(g, DType::bf16, {s[0], s[1]}), DType::f32);
          const NodeId mean = add_reduce(g, Op::mean, x, {-1}, true);
          const NodeId d = add_binary(g, Op::sub, x, mean);
          const NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, d, d), {-1}, true);
          const NodeId eps = add_constant(g, DType::f32, 1e-5);
          const NodeId r = add_unary(g, Op::rsqrt, add_binary(g, Op::add, var, eps));
          g.set_outputs({add_cast(g, add_binary(g, Op::mul, d, r), DType::bf16)});
        });
  }
  SECTION("row sums") {
    require_dynamic_match(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], 768});
          g.set_outputs({add_reduce(g, Op::sum, x, {-1}, false)});
        },
        {4099}, one);
  }
}
