// The graph passes, one at a time: a trace in, one pass, the trace out.
#include <cmath>
#include <string>

#include "fusion/common_subexpressions.h"
#include "fusion/dead_code.h"
#include "fusion/fold_constants.h"
#include "fusion/pipeline.h"
#include "fusion/simplify.h"
#include "ir/text.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::fusion;

namespace {

constexpr std::string_view kHeader = "fusejit-trace 1\n";

// Parses `body` (the trace without its header), runs `pass`, prints the result without its
// header.
std::string run(ir::Graph (*pass)(ir::Graph), const std::string& body) {
  const std::string text = ir::print(pass(ir::parse(std::string(kHeader) + body)));
  REQUIRE(text.rfind(kHeader, 0) == 0);
  return text.substr(kHeader.size());
}

// A pass that changes nothing gives back its input, equal and unrenumbered.
void check_unchanged(ir::Graph (*pass)(ir::Graph), const std::string& body) {
  const ir::Graph in = ir::parse(std::string(kHeader) + body);
  CHECK(pass(in) == in);
}

double constant_at(const ir::Graph& g, ir::NodeId id) {
  REQUIRE(g.node(id).op == ir::Op::constant);
  return g.node(id).value;
}

}  // namespace

TEST_CASE("dead code elimination keeps what outputs need and every input", "[fusion][dce]") {
  CHECK(run(eliminate_dead_code,
            "%0 : f32[4] = input\n"
            "%1 : f32[4] = exp %0\n"
            "%2 : f32[4] = input\n"
            "%3 : f32[4] = log %2\n"
            "%4 : f32[4] = neg %3\n"
            "%5 : f32[4] = sqrt %0\n"
            "output %4, %1\n") ==
        "%0 : f32[4] = input\n"
        "%1 : f32[4] = exp %0\n"
        "%2 : f32[4] = input\n"
        "%3 : f32[4] = log %2\n"
        "%4 : f32[4] = neg %3\n"
        "output %4, %1\n");
  // An unused input stays, in its place: data is bound to inputs by position.
  CHECK(run(eliminate_dead_code,
            "%0 : f32[4] = input\n"
            "%1 : f32[4] = exp %0\n"
            "%2 : f32[4] = input\n"
            "%3 : f32[] = const 2\n"
            "%4 : f32[4] = mul %2, %3\n"
            "output %2\n") ==
        "%0 : f32[4] = input\n"
        "%1 : f32[4] = input\n"
        "output %1\n");
  check_unchanged(eliminate_dead_code, "%0 : f32[4] = input\n%1 : f32[4] = exp %0\noutput %1\n");
}

