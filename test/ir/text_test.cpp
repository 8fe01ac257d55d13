// The trace text format (print, parse, their errors) and the verifier on the graphs it builds.
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

// A small graph whose last node is `op`, with operands of the kinds the op wants.
Graph graph_for(Op op) {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {2, 3});
  const NodeId row = add_input(g, DType::f32, {3});
  NodeId out = x;
  switch (op_kind(op)) {
    case OpKind::source:
      out = op == Op::input      ? x
            : op == Op::arange ? add_arange(g, 5, DType::i32)
                               : add_constant(g, DType::f32, 2.5);
      break;
    case OpKind::unary:
      out = add_unary(g, op, x);
      break;
    case OpKind::binary:
    case OpKind::compare:
      out = add_binary(g, op, x, row);
      break;
    case OpKind::select: {
      const NodeId cond = add_input(g, DType::boolean, {2, 1});
      out = add_where(g, cond, x, row);
      break;
    }
    case OpKind::cast:
      out = add_cast(g, x, DType::bf16);
      break;
    case OpKind::reduce:
      add_reduce(g, op, x, {0}, false);  // a second node: with and without keepdim
      out = add_reduce(g, op, x, {-1}, true);
      break;
    case OpKind::view:
      out = op == Op::reshape   ? add_reshape(g, x, {3, 2})
            : op == Op::permute ? add_permute(g, x, {1, 0})
            : op == Op::slice   ? add_slice(g, x, -1, 1, 3)
            : op == Op::concat  ? add_concat(g, {x, add_input(g, DType::i32, {2, 1}), x}, 1)
                                : add_expand(g, row, {4, 3});
      break;
    case OpKind::matmul:
      out = add_matmul(g, x, add_input(g, DType::f32, {3, 4}));
      break;
    case OpKind::gather:
      out = add_gather(g, x, -1, add_input(g, DType::i64, {2, 5}));
      break;
    case OpKind::random:
      out = add_random(g, op, DType::bf16, {3, 2}, add_input(g, DType::i64, {2}));
      break;
    case OpKind::update:
      out =
          add_update_slice(g, add_input(g, DType::f32, {2, 8}), x, 1, add_input(g, DType::i32, {}));
      break;
  }
  g.set_outputs({out, x});
  return g;
}

const char* kSmall =
    "fusejit-trace 1\n"
    "%0 : f32[4,8] = input\n"
    "%1 : f32[8] = input\n"
    "%2 : f32[4,8] = mul %0, %1\n"
    "%3 : f32[4] = sum %2 axes=[1]\n"
    "output %3, %2\n";

// The error message `text` gives, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse(text, "t.txt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// kSmall's header and inputs, then `lines`.
std::string with_inputs(const std::string& lines) {
  return "fusejit-trace 1\n%0 : f32[4,8] = input\n%1 : f32[8] = input\n" + lines;
}

}  // namespace

TEST_CASE("print writes the canonical form", "[ir][text]") {
  Graph g = parse(kSmall);
  CHECK(print(g) == kSmall);
  CHECK(g.size() == 4);
  CHECK(g.outputs() == std::vector<NodeId>{3, 2});
  CHECK(g.node(3).axes == std::vector<int64_t>{1});
}

TEST_CASE("every op round-trips through print and parse", "[ir][text]") {
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    INFO("op " << op_name(op));
    const Graph g = graph_for(op);
    const std::string text = print(g);
    CHECK(text.find(" = " + std::string(op_name(op))) != std::string::npos);
    const Graph back = parse(text);
    CHECK(back == g);
    CHECK(print(back) == text);
    CHECK_NOTHROW(verify(back));
  }
  // Reductions print their axes and keepdim, views take their target from the stated type.
  CHECK(print(graph_for(Op::max)).find("%3 : f32[2,1] = max %0 axes=[1] keepdim\n") !=
        std::string::npos);
  CHECK(print(graph_for(Op::permute)).find("%2 : f32[3,2] = permute %0 axes=[1,0]\n") !=
        std::string::npos);
  CHECK(print(graph_for(Op::cast)).find("%2 : bf16[2,3] = cast %0\n") != std::string::npos);
  // gather names its axis; a random op reads its key, an i64[2] input, as an operand.
  CHECK(print(graph_for(Op::gather)).find("%3 : f32[2,5] = gather %0, %2 axes=[1]\n") !=
        std::string::npos);
  CHECK(print(graph_for(Op::randn)).find("%2 : i64[2] = input\n%3 : bf16[3,2] = randn %2\n") !=
        std::string::npos);
  // slice and concat spell their one axis axis=N; slice adds its start and step.
  CHECK(print(graph_for(Op::slice)).find("%2 : f32[2,2] = slice %0 axis=1 start=1 step=1\n") !=
        std::string::npos);
  CHECK(print(graph_for(Op::concat)).find("%3 : f32[2,7] = concat %0, %2, %0 axis=1\n") !=
        std::string::npos);
  CHECK(print(graph_for(Op::arange)).find("%2 : i32[5] = arange\n") != std::string::npos);
}

