// Parallel compiles: jit::parallel_for's contract (every item once, the first failure in item
// order), and build_executable obtaining a plan's missing kernels on several threads while it
// finds and loads them on the calling one, with the real NVRTC and kernel cache (no GPU: the
// loader below loads nothing); the [gpu] case does the same through a Runtime.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fusejit/error.h"
#include "fusejit_test_paths.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/graph.h"
#include "ir/text.h"
#include "jit/api/log.h"
#include "jit/runtime/executor.h"
#include "jit/runtime/parallel.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"
#include "support/gpu.h"

using namespace fusejit;
namespace fs = std::filesystem;

TEST_CASE("parallel_for runs every item once, on several threads", "[jit][parallel]") {
  for (const int threads : {1, 3, 8}) {
    std::vector<std::atomic<int>> runs(20);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    jit::parallel_for(runs.size(), threads, [&](size_t i) {
      ++runs[i];
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard lock(mutex);
      ids.insert(std::this_thread::get_id());
    });
    for (const auto& r : runs) CHECK(r == 1);
    CHECK(ids.size() <= static_cast<size_t>(threads));
    if (threads == 1) CHECK(*ids.begin() == std::this_thread::get_id());
  }
  jit::parallel_for(0, 4, [](size_t) { FAIL("no items, no calls"); });
  CHECK(jit::default_compile_threads() >= 1);
  CHECK(jit::default_compile_threads() <= jit::kMaxCompileThreads);
}

TEST_CASE("parallel_for rethrows the first failure in item order", "[jit][parallel]") {
  for (const int threads : {1, 4}) {
    std::vector<std::atomic<int>> runs(40);
    auto fn = [&](size_t i) {
      ++runs[i];
      // Item 7 fails at once, item 3 later: item 3's error is the one that counts.
      if (i == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        throw std::runtime_error("item 3");
      }
      if (i == 7) throw std::runtime_error("item 7");
    };
    CHECK_THROWS_WITH(jit::parallel_for(runs.size(), threads, fn), "item 3");
    // Items are claimed in order, so every item before the first failure ran, once. How many
    // items after it other threads had already claimed depends on scheduling; with one thread
    // there are none.
    for (size_t i = 0; i <= 3; ++i) CHECK(runs[i] == 1);
    for (const auto& r : runs) CHECK(r <= 1);
    if (threads == 1) {
      for (size_t i = 4; i < runs.size(); ++i) CHECK(runs[i] == 0);
    }
  }
}

namespace {

// x -> exp -> @w1 -> sigmoid -> @w2 -> tanh -> @w3 -> sin: four generated kernels between
// three cuBLASLt calls, four different sources (regions of one structure share a kernel).
ir::Graph four_kernels(int64_t n) {
  ir::Graph g;
  ir::NodeId h = ir::add_input(g, DType::f32, {n, 64});
  const ir::Op acts[] = {ir::Op::exp, ir::Op::sigmoid, ir::Op::tanh, ir::Op::sin};
  for (int i = 0; i < 4; ++i) {
    h = ir::add_unary(g, acts[i], h);
    if (i < 3) h = ir::add_matmul(g, h, ir::add_input(g, DType::f32, {64, 64}));
  }
  g.set_outputs({h});
  return g;
}

// A loader over a real KernelCache that records which thread did what, and loads nothing.
struct RecordingLoader {
  jit::KernelCache& cache;
  std::mutex mutex;
  std::set<std::thread::id> obtain_threads;
  std::vector<std::string> loaded;  // kernel names, in load order
  std::set<std::string> known;      // what `find` returns
  int compiled = 0;
  std::atomic<int> running{0}, most_running{0};

