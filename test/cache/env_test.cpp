// The cache's environment variables as the CLI meets them (test/jit/options_test.cpp checks
// their parsing): bad values stop `warm` and `cache` with the variable named, the default
// directory follows XDG_CACHE_HOME, and FUSEJIT_REQUIRE_WARM does not stop warming.
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "jit/runtime/nvrtc.h"
#include "support.h"

using namespace fusejit;
using test::CliResult;
using test::run_cli;
using test::TempDir;

namespace {
const std::string kTrace = std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces/sumsq_f32.trace";
}

TEST_CASE("env: bad cache variables stop warm and cache, naming the variable", "[cache][env]") {
  TempDir dir("env-bad");
  const std::string at = " --cache-dir " + dir.str("cache") + " ";
  struct Case {
    const char* env;
    const char* says;
  };
  for (const Case& c : {Case{"FUSEJIT_CACHE=disk", "valid values: on, memory, off"},
                        Case{"FUSEJIT_CACHE_MAX_MB=lots", "FUSEJIT_CACHE_MAX_MB=lots"},
                        Case{"FUSEJIT_ARCH=hopper", "sm_NN"}}) {
    for (const std::string& command : {"warm --arch sm_90" + at + kTrace, "cache stats" + at}) {
      INFO(c.env << " fusejit " << command);
      const CliResult r = run_cli(command, c.env);
      CHECK(r.status == 1);
      CHECK_THAT(r.out, ContainsSubstring(c.says));
    }
  }
  CHECK_FALSE(std::filesystem::exists(dir.str("cache")));
}

TEST_CASE("env: an unknown FUSEJIT_* variable is a warning that does not stop the CLI",
          "[cache][env]") {
  TempDir dir("env-unknown");
  const CliResult r = run_cli("cache stats --cache-dir " + dir.str("cache"),
                              "FUSEJIT_CACHE_DIRECTORY=/tmp");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring("fusejit: warning: FUSEJIT_CACHE_DIRECTORY is not a fusejit "
                                      "variable"));
}

TEST_CASE("env: the default cache directory, FUSEJIT_CACHE_DIR, FUSEJIT_REQUIRE_WARM",
          "[cache][env]") {
  TempDir dir("env-dirs");
  // No FUSEJIT_CACHE_DIR: $XDG_CACHE_HOME/fusejit.
  CliResult r = run_cli("cache stats", "XDG_CACHE_HOME=" + dir.str("xdg"));
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring(dir.str("xdg") + "/fusejit"));
  // Warming is compiling: FUSEJIT_REQUIRE_WARM=1 in the environment does not stop it.
  r = run_cli("warm --arch sm_90 " + kTrace,
              "FUSEJIT_REQUIRE_WARM=1 FUSEJIT_CACHE_DIR=" + dir.str("cache"));
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring("compiled: 1  cached: 0  failed: 0"));
  r = run_cli("cache stats", "FUSEJIT_CACHE_DIR=" + dir.str("cache"));
  CHECK_THAT(r.out, ContainsSubstring("entries: 1 "));
}

TEST_CASE("env: FUSEJIT_NVRTC_OPTIONS takes only options that cannot change results",
          "[cache][env]") {
  const auto parse = [](const std::string& value) {
    return Options::parse({{"FUSEJIT_NVRTC_OPTIONS", value}}).nvrtc_options;
  };
  // Refused, each with the list of what is accepted: a macro can rename any function the
  // kernel calls (softmax's expf), and ptxas's --fmad changes every contraction.
  for (const char* bad :
       {"-Dexpf=logf", "--ptxas-options=--fmad=false", "--ptxas-options=-v,--fmad=false",
        "-Xptxas=--fmad=false", "--maxrregcount=abc", "--maxrregcount", "--Ofast-compile=fast",
        "-lineinfo=1", "-G", "--device-debug", "--use_fast_math", "-I/usr/include",
        "--pre-include=x.h", "-ftz=true", "--no-such"}) {
    INFO(bad);
    try {
      parse(std::string("-lineinfo ") + bad);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK_THAT(e.what(), ContainsSubstring(std::string("FUSEJIT_NVRTC_OPTIONS: ") + bad));
      CHECK_THAT(e.what(), ContainsSubstring("accepted: --Ofast-compile={0|min|mid|max}"));
      CHECK_THAT(e.what(), ContainsSubstring("--maxrregcount=N"));
    }
  }
  // Accepted, and NVRTC compiles with each of them (the list names no option it lacks).
  const std::vector<std::string> good = {"--Ofast-compile=mid",
                                         "-Ofc=max",
                                         "--generate-line-info",
                                         "-lineinfo",
                                         "--maxrregcount=64",
                                         "-maxrregcount=32",
                                         "--extra-device-vectorization",
                                         "-extra-device-vectorization",
                                         "--split-compile=2",
                                         "-split-compile=1",
                                         "--disable-warnings",
                                         "-w",
                                         "--ptxas-options=-v",
                                         "--ptxas-options=--warn-on-spills"};
  std::string all;
  for (const std::string& g : good) all += " " + g;
  CHECK(parse(all) == good);
  const templates::Kernel k = test::tiny_kernel(41);
  for (const std::string& g : good) {
    INFO(g);
    CHECK_NOTHROW(jit::compile(k, "sm_90", {.extra = {g}}));
  }
}
