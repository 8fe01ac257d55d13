// The size limit of a tensor (ir/shape.h, kMaxTensorBytes = 2^62 bytes): shapes past it, or whose
// element count overflows 64 bits, are usage errors through the graph API and the trace parser,
// naming the op, the shape and the limit; shapes at it are accepted.
#include <string>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/shape.h"
#include "ir/text.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

constexpr int64_t k2to30 = int64_t{1} << 30;
constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr int64_t k2to40 = int64_t{1} << 40;

std::string trace_of(const std::string& type, const std::string& op_line = "") {
  return "fusejit-trace 1\n%0 : " + type + " = input\n" + op_line + "output %" +
         (op_line.empty() ? "0" : "1") + "\n";
}

}  // namespace

TEST_CASE("checked_mul and checked_numel say when a product overflows", "[ir][limits]") {
  CHECK(checked_mul(3, 5) == 15);
  CHECK(checked_mul(-4, 3) == -12);
  CHECK_FALSE(checked_mul(k2to32, k2to32).has_value());
  CHECK_FALSE(checked_mul(3037000500, 3037000500).has_value());
  CHECK(checked_numel({}) == 1);
  CHECK(checked_numel({k2to30, k2to30}) == int64_t{1} << 60);
  CHECK_FALSE(checked_numel({k2to32, k2to32}).has_value());
  CHECK_FALSE(checked_numel({k2to40, k2to40}).has_value());
  REQUIRE_THROWS_WITH(numel({k2to32, k2to32}), ContainsSubstring("overflows 64 bits"));
}

TEST_CASE("tensors past 2^62 bytes are refused through the graph API", "[ir][limits]") {
  Graph g;
  SECTION("an input whose count wraps to 0") {
    REQUIRE_THROWS_WITH(add_input(g, DType::f32, {k2to32, k2to32}),
                        ContainsSubstring("input (node %0): f32[4294967296,4294967296]") &&
                            ContainsSubstring("limit of 2^62 bytes"));
  }
  SECTION("an input past the limit by its bytes, not its count") {
    CHECK_NOTHROW(add_input(g, DType::boolean, {int64_t{1} << 62}));
    CHECK_NOTHROW(add_input(g, DType::f32, {k2to30, k2to30}));  // exactly 2^62 bytes
    REQUIRE_THROWS_WITH(add_input(g, DType::f32, {(int64_t{1} << 60) + 1}),
                        ContainsSubstring("holds 4611686018427387908 bytes"));
    REQUIRE_THROWS_AS(add_input(g, DType::i64, {3037000500, 3037000500}), UsageError);
    REQUIRE_THROWS_AS(add_input(g, DType::f32, {INT64_MAX}), UsageError);
  }
  SECTION("a reshape between two counts that both wrap to 0") {
    const NodeId x = add_input(g, DType::f32, {4});
    REQUIRE_THROWS_WITH(add_reshape(g, x, {k2to32, k2to32}),
                        ContainsSubstring("reshape") && ContainsSubstring("2^62"));
  }
  SECTION("an expand to nearly INT64_MAX elements") {
    const NodeId x = add_input(g, DType::f32, {1, 1});
    REQUIRE_THROWS_WITH(add_expand(g, x, {INT64_MAX / 2, 2}), ContainsSubstring("expand (node %1)"));
  }
  SECTION("a broadcast whose result is past the limit") {
    const NodeId a = add_input(g, DType::f32, {k2to32, 1});
    const NodeId b = add_input(g, DType::f32, {1, k2to32 + 1});
    REQUIRE_THROWS_WITH(add_binary(g, Op::add, a, b), ContainsSubstring("add (node %2)"));
  }
  SECTION("a concat whose extent overflows") {
    const NodeId a = add_input(g, DType::boolean, {INT64_MAX / 2 + 1});
    REQUIRE_THROWS_AS(add_concat(g, {a, a}, 0), UsageError);
  }
  SECTION("a slice whose step times length overflows") {
    const NodeId a = add_input(g, DType::f32, {100});
    REQUIRE_THROWS_AS(g.add({.op = Op::slice, .inputs = {a}, .shape = {3}, .axes = {0},
                             .start = 0, .step = INT64_MAX / 2 + 1}),
                      UsageError);
  }
  SECTION("a host tensor") {
    REQUIRE_THROWS_AS(HostTensor(DType::f32, {INT64_MAX}), UsageError);
  }
}

TEST_CASE("the trace parser refuses tensors past the limit, naming the line", "[ir][limits]") {
  REQUIRE_THROWS_WITH(parse(trace_of("f32[1099511627776,1099511627776]"), "t"),
                      ContainsSubstring("t:2:") && ContainsSubstring("limit of 2^62 bytes"));
  REQUIRE_THROWS_WITH(parse(trace_of("f32[9223372036854775807]"), "t"),
                      ContainsSubstring("f32[9223372036854775807]"));
  REQUIRE_THROWS_AS(parse(trace_of("f32[4294967296,4294967297]",
                                   "%1 : f32[4294967296] = sum %0 axes=[1]\n")),
                    UsageError);
  REQUIRE_THROWS_AS(parse(trace_of("f32[4]", "%1 : f32[4294967296,4294967296] = reshape %0\n")),
                    UsageError);
  CHECK_NOTHROW(parse(trace_of("f32[1073741824,1073741824]", "%1 : f32[1073741824,1073741824] = "
                                                             "exp %0\n")));
}
