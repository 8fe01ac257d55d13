// FUSEJIT_DUMP set through the API on a Context evaluating a trace: the dumps appear whether or
// not there is a GPU. Without one, eval runs the CPU reference and the dumps are those a GPU
// of FUSEJIT_ARCH would run (jit/context.cpp, dump_without_gpu); with one, the GPU's own.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fusejit/fusejit.h"
#include "support/catch.h"

using namespace fusejit;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fusejit_dump_no_gpu_test_" + name);
  fs::remove_all(d);
  return d;
}

// The files of `dir` whose names end with `suffix`.
std::vector<fs::path> files_ending(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().ends_with(suffix)) out.push_back(e.path());
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

// softmax(relu(x) * 2) on a Context with `dump` and FUSEJIT_ARCH=sm_80 (used without a GPU):
// checks the result, returns the dump directory.
fs::path eval_with_dumps(const std::string& name, const std::string& dump) {
  const fs::path dir = fresh_dir(name);
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"},
                              {"FUSEJIT_DUMP", dump},
                              {"FUSEJIT_DUMP_DIR", dir.string()},
                              {"FUSEJIT_ARCH", "sm_80"},
                              {"FUSEJIT_CACHE", "memory"}}));
  const auto x = ctx.from_vector(std::vector<double>(8 * 32, 1.0), {8, 32});
  const std::vector<double> y = softmax(relu(x) * 2.0).to_host();
  REQUIRE(y.size() == 8 * 32);
  CHECK(y[0] == Approx(1.0 / 32));  // a uniform row
  return dir;
}

}  // namespace

TEST_CASE("FUSEJIT_DUMP=all through the API writes the IR, plan, decisions and kernels",
          "[jit][dump]") {
  const fs::path dir = eval_with_dumps("all", "all");
  REQUIRE(files_ending(dir, ".ir").size() == 1);
  REQUIRE(files_ending(dir, ".plan").size() == 1);
  REQUIRE(files_ending(dir, ".decisions").size() == 1);
  CHECK(read(files_ending(dir, ".ir")[0]).find("# as optimized") != std::string::npos);
  CHECK_FALSE(read(files_ending(dir, ".decisions")[0]).empty());
  // The plan names the kernel each region became; its source and PTX are there by that name.
  const std::string plan = read(files_ending(dir, ".plan")[0]);
  const size_t at = plan.find("region 0: fj_");
  REQUIRE(at != std::string::npos);
  const size_t begin = plan.find("fj_", at);
  const std::string kernel = plan.substr(begin, plan.find_first_of(" \n", begin) - begin);
  INFO(plan);
  const std::vector<fs::path> sources = files_ending(dir, ".cu");
  REQUIRE(sources.size() == 1);
  CHECK(sources[0].filename() == kernel + ".cu");
  CHECK(read(sources[0]).find(kernel) != std::string::npos);
  const std::vector<fs::path> ptx = files_ending(dir, ".ptx");
  REQUIRE(ptx.size() == 1);
  CHECK(ptx[0].filename() == kernel + ".ptx");
  CHECK(read(ptx[0]).find(".entry " + kernel) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("FUSEJIT_DUMP=cuda,plan writes the sources without the PTX", "[jit][dump]") {
  const fs::path dir = eval_with_dumps("cuda", "cuda,plan");
  CHECK(files_ending(dir, ".plan").size() == 1);
  CHECK(files_ending(dir, ".cu").size() == 1);
  CHECK(files_ending(dir, ".ptx").empty());
  CHECK(files_ending(dir, ".ir").empty());
  fs::remove_all(dir);
}

TEST_CASE("without a GPU, a dump directory that cannot be written does not fail the eval",
          "[jit][dump]") {
  const fs::path dir = fresh_dir("unwritable");
  fs::create_directories(dir);
  std::ofstream(dir / "a_file") << "x";
  Context ctx(Options::parse({{"FUSEJIT_LOG", "off"},
                              {"FUSEJIT_DUMP", "ir,cuda"},
                              {"FUSEJIT_DUMP_DIR", (dir / "a_file" / "dumps").string()}}));
  if (ctx.has_gpu()) {
    SUCCEED("a GPU is present: its evals dump as the GPU path does");
    return;
  }
  const auto x = ctx.from_vector(std::vector<double>{-1.0, 2.0}, {2});
  CHECK(relu(x).to_host() == std::vector<double>{0.0, 2.0});
  fs::remove_all(dir);
}
