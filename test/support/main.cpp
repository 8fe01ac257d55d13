// The tests' main: Catch2's own (v2 and v3 alike), run inside a scratch directory unique to
// this process.
//
// Before any test runs, main makes $TMPDIR/fusejit-test-<pid>-XXXXXX and points TMPDIR and
// XDG_CACHE_HOME at it, so that every file a test, the library (NVRTC's failed sources, the
// default disk cache) or a child process (the CLI tests) writes lands there: two suites, or two
// ctest entries of one suite, can run at once without sharing a path. The directory is removed
// when the run ends; FUSEJIT_KEEP_TEST_SCRATCH=1 keeps it (its path is printed) for debugging.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#if FUSEJIT_CATCH2_V3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

namespace {

// Makes the scratch directory and exports it; returns its path ("" if it could not be made,
// after saying why: the tests then use the inherited TMPDIR, as before).
std::string enter_scratch_directory() {
  const char* parent = std::getenv("TMPDIR");
  std::string pattern = (parent && *parent) ? parent : "/tmp";
  pattern += "/fusejit-test-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror(("fusejit tests: cannot make a scratch directory " + pattern).c_str());
    return {};
  }
  // Traversable by others, as /tmp is: some tests drop root privileges in a child process and
  // must still reach the files they made here.
  std::error_code ec;
  std::filesystem::permissions(
      pattern,
      std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
          std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
          std::filesystem::perms::others_exec,
      ec);
  setenv("TMPDIR", pattern.c_str(), 1);
  setenv("XDG_CACHE_HOME", (pattern + "/xdg-cache").c_str(), 1);
  return pattern;
}

// The scripts' own variables (scripts/test's FUSEJIT_SKIP_ASAN, FUSEJIT_FUZZ_SECONDS, ...) are
// not the library's: a Context warns about an unknown FUSEJIT_* name, and tests that count a
// program's warnings would count those. The tests see the environment a user's program would.
void drop_script_variables() {
  static constexpr const char* kScriptVariables[] = {
      "FUSEJIT_SKIP_TSAN",        "FUSEJIT_SKIP_ASAN",     "FUSEJIT_SKIP_FUZZ",
      "FUSEJIT_FUZZ_SECONDS",     "FUSEJIT_FUZZ_CXX",      "FUSEJIT_FUZZ_BUILD_DIR",
      "FUSEJIT_ASAN_BUILD_DIR",   "FUSEJIT_SETUP_DRY_RUN", "FUSEJIT_CCACHE",
      "FUSEJIT_KEEP_TEST_SCRATCH"};
  for (const char* name : kScriptVariables) unsetenv(name);
}

}  // namespace

int main(int argc, char* argv[]) {
  const char* keep = std::getenv("FUSEJIT_KEEP_TEST_SCRATCH");
  const bool keep_scratch = keep && std::string(keep) == "1";
  drop_script_variables();
  const std::string scratch = enter_scratch_directory();
  const int rc = Catch::Session().run(argc, argv);
  if (!scratch.empty()) {
    if (keep_scratch) {
      std::fprintf(stderr, "fusejit tests: scratch kept in %s\n", scratch.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
    }
  }
  return rc;
}
