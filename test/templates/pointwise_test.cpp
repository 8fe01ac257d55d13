// Pointwise kernels: every elementwise op of the op table in every dtype inference accepts,
// views, broadcasts, several outputs, vectorized and not. Each kernel is compiled by NVRTC.
#include <algorithm>

#include "ir/op.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::all_dtypes;
using fusejit::test::compile_graph;
using fusejit::test::kernel_text;
using fusion::RegionKind;

namespace {

std::vector<Op> ops_of_kind(std::initializer_list<OpKind> kinds) {
  std::vector<Op> ops;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (std::find(kinds.begin(), kinds.end(), op_kind(op)) != kinds.end()) ops.push_back(op);
  }
  return ops;
}

}  // namespace

TEST_CASE("every unary op in every dtype compiles", "[templates][pointwise]") {
  int compiled = 0;
  std::vector<std::string> rejected;  // "op dtype" that inference refuses
  for (Op op : ops_of_kind({OpKind::unary})) {
    for (DType d : all_dtypes()) {
      const std::string what = std::string(op_name(op)) + " " + std::string(dtype_name(d));
      Graph g;
      const NodeId x = add_input(g, d, {64, 256});
      NodeId y;
      try {
        y = add_unary(g, op, x);
      } catch (const Error& e) {
        CHECK_THAT(e.what(), ContainsSubstring("bool operands are not supported"));
        rejected.push_back(what);
        continue;
      }
      g.add_output(y);
      INFO(what);
      compile_graph(g, RegionKind::pointwise);
      ++compiled;
    }
  }
  // The ops that keep their operand's dtype (neg, abs, relu) refuse bool; every other unary op
  // computes in float, so bool is promoted and compiles. All 15 unary ops in the other 6 dtypes
  // (i8 among them) compile.
  CHECK(rejected == std::vector<std::string>{"neg bool", "abs bool", "relu bool"});
  CHECK(compiled == 15 * 7 - 3);
}

TEST_CASE("every binary and comparison op in every dtype compiles", "[templates][pointwise]") {
  int compiled = 0;
  for (Op op : ops_of_kind({OpKind::binary, OpKind::compare})) {
    for (DType d : all_dtypes()) {
      Graph g;
      const NodeId a = add_input(g, d, {64, 256});
      const NodeId b = add_input(g, d, {256});  // broadcast along the rows
      NodeId y;
      try {
        y = add_binary(g, op, a, b);
      } catch (const Error&) {
        continue;  // arithmetic on bool
      }
      g.add_output(y);
      INFO(op_name(op) << " " << dtype_name(d));
      compile_graph(g, RegionKind::pointwise);
      ++compiled;
    }
  }
  CHECK(compiled == 7 * 7 - 6 + 6 * 7);  // bool arithmetic is rejected, except div
}

TEST_CASE("mixed dtypes promote", "[templates][pointwise]") {
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::i32, DType::f32}, {DType::f16, DType::bf16}, {DType::boolean, DType::i64},
      {DType::i32, DType::i64}, {DType::bf16, DType::f32}, {DType::boolean, DType::f16},
      {DType::i8, DType::bf16}, {DType::i8, DType::i32}};
  for (const auto& [da, db] : pairs) {
    for (Op op : {Op::add, Op::div, Op::pow, Op::maximum, Op::lt}) {
      Graph g;
      const NodeId a = add_input(g, da, {32, 64});
      const NodeId b = add_input(g, db, {32, 1});
      g.add_output(add_binary(g, op, a, b));
      INFO(op_name(op) << " " << dtype_name(da) << " " << dtype_name(db));
      compile_graph(g, RegionKind::pointwise);
    }
  }
}

TEST_CASE("where and cast in every dtype compile", "[templates][pointwise]") {
  for (DType d : all_dtypes()) {
    Graph g;
    const NodeId c = add_input(g, DType::boolean, {64, 1});
    const NodeId a = add_input(g, d, {64, 256});
    const NodeId b = add_input(g, d, {256});
    g.add_output(add_where(g, c, a, b));
    INFO("where " << dtype_name(d));
    compile_graph(g, RegionKind::pointwise);
  }
  for (DType from : all_dtypes()) {
    Graph g;
    const NodeId x = add_input(g, from, {64, 256});
    for (DType to : all_dtypes()) g.add_output(add_cast(g, x, to));
    INFO("cast from " << dtype_name(from));
    const auto k = compile_graph(g, RegionKind::pointwise);
    CHECK(k.params.size() == 1 + all_dtypes().size());
  }
}

