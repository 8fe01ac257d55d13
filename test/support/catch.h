// One include for Catch2 v2 (Debian 12) and v3 (the GPU machine).
#pragma once

#if FUSEJIT_CATCH2_V3
// All of v3, not the headers the tests use today: CI builds against v2 alone, so a test that
// starts using a v3 facility from a header not listed here (GENERATE did, in 4ff46ff) would
// break only the GPU machine's build.
#include <catch2/catch_all.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif

#if FUSEJIT_CATCH2_V3
using Catch::Matchers::ContainsSubstring;
#else
// Catch2 v2 calls the substring matcher Contains.
inline auto ContainsSubstring(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif

// REQUIRE_THROWS_WITH(expr, ContainsSubstring("...")) works on both versions.

// FUSEJIT_SKIP(message) ends the running test case as skipped, not passed, saying why; the
// message streams like INFO's ("no GPU (" << why << ")"). Call it from a TEST_CASE's body (under
// v2 it returns from the enclosing function).
//   v3: Catch2's SKIP (3.3 and later): the test case counts as skipped, and a run in which every
//       test case was skipped exits with 4.
//   v2: there is no skip, so it WARNs "SKIPPED: message", tells test/support/main.cpp, and
//       returns: the test case reads as passed in Catch2's own counts, and the run goes on to the
//       next one. main then prints how many test cases were skipped, and exits with 4, as v3
//       does, when every test case it ran was skipped and none failed.
// ctest runs each test case in a process of its own and takes exit code 4 as "skipped"
// (SKIP_RETURN_CODE, set in test/CMakeLists.txt), so on both versions its counts say what ran.
#if FUSEJIT_CATCH2_V3
#define FUSEJIT_SKIP(...) SKIP(__VA_ARGS__)
#else
namespace fusejit::testing {
// Marks the running test case as skipped (for main's count and exit code).
void mark_test_case_skipped();
}  // namespace fusejit::testing
#define FUSEJIT_SKIP(...)                               \
  do {                                                  \
    ::fusejit::testing::mark_test_case_skipped();       \
    WARN("SKIPPED: " << __VA_ARGS__);                   \
    return;                                             \
  } while (0)
#endif
