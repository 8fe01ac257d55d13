// Dynamic dims at run time: one symbolic trace, one plan and one kernel per region across batch
// sizes (CPU: DynamicDims, plan_dynamic, NVRTC), and evals at sizes never seen ([gpu]).
#include <cmath>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "fusejit/fusejit.h"
#include "ir/graph.h"
#include "ir/interp.h"
#include "jit/runtime/dynamic.h"
#include "jit/api/log.h"
#include "jit/runtime/nvrtc.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "templates/kir/fastdiv.h"
#include "templates/target.h"

using namespace fusejit;

namespace {

// What a server records per request at batch b: rms_norm(x) * w + x, then silu, and the row
// sums; a [b, 256] f32 input and a [256] weight.
ir::Graph request(int64_t b) {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::f32, {b, 256});
  const ir::NodeId w = ir::add_input(g, DType::f32, {256});
  const ir::NodeId sq = ir::add_binary(g, ir::Op::mul, x, x);
  const ir::NodeId ms = ir::add_reduce(g, ir::Op::mean, sq, {1}, true);
  const ir::NodeId inv = ir::add_unary(
      g, ir::Op::rsqrt, ir::add_binary(g, ir::Op::add, ms, ir::add_constant(g, DType::f32, 1e-6)));
  const ir::NodeId y = ir::add_binary(
      g, ir::Op::add, ir::add_binary(g, ir::Op::mul, ir::add_binary(g, ir::Op::mul, x, inv), w),
      x);
  const ir::NodeId out = ir::add_unary(g, ir::Op::silu, y);
  g.set_outputs({out});
  return g;
}

templates::CodegenOptions sm90() {
  templates::CodegenOptions o;
  o.target = templates::target_for_arch("sm_90");
  return o;
}

}  // namespace

TEST_CASE("one symbolic trace and one kernel per region serve 60 batch sizes",
          "[jit][dynamic][nvrtc]") {
  auto log = jit::make_logger(LogLevel::off);
  jit::DynamicDims dims;
  std::shared_ptr<const ir::SymbolicGraph> trace;
  std::optional<jit::DynamicPlan> plan;
  std::set<std::string> sources;
  for (int64_t b = 1; b <= 60; ++b) {
    const std::optional<jit::DynamicMatch> m = dims.match(request(b), {}, *log);
    if (b == 1) {  // the first size runs as it is: nothing says the batch dim changes yet
      CHECK_FALSE(m.has_value());
      continue;
    }
    REQUIRE(m.has_value());
    if (!trace) {
      trace = m->trace;
      plan = jit::plan_dynamic(*trace, {}, sm90());
    }
    CHECK(m->trace == trace);
    CHECK(m->values == ir::Bindings{b});
    for (const templates::Kernel& k : jit::kernels_at(*plan, m->values, sm90())) {
      sources.insert(k.source);
    }
  }
  REQUIRE(plan.has_value());
  CHECK(plan->plan.kernel_count() == 1);
  // One kernel source for every size, and it compiles.
  REQUIRE(sources.size() == 1);
  for (int i = 0; i < plan->plan.kernel_count(); ++i) REQUIRE(plan->kernels[0].has_value());
  CHECK_FALSE(jit::compile(*plan->kernels[0], "sm_90").cubin.empty());
}

TEST_CASE("marked axes are dynamic from the first eval; other structures stay apart",
          "[jit][dynamic]") {
  auto log = jit::make_logger(LogLevel::off);
  jit::DynamicDims dims;
  const std::vector<ir::DynamicAxis> marks{{.input = 0, .axis = 0, .name = "B"}};
  const auto first = dims.match(request(8), marks, *log);
  REQUIRE(first.has_value());
  CHECK(first->trace->symbols.at(0).name == "B");
  const auto again = dims.match(request(13), {}, *log);
  REQUIRE(again.has_value());
  CHECK(again->trace == first->trace);
  // A different program is not an instance of it.
  ir::Graph other = request(8);
  other.set_outputs({other.inputs()[0]});
  CHECK_FALSE(dims.match(other, {}, *log).has_value());
}