TEST_CASE("constants of every dtype including non-finite ones", "[templates][pointwise]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {1000});
  NodeId y = add_binary(g, Op::add, x, add_constant(g, DType::f32, 0.1));
  y = add_binary(g, Op::maximum, y,
                 add_constant(g, DType::f32, -std::numeric_limits<double>::infinity()));
  y = add_binary(g, Op::minimum, y,
                 add_constant(g, DType::f32, std::numeric_limits<double>::quiet_NaN()));
  y = add_binary(g, Op::mul, y, add_constant(g, DType::bf16, 3.14159));
  g.add_output(y);
  const NodeId i = add_input(g, DType::i32, {1000});
  g.add_output(add_binary(g, Op::add, i, add_constant(g, DType::i32, -2147483648.0)));
  const NodeId l = add_input(g, DType::i64, {1000});
  g.add_output(add_binary(g, Op::mul, l, add_constant(g, DType::i64, -9e18)));
  g.add_output(add_where(g, add_constant(g, DType::boolean, 1), i, l));
  const auto k = compile_graph(g, RegionKind::pointwise);
  // In the code, not only in the region's summary (a comment that shows every constant).
  const std::string text = fusejit::test::kernel_code(k);
  CHECK(text.find("0x1.99999ap-4f") != std::string::npos);  // 0.1f, exactly
  CHECK(text.find("__uint_as_float(0xff800000u)") != std::string::npos);
  CHECK(text.find("__uint_as_float(0x7fffffffu)") != std::string::npos);
  CHECK(text.find("(-2147483647 - 1)") != std::string::npos);
}

TEST_CASE("i64 constants reach the kernel exactly, INT64_MIN included", "[templates][pointwise]") {
  Graph g;
  const NodeId l = add_input(g, DType::i64, {1000});
  NodeId y = add_binary(g, Op::add, l, add_integer_constant(g, DType::i64, INT64_MAX));
  y = add_binary(g, Op::mul, y, add_integer_constant(g, DType::i64, 9007199254740993));
  y = add_binary(g, Op::sub, y, add_integer_constant(g, DType::i64, INT64_MIN));
  g.add_output(y);
  const std::string text = fusejit::test::kernel_code(compile_graph(g, RegionKind::pointwise));
  CHECK(text.find("9223372036854775807LL") != std::string::npos);
  CHECK(text.find("9007199254740993LL") != std::string::npos);
  CHECK(text.find("(-9223372036854775807LL - 1)") != std::string::npos);
  CHECK(text.find("9223372036854775808") == std::string::npos);
}

TEST_CASE("f16 and bf16 nodes are rounded where the rounding mode says", "[templates][pointwise]") {
  Graph g;
  const NodeId a = add_input(g, DType::bf16, {128});
  const NodeId b = add_input(g, DType::bf16, {128});
  const NodeId s = add_binary(g, Op::add, a, b);
  const NodeId m = add_binary(g, Op::maximum, s, a);  // exact once s is rounded
  const NodeId e = add_unary(g, Op::exp, m);
  const NodeId c = add_cast(g, add_binary(g, Op::mul, e, e), DType::f32);
  g.add_output(add_cast(g, add_unary(g, Op::exp, c), DType::bf16));
  SECTION("node: every node as the reference rounds it, precise math") {
    const std::string text =
        kernel_text(compile_graph(g, RegionKind::pointwise, {.rounding = Rounding::node}));
    CHECK(text.find("fj_round_bf16(fj_add(") != std::string::npos);
    CHECK(text.find("fj_round_bf16(fj_maximum(") == std::string::npos);
    CHECK(text.find("fj_round_bf16(fj_exp(") != std::string::npos);
    CHECK(text.find("fj_fast_") == std::string::npos);
  }
  SECTION("store: f32 inside the kernel, rounded at explicit casts and stores") {
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(text.find("fj_round_bf16(fj_add(") == std::string::npos);
    CHECK(text.find("fj_round_bf16(fj_mul(") == std::string::npos);
    // The one bf16 output allows the approximate exponential, and the final cast is the store.
    CHECK(text.find("fj_fast_exp(") != std::string::npos);
    CHECK(text.find("fj_exp(") == std::string::npos);
    CHECK(text.find("fj_store_bf16_vec") != std::string::npos);
  }
  SECTION("store: an f32 output keeps precise math") {
    Graph h;
    const NodeId x = add_input(h, DType::bf16, {128});
    const NodeId y = add_unary(h, Op::exp, x);
    h.add_output(y);
    h.add_output(add_cast(h, y, DType::f32));
    const std::string text = kernel_text(compile_graph(h, RegionKind::pointwise));
    CHECK(text.find("fj_exp(") != std::string::npos);
    CHECK(text.find("fj_fast_") == std::string::npos);
  }
  SECTION("store: a comparison in the kernel keeps precise math") {
    Graph h;
    const NodeId x = add_input(h, DType::bf16, {128});
    const NodeId e = add_unary(h, Op::exp, x);
    const NodeId big = add_binary(h, Op::gt, e, add_constant(h, DType::bf16, 2.0));
    h.add_output(add_where(h, big, e, x));
    const std::string text = kernel_text(compile_graph(h, RegionKind::pointwise));
    CHECK(text.find("fj_exp(") != std::string::npos);
    CHECK(text.find("fj_fast_") == std::string::npos);
  }
  SECTION("store: an explicit cast to bf16 inside the kernel rounds") {
    Graph h;
    const NodeId x = add_input(h, DType::f32, {128});
    const NodeId r = add_cast(h, add_unary(h, Op::sqrt, x), DType::bf16);
    h.add_output(add_binary(h, Op::add, add_cast(h, r, DType::f32), x));
    const std::string text = kernel_text(compile_graph(h, RegionKind::pointwise));
    CHECK(text.find("fj_round_bf16(") != std::string::npos);
  }
  SECTION("f16 outputs: the approximate exp and sigmoid, but not the hardware tanh") {
    Graph h;
    const NodeId x = add_input(h, DType::f16, {128});
    h.add_output(add_unary(h, Op::tanh, add_unary(h, Op::sigmoid, x)));
    const std::string text = kernel_text(compile_graph(h, RegionKind::pointwise));
    CHECK(text.find("fj_fast_sigmoid(") != std::string::npos);
    CHECK(text.find("fj_tanh(") != std::string::npos);
  }
}