TEST_CASE("the key's attribute spelling of earlier builds reads as a key input", "[ir][text]") {
  // `rand seed=N offset=N` (no operand) gets a key input of its own just before it; the values
  // are data bound at eval, so they are dropped; the trace prints in the operand spelling.
  const Graph g = parse(with_inputs("%2 : f32[4,8] = rand seed=18364758544493064720 offset=7\n"
                                    "%3 : f32[4,8] = add %0, %2\n"
                                    "output %3\n"));
  CHECK(print(g) == with_inputs("%2 : i64[2] = input\n"
                                "%3 : f32[4,8] = rand %2\n"
                                "%4 : f32[4,8] = add %0, %3\n"
                                "output %4\n"));
  CHECK(g.inputs() == std::vector<NodeId>{0, 1, 2});
  CHECK_NOTHROW(verify(g));
}

TEST_CASE("gather and random nodes reject what they cannot mean", "[ir][text]") {
  const std::string idx = "%2 : i32[4,3] = input\n";
  CHECK(parse_error(with_inputs(idx + "%3 : f32[4,3] = gather %0, %2 axes=[1]\noutput %3\n"))
            .empty());
  CHECK(parse_error(with_inputs(idx + "%3 : f32[4,3] = gather %0, %2\noutput %3\n"))
            .find("gather: takes exactly one axis") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : f32[4,3] = input\n%3 : f32[4,3] = gather %0, %2 "
                                "axes=[1]\noutput %3\n"))
            .find("indices must be i32 or i64") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : i32[5,3] = input\n%3 : f32[5,3] = gather %0, %2 "
                                "axes=[1]\noutput %3\n"))
            .find("along axis 0 the index operand i32[5,3] is longer") != std::string::npos);
  const std::string key = "%2 : i64[2] = input\n";
  CHECK(parse_error(with_inputs(key + "%3 : f32[2] = rand %2\noutput %3\n")).empty());
  CHECK(parse_error(with_inputs("%2 : f32[2] = rand\noutput %2\n"))
            .find("rand: takes 1 operand(s), got 0") != std::string::npos);
  CHECK(parse_error(with_inputs(key + "%3 : i32[2] = rand %2\noutput %3\n"))
            .find("rand: dtype i32 is not supported") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : i32[2] = input\n%3 : f32[2] = rand %2\noutput %3\n"))
            .find("rand: the key operand %2 is input i32[2]; it must be an i64[2] input") !=
        std::string::npos);
  CHECK(parse_error(with_inputs(key + "%3 : i64[2] = neg %2\n%4 : f32[2] = randn %3\n"
                                      "output %4\n"))
            .find("randn: the key operand %3 is neg i64[2]; it must be an i64[2] input") !=
        std::string::npos);
  CHECK(parse_error(with_inputs(key + "%3 : f32[2] = rand %2 seed=1 offset=0\noutput %3\n"))
            .find("unexpected 'seed' after the operands of rand") != std::string::npos);
  // The attribute spelling of earlier builds is still checked as it was.
  CHECK(parse_error(with_inputs("%2 : f32[2] = rand seed=1\noutput %2\n"))
            .find("expected offset=N after the seed") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : f32[2] = rand seed=-1 offset=0\noutput %2\n"))
            .find("expected the seed (an integer in [0, 2^64))") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : i32[2] = rand seed=1 offset=0\noutput %2\n"))
            .find("rand: dtype i32 is not supported") != std::string::npos);
  CHECK(parse_error(with_inputs("%2 : f32[4] = sum %0 axes=[1] seed=1\noutput %2\n"))
            .find("unexpected 'seed'") != std::string::npos);
}

