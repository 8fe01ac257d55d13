// One include for Catch2 v2 (Debian 12) and v3 (the GPU machine).
#pragma once

#if FUSEJIT_CATCH2_V3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
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
