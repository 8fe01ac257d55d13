// jit/executor without a GPU: the NVTX range names a plan's steps carry (range_name), and the
// arguments of steps that share one loaded kernel; on a GPU, such steps run right.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/libs/gemm_call.h"
#include "jit/libs/plan_text.h"
#include "jit/runtime/executor.h"
#include "jit/runtime/nvrtc.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;

namespace {

// concat(x0, ..., x{n-1}) of n distinct inputs f32[3]: planned as kernels of up to 64 operands
// that share a source (templates/emit.h, RegionInfo::value_name).
ir::Graph concat_of_distinct(int n) {
  ir::Graph g;
  std::vector<ir::NodeId> parts;
  for (int i = 0; i < n; ++i) parts.push_back(ir::add_input(g, DType::f32, {3}));
  g.add_output(ir::add_concat(g, parts, 0));
  return g;
}

std::vector<std::string> range_names(const std::string& trace) {
  const fusion::Plan plan = fusion::make_plan(ir::parse(trace));
  std::vector<std::string> names;
  for (const fusion::Region& r : plan.regions) names.push_back(jit::range_name(plan.graph, r));
  return names;
}

}  // namespace

TEST_CASE("NVTX range names say each region's kind and ops, each op once", "[jit][executor]") {
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const Tensor x = ctx.placeholder({8, 64});
  const Tensor w = ctx.placeholder({64, 32});

  const std::vector<std::string> norm = range_names(ctx.trace_text({layer_norm(x * 2.0)}));
  REQUIRE(norm.size() == 1);
  CHECK(norm[0].rfind("fj normalization: ", 0) == 0);
  CHECK_THAT(norm[0], ContainsSubstring(" mean"));
  CHECK_THAT(norm[0], ContainsSubstring(" rsqrt"));
  CHECK_THAT(norm[0], !ContainsSubstring("reshape"));  // views are index arithmetic, not ops
  CHECK_THAT(norm[0], !ContainsSubstring("constant"));
  // mul appears twice in the region (x * 2, and the normalization): named once.
  CHECK(norm[0].find(" mul") == norm[0].rfind(" mul"));

  const std::vector<std::string> gemm = range_names(ctx.trace_text({matmul(x, w)}));
  REQUIRE(gemm.size() == 1);
  CHECK(gemm[0] == "fj gemm: matmul");

  // A long elementwise chain is cut after 8 ops.
  Tensor y = x;
  const std::vector<Tensor (*)(const Tensor&)> chain_ops = {
      fusejit::exp,  fusejit::log,  fusejit::sin,  fusejit::cos,  fusejit::tanh,
      fusejit::sigmoid, fusejit::relu, fusejit::silu, fusejit::sqrt, fusejit::abs};
  for (const auto f : chain_ops) y = f(y);
  const std::vector<std::string> chain = range_names(ctx.trace_text({y}));
  REQUIRE(chain.size() == 1);
  CHECK(chain[0] == "fj pointwise: exp log sin cos tanh sigmoid relu silu ...");
}

TEST_CASE("steps that share a loaded kernel launch it on their own buffers", "[jit][executor]") {
  const fusion::Plan plan = fusion::make_plan(concat_of_distinct(1000));
  // A loader that compiles nothing and counts what it is asked to obtain (a compile, in a run).
  std::map<std::string, std::shared_ptr<jit::LoadedKernel>> loaded;
  int obtained = 0;
  jit::KernelLoader loader;
  loader.find = [&](const templates::Kernel& k) -> std::shared_ptr<jit::LoadedKernel> {
    const auto it = loaded.find(k.source);
    return it == loaded.end() ? nullptr : it->second;
  };
  loader.obtain = [&](const templates::Kernel&) {
    ++obtained;
    return jit::ObtainedKernel{};
  };
  loader.load = [&](const templates::Kernel& k, const jit::ObtainedKernel&) {
    auto l = std::make_shared<jit::LoadedKernel>();
    l->kernel = k;
    return loaded[k.source] = l;
  };
  const jit::Executable exe = jit::build_executable(plan, loader, {});
  REQUIRE(exe.steps.size() == plan.regions.size());
  REQUIRE(exe.steps.size() >= 10);  // 13 today
  CHECK(obtained <= 3);
  CHECK(loaded.size() == static_cast<size_t>(obtained));
  size_t sharing = 0;
  size_t params = 0;
  for (const jit::Step& step : exe.steps) {
    REQUIRE(step.kernel);
    std::vector<ir::NodeId> buffers = step.region->inputs;
    buffers.insert(buffers.end(), step.region->outputs.begin(), step.region->outputs.end());
    CHECK(step.arguments == buffers);
    params += step.arguments.size();
    if (step.kernel->kernel.params != step.arguments) ++sharing;
  }
  CHECK(sharing > 0);  // the case this is about: another region's kernel, these buffers
  CHECK(exe.kernel_params == params);
}