TEST_CASE("slice, concat and arange parse and say what is wrong", "[ir][text]") {
  const std::string head = "fusejit-trace 1\n%0 : f32[4,8] = input\n%1 : i64[4,2] = input\n";
  const Graph g = parse(head +
                        "%2 : f32[4,3] = slice %0 axis=-1 start=1 step=3\n"
                        "%3 : f32[4,13] = concat %0, %1, %2 axis=1\n"
                        "%4 : f16[7] = arange\n"
                        "output %3, %4\n");
  CHECK(g.node(2).axes == std::vector<int64_t>{1});
  CHECK(g.node(2).start == 1);
  CHECK(g.node(2).step == 3);
  CHECK(g.node(3).inputs == std::vector<NodeId>{0, 1, 2});
  auto error_of = [&](const std::string& body) {
    try {
      parse(head + body + "output %2\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  CHECK_THAT(error_of("%2 : f32[4,3] = slice %0 axis=1 start=7 step=1\n"),
             ContainsSubstring("do not fit axis 1"));
  CHECK_THAT(error_of("%2 : f32[4,3] = slice %0 axis=1 step=1\n"),
             ContainsSubstring("expected start=N"));
  CHECK_THAT(error_of("%2 : f32[4,3] = slice %0 axis=1 start=0 step=0\n"),
             ContainsSubstring("step >= 1"));
  CHECK_THAT(error_of("%2 : f32[8,10] = concat %0, %1 axis=0\n"),
             ContainsSubstring("operand 1 is i64[4,2] but operand 0 is f32[4,8]"));
  CHECK_THAT(error_of("%2 : f32[4,8] = concat axis=0\n"),
             ContainsSubstring("takes one or more operand(s), got 0"));
  CHECK_THAT(error_of("%2 : bool[3] = arange\n"),
             ContainsSubstring("bool arange is not supported"));
  CHECK_THAT(error_of("%2 : f32[4,8] = concat %0 axes=[0]\n"),
             ContainsSubstring("expected axis=N"));
}

TEST_CASE("constants print the shortest round-trip decimal", "[ir][text]") {
  const double values[] = {
      0.1, 1e-30, -0.0, 0.0, 1.0 / 3.0, -2.5, 5e-324, 1.7976931348623157e308, 123456789.0, 1e21};
  Graph g;
  for (double v : values) add_constant(g, DType::f32, v);
  add_constant(g, DType::f32, std::numeric_limits<double>::infinity());
  add_constant(g, DType::f32, -std::numeric_limits<double>::infinity());
  add_constant(g, DType::f32, std::numeric_limits<double>::quiet_NaN());
  add_constant(g, DType::i64, -7);
  add_constant(g, DType::boolean, 1);
  g.set_outputs({0});
  const std::string text = print(g);
  for (const char* s : {"= const 0.1\n", "= const 1e-30\n", "= const -0\n", "= const 0\n",
                        "= const -2.5\n", "= const 5e-324\n", "= const 123456789\n",
                        "= const 1e+21\n", "f32[] = const inf\n", "f32[] = const -inf\n",
                        "f32[] = const nan\n", "i64[] = const -7\n", "bool[] = const 1\n"}) {
    INFO(s);
    CHECK(text.find(s) != std::string::npos);
  }
  const Graph back = parse(text);
  CHECK(print(back) == text);
  for (size_t i = 0; i < std::size(values); ++i) {
    CHECK(std::bit_cast<uint64_t>(back.node(static_cast<NodeId>(i)).value) ==
          std::bit_cast<uint64_t>(values[i]));
  }
  CHECK(std::isnan(back.node(12).value));
  CHECK(back.node(11).value == -std::numeric_limits<double>::infinity());
}

TEST_CASE("ids are labels, numbered densely in file order", "[ir][text]") {
  const Graph g = parse(
      "fusejit-trace 1\n"
      "# labels need not be dense or ordered\n"
      "\n"
      "%17 : f32[4,8] = input\r\n"
      "   # an indented comment\n"
      "%3 : f32[8] = input\n"
      "%900 : f32[4,8] =  mul %17,%3\n"
      "%4 : f32[4] = sum %900 axes=[-1]\n"
      "output %4, %900");
  CHECK(print(g) == kSmall);
}

TEST_CASE("parse_file reads a file and names it in errors", "[ir][text]") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "fusejit_text_test_trace.txt").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << kSmall;
  }
  CHECK(print(parse_file(path)) == kSmall);
  {
    std::ofstream out(path, std::ios::binary);
    out << "fusejit-trace 1\n%0 : f32[4] = input\n%1 : f32[4] = mull %0\noutput %1\n";
  }
  REQUIRE_THROWS_WITH(parse_file(path), ContainsSubstring(path + ":3:15: unknown op 'mull'"));
  std::filesystem::remove(path);
  REQUIRE_THROWS_WITH(parse_file(path), ContainsSubstring("cannot read trace file '" + path + "'"));
}