TEST_CASE("a dynamic eval computes what the reference does at sizes never seen",
          "[jit][dynamic][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  Options options = Options::from_env();
  Context ctx(options);
  const Context::Stats before = ctx.stats();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> w(256);
  for (float& v : w) v = normal(rng);
  const Tensor weight = ctx.from_vector(w, {256});
  for (int64_t b : {2, 3, 1, 60, 7, 1000, 37, 4096, 5}) {
    std::vector<float> x(static_cast<size_t>(b * 256));
    for (float& v : x) v = normal(rng);
    const Tensor input = ctx.from_vector(x, {b, 256});
    ctx.mark_dynamic(input, 0, "B");
    const std::vector<double> got = silu(rms_norm(input, weight) + input).to_host();
    ir::HostTensor hx(DType::f32, {b, 256}), hw(DType::f32, {256});
    for (size_t i = 0; i < x.size(); ++i) hx.set(static_cast<int64_t>(i), x[i]);
    for (size_t i = 0; i < w.size(); ++i) hw.set(static_cast<int64_t>(i), w[i]);
    const ir::HostTensor want = ir::interpret(request(b), {hx, hw}).at(0);
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want.get(static_cast<int64_t>(i))) * (got[i] - want.get(static_cast<int64_t>(i)));
      norm += want.get(static_cast<int64_t>(i)) * want.get(static_cast<int64_t>(i));
    }
    INFO("batch " << b);
    CHECK(std::sqrt(err / norm) <= 1e-5);
  }
  const Context::Stats s = ctx.stats();
  // Every size, 1 included (it binds to the trace made at 2), shares one plan and one kernel.
  CHECK(s.plans_built - before.plans_built == 1);
  CHECK(s.kernels_compiled + s.kernel_cache_hits - before.kernels_compiled -
            before.kernel_cache_hits ==
        1);
  CHECK(s.dynamic_instances - before.dynamic_instances == 9);
}

TEST_CASE("mark_dynamic refuses what it cannot mark", "[jit][dynamic][errors]") {
  Context ctx;
  const Tensor x = ctx.from_vector(std::vector<float>(6, 1.0f), {2, 3});
  CHECK_THROWS_WITH(ctx.mark_dynamic(x, 2), ContainsSubstring("axis 2 is out of range for shape [2,3]"));
  CHECK_THROWS_WITH(ctx.mark_dynamic(x, 0, "2B"), ContainsSubstring("name '2B' must be a letter"));
  CHECK_THROWS_WITH(ctx.mark_dynamic(exp(x), 0),
                    ContainsSubstring("the tensor is computed by the current trace"));
  Context other;
  CHECK_THROWS_WITH(other.mark_dynamic(x, 0), ContainsSubstring("a tensor of this Context"));
  ctx.mark_dynamic(x, -2, "B");  // negative axes count from the end
  CHECK(exp(x).to_host().size() == 6);
}

TEST_CASE("a positional table over one symbol of two is one kernel with a runtime extent",
          "[jit][dynamic][nvrtc]") {
  // x[B,S,1024] + pos[S,1024], B and S dynamic: the table's element is i % (1024*S).
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::bf16, {8, 2048, 1024});
  const ir::NodeId pos = ir::add_input(g, DType::bf16, {2048, 1024});
  g.set_outputs({ir::add_binary(g, ir::Op::add, x, pos)});
  const std::vector<ir::DynamicAxis> marks{{.input = 0, .axis = 0, .name = "B"},
                                           {.input = 0, .axis = 1, .name = "S"},
                                           {.input = 1, .axis = 0, .name = "S"}};
  std::string why;
  const std::optional<ir::SymbolicGraph> sym = ir::generalize(g, marks, &why);
  INFO(why);
  REQUIRE(sym.has_value());
  const jit::DynamicPlan plan = jit::plan_dynamic(*sym, {}, sm90());
  REQUIRE(plan.kernels.size() == 1);
  INFO(plan.reasons[0]);
  REQUIRE(plan.kernels[0].has_value());
  const templates::Kernel& k = *plan.kernels[0];
  REQUIRE(k.runtime_extents.size() == 1);
  CHECK(k.max_elements == int64_t{1} << 30);
  CHECK(plan.reasons[0] == "runtime extents 1024*S, divided by fast division");
  CHECK_FALSE(plan.aligned.at(0).has_value());  // alignment changes nothing here
  CHECK_FALSE(jit::compile(k, "sm_90").cubin.empty());
  // The arguments at a size: the extent and its fast divisor, once per size.
  const ir::Bindings at{8, 2048};
  REQUIRE(jit::runs_dynamic(plan, 0, at));
  CHECK(jit::runtime_arguments(k, at) ==
        std::vector<uint64_t>{1024 * 2048, templates::fast_divisor(1024 * 2048).packed()});
  CHECK(jit::runs_dynamic(plan, 0, {1, 1}));
  CHECK(jit::runs_dynamic(plan, 0, {3, 1000}));
  // Past the sizes its 32-bit index arithmetic serves (here x alone has more than 2^30
  // elements), the size gets a static kernel of its own.
  const ir::Bindings huge{1, (int64_t{1} << 20) + 1};
  CHECK_FALSE(jit::runs_dynamic(plan, 0, huge));
  const std::vector<templates::Kernel> at_huge = jit::kernels_at(plan, huge, sm90());
  REQUIRE(at_huge.size() == 1);
  CHECK_FALSE(at_huge[0].dynamic);
}