  jit::KernelLoader loader() {
    jit::KernelLoader l;
    l.find = [this](const templates::Kernel& k) -> std::shared_ptr<jit::LoadedKernel> {
      if (!known.count(k.name)) return nullptr;
      return make(k);
    };
    l.obtain = [this](const templates::Kernel& k) {
      const int now = ++running;
      for (int m = most_running; now > m && !most_running.compare_exchange_weak(m, now);) {
      }
      jit::ObtainedKernel o;
      o.compiled = cache.get(k, "sm_90", &o.outcome);
      --running;
      std::lock_guard lock(mutex);
      obtain_threads.insert(std::this_thread::get_id());
      return o;
    };
    l.load = [this](const templates::Kernel& k, const jit::ObtainedKernel& o) {
      CHECK(o.compiled.name == k.name);
      compiled += o.outcome == jit::KernelCache::Outcome::compiled;
      loaded.push_back(k.name);
      known.insert(k.name);
      return make(k);
    };
    return l;
  }
  static std::shared_ptr<jit::LoadedKernel> make(const templates::Kernel& k) {
    auto loaded = std::make_shared<jit::LoadedKernel>();
    loaded->kernel = k;
    return loaded;
  }
};

Options cache_options(const std::string& dir, std::vector<std::pair<std::string, std::string>> more = {}) {
  more.emplace_back("FUSEJIT_CACHE_DIR", dir);
  more.emplace_back("FUSEJIT_LOG", "error");
  return Options::parse(more);
}

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("fusejit-parallel-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("build_executable compiles a plan's missing kernels in parallel, loads in plan order",
          "[jit][parallel]") {
  const std::string dir = fresh_dir("build");
  auto log = jit::make_logger(LogLevel::error);
  jit::KernelCache cache(cache_options(dir), *log);
  RecordingLoader rec{cache};
  jit::BuildOptions options;
  options.compile_threads = 4;
  const jit::Executable exe = jit::build_executable(fusion::make_plan(four_kernels(1024)),
                                                    rec.loader(), options);
  std::vector<std::string> in_plan;
  for (const jit::Step& s : exe.steps) {
    if (s.kernel) in_plan.push_back(s.kernel->kernel.name);
  }
  REQUIRE(in_plan.size() == 4);
  CHECK(rec.loaded == in_plan);  // loaded in step order, on this thread
  CHECK(rec.compiled == 4);      // exact, whatever thread compiled what
  CHECK(cache.counts().compiled == 4);
  CHECK(rec.most_running >= 2);  // NVRTC ran for two kernels at once at least once
  CHECK(rec.obtain_threads.size() >= 2);

  // Built again (another trace with the same kernels): everything is found, nothing obtained.
  rec.obtain_threads.clear();
  jit::build_executable(fusion::make_plan(four_kernels(1024)), rec.loader(), options);
  CHECK(rec.obtain_threads.empty());
  CHECK(rec.loaded.size() == 4);

  // Another process (a fresh cache and loader): disk hits, none compiled.
  jit::KernelCache second(cache_options(dir), *log);
  RecordingLoader again{second};
  jit::build_executable(fusion::make_plan(four_kernels(1024)), again.loader(), options);
  CHECK(again.compiled == 0);
  CHECK(second.counts().disk_hits == 4);
  fs::remove_all(dir);
}

TEST_CASE("a parallel build reports the first failing kernel in plan order", "[jit][parallel]") {
  const std::string dir = fresh_dir("strict");
  auto log = jit::make_logger(LogLevel::error);
  jit::KernelCache strict(cache_options(dir, {{"FUSEJIT_REQUIRE_WARM", "1"}}), *log);
  RecordingLoader rec{strict};
  const fusion::Plan plan = fusion::make_plan(four_kernels(512));
  std::string first_kernel;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind != fusion::RegionKind::gemm && first_kernel.empty())
      first_kernel = templates::generate(plan.graph, r).name;
  }
  jit::BuildOptions options;
  options.compile_threads = 4;
  CHECK_THROWS_WITH(jit::build_executable(plan, rec.loader(), options),
                    ContainsSubstring("FUSEJIT_REQUIRE_WARM=1") &&
                        ContainsSubstring("kernel " + first_kernel + " for sm_90"));
  CHECK(rec.loaded.empty());
  CHECK(strict.counts().compiled == 0);  // nothing compiled under FUSEJIT_REQUIRE_WARM

  // A kernel NVRTC rejects: its CompileError, with the log, comes back to the caller.
  jit::KernelCache broken(
      cache_options(dir), *log,
      [](const templates::Kernel& k, std::string_view, const jit::CompileOptions&)
          -> jit::CompiledKernel {
        throw CompileError("NVRTC could not compile kernel " + k.name, "", "the log");
      });
  RecordingLoader rec_broken{broken};
  CHECK_THROWS_AS(jit::build_executable(plan, rec_broken.loader(), options), CompileError);
  fs::remove_all(dir);
}