TEST_CASE("parse errors name the place, what was expected and what was found", "[ir][text]") {
  // The header.
  CHECK(parse_error("") ==
        "t.txt:1:1: expected 'fusejit-trace 1' (or 2 with dynamic dims) as the first line, "
        "found an empty line");
  CHECK(parse_error("fusejit-traces 1\n") ==
        "t.txt:1:1: expected 'fusejit-trace 1' (or 2 with dynamic dims) as the first line, "
        "found 'fusejit-traces'");
  CHECK(parse_error("fusejit-trace 3\n%0 : f32[4] = input\noutput %0\n") ==
        "t.txt:1:15: unsupported trace format version '3'; expected 'fusejit-trace 1' (or 2 with "
        "dynamic dims) as the first line (this build reads versions 1 and 2)");

  // Tokens, with their columns.
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = mull %0, %1\noutput %2\n")) ==
        "t.txt:4:17: unknown op 'mull' (docs/trace-format.md lists the ops)");
  CHECK(parse_error(with_inputs("%2 : f33[4,8] = mul %0, %1\noutput %2\n")) ==
        "t.txt:4:6: unknown dtype 'f33'; valid: f32, f16, bf16, i32, i64, bool, i8");
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = mul %0, %7\noutput %2\n")) ==
        "t.txt:4:25: undefined id %7; an id must be defined on an earlier line");
  CHECK(parse_error(with_inputs("%1 : f32[4,8] = mul %0, %1\noutput %1\n")) ==
        "t.txt:4:1: duplicate id %1: it is already defined on line 3");
  CHECK(parse_error(with_inputs("%2 f32[4,8] = mul %0, %1\noutput %2\n")) ==
        "t.txt:4:4: expected ':' after the id, found 'f32'");
  CHECK(parse_error(with_inputs("%2 : f32[4,x] = mul %0, %1\noutput %2\n")) ==
        "t.txt:4:12: expected a dimension (a positive integer), found 'x'");
  CHECK(parse_error(with_inputs("x = mul %0, %1\n")) ==
        "t.txt:4:1: expected a node ('%id : type = op ...') or the output line, found 'x'");

  // The stated type is checked against inference, naming both.
  CHECK(parse_error(with_inputs("%2 : f32[4] = mul %0, %1\noutput %2\n")) ==
        "t.txt:4:6: the stated type f32[4] differs from the type inferred for mul: f32[4,8]");
  CHECK(parse_error(with_inputs("%2 : bf16[4,8] = mul %0, %1\noutput %2\n")) ==
        "t.txt:4:6: the stated type bf16[4,8] differs from the type inferred for mul: f32[4,8]");

  // Errors of Graph::add come back with the op's location in front.
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = mul %0\noutput %2\n")) ==
        "t.txt:4:17: mul: takes 2 operand(s), got 1");
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = reshape %0\noutput %2\n")) == "");
  CHECK_THAT(parse_error(with_inputs("%2 : f32[5,8] = reshape %0\noutput %2\n")),
             ContainsSubstring("t.txt:4:17: reshape: cannot reshape f32[4,8]"));
  CHECK_THAT(parse_error("fusejit-trace 1\n%0 : f32[0,3] = input\noutput %0\n"),
             ContainsSubstring("t.txt:2:17: input: shape [0,3] has a dimension of 0"));

  // Axes and other attributes.
  CHECK(parse_error(with_inputs("%2 : f32[4] = sum %0 axes=[0,x]\noutput %2\n")) ==
        "t.txt:4:30: expected an axis (an integer), found 'x'");
  CHECK(parse_error(with_inputs("%2 : f32[4] = sum %0 axes=[1\noutput %2\n")) ==
        "t.txt:4:29: expected ']' or ',' in the axes, found end of line");
  CHECK_THAT(parse_error(with_inputs("%2 : f32[4] = sum %0 axes=[2]\noutput %2\n")),
             ContainsSubstring("t.txt:4:15: sum: axis 2 is out of range for a tensor of rank 2"));
  CHECK_THAT(parse_error(with_inputs("%2 : f32[4] = sum %0\noutput %2\n")),
             ContainsSubstring("t.txt:4:15: sum: no axes given"));
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = exp %0 axes=[1]\noutput %2\n")) ==
        "t.txt:4:24: 'exp' takes no axes=[...]; only reductions, permute and gather do");
  CHECK(parse_error(with_inputs("%2 : f32[8,4] = permute %0 axes=[1,0] keepdim\noutput %2\n")) ==
        "t.txt:4:39: 'permute' takes no keepdim; only reductions do");
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = exp %0 fast\noutput %2\n")) ==
        "t.txt:4:24: unexpected 'fast' after the operands of exp");

  // Numbers.
  CHECK(parse_error("fusejit-trace 1\n%0 : f32[] = const 1.5.2\noutput %0\n") ==
        "t.txt:2:20: expected a number (such as 1.5, -2, 1e-30, inf, -inf or nan), found '1.5.2'");
  CHECK(parse_error("fusejit-trace 1\n%0 : f32[] = const\noutput %0\n") ==
        "t.txt:2:19: expected a number (such as 1.5, -2, 1e-30, inf, -inf or nan), found end of "
        "line");
  CHECK(parse_error("fusejit-trace 1\n%0 : f32[] = const 1e999\noutput %0\n") ==
        "t.txt:2:20: number '1e999' is out of range for a double");
  CHECK(parse_error("fusejit-trace 1\n%0 : i32[] = const 1.5\noutput %0\n") ==
        "t.txt:2:20: const: 1.5 is not a valid i32 value (expected an integer)");
  CHECK(parse_error("fusejit-trace 1\n%0 : i32[] = const inf\noutput %0\n") ==
        "t.txt:2:20: const: inf is not a valid i32 value (expected an integer)");
  CHECK(parse_error("fusejit-trace 1\n%0 : f32[1] = const 2\noutput %0\n") ==
        "t.txt:2:6: the stated type f32[1] differs from the type inferred for const: f32[]");

  // The output line.
  CHECK(parse_error(with_inputs("%2 : f32[4,8] = mul %0, %1\n")) ==
        "t.txt:5:1: missing output line; a trace ends with 'output %id, ...' naming its results");
  CHECK(parse_error(with_inputs("output\n")) ==
        "t.txt:4:7: expected an id such as %0, found end of line");
  CHECK(parse_error(with_inputs("output %0, %9\n")) ==
        "t.txt:4:12: undefined id %9; an id must be defined on an earlier line");
  CHECK(parse_error(with_inputs("output %0 %1\n")) ==
        "t.txt:4:11: unexpected '%1' at the end of the output line");
  CHECK(parse_error(with_inputs("output %0\n%2 : f32[4,8] = exp %0\n")) ==
        "t.txt:5:1: unexpected '%2' after the output line (line 4); the output line comes last");
  CHECK(parse_error(with_inputs("output %0\n# a comment\n\n")) == "");
}