TEST_CASE("common subexpressions merge, commutative operands in either order", "[fusion][cse]") {
  CHECK(run(eliminate_common_subexpressions,
            "%0 : f32[4,8] = input\n"
            "%1 : f32[8] = input\n"
            "%2 : f32[4,8] = add %0, %1\n"
            "%3 : f32[4,8] = add %1, %0\n"
            "%4 : f32[4,8] = exp %2\n"
            "%5 : f32[4,8] = exp %3\n"
            "%6 : f32[4,8] = sub %4, %5\n"
            "output %6\n") ==
        "%0 : f32[4,8] = input\n"
        "%1 : f32[8] = input\n"
        "%2 : f32[4,8] = add %0, %1\n"
        "%3 : f32[4,8] = exp %2\n"
        "%4 : f32[4,8] = sub %3, %3\n"
        "output %4\n");
  // sub is not commutative; two inputs of one type are two inputs; attributes count.
  check_unchanged(eliminate_common_subexpressions,
                  "%0 : f32[4,4] = input\n"
                  "%1 : f32[4,4] = input\n"
                  "%2 : f32[4,4] = sub %0, %1\n"
                  "%3 : f32[4,4] = sub %1, %0\n"
                  "%4 : f32[4] = sum %0 axes=[0]\n"
                  "%5 : f32[4] = sum %0 axes=[1]\n"
                  "%6 : f32[4,1] = sum %0 axes=[1] keepdim\n"
                  "output %2, %3, %4, %5, %6\n");
  // Equal constants merge; 0.0 and -0.0 do not.
  CHECK(run(eliminate_common_subexpressions,
            "%0 : f32[4] = input\n"
            "%1 : f32[] = const 2\n"
            "%2 : f32[] = const 2\n"
            "%3 : f32[] = const 0\n"
            "%4 : f32[] = const -0\n"
            "%5 : f32[4] = mul %0, %1\n"
            "%6 : f32[4] = add %5, %2\n"
            "%7 : f32[4] = add %6, %3\n"
            "%8 : f32[4] = add %7, %4\n"
            "output %8\n") ==
        "%0 : f32[4] = input\n"
        "%1 : f32[] = const 2\n"
        "%2 : f32[] = const 0\n"
        "%3 : f32[] = const -0\n"
        "%4 : f32[4] = mul %0, %1\n"
        "%5 : f32[4] = add %4, %1\n"
        "%6 : f32[4] = add %5, %2\n"
        "%7 : f32[4] = add %6, %3\n"
        "output %7\n");
  // Merged outputs keep their positions.
  CHECK(run(eliminate_common_subexpressions,
            "%0 : f32[4] = input\n%1 : f32[4] = exp %0\n%2 : f32[4] = exp %0\noutput %2, %1\n") ==
        "%0 : f32[4] = input\n%1 : f32[4] = exp %0\noutput %1, %1\n");
}

TEST_CASE("constant folding computes as the reference does, rounding included", "[fusion][fold]") {
  CHECK(run(fold_constants,
            "%0 : f32[4] = input\n"
            "%1 : f32[] = const 2\n"
            "%2 : f32[] = const 3\n"
            "%3 : f32[] = mul %1, %2\n"
            "%4 : f32[] = neg %3\n"
            "%5 : f32[4] = add %0, %4\n"
            "output %5\n") ==
        "%0 : f32[4] = input\n"
        "%1 : f32[] = const 2\n"
        "%2 : f32[] = const 3\n"
        "%3 : f32[] = const 6\n"
        "%4 : f32[] = const -6\n"
        "%5 : f32[4] = add %0, %4\n"
        "output %5\n");

  auto folded = [](const std::string& body) {
    const ir::Graph g = fold_constants(ir::parse(std::string(kHeader) + body));
    return constant_at(g, g.outputs().at(0));
  };
  // 1 + 2^-8 is a tie in bf16 and rounds to even: 1.
  CHECK(folded("%0 : bf16[] = const 1\n%1 : bf16[] = const 0.00390625\n"
               "%2 : bf16[] = add %0, %1\noutput %2\n") == 1.0);
  // f32 arithmetic, not double.
  CHECK(folded("%0 : f32[] = const 0.1\n%1 : f32[] = const 0.2\n%2 : f32[] = add %0, %1\n"
               "output %2\n") == static_cast<double>(0.1f + 0.2f));
  // Casts truncate; comparisons give bool; where selects.
  CHECK(folded("%0 : f32[] = const -3.7\n%1 : i32[] = cast %0\noutput %1\n") == -3.0);
  CHECK(folded("%0 : f32[] = const 1\n%1 : f32[] = const 2\n%2 : bool[] = lt %0, %1\n"
               "%3 : f32[] = where %2, %0, %1\noutput %3\n") == 1.0);
  // NaN is a value like any other: 0 * inf folds to NaN.
  CHECK(
      std::isnan(folded("%0 : f32[] = const 0\n%1 : f32[] = const inf\n"
                        "%2 : f32[] = mul %0, %1\noutput %2\n")));

  // Integers fold exactly, past 2^53 and at the ends of i64 (wrapping as the reference does).
  auto folded_integer = [](const std::string& body) {
    const ir::Graph g = fold_constants(ir::parse(std::string(kHeader) + body));
    return g.node(g.outputs().at(0)).integer;
  };
  CHECK(folded_integer("%0 : i64[] = const 9007199254740992\n%1 : i64[] = const 1\n"
                       "%2 : i64[] = add %0, %1\noutput %2\n") == 9007199254740993);
  CHECK(folded_integer("%0 : i64[] = const 9223372036854775807\n%1 : i64[] = const 1\n"
                       "%2 : i64[] = add %0, %1\noutput %2\n") == INT64_MIN);
  CHECK(folded_integer("%0 : i64[] = const 9223372036854775807\n%1 : i64[] = neg %0\n"
                       "output %1\n") == -INT64_MAX);

  // An operand that is not a constant stops folding; so does a view.
  check_unchanged(fold_constants,
                  "%0 : f32[] = input\n%1 : f32[] = const 2\n%2 : f32[] = mul %0, %1\noutput %2\n");
  check_unchanged(fold_constants,
                  "%0 : f32[] = const 2\n%1 : f32[4] = expand %0\n%2 : f32[4] = exp %1\n"
                  "output %2\n");
}