TEST_CASE("a concat of a thousand distinct inputs runs right on its shared kernels",
          "[jit][executor][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  const testing::GpuCheck check = testing::check_on_gpu(concat_of_distinct(1000), 11);
  INFO(check.detail);
  CHECK(check.pass);
}

namespace {

// linear(x, w, bias) of M rows: x bf16[M, 4096], w bf16[1000, 4096] (linear's [N, K]), bias.
// relu(x @ w^T + bias): m rows of 4096 against n weight rows.
std::string linear_trace(int m, int n = 1000) {
  return fmt::format(
      "fusejit-trace 1\n"
      "%0 : bf16[{0},4096] = input\n"
      "%1 : bf16[{1},4096] = input\n"
      "%2 : bf16[{1}] = input\n"
      "%3 : bf16[4096,{1}] = permute %1 axes=[1,0]\n"
      "%4 : bf16[{0},{1}] = matmul %0, %3\n"
      "%5 : bf16[{0},{1}] = add %4, %2\n"
      "%6 : bf16[{0},{1}] = relu %5\n"
      "output %6\n",
      m, n);
}

// The executable of a trace under a FUSEJIT_GEMV mode, built with a loader that compiles
// nothing.
jit::Executable gemv_executable(const std::string& trace, GemvMode gemv) {
  jit::KernelLoader loader;
  loader.find = [](const templates::Kernel&) { return std::shared_ptr<jit::LoadedKernel>(); };
  loader.obtain = [](const templates::Kernel&) { return jit::ObtainedKernel{}; };
  loader.load = [](const templates::Kernel& k, const jit::ObtainedKernel&) {
    auto l = std::make_shared<jit::LoadedKernel>();
    l->kernel = k;
    return l;
  };
  jit::BuildOptions options;
  options.codegen.gemv = gemv;
  return jit::build_executable(fusion::make_plan(ir::parse(trace)), loader, options);
}

bool runs_gemv(const jit::Executable& exe) {
  return exe.steps.size() == 1 && exe.steps[0].kernel &&
         exe.steps[0].kernel->kernel.name.rfind("fj_gemv_", 0) == 0;
}

}  // namespace

TEST_CASE("with FUSEJIT_GEMV=1, GEMMs of up to 16 rows run the generated kernel",
          "[jit][executor][gemv]") {
  const jit::Executable on = gemv_executable(linear_trace(3), GemvMode::on);
  REQUIRE(on.steps.size() == 1);
  const jit::Step& step = on.steps[0];
  REQUIRE(step.region->kind == fusion::RegionKind::gemm);
  REQUIRE(runs_gemv(on));
  // A, B, bias, D: the matmul's operands as cuBLASLt would have read them.
  CHECK(step.arguments ==
        std::vector<ir::NodeId>{step.gemm.a, step.gemm.b, step.gemm.bias, step.gemm.d});
  // The epilogue at the store.
  CHECK(step.kernel->kernel.source.find("fj_gemv_relu(") != std::string::npos);
  REQUIRE(!on.plan.decisions.empty());
  CHECK(on.plan.decisions.back().fused);
  CHECK_THAT(on.plan.decisions.back().reason,
             ContainsSubstring("runs the generated gemv kernel (gemv{vector_width=8"));
  // Off: cuBLASLt, and no decision about it.
  const jit::Executable off = gemv_executable(linear_trace(3), GemvMode::off);
  CHECK(!off.steps[0].kernel);
  CHECK(off.plan.decisions.size() + 1 == on.plan.decisions.size());
  // 32 rows: cuBLASLt, and the decision says why.
  const jit::Executable tall = gemv_executable(linear_trace(32), GemvMode::on);
  CHECK(!tall.steps[0].kernel);
  CHECK_THAT(
      tall.plan.decisions.back().reason,
      ContainsSubstring("not the gemv kernel (M = 32 rows (takes 1..16)); cuBLASLt runs it"));
}