TEST_CASE("verify accepts well-formed graphs", "[ir][verify]") {
  CHECK_NOTHROW(verify(parse(kSmall)));
  for (int i = 0; i < kNumOps; ++i) {
    INFO("op " << op_name(static_cast<Op>(i)));
    CHECK_NOTHROW(verify(graph_for(static_cast<Op>(i))));
  }
  Graph nan_const;
  add_constant(nan_const, DType::f32, std::numeric_limits<double>::quiet_NaN());
  nan_const.set_outputs({0});
  CHECK_NOTHROW(verify(nan_const));
}

TEST_CASE("verify rejects a graph without outputs, printing it", "[ir][verify]") {
  Graph g = parse(kSmall);
  g.set_outputs({});
  REQUIRE_THROWS_AS(verify(g), InternalError);
  REQUIRE_THROWS_WITH(verify(g), ContainsSubstring("internal error: verify: the graph has no "
                                                   "outputs"));
  REQUIRE_THROWS_WITH(verify(g), ContainsSubstring("%2 : f32[4,8] = mul %0, %1\n"));
  REQUIRE_THROWS_AS(verify(Graph{}), InternalError);
}

TEST_CASE("integer constants keep their exact value through parse and print", "[ir][text]") {
  const std::string text =
      "fusejit-trace 1\n"
      "%0 : i64[] = const 9223372036854775807\n"
      "%1 : i64[] = const -9223372036854775808\n"
      "%2 : i64[] = const 9007199254740993\n"
      "%3 : i32[] = const -2147483648\n"
      "%4 : i64[] = const 100000\n"
      "output %0, %1, %2, %3, %4\n";
  const Graph g = parse(text);
  CHECK(g.node(0).integer == INT64_MAX);
  CHECK(g.node(1).integer == INT64_MIN);
  CHECK(g.node(2).integer == 9007199254740993);
  CHECK(g.node(3).integer == INT32_MIN);
  CHECK(print(g) == text);
  // Constants that differ only past 2^53 are different nodes with different hashes.
  CHECK(g.node_hashes()[2] != parse(std::string(text).replace(text.find("993"), 3, "992"))
                                  .node_hashes()[2]);
  // The exponent spelling of earlier builds still reads, and prints as a plain integer.
  const Graph old = parse("fusejit-trace 1\n%0 : i64[] = const 1e+18\noutput %0\n");
  CHECK(old.node(0).integer == 1000000000000000000);
  CHECK(print(old).find("const 1000000000000000000\n") != std::string::npos);
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n%0 : i64[] = const 9223372036854775808\noutput %0\n",
                            "t"),
                      ContainsSubstring("t:2:20: const: 9223372036854775808 is out of range"));
  // An i32 literal past its range is an error, not a wrapped value.
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n%0 : i32[] = const 3000000000\noutput %0\n", "t"),
                      ContainsSubstring("t:2:20: const: 3000000000 is out of range for i32"));
  REQUIRE_THROWS_AS(parse("fusejit-trace 1\n%0 : i32[] = const -2147483649\noutput %0\n"),
                    UsageError);
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n%0 : i32[] = const 3e+09\noutput %0\n"),
                      ContainsSubstring("out of range for i32"));
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n%0 : i64[] = const 1e+19\noutput %0\n"),
                      ContainsSubstring("out of range for i64"));
  CHECK_NOTHROW(verify(g));
}