TEST_CASE("simplification rewrites only what is exact for every value", "[fusion][simplify]") {
  CHECK(run(simplify,
            "%0 : f32[4] = input\n"
            "%1 : f32[] = const 1\n"
            "%2 : f32[4] = mul %1, %0\n"
            "%3 : f32[4] = div %2, %1\n"
            "%4 : f32[] = const -0\n"
            "%5 : f32[4] = add %3, %4\n"
            "%6 : f32[] = const 0\n"
            "%7 : f32[4] = sub %5, %6\n"
            "%8 : f32[4] = neg %7\n"
            "%9 : f32[4] = neg %8\n"
            "%10 : f32[4] = cast %9\n"
            "output %10\n") ==
        "%0 : f32[4] = input\n"
        "%1 : f32[] = const 1\n"
        "%2 : f32[] = const -0\n"
        "%3 : f32[] = const 0\n"
        "%4 : f32[4] = neg %0\n"  // left for eliminate_dead_code
        "output %0\n");

  // NaN- and signed-zero-preserving refusals: x*0, x-x, x+0.0, 0.0-x, x-(-0.0) all stay.
  check_unchanged(simplify,
                  "%0 : f32[4] = input\n"
                  "%1 : f32[] = const 0\n"
                  "%2 : f32[4] = mul %0, %1\n"
                  "%3 : f32[4] = sub %0, %0\n"
                  "%4 : f32[4] = add %0, %1\n"
                  "%5 : f32[4] = sub %1, %0\n"
                  "%6 : f32[] = const -0\n"
                  "%7 : f32[4] = sub %0, %6\n"
                  "output %2, %3, %4, %5, %7\n");
  // Integers have no signed zero: x + 0 is x.
  CHECK(run(simplify,
            "%0 : i32[4] = input\n%1 : i32[] = const 0\n%2 : i32[4] = add %0, %1\noutput %2\n") ==
        "%0 : i32[4] = input\n%1 : i32[] = const 0\noutput %0\n");
  // A rewrite that would change the output's dtype or shape is not made: bf16 * f32 1 is f32,
  // i32 / 1 is f32, and a scalar times a broadcast 1 is a vector.
  check_unchanged(simplify,
                  "%0 : bf16[4] = input\n%1 : f32[] = const 1\n%2 : f32[4] = mul %0, %1\n"
                  "output %2\n");
  check_unchanged(simplify,
                  "%0 : i32[4] = input\n%1 : i32[] = const 1\n%2 : f32[4] = div %0, %1\n"
                  "output %2\n");
  check_unchanged(simplify,
                  "%0 : f32[] = input\n%1 : f32[4] = input\n%2 : f32[4] = mul %0, %1\n"
                  "output %2\n");
  // A constant that rounds to 1 in its dtype is 1.
  CHECK(run(simplify,
            "%0 : bf16[4] = input\n%1 : bf16[] = const 1.001\n%2 : bf16[4] = mul %0, %1\n"
            "output %2\n") == "%0 : bf16[4] = input\n%1 : bf16[] = const 1.001\noutput %0\n");
}

