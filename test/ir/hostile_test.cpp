// Hostile input to the IR layer: traces and graph calls built to overflow a bound (the count of
// dynamic dims, the size of a trace file, 64-bit slice arithmetic) get a message that names
// what was wrong, never an internal error or a wrapped value.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/symbolic.h"
#include "ir/text.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

// A version-2 trace with `count` dynamic dims D0, D1, ..., each the extent of one input.
std::string trace_with_dynamic_dims(size_t count) {
  std::string dynamic = "dynamic ";
  std::string nodes;
  for (size_t k = 0; k < count; ++k) {
    dynamic += (k == 0 ? "" : ", ") + fmt::format("D{}=2", k);
    nodes += fmt::format("%{} : f32[D{}] = input\n", k, k);
  }
  return "fusejit-trace 2\n" + dynamic + "\n" + nodes + "output %0\n";
}

std::string scratch_file(const std::string& name, const std::string& bytes) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

}  // namespace

TEST_CASE("a trace with more dynamic dims than a graph may have is refused by name",
          "[ir][hostile]") {
  CHECK_NOTHROW(parse_symbolic(trace_with_dynamic_dims(kMaxDynamicDims)));
  // 4,000 dims used to run past the primes below 2^15 (an out-of-range index, no message).
  for (size_t count : {kMaxDynamicDims + 1, size_t{4000}}) {
    REQUIRE_THROWS_WITH(parse_symbolic(trace_with_dynamic_dims(count)),
                        ContainsSubstring(fmt::format("dynamic dim D{} is one too many",
                                                      kMaxDynamicDims)) &&
                            ContainsSubstring("at most 4 dynamic dims") &&
                            ContainsSubstring("<trace>:2:"));
  }
  REQUIRE_THROWS_AS(choose_sentinels(kMaxDynamicDims + 1, {}), InternalError);
}

TEST_CASE("reading a trace file refuses binary files and devices instead of exhausting memory",
          "[ir][hostile]") {
  const std::string text = scratch_file("hostile_ir_text.trace",
                                        "fusejit-trace 1\n%0 : f32[4] = input\noutput %0\n");
  CHECK(parse_file(text).size() == 1);
  const std::string binary =
      scratch_file("hostile_ir_binary.trace", std::string("fusejit-trace 1\n\0\0", 18));
  REQUIRE_THROWS_WITH(read_trace_file(binary),
                      ContainsSubstring("is not a trace: it holds a NUL byte at offset 16"));
  if (std::filesystem::exists("/dev/zero")) {
    REQUIRE_THROWS_WITH(parse_file("/dev/zero"),
                        ContainsSubstring("'/dev/zero' is not a trace") &&
                            ContainsSubstring("offset 0"));
  }
  std::filesystem::remove(text);
  std::filesystem::remove(binary);
}

TEST_CASE("slices with steps near 2^63 are exact, not overflowed", "[ir][hostile]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {4});
  SECTION("a step of INT64_MAX takes one element, with step 1") {
    const NodeSpec s = slice_spec(g, x, 0, 2, INT64_MAX, INT64_MAX);
    CHECK(s.shape == Shape{1});
    CHECK(s.start == 2);
    CHECK(s.step == 1);
    CHECK_NOTHROW(g.add(s));
  }
  SECTION("large steps still count their elements") {
    CHECK(slice_spec(g, x, 0, 0, INT64_MAX, 3).shape == Shape{2});
    CHECK(slice_spec(g, x, 0, -3, INT64_MAX, INT64_MAX - 1).shape == Shape{1});
    CHECK(slice_spec(g, x, 0, 0, 4, 2).step == 2);
  }
  SECTION("a parsed slice of one element may state any step") {
    const Graph p = parse(
        "fusejit-trace 1\n%0 : f32[4] = input\n"
        "%1 : f32[1] = slice %0 axis=0 start=3 step=9223372036854775807\noutput %1\n");
    CHECK(p.node(1).step == INT64_MAX);
  }
}

TEST_CASE("a concat that adds a dynamic extent to a static one is refused in the dims' names",
          "[ir][hostile]") {
  const std::string head =
      "fusejit-trace 2\ndynamic B=8\n%0 : f32[B,4] = input\n%1 : f32[3,4] = input\n";
  // The sum used to surface as a stand-in prime plus 3 ("f32[32752,4]").
  const auto refused = [](const std::string& text) {
    try {
      parse_symbolic(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string why = refused(head + "%2 : f32[11,4] = concat %0, %1 axis=0\noutput %2\n");
  CHECK_THAT(why, ContainsSubstring("the extents B + 3 add up to no dim"));
  CHECK_THAT(why, !ContainsSubstring("3275"));
  // Extents of one form add; along a static axis anything goes.
  CHECK_NOTHROW(parse_symbolic(head + "%2 : f32[2*B,4] = concat %0, %0 axis=0\noutput %2\n"));
  CHECK_NOTHROW(parse_symbolic(
      "fusejit-trace 2\ndynamic B=8\n%0 : f32[4,B] = input\n%1 : f32[3,B] = input\n"
      "%2 : f32[7,B] = concat %0, %1 axis=0\noutput %2\n"));
}