TEST_CASE("errors in a trace with dynamic dims name the dims, not their sentinels",
          "[ir][text][dynamic]") {
  const std::string text =
      "fusejit-trace 2\n"
      "dynamic B=4\n"
      "%0 : f32[B,8] = input\n"
      "%1 : f32[B,9] = input\n"
      "%2 : f32[B,8] = add %0, %1\n"
      "output %2\n";
  REQUIRE_THROWS_WITH(parse(text, "t"),
                      ContainsSubstring("t:5:17: add: shapes [B,8] and [B,9] do not broadcast"));
}

TEST_CASE("parse errors escape bytes that are not printable and shorten long text",
          "[ir][text]") {
  std::string binary = "\x7f" "ELF\x02\x01\x01";
  binary += std::string(5000, '\xfe');
  binary += "\n\x01\x02\n";
  std::string message;
  try {
    parse(binary, "bin");
  } catch (const UsageError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("\\x7fELF\\x02\\x01\\x01\\xfe") != std::string::npos);
  CHECK(message.find("(5007 bytes)") != std::string::npos);
  CHECK(message.size() < 400);
  for (const char ch : message) {
    const auto b = static_cast<unsigned char>(ch);
    CHECK((b >= 0x20 && b < 0x7f));
  }
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n%0 : f32[] = const 1\x01\x02\noutput %0\n"),
                      ContainsSubstring("found '1\\x01\\x02'"));
  REQUIRE_THROWS_WITH(parse("fusejit-trace 1\n\x01\x02 junk\noutput %0\n"),
                      ContainsSubstring("found '\\x01'"));
}

// Found by the trace fuzzer (test/fuzz/crashes/parse_hang_zero_dim.trace): a 0 dim in a trace
// with dynamic dims is a multiple of every stand-in prime, and the parse started over forever.
TEST_CASE("a zero dim next to dynamic dims is refused at once", "[ir][text][dynamic]") {
  const std::string text = "fusejit-trace 2\ndynamic B=8\n%0 : f32[B,0] = input\noutput %0\n";
  // Zero-size dims are refused (as in version 1), now at once instead of never.
  CHECK_THROWS_WITH(parse_symbolic(text), ContainsSubstring("a dimension of 0"));
}