TEST_CASE("a Runtime compiles a plan's kernels in parallel, counts them, and runs them right",
          "[jit][parallel][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  const auto info = jit::probe_device();
  REQUIRE(info);
  const ir::Graph g = four_kernels(4096);
  auto log = jit::make_logger(LogLevel::error);
  // Memory only: every kernel is compiled here, by this Runtime.
  const Options options = Options::parse({{"FUSEJIT_CACHE", "memory"}, {"FUSEJIT_LOG", "error"}});
  Context::Stats stats;
  jit::Runtime rt(*info, options, *log, stats);
  const auto exe = rt.executable_for(g);
  int kernels = 0;
  for (const jit::Step& s : exe->steps) {
    if (!s.kernel) continue;
    ++kernels;
    CHECK(s.kernel->module != nullptr);
    CHECK(s.kernel->function != nullptr);
  }
  CHECK(kernels == 4);
  CHECK(stats.kernels_compiled == 4);
  CHECK(stats.kernel_cache_hits == 0);
  rt.executable_for(g);  // the memo: nothing more compiled
  CHECK(stats.kernels_compiled == 4);

  const testing::GpuCheck check = testing::check_on_gpu(g, 7);
  INFO(check.detail);
  CHECK(check.pass);

  // FUSEJIT_REQUIRE_WARM: the error names a kernel and nothing is compiled.
  const Options strict = Options::parse(
      {{"FUSEJIT_CACHE", "memory"}, {"FUSEJIT_REQUIRE_WARM", "1"}, {"FUSEJIT_LOG", "error"}});
  Context::Stats strict_stats;
  jit::Runtime strict_rt(*info, strict, *log, strict_stats);
  CHECK_THROWS_WITH(strict_rt.executable_for(g), ContainsSubstring("FUSEJIT_REQUIRE_WARM=1"));
  CHECK(strict_stats.kernels_compiled == 0);
}

TEST_CASE(
    "build_executable: a skinny GEMM computes its A, and the region computing A runs no "
    "kernel (a prologue)",
    "[jit][parallel][prologue]") {
  // examples/generate's tiny decode step: per layer an RMS norm before q/k/v and before
  // gate/up, silu(gate) * up before down, and the final norm before the vocabulary projection.
  const ir::Graph g = ir::parse_file(std::string(FUSEJIT_SOURCE_DIR) +
                                     "/test/traces/replay/tiny_decode_step.trace");
  const fusion::Plan plan = fusion::make_plan(g);
  const std::string dir = fresh_dir("prologue");
  auto log = jit::make_logger(LogLevel::error);
  jit::KernelCache cache(cache_options(dir), *log);
  RecordingLoader rec{cache};
  jit::BuildOptions options;
  options.codegen.gemv = GemvMode::on;  // the tiny GEMMs too (auto takes large ones only)
  options.codegen.gemv_prologue = true;
  const jit::Executable exe = jit::build_executable(plan, rec.loader(), options);
  INFO(fusion::plan_to_text(exe.plan));
  // 2 layers x 3 producers, and the final norm: 7 regions fewer, each a prologue's decision.
  CHECK(exe.steps.size() == plan.regions.size() - 7);
  CHECK(exe.plan.regions.size() == exe.steps.size());
  CHECK(exe.kernel_steps == exe.steps.size());  // every step a kernel: one graph launch
  int prologues = 0;
  for (const fusion::Decision& d : exe.plan.decisions) {
    if (d.fused && d.reason.find("(a prologue)") != std::string::npos) ++prologues;
  }
  CHECK(prologues == 7);
  const jit::BufferSlots slots = jit::buffer_slots(exe.plan);
  for (const jit::Step& step : exe.steps) {
    if (step.region->kind != fusion::RegionKind::gemm) continue;
    REQUIRE(step.kernel);
    const ir::NodeId a = step.gemm.a;
    const bool computed = step.arguments.front() != a;
    if (!computed) continue;
    // A: no region writes it, no buffer holds it, no kernel reads it.
    for (const fusion::Region& r : exe.plan.regions) {
      CHECK(std::find(r.outputs.begin(), r.outputs.end(), a) == r.outputs.end());
    }
    CHECK(slots.slot[static_cast<size_t>(a)] == -1);
    // The GEMM's kernel reads what A's producer read, and the step's region lists it, so that
    // those buffers live until this step.
    CHECK(step.arguments.back() == step.gemm.d);
    for (size_t k = 0; k + 1 < step.arguments.size(); ++k) {
      const ir::NodeId id = step.arguments[k];
      CHECK(std::find(step.region->inputs.begin(), step.region->inputs.end(), id) !=
            step.region->inputs.end());
    }
    const std::string& source = step.kernel->kernel.source;
    const bool from_norm = source.find("every block for itself") != std::string::npos;
    const bool from_silu = source.find("silu") != std::string::npos;
    CHECK((from_norm || from_silu));
  }
  // Off (the default): the plan as planned.
  options.codegen.gemv_prologue = false;
  CHECK(jit::build_executable(plan, rec.loader(), options).steps.size() == plan.regions.size());
  fs::remove_all(dir);
}