TEST_CASE("a dynamic row length gets a variant for sizes that are multiples of 8",
          "[jit][dynamic]") {
  // softmax over scores [B,4,S,S] along S: the kernel for every size reads scalars (S may be
  // odd); the variant for S a multiple of 8 reads 16-byte vectors and drops the row guard.
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::bf16, {2, 4, 24, 24});
  const ir::NodeId xf = ir::add_cast(g, x, DType::f32);
  const ir::NodeId m = ir::add_reduce(g, ir::Op::max, xf, {3}, true);
  const ir::NodeId e = ir::add_unary(g, ir::Op::exp, ir::add_binary(g, ir::Op::sub, xf, m));
  const ir::NodeId sum = ir::add_reduce(g, ir::Op::sum, e, {3}, true);
  g.set_outputs({ir::add_cast(g, ir::add_binary(g, ir::Op::div, e, sum), DType::bf16)});
  const std::optional<ir::SymbolicGraph> sym = ir::generalize(
      g, {{.input = 0, .axis = 0, .name = "B"}, {.input = 0, .axis = 2, .name = "S"},
          {.input = 0, .axis = 3, .name = "S"}});
  REQUIRE(sym.has_value());
  const jit::DynamicPlan plan = jit::plan_dynamic(*sym, {}, sm90());
  REQUIRE(plan.kernels.size() == 1);
  INFO(plan.reasons[0]);
  REQUIRE(plan.kernels[0].has_value());
  REQUIRE(plan.aligned.size() == 1);
  REQUIRE(plan.aligned[0].has_value());
  const templates::Kernel& any = *plan.kernels[0];
  const templates::Kernel& aligned = *plan.aligned[0];
  // Both grids follow the elements (4 per unit of the outer extent B*S*S), a block per vector
  // of each of its 256 threads: scalars, and vectors of 8. So short rows still get a warp each:
  // at B=64 S=128, 2,048 blocks for 32,768 rows of 128, and at B=8 S=2048 the cap of 4 waves.
  CHECK(any.items_per_outer == 4);
  CHECK(any.items_per_block == 256);
  CHECK(aligned.items_per_block == 256 * 8);
  CHECK(templates::launch_grid(aligned, 132, 64 * 128 * 128) == 2048);
  CHECK(templates::launch_grid(aligned, 132, 8 * 2048 * 2048) == 4 * 132 * aligned.blocks_per_sm);
  CHECK(any.alignment.empty());
  CHECK(aligned.alignment == std::vector<int64_t>{1, 8});  // S alone: the rows are 4*B*S
  CHECK(plan.reasons[0].find("a variant for sizes where S is a multiple of 8") !=
        std::string::npos);
  const auto body = [](const templates::Kernel& k) {  // the kernel after the device helpers
    return k.source.substr(k.source.find("// ==== kernel ===="));
  };
  CHECK(body(any).find("fj_load_vec(") == std::string::npos);
  CHECK(body(aligned).find("fj_load_vec(") != std::string::npos);
  CHECK(body(any).find("row < fj_e0;") != std::string::npos);  // 4*B*S rows: guarded by 8
  CHECK(body(aligned).find("live") == std::string::npos);
  // Neither holds the row in registers: each reads it from memory in every pass.
  CHECK(body(any).find("cache0") == std::string::npos);
  CHECK(body(aligned).find("cache0") == std::string::npos);
  // The register paths, kernels of their own, of the variant then of the kernel: one vector per
  // thread on 16 then 32 threads per row (vectors only), then 4 vectors per thread on 16 and
  // 32 threads per row (scalars: 16 per thread on 4 to 32), then blocks of 64 to 1,024 threads
  // per row (512 with three quarters of the cache; scalars: 12 per thread there).
  REQUIRE(plan.paths.size() == 1);
  REQUIRE(plan.paths[0].size() == 18);
  const std::vector<templates::Kernel>& paths = plan.paths[0];
  const std::vector<int64_t> bounds = {128, 256, 512,  1024, 2048, 4096, 8192, 12288, 32768,
                                       64,  128, 256,  512,  1024, 2048, 4096, 6144,  16384};
  const std::vector<std::string> reduce = {
      "fj_warp_reduce<1, 16>", "fj_warp_reduce<1, 32>", "fj_warp_reduce<1, 16>",
      "fj_warp_reduce<1, 32>", "fj_block_reduce<64>",   "fj_block_reduce<128>",
      "fj_block_reduce<256>",  "fj_block_reduce<512>",  "fj_block_reduce<1024>",
      "fj_warp_reduce<1, 4>",  "fj_warp_reduce<1, 8>",  "fj_warp_reduce<1, 16>",
      "fj_warp_reduce<1, 32>", "fj_block_reduce<64>",   "fj_block_reduce<128>",
      "fj_block_reduce<256>",  "fj_block_reduce<512>",  "fj_block_reduce<1024>"};
  // The variant serves outer extents B*S*S as large as the kernel's, up to 2^30 elements in all
  // (generated with S at 8 times a prime, B at a prime, each as large as that leaves room for).
  CHECK(aligned.max_outer >= int64_t{12288} * 12288);
  for (size_t i = 0; i < paths.size(); ++i) {
    INFO("path " << i);
    const bool vectors = i < 9;
    CHECK(paths[i].max_row_length == bounds[i]);
    // From one element more than the path before it, of its own variant, holds.
    CHECK(paths[i].min_row_length == (i == 0 || i == 9 ? 1 : bounds[i - 1] + 1));
    CHECK(paths[i].max_outer == (vectors ? aligned.max_outer : any.max_outer));
    CHECK(paths[i].alignment == (vectors ? aligned.alignment : any.alignment));
    CHECK(paths[i].row_length.exponents == std::vector<int>{0, 1});  // S
    CHECK(paths[i].row_length.coefficient == 1);
    CHECK(body(paths[i]).find("cache0[") != std::string::npos);
    CHECK(body(paths[i]).find(reduce[i]) != std::string::npos);
    // Past the end of a row, the register cache loads the row's last vector instead.
    CHECK(body(paths[i]).find(vectors ? " - 8))" : " - 1))") != std::string::npos);
    CHECK(paths[i].dynamic);
    CHECK(paths[i].items_per_outer == 4);
  }
  CHECK(plan.reasons[0].find("register paths for rows of at most 128, 256, 512, 1024, 2048, "
                             "4096, 8192, 12288, 32768, 64, 128, 256, 512, 1024, 2048, 4096, "
                             "6144, 16384 elements") != std::string::npos);
  // A path's grid: a block per vector of each thread, or where more, per rows_per_block rows
  // of the shortest length the path takes (one more than the path before it holds), so that
  // at no length does it launch more blocks than its shortest rows need.
  CHECK(paths[0].items_per_block == 256 * 8);  // 16 rows of at least 1
  CHECK(paths[2].items_per_block == 16 * 257);  // 16 threads per row: 16 rows of 257 or more
  CHECK(paths[9].items_per_block == 256);       // scalars, 4 threads per row, from 1
  CHECK(paths[10].items_per_block == 32 * 65);  // 8 threads per row: 32 rows of 65 or more
  CHECK(paths[15].items_per_block == 2049);     // one row of 2,049 or more per block
  // Given the row length at launch, a path's grid is a block per rows_per_block rows, as a
  // static kernel's: the 16-thread path at B=4 S=512 (8,192 rows of 512, 16 a block) launches
  // 512 blocks, not the 1,021 of its shortest rows (257). Without the length, the latter.
  CHECK(paths[2].rows_per_block == 16);
  CHECK(templates::launch_grid(paths[2], 132, 4 * 512 * 512, 512) == 512);
  CHECK(templates::launch_grid(paths[2], 132, 4 * 512 * 512) == 1021);
  CHECK(templates::launch_grid(paths[2], 132, 4 * 257 * 257, 257) ==
        templates::launch_grid(paths[2], 132, 4 * 257 * 257));  // its shortest rows: the same
  CHECK(paths[10].rows_per_block == 32);  // B=1 S=128: 512 rows of 128 in 16 blocks, not 32
  CHECK(templates::launch_grid(paths[10], 132, 128 * 128, 128) == 16);
  CHECK(templates::launch_grid(paths[10], 132, 128 * 128) == 32);
  CHECK(templates::launch_grid(paths[15], 132, 8 * 2049 * 2049, 2049) ==
        4 * 132 * paths[15].blocks_per_sm);  // 65,568 rows of 2,049: the cap of 4 waves
  // Which one a size launches: the first path whose bound holds S, of the variant wherever S is
  // a multiple of 8 (whatever B is); longer rows the kernels that loop.
  CHECK(jit::dynamic_kernel_at(plan, 0, {16, 64}) == &paths[0]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {64, 128}) == &paths[0]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 8}) == &paths[0]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {16, 256}) == &paths[1]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {4, 512}) == &paths[2]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {3, 1024}) == &paths[3]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {8, 2048}) == &paths[4]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {2, 4096}) == &paths[5]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 8192}) == &paths[6]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 8200}) == &paths[7]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 12288}) == &paths[7]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 12296}) == &paths[8]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {8, 12}) == &paths[9]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 1}) == &paths[9]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {33, 127}) == &paths[10]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {3, 255}) == &paths[11]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {8, 2049}) == &paths[15]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 4097}) == &paths[16]);
  CHECK(jit::dynamic_kernel_at(plan, 0, {1, 12001}) == &paths[17]);
  // (Rows longer than 16,384 would be 2^30 elements in all: past the kernels' outer extent.)
  // Offline warming compiles all of them.
  CHECK(jit::kernels_at(plan, {3, 1000}, sm90()).size() == 20);
  // A run loads each at the first size that launches it, and only that one: a size whose path
  // an earlier size loaded obtains nothing.
  std::mutex mutex;
  std::vector<std::string> obtained;
  const jit::KernelLoader loader{
      [](const templates::Kernel&) { return std::shared_ptr<jit::LoadedKernel>(); },
      [&](const templates::Kernel& k) {
        const std::lock_guard lock(mutex);
        obtained.push_back(k.name);
        return jit::ObtainedKernel{};
      },
      [](const templates::Kernel& k, const jit::ObtainedKernel&) {
        auto loaded = std::make_shared<jit::LoadedKernel>();
        loaded->kernel = k;
        return loaded;
      }};
  jit::DynamicExecutable dyn(plan);
  const auto launch = [&](const ir::Bindings& values) {
    const jit::Executable exe = jit::instantiate_executable(dyn, values, loader, {});
    REQUIRE(exe.steps.size() == 1);
    REQUIRE(exe.steps[0].kernel);
    CHECK(exe.steps[0].row_length == values[1]);  // a path's grid follows its rows
    return exe.steps[0].kernel->kernel.name;
  };
  CHECK(launch({4, 512}) == paths[2].name);
  CHECK(launch({4, 520}) == paths[3].name);
  CHECK(launch({7, 1000}) == paths[3].name);
  CHECK(launch({33, 127}) == paths[10].name);
  CHECK(launch({2, 512}) == paths[2].name);
  CHECK(obtained == std::vector<std::string>{paths[2].name, paths[3].name, paths[10].name});
  for (const templates::Kernel& k : paths) CHECK_FALSE(jit::compile(k, "sm_90").cubin.empty());
  CHECK_FALSE(jit::compile(any, "sm_90").cubin.empty());
  CHECK_FALSE(jit::compile(aligned, "sm_90").cubin.empty());
}

TEST_CASE("a column sum over a dynamic axis is still compiled per size", "[jit][dynamic]") {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::f32, {300, 512});
  g.set_outputs({ir::add_reduce(g, ir::Op::sum, x, {0}, false)});
  const std::optional<ir::SymbolicGraph> sym =
      ir::generalize(g, {{.input = 0, .axis = 0, .name = "B"}});
  REQUIRE(sym.has_value());
  const jit::DynamicPlan plan = jit::plan_dynamic(*sym, {}, sm90());
  REQUIRE(plan.kernels.size() == 1);
  CHECK_FALSE(plan.kernels[0].has_value());
  CHECK_FALSE(plan.reasons[0].empty());
}