TEST_CASE("int8 weights run the gemv kernel in every FUSEJIT_GEMV mode, scale before bias",
          "[jit][executor][gemv][int8]") {
  // linear with int8 weights [1000, 4096] and their scales: x @ cast(w)^T * s + b.
  const std::string trace =
      "fusejit-trace 1\n%0 : bf16[2,4096] = input\n%1 : i8[1000,4096] = input\n"
      "%2 : bf16[1000] = input\n"
      "%3 : bf16[1000] = input\n%4 : bf16[1000,4096] = cast %1\n"
      "%5 : bf16[4096,1000] = permute %4 axes=[1,0]\n%6 : bf16[2,1000] = matmul %0, %5\n"
      "%7 : bf16[2,1000] = mul %6, %2\n%8 : bf16[2,1000] = add %7, %3\noutput %8\n";
  for (GemvMode mode : {GemvMode::off, GemvMode::large, GemvMode::on}) {
    const jit::Executable exe = gemv_executable(trace, mode);
    REQUIRE(runs_gemv(exe));
    const jit::Step& step = exe.steps[0];
    CHECK(step.gemm.int8_b);
    CHECK(step.gemm.b == 1);
    CHECK(step.arguments == std::vector<ir::NodeId>{0, 1, 2, 3, step.gemm.d});
    const std::string& src = step.kernel->kernel.source;
    CHECK(src.find("const signed char* __restrict__ b") != std::string::npos);
    CHECK(src.find("scale[") != std::string::npos);
    CHECK_THAT(jit::gemm_call_label(step.gemm), ContainsSubstring("+int8_weights+scale+bias"));
    if (mode == GemvMode::off) {  // compiled once: the other modes build the same kernel
      jit::CompiledKernel c;
      REQUIRE_NOTHROW(c = jit::compile(step.kernel->kernel, "sm_90"));
      CHECK(!c.cubin.empty());
    }
  }
  CHECK_THAT(jit::plan_text(fusion::make_plan(ir::parse(trace)), false, GemvMode::off),
             ContainsSubstring("+int8_weights+scale+bias, run instead by the generated kernel "
                               "gemv{vector_width=8, warps=4, block=128, rows=32") &&
                 ContainsSubstring("mma=true"));  // 2 rows: the tensor-core variant
}

TEST_CASE("FUSEJIT_GEMV=auto runs the kernel for one row against large weights only",
          "[jit][executor][gemv]") {
  // 4096 x 4096 = 2^24 weights (Llama-3.1-8B's o projection): the smallest it takes.
  const jit::Executable large = gemv_executable(linear_trace(1, 4096), GemvMode::large);
  CHECK(runs_gemv(large));
  CHECK_THAT(large.plan.decisions.back().reason,
             ContainsSubstring("runs the generated gemv kernel"));
  const jit::Executable off = gemv_executable(linear_trace(1, 4096), GemvMode::off);
  // Smaller weights, or more rows: cuBLASLt, and no decision about it.
  for (const auto& [m, n] : {std::pair{1, 4095}, std::pair{2, 4096}, std::pair{3, 1000}}) {
    INFO(m << " rows, " << n << " weight rows");
    const jit::Executable exe = gemv_executable(linear_trace(m, n), GemvMode::large);
    CHECK_FALSE(runs_gemv(exe));
    CHECK(exe.plan.decisions.size() == off.plan.decisions.size());
    CHECK(runs_gemv(gemv_executable(linear_trace(m, n), GemvMode::on)));
  }
}

TEST_CASE("FUSEJIT_GEMV: auto by default, 1 for every GEMM the kernel takes, 0 for none",
          "[jit][executor][gemv]") {
  CHECK(Options::parse({}).gemv == GemvMode::large);
  CHECK(Options::parse({{"FUSEJIT_GEMV", "auto"}}).gemv == GemvMode::large);
  CHECK(Options::parse({{"FUSEJIT_GEMV", "1"}}).gemv == GemvMode::on);
  CHECK(Options::parse({{"FUSEJIT_GEMV", "on"}}).gemv == GemvMode::on);
  CHECK(Options::parse({{"FUSEJIT_GEMV", "0"}}).gemv == GemvMode::off);
  CHECK(Options::parse({{"FUSEJIT_GEMV", "1"}}).warnings.empty());
  CHECK_THROWS_WITH(Options::parse({{"FUSEJIT_GEMV", "always"}}),
                    ContainsSubstring("FUSEJIT_GEMV"));
}

TEST_CASE("fusejit plan says which GEMMs the gemv kernel runs", "[jit][executor][gemv]") {
  const fusion::Plan plan = fusion::make_plan(ir::parse(linear_trace(3)));
  const std::string off = jit::plan_text(plan, false, GemvMode::off);
  CHECK(off == jit::plan_text(plan, false));  // auto: 3 rows stay with cuBLASLt, unmentioned
  CHECK(off.find("gemv") == std::string::npos);
  CHECK_THAT(
      jit::plan_text(plan, false, GemvMode::on),
      ContainsSubstring("cublasLt 3x1000x4096 bf16+bias+relu, run instead by the generated kernel "
                        "gemv{vector_width=8, warps=4, block=128, rows=32, unroll=2") &&
          ContainsSubstring("mma=true, m_tiles=1, prefetch=true}"));  // 3 rows: tensor cores
  CHECK_THAT(jit::plan_text(fusion::make_plan(ir::parse(linear_trace(32))), false, GemvMode::on),
             ContainsSubstring(", not the gemv kernel (M = 32 rows (takes 1..16))"));
  CHECK_THAT(jit::plan_text(fusion::make_plan(ir::parse(linear_trace(1, 32768))), false),
             ContainsSubstring("cublasLt 1x32768x4096 bf16+bias+relu, run instead by the "
                               "generated kernel gemv{"));
}
