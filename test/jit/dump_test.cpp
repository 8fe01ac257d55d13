// FUSEJIT_RECORD_DIR and FUSEJIT_DUMP=ir,plan,decisions, with no GPU: the recorded traces parse
// back and are deduplicated; the per-eval dumps name the kernels each region became; writers
// racing on one file each succeed, and a file that cannot be written never fails an eval.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/runtime/dump.h"
#include "jit/runtime/executor.h"
#include "support/catch.h"

using namespace fusejit;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fusejit_dump_test_" + name);
  fs::remove_all(d);
  return d;
}

std::vector<fs::path> files_in(const fs::path& d) {
  std::vector<fs::path> out;
  if (fs::exists(d)) {
    for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("FUSEJIT_RECORD_DIR saves each evaluated trace once", "[jit][record]") {
  const fs::path dir = fresh_dir("record");
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_RECORD_DIR", dir.string()}}));
  for (int i = 0; i < 3; ++i) {
    const auto x = ctx.from_vector(std::vector<double>(12, 1.0 + i), {3, 4});
    (relu(x) * 2.0).to_host();
  }
  REQUIRE(files_in(dir).size() == 1);  // the same trace three times
  const auto y = ctx.from_vector(std::vector<double>(10, 1.0), {2, 5});
  softmax(y).to_host();
  const auto files = files_in(dir);
  REQUIRE(files.size() == 2);
  for (const fs::path& f : files) {
    CHECK(f.extension() == ".trace");
    const ir::Graph g = ir::parse_file(f.string());  // a recorded trace is a valid trace
    CHECK_FALSE(g.outputs().empty());
  }
}

TEST_CASE("FUSEJIT_RECORD_DIR saves one trace for a dropout drawn with many seeds",
          "[jit][record][random]") {
  // A training loop's dropout, a new seed and offset each step: the seed is data, so the trace
  // (and what `fusejit warm` compiles from it) is the same every step.
  const fs::path dir = fresh_dir("record_random");
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_RECORD_DIR", dir.string()}}));
  const auto x = ctx.from_vector(std::vector<double>(12, 1.0), {3, 4});
  for (uint64_t step = 0; step < 5; ++step) dropout(x, 0.1, 1000 + step, step).to_host();
  const auto files = files_in(dir);
  REQUIRE(files.size() == 1);
  const std::string text = read(files[0]);
  CHECK(text.find(" : i64[2] = input\n") != std::string::npos);
  CHECK(text.find(" : f32[3,4] = rand %") != std::string::npos);
  CHECK(text.find("seed") == std::string::npos);
}

TEST_CASE("FUSEJIT_DUMP=ir,plan,decisions writes one set of files per planned trace", "[jit][dump]") {
  const fs::path dir = fresh_dir("eval");
  const Options options = Options::parse(
      {{"FUSEJIT_DUMP", "ir,plan,decisions"}, {"FUSEJIT_DUMP_DIR", dir.string()}});
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::f32, {8, 64});
  const ir::NodeId w = ir::add_input(g, DType::f32, {64, 16});
  const ir::NodeId h = ir::add_matmul(g, ir::add_unary(g, ir::Op::exp, x), w);
  g.set_outputs({ir::add_unary(g, ir::Op::sigmoid, h)});
  // Kernels are generated but not compiled or loaded: no GPU is needed for the dump.
  jit::KernelLoader loader;
  loader.find = [](const templates::Kernel& k) {
    auto loaded = std::make_shared<jit::LoadedKernel>();
    loaded->kernel = k;
    return loaded;
  };
  const jit::Executable exe = jit::build_executable(fusion::make_plan(g), loader, {});
  jit::dump_eval(options, g, exe, *spdlog::default_logger());
  const auto files = files_in(dir);
  REQUIRE(files.size() == 3);
  const std::string ir_text = read(files[2].extension() == ".ir" ? files[2] : files[1]);
  std::string plan_text, decisions_text;
  for (const fs::path& f : files) {
    if (f.extension() == ".plan") plan_text = read(f);
    if (f.extension() == ".decisions") decisions_text = read(f);
  }
  CHECK(ir_text.find("# as optimized") != std::string::npos);
  CHECK(plan_text.find("region 0: fj_pointwise_") != std::string::npos);
  CHECK(plan_text.find("cublasLt 8x16x64") != std::string::npos);
  CHECK(plan_text.find("region 2: fj_pointwise_") != std::string::npos);
  CHECK(decisions_text.find("matmul") != std::string::npos);
}

TEST_CASE("FUSEJIT_RECORD_DIR: writers recording the same trace at once all succeed",
          "[jit][record]") {
  // Each round, four writers find the trace unrecorded and write it at once: each through its
  // own temporary file, so none fails and the file is whole.
  const fs::path dir = fresh_dir("record_race");
  const Options options =
      Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_RECORD_DIR", dir.string()}});
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::f32, {4, 8});
  g.set_outputs({ir::add_unary(g, ir::Op::exp, x)});
  const ir::SymbolicGraph trace{g, {}};
  std::ostringstream sink_text;
  spdlog::logger log("record_race", std::make_shared<spdlog::sinks::ostream_sink_mt>(sink_text));
  std::atomic<int> failures{0};
  for (int round = 0; round < 50; ++round) {
    fs::remove_all(dir);
    std::atomic<int> ready{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      writers.emplace_back([&] {
        ++ready;
        while (ready.load() < 4) {
        }
        try {
          jit::record_trace(options, trace, log);
        } catch (...) {
          ++failures;
        }
      });
    }
    for (std::thread& t : writers) t.join();
    const auto files = files_in(dir);
    REQUIRE(files.size() == 1);
    CHECK(ir::parse_file(files[0].string()).outputs().size() == 1);
  }
  CHECK(failures == 0);
  CHECK(sink_text.str().empty());
}

TEST_CASE("FUSEJIT_RECORD_DIR and FUSEJIT_DUMP_DIR that cannot be written do not fail an eval",
          "[jit][record][dump]") {
  const fs::path dir = fresh_dir("unwritable");
  fs::create_directories(dir);
  std::ofstream(dir / "afile") << "not a directory";
  const std::string below_a_file = (dir / "afile" / "sub").string();
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"},
                              {"FUSEJIT_RECORD_DIR", below_a_file},
                              {"FUSEJIT_DUMP", "ir,plan,decisions"},
                              {"FUSEJIT_DUMP_DIR", below_a_file}}));
  for (int i = 0; i < 2; ++i) {
    const auto x = ctx.from_vector(std::vector<double>(6, 2.0 + i), {2, 3});
    std::vector<double> out;
    REQUIRE_NOTHROW(out = (x * 3.0).to_host());
    CHECK(out == std::vector<double>(6, 3.0 * (2.0 + i)));
  }
  CHECK(files_in(dir).size() == 1);
}
