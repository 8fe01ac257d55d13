// Dynamic dims: symbolic graphs, their text, generalizing a trace, binding one to sizes.
#include <string>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/symbolic.h"
#include "ir/text.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

// What a program records at batch b and sequence s: x[b,s,64] times a weight over the hidden
// dim, reshaped to rows, a softmax over each row, reshaped back, then max with a full of zeros.
Graph program(int64_t b, int64_t s) {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {b, s, 64});
  const NodeId w = add_input(g, DType::f32, {64});
  const NodeId y = add_binary(g, Op::mul, x, w);
  const NodeId rows = add_reshape(g, y, {b * s, 64});
  const NodeId m = add_reduce(g, Op::max, rows, {1}, true);
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, rows, m));
  const NodeId z = add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {1}, true));
  const NodeId back = add_reshape(g, z, {b, s, 64});
  const NodeId zeros = add_expand(g, add_constant(g, DType::f32, 0.0), {b, s, 64});
  g.set_outputs({add_binary(g, Op::maximum, back, zeros)});
  return g;
}

std::vector<DynamicAxis> batch_and_seq() {
  return {{.input = 0, .axis = 0, .name = "B"}, {.input = 0, .axis = 1, .name = "S"}};
}

}  // namespace

TEST_CASE("a generalized trace binds to the same program at other sizes", "[ir][symbolic]") {
  std::string why;
  const auto sym = generalize(program(8, 128), batch_and_seq(), &why);
  REQUIRE(sym.has_value());
  REQUIRE(sym->symbols.size() == 2);
  CHECK(sym->symbols[0].example == 8);
  CHECK(sym->symbols[1].example == 128);
  // The reshape to rows is B*S, the expand of the zeros B and S.
  CHECK(type_str(sym->graph.node(3), sym->symbols) == "f32[B*S,64]");
  CHECK(type_str(sym->graph.node(sym->graph.outputs()[0]), sym->symbols) == "f32[B,S,64]");

  for (auto [b, s] : {std::pair<int64_t, int64_t>{1, 7}, {3, 5}, {60, 2}, {8, 128}}) {
    const auto values = bind(*sym, program(b, s));
    REQUIRE(values.has_value());
    CHECK(*values == Bindings{b, s});
    CHECK(instantiate(sym->graph, sym->symbols, *values) == program(b, s));
  }
  // Another program of the same shape-free structure does not bind.
  Graph other = program(4, 4);
  CHECK(shape_free_hash(other) == shape_free_hash(program(9, 3)));
  CHECK(structural_hash(other) != structural_hash(program(9, 3)));
}

TEST_CASE("a symbolic trace prints and parses back exactly", "[ir][symbolic][text]") {
  const auto sym = generalize(program(8, 128), batch_and_seq());
  REQUIRE(sym.has_value());
  const std::string text = print(*sym);
  CHECK(text.rfind("fusejit-trace 2\ndynamic B=8, S=128\n%0 : f32[B,S,64] = input\n", 0) == 0);
  CHECK(text.find("%3 : f32[B*S,64] = reshape %2") != std::string::npos);
  const SymbolicGraph back = parse_symbolic(text);
  CHECK(back == *sym);
  CHECK(print(back) == text);
  // parse() gives the trace at the example sizes.
  CHECK(parse(text) == program(8, 128));
  // A concrete trace still prints as version 1.
  CHECK(print(program(2, 3)).rfind("fusejit-trace 1\n", 0) == 0);
}

TEST_CASE("a static dim that is a multiple of a sentinel gets other sentinels",
          "[ir][symbolic][text]") {
  const std::vector<int64_t> first = choose_sentinels(1, {});
  REQUIRE(first.size() == 1);
  const int64_t clash = first[0] * 2;
  const std::string text = "fusejit-trace 2\ndynamic B=4\n%0 : f32[B," + std::to_string(clash) +
                           "] = input\n%1 : f32[B," + std::to_string(clash) +
                           "] = exp %0\noutput %1\n";
  const SymbolicGraph sym = parse_symbolic(text);
  CHECK(sym.symbols[0].sentinel != first[0]);
  CHECK(type_str(sym.graph.node(1), sym.symbols) == "f32[B," + std::to_string(clash) + "]");
  CHECK(print(sym) == text);
}