TEST_CASE("simplification removes identity views and merges view chains", "[fusion][simplify]") {
  CHECK(run(simplify,
            "%0 : f32[4,6] = input\n"
            "%1 : f32[4,6] = reshape %0\n"
            "%2 : f32[4,6] = permute %1 axes=[0,1]\n"
            "%3 : f32[4,6] = expand %2\n"
            "%4 : f32[24] = reshape %3\n"
            "%5 : f32[2,12] = reshape %4\n"
            "%6 : f32[12,2] = permute %5 axes=[1,0]\n"
            "%7 : f32[2,12] = permute %6 axes=[1,0]\n"
            "%8 : f32[4,6] = reshape %7\n"
            "output %5, %8\n") ==
        "%0 : f32[4,6] = input\n"
        "%1 : f32[24] = reshape %0\n"
        "%2 : f32[2,12] = reshape %0\n"
        "%3 : f32[12,2] = permute %2 axes=[1,0]\n"
        "output %2, %0\n");
}

TEST_CASE("a permute that moves only axes of extent 1 is a reshape", "[fusion][simplify]") {
  // A decode step's attention output, [1, 4, 1, 16] heads back into a row: the permute swaps a
  // 1 with the heads, so it joins the reshapes around it as one reshape of the buffer.
  CHECK(run(simplify,
            "%0 : f32[1,2,2,16] = input\n"
            "%1 : f32[1,4,1,16] = reshape %0\n"
            "%2 : f32[1,1,4,16] = permute %1 axes=[0,2,1,3]\n"
            "%3 : f32[1,1,64] = reshape %2\n"
            "output %3\n") ==
        "%0 : f32[1,2,2,16] = input\n"
        "%1 : f32[1,4,1,16] = reshape %0\n"
        "%2 : f32[1,1,4,16] = reshape %0\n"
        "%3 : f32[1,1,64] = reshape %0\n"
        "output %3\n");
  // Axes other than 1 that change places stay a permute, even among 1s.
  check_unchanged(simplify,
                  "%0 : f32[1,4,1,3] = input\n"
                  "%1 : f32[3,1,4,1] = permute %0 axes=[3,2,1,0]\n"
                  "output %1\n");
}

TEST_CASE("optimize runs the passes in order and calls the hook after each", "[fusion][dce]") {
  const ir::Graph g = ir::parse(std::string(kHeader) +
                                "%0 : f32[4] = input\n"
                                "%1 : f32[] = const 2\n"
                                "%2 : f32[] = const 0.5\n"
                                "%3 : f32[] = mul %1, %2\n"
                                "%4 : f32[4] = mul %0, %3\n"
                                "%5 : f32[4] = exp %4\n"
                                "%6 : f32[4] = exp %0\n"
                                "%7 : f32[4] = exp %0\n"
                                "%8 : f32[4] = add %6, %7\n"
                                "output %5, %8\n");
  std::vector<std::string> passes;
  const ir::Graph out = optimize(
      g, {.after_pass = [&](std::string_view p, const ir::Graph&) { passes.emplace_back(p); }});
  CHECK(passes == std::vector<std::string>{
                      "eliminate_dead_code", "eliminate_common_subexpressions", "fold_constants",
                      "simplify", "eliminate_common_subexpressions", "eliminate_dead_code"});
  CHECK(ir::print(out) == std::string(kHeader) +
                              "%0 : f32[4] = input\n"
                              "%1 : f32[4] = exp %0\n"
                              "%2 : f32[4] = add %1, %1\n"
                              "output %1, %2\n");
  CHECK(optimize(g, {.passes = false}) == g);
}