TEST_CASE("views are index arithmetic", "[templates][pointwise][views]") {
  SECTION("permute then add reads the transposed input per lane") {
    // An 8-wide inner axis is too narrow for the tiled transpose (transpose_test.cpp).
    Graph g;
    const NodeId x = add_input(g, DType::f32, {256, 8});
    const NodeId y = add_input(g, DType::f32, {8, 256});
    g.add_output(add_binary(g, Op::add, add_permute(g, x, {1, 0}), y));
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(text.find("fj_load_vec(r") != std::string::npos);  // y: contiguous
    CHECK(text.find("in0[") != std::string::npos);           // x: strided, per lane
  }
  SECTION("expand") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {64, 1});
    const NodeId y = add_input(g, DType::bf16, {64, 256});
    g.add_output(add_binary(g, Op::mul, add_expand(g, x, {64, 256}), y));
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(text.find("in0[i0 / 256]") != std::string::npos);  // once per vector, hoisted
  }
  SECTION("reshape keeps the linear index") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {64, 256});
    const NodeId y = add_input(g, DType::f32, {16384});
    g.add_output(add_binary(g, Op::sub, add_reshape(g, x, {16384}), y));
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(text.find(", in0 + i0);") != std::string::npos);
    CHECK(text.find(", in1 + i0);") != std::string::npos);
  }
  SECTION("reshape across a permute simplifies to one expression") {
    Graph g;
    const NodeId x = add_input(g, DType::i32, {6, 4, 5});
    const NodeId p = add_permute(g, x, {2, 0, 1});  // [5, 6, 4]
    const NodeId r = add_reshape(g, p, {10, 12});   // regroups across axes
    const NodeId q = add_permute(g, r, {1, 0});     // [12, 10]
    g.add_output(add_binary(g, Op::add, q, add_input(g, DType::i32, {12, 10})));
    // x[c0, c1, c2] with (c0, c1, c2) worked out by hand: 60 * (i % 2) + i / 2.
    CHECK(kernel_text(compile_graph(g, RegionKind::pointwise)).find("in0[(i % 2) * 60 + i / 2]") !=
          std::string::npos);
  }
  SECTION("broadcast of a scalar input and a rank-0 output") {
    Graph g;
    const NodeId s = add_input(g, DType::f32, {});
    const NodeId x = add_input(g, DType::f32, {3, 5});
    g.add_output(add_binary(g, Op::mul, s, x));
    g.add_output(add_unary(g, Op::neg, s));
    compile_graph(g, RegionKind::pointwise);
  }
}