TEST_CASE("dynamic dims in the text are checked", "[ir][symbolic][text]") {
  auto error = [](const std::string& text) {
    try {
      parse_symbolic(text, "t.txt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("fusejit-trace 2\ndynamic B=8\n%0 : f32[N,4] = input\noutput %0\n") ==
        "t.txt:3:10: expected a dimension (a positive integer or a dynamic dim of the 'dynamic' "
        "line), found 'N'");
  CHECK(error("fusejit-trace 2\ndynamic B=1\n%0 : f32[B] = input\noutput %0\n") ==
        "t.txt:2:9: B=1: an example value is at least 2");
  CHECK(error("fusejit-trace 2\ndynamic B=2, B=3\n%0 : f32[B] = input\noutput %0\n") ==
        "t.txt:2:14: dynamic dim B is declared twice");
  CHECK(error("fusejit-trace 2\ndynamic B=8\n%0 : f32[B,4] = input\n%1 : f32[4,B] = exp %0\n"
              "output %1\n")
            .find("the stated type f32[4,B] differs from the type inferred for exp: f32[B,4]") !=
        std::string::npos);
}

TEST_CASE("generalize refuses what would not give the trace back", "[ir][symbolic]") {
  std::string why;
  // A slice of the dynamic axis has a static length: not a function of B.
  Graph g;
  const NodeId x = add_input(g, DType::f32, {16, 8});
  g.set_outputs({add_slice(g, x, 0, 1, 16)});
  CHECK_FALSE(generalize(g, {{.input = 0, .axis = 0, .name = "B"}}, &why).has_value());
  CHECK(why.find("slice") != std::string::npos);
  // An extent of 1 broadcasts: it is not a size.
  CHECK_FALSE(generalize(program(1, 4), batch_and_seq(), &why).has_value());
  CHECK(why.find("B is 1") != std::string::npos);
  // Two axes named alike must agree.
  CHECK_FALSE(generalize(program(8, 4), {{.input = 0, .axis = 0, .name = "B"},
                                         {.input = 0, .axis = 1, .name = "B"}},
                         &why)
                  .has_value());
}

TEST_CASE("differing_axes names the axes that changed between two sizes", "[ir][symbolic]") {
  const std::vector<DynamicAxis> marks = differing_axes(program(8, 16), program(4, 16));
  REQUIRE(marks.size() == 1);
  CHECK(marks[0] == DynamicAxis{.input = 0, .axis = 0, .name = "s0"});
  const std::vector<DynamicAxis> both = differing_axes(program(8, 16), program(4, 32));
  REQUIRE(both.size() == 2);
  CHECK(both[1] == DynamicAxis{.input = 0, .axis = 1, .name = "s1"});
  CHECK(differing_axes(program(8, 16), program(8, 16)).empty());
}

TEST_CASE("a dim decodes into its terms", "[ir][symbolic]") {
  const std::vector<int64_t> p = choose_sentinels(2, {});
  const std::vector<Symbol> symbols{{"B", p[0], 8}, {"S", p[1], 128}};
  CHECK(dim_str(4 * p[0] * p[1], symbols) == "4*B*S");
  CHECK(dim_str(p[1] * p[1], symbols) == "S*S");
  CHECK(dim_str(1024, symbols) == "1024");
  CHECK(dim_value(4 * p[0] * p[1], symbols, {3, 5}) == 60);
  CHECK(symbolize(fmt::format("%{} over [{},{},{}] x2", p[0], p[0], p[1] * 4, 4096), symbols) ==
        fmt::format("%{} over [B,4*S,4096] x2", p[0]));
  CHECK_THROWS_AS(dim_value(p[0] * p[1], symbols, {int64_t{1} << 40, int64_t{1} << 40}), Error);
}
