// The tests' main: Catch2's own (v2 and v3 alike), run inside a scratch directory unique to
// this process, with an exit code that tells skipped from passed.
//
// Before any test runs, main makes $TMPDIR/fusejit-test-<pid>-XXXXXX and points TMPDIR and
// XDG_CACHE_HOME at it, so that every file a test, the library (NVRTC's failed sources, the
// default disk cache) or a child process (the CLI tests) writes lands there: two suites, or two
// ctest entries of one suite, can run at once without sharing a path. The directory is removed
// when the run ends; FUSEJIT_KEEP_TEST_SCRATCH=1 keeps it (its path is printed) for debugging.
//
// Exit codes: Catch2's, except that a run which ran test cases and skipped every one of them
// (FUSEJIT_SKIP, test/support/catch.h), with nothing failed, exits with
// FUSEJIT_TEST_SKIPPED_EXIT_CODE (4, Catch2 v3's own code for it; test/CMakeLists.txt gives it to
// ctest as SKIP_RETURN_CODE), and a run with a failure never does: Catch2 v2, and v3 before 3.5,
// exit with the number of failed assertions, which may be 4. Under v2, whose runs count a
// skipped test case as passed, main also prints how many were skipped. A run of several test
// cases is never cut short by a skip: the test case returns and the next one runs.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#if FUSEJIT_CATCH2_V3
#include <catch2/catch_session.hpp>
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>
using ListenerBase = Catch::EventListenerBase;
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
using ListenerBase = Catch::TestEventListenerBase;
#endif

namespace {

constexpr int kSkippedExitCode = FUSEJIT_TEST_SKIPPED_EXIT_CODE;

// What the run did, as the listener below saw it.
struct RunCounts {
  std::size_t test_cases = 0;
  std::size_t skipped = 0;  // test cases
  std::size_t failed = 0;   // failed assertions and test cases
};
RunCounts run_counts;
#if !FUSEJIT_CATCH2_V3
bool current_case_skipped = false;  // FUSEJIT_SKIP ran in the running test case
#endif

class RunCounter : public ListenerBase {
 public:
  using ListenerBase::ListenerBase;
#if !FUSEJIT_CATCH2_V3
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    if (current_case_skipped) ++run_counts.skipped;
    current_case_skipped = false;
    ListenerBase::testCaseEnded(stats);
  }
#endif
  void testRunEnded(Catch::TestRunStats const& stats) override {
    run_counts.test_cases = stats.totals.testCases.total();
    run_counts.failed = stats.totals.assertions.failed + stats.totals.testCases.failed;
#if FUSEJIT_CATCH2_V3
    run_counts.skipped = stats.totals.testCases.skipped;
#endif
    ListenerBase::testRunEnded(stats);
  }
};

// Catch2's exit code, made to say "skipped" exactly when every test case that ran was.
int exit_code(int catch_code) {
  if (run_counts.failed > 0) return catch_code == kSkippedExitCode ? 1 : catch_code;
  const bool all_skipped = run_counts.test_cases > 0 && run_counts.skipped == run_counts.test_cases;
  return catch_code == 0 && all_skipped ? kSkippedExitCode : catch_code;
}

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

CATCH_REGISTER_LISTENER(RunCounter)

#if !FUSEJIT_CATCH2_V3
namespace fusejit::testing {
void mark_test_case_skipped() { current_case_skipped = true; }
}  // namespace fusejit::testing
#endif

int main(int argc, char* argv[]) {
  const char* keep = std::getenv("FUSEJIT_KEEP_TEST_SCRATCH");
  const bool keep_scratch = keep && std::string(keep) == "1";
  drop_script_variables();
  const std::string scratch = enter_scratch_directory();
  Catch::Session session;
  const int rc = exit_code(session.run(argc, argv));
#if !FUSEJIT_CATCH2_V3
  // After the console reporter's totals; never into another reporter's XML or JUnit.
  if (run_counts.skipped > 0 && session.configData().reporterName == "console") {
    std::printf("test cases skipped: %zu of %zu (each says why, above: SKIPPED)\n",
                run_counts.skipped, run_counts.test_cases);
  }
#endif
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