TEST_CASE("vectorized and scalar pointwise kernels", "[templates][pointwise]") {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    Graph g;
    const NodeId x = add_input(g, d, {64, 256});
    const NodeId w = add_input(g, d, {64, 256});
    const NodeId b = add_input(g, d, {256});
    g.add_output(add_unary(g, Op::relu, add_binary(g, Op::add, add_binary(g, Op::mul, x, w), b)));
    const std::string vec = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(vec.find("fj_load_vec") != std::string::npos);
    // f16/bf16 lanes are narrowed in pairs by the packed conversions as they are stored.
    CHECK(vec.find(d == DType::f32 ? "fj_store_vec" : "16_vec(out0") != std::string::npos);
    const std::string scalar =
        kernel_text(compile_graph(g, RegionKind::pointwise, {.vectorize = false}));
    CHECK(scalar.find("fj_load_vec") == std::string::npos);
    CHECK(scalar.find("_vec(") == std::string::npos);
  }
  SECTION("a count that is no multiple of the width takes whole vectors and a scalar tail") {
    // 42 elements: 10 vectors of 4, then 2; b's index moves by one per lane only within a row
    // of 6, so it is read per lane (pointwise_tail_test.cpp runs such kernels).
    Graph g;
    const NodeId x = add_input(g, DType::f32, {7, 6});
    const NodeId b = add_input(g, DType::f32, {6});
    g.add_output(add_binary(g, Op::add, x, b));
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    const std::string text = kernel_text(k);
    CHECK(test::schedule_field(k, "vector_widths") == "[4]");
    // 10 vectors, then the last 2 elements one per thread.
    CHECK(test::loop_bounds(test::kernel_ir(g, RegionKind::pointwise).fn, "t") ==
          std::vector<int64_t>{10, 2});
    CHECK(text.find("fj_load_vec(r0, in0 + i0)") != std::string::npos);
    CHECK(text.find("in1[i % 6]") != std::string::npos);
  }
}

TEST_CASE("outputs of different sizes get one sweep each", "[templates][pointwise]") {
  Graph g;
  const NodeId a = add_input(g, DType::f32, {256});
  const NodeId x = add_input(g, DType::f32, {64, 256});
  const NodeId e = add_unary(g, Op::exp, a);
  g.add_output(e);
  g.add_output(add_binary(g, Op::mul, x, e));
  const auto k = compile_graph(g, RegionKind::pointwise);
  const std::string text = kernel_text(k);
  // A sweep each, in vectors of 4: 256 elements, then 16384.
  CHECK(test::schedule_field(k, "vector_widths") == "[4, 4]");
  CHECK(test::loop_bounds(test::kernel_ir(g, RegionKind::pointwise).fn, "t") ==
        std::vector<int64_t>{64, 4096});
  CHECK(k.work_blocks == 16);  // 16384 / 4 per thread / 256 threads
}

TEST_CASE("large tensors use 64-bit indices", "[templates][pointwise]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {65536, 32768});
  g.add_output(add_unary(g, Op::silu, x));
  const auto k = compile_graph(g, RegionKind::pointwise);
  CHECK(kernel_text(k).find("long long t =") != std::string::npos);
  Graph small;
  small.add_output(add_unary(small, Op::silu, add_input(small, DType::bf16, {16384, 16384})));
  CHECK(kernel_text(compile_graph(small, RegionKind::pointwise)).find("int t =") !=
        std::string::npos);
}

TEST_CASE("launch_grid caps the grid at whole waves, or not at all", "[templates]") {
  templates::Kernel k;
  k.work_blocks = 100000;
  k.blocks_per_sm = 8;
  CHECK(templates::launch_grid(k, 132) == 4 * 132 * 8);
  k.waves = 1;
  CHECK(templates::launch_grid(k, 132) == 132 * 8);
  k.waves = 0;  // no cap
  CHECK(templates::launch_grid(k, 132) == 100000);
  k.work_blocks = 10;
  CHECK(templates::launch_grid(k, 132) == 10);
  k.waves = 4;
  CHECK(templates::launch_grid(k, 132) == 10);
}

TEST_CASE("kernel names are a deterministic hash of the source", "[templates]") {
  auto make = [](int64_t n) {
    Graph g;
    g.add_output(add_unary(g, Op::exp, add_input(g, DType::f32, {n})));
    return templates::generate(g, test::whole_graph_region(g, RegionKind::pointwise));
  };
  const auto a = make(1024), b = make(1024), c = make(2048);
  CHECK(a.name == b.name);
  CHECK(a.source == b.source);
  CHECK(a.name != c.name);
  CHECK(a.name.rfind("fj_pointwise_", 0) == 0);
  CHECK(a.name.size() == std::string("fj_pointwise_").size() + 16);
  CHECK(a.source.find("extern \"C\" __global__") != std::string::npos);
  CHECK(a.source.find("#include") == std::string::npos);  // self-contained: no headers
}
