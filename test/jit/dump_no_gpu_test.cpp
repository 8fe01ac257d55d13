// FUSEJIT_DUMP set through the API on a Context evaluating a trace: the dumps appear whether or
// not there is a GPU. Without one, eval runs the CPU reference and the dumps are those a GPU
// of FUSEJIT_ARCH would run (jit/api/context.cpp, dump_without_gpu); with one, the GPU's own.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "support/catch.h"

using namespace fusejit;
namespace fs = std::filesystem;

namespace {

// Every file of `dir` by name, with its contents (none when `dir` is not there).
std::map<std::string, std::string> dumped(const fs::path& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); ++it) {
    std::ifstream in(it->path(), std::ios::binary);
    files[it->path().filename().string()].assign(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// The contents of the files of `files` whose names end with `suffix`.
std::vector<std::string> ending(const std::map<std::string, std::string>& files,
                                const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& [name, text] : files) {
    if (name.ends_with(suffix)) out.push_back(text);
  }
  return out;
}

// softmax(relu(x) * 2) on a Context with `dump` and FUSEJIT_ARCH=sm_80 (used without a GPU):
// checks the result, returns the dump directory.
fs::path eval_with_dumps(const std::string& name, const std::string& dump) {
  const fs::path dir = fs::temp_directory_path() / ("fusejit_dump_no_gpu_test_" + name);
  fs::remove_all(dir);
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
  const std::map<std::string, std::string> files = dumped(dir);
  REQUIRE(ending(files, ".ir").size() == 1);
  REQUIRE(ending(files, ".plan").size() == 1);
  REQUIRE(ending(files, ".decisions").size() == 1);
  CHECK(ending(files, ".ir")[0].find("# as optimized") != std::string::npos);
  CHECK_FALSE(ending(files, ".decisions")[0].empty());
  // After the fusion decisions, the schedule of each kernel: the softmax's rows, with the row
  // scheduler's parameters (templates/schedulers/registry.h).
  CHECK(ending(files, ".decisions")[0].find("# schedules\nregion 0: rows{vector_width=") !=
        std::string::npos);
  // The plan names the kernel each region became; its source and PTX are there by that name.
  const std::string plan = ending(files, ".plan")[0];
  INFO(plan);
  const size_t at = plan.find("region 0: fj_");
  REQUIRE(at != std::string::npos);
  const size_t begin = plan.find("fj_", at);
  const std::string kernel = plan.substr(begin, plan.find_first_of(" \n", begin) - begin);
  CHECK(ending(files, ".cu").size() == 1);
  REQUIRE(files.count(kernel + ".cu") == 1);
  CHECK(files.at(kernel + ".cu").find(kernel) != std::string::npos);
  CHECK(ending(files, ".ptx").size() == 1);
  REQUIRE(files.count(kernel + ".ptx") == 1);
  CHECK(files.at(kernel + ".ptx").find(".entry " + kernel) != std::string::npos);
  CHECK(files.count(kernel + ".kir") == 1);
  fs::remove_all(dir);
}

TEST_CASE("FUSEJIT_DUMP=cuda,plan writes the sources without the PTX", "[jit][dump]") {
  const fs::path dir = eval_with_dumps("cuda", "cuda,plan");
  const std::map<std::string, std::string> files = dumped(dir);
  CHECK(ending(files, ".plan").size() == 1);
  CHECK(ending(files, ".cu").size() == 1);
  CHECK(ending(files, ".ptx").empty());
  CHECK(ending(files, ".ir").empty());
  fs::remove_all(dir);
}

TEST_CASE("FUSEJIT_DUMP=kir writes each kernel's IR after each lowering step", "[jit][dump]") {
  const fs::path dir = eval_with_dumps("kir", "kir");
  const std::map<std::string, std::string> files = dumped(dir);
  CHECK(ending(files, ".cu").empty());
  const std::vector<std::string> kir = ending(files, ".kir");
  REQUIRE(kir.size() == 1);
  INFO(kir[0]);
  // The tree as built (offsets still symbolic), then with every offset lowered to arithmetic.
  const size_t built = kir[0].find("// ==== built ====\nkernel ");
  const size_t placed = kir[0].find("// ==== declarations placed ====\nkernel ");
  const size_t lowered = kir[0].find("// ==== indices lowered ====\nkernel ");
  REQUIRE(built != std::string::npos);
  REQUIRE(placed != std::string::npos);
  REQUIRE(lowered != std::string::npos);
  CHECK(built < placed);
  CHECK(placed < lowered);
  CHECK(kir[0].find("(offset", built) < lowered);
  CHECK(kir[0].find("(offset", lowered) == std::string::npos);
  CHECK(kir[0].find("\nbody\n", lowered) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("without a GPU, a dump directory that cannot be written is a warning, not a failed eval",
          "[jit][dump]") {
  const fs::path dir = fs::temp_directory_path() / "fusejit_dump_no_gpu_test_unwritable";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "a_file") << "x";
  std::vector<std::string> warnings;
  set_log_callback([&](LogLevel level, std::string_view message) {
    if (level == LogLevel::warn) warnings.emplace_back(message);
  });
  {
    Context ctx(Options::parse({{"FUSEJIT_LOG", "warn"},
                                {"FUSEJIT_DUMP", "ir,cuda"},
                                {"FUSEJIT_DUMP_DIR", (dir / "a_file" / "dumps").string()}}));
    if (ctx.has_gpu()) {
      set_log_callback({});
      SUCCEED("a GPU is present: its evals dump as the GPU path does");
      return;
    }
    warnings.clear();  // the Context's own (no GPU, once per process)
    const auto x = ctx.from_vector(std::vector<double>{-1.0, 2.0}, {2});
    CHECK(relu(x).to_host() == std::vector<double>{0.0, 2.0});
  }
  set_log_callback({});
  // The dump warns once per process and kind of file (jit/runtime/dump.cpp), naming the variable to
  // change; ctest runs this case in a process of its own, so the warning is still to come.
  INFO(warnings.size() << " warnings");
  const auto ours = std::find_if(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.find("FUSEJIT_DUMP_DIR") != std::string::npos;
  });
  REQUIRE(ours != warnings.end());
  CHECK(ours->find((dir / "a_file").string()) != std::string::npos);  // names where
  fs::remove_all(dir);
}
