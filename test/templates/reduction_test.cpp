// Reduction kernels: row (trailing axes), column (leading or middle axes) and generic axis sets,
// x sum/mean/max/min x f32/bf16/i32, with prologues, epilogues and several outputs. Every
// kernel is compiled by NVRTC.
#include <algorithm>

#include <fmt/format.h>

#include "templates/schedulers/registry.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::has;
using fusejit::test::kernel_text;
using fusejit::test::schedule_count;
using fusejit::test::scheduler_of;
using fusion::RegionKind;

namespace {

struct Layout {
  const char* name;
  Shape shape;
  std::vector<int64_t> axes;
  const char* scheduler;  // the scheduler that takes it (templates/schedulers/registry.h)
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {
      {"row", {64, 1000}, {1}, "rows"},
      {"row of a rank-3 tensor", {8, 16, 512}, {1, 2}, "rows"},
      {"column", {1000, 256}, {0}, "column"},
      {"middle axis", {8, 100, 64}, {1}, "column"},
      {"generic {0,2}", {16, 32, 24}, {0, 2}, "rows"},
      {"full", {64, 64}, {0, 1}, "rows"},
  };
  return l;
}

// The schedule of the whole graph as one reduction region.
templates::Schedule reduction_schedule(const Graph& g) {
  return templates::schedule(g, fusejit::test::whole_graph_region(g, RegionKind::reduction));
}

}  // namespace

TEST_CASE("reductions over every layout and op and dtype compile", "[templates][reduction]") {
  int compiled = 0;
  for (const Layout& layout : layouts()) {
    for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
      for (DType d : {DType::f32, DType::bf16, DType::i32}) {
        for (bool keepdim : {false, true}) {
          if (keepdim && d != DType::f32) continue;  // keepdim only changes the output shape
          Graph g;
          const NodeId x = add_input(g, d, layout.shape);
          NodeId r;
          try {
            r = add_reduce(g, op, x, layout.axes, keepdim);
          } catch (const Error&) {
            continue;  // mean of an integer tensor
          }
          g.add_output(r);
          INFO(layout.name << " " << op_name(op) << " " << dtype_name(d) << " keepdim " << keepdim);
          compile_graph(g, RegionKind::reduction);
          CHECK(reduction_schedule(g).scheduler->name() == layout.scheduler);
          ++compiled;
        }
      }
    }
  }
  CHECK(compiled == 6 * ((4 * 3 - 1) + 4));
}

TEST_CASE("reductions of bool and i64", "[templates][reduction]") {
  for (DType d : {DType::boolean, DType::i64, DType::f16}) {
    for (Op op : {Op::sum, Op::max, Op::min}) {
      Graph g;
      const NodeId x = add_input(g, d, {32, 96});
      g.add_output(add_reduce(g, op, x, {1}, false));
      g.add_output(add_reduce(g, op, x, {0}, false));
      INFO(op_name(op) << " " << dtype_name(d));
      // Two regions: the row and the column reduction of the same input.
      for (size_t out = 0; out < 2; ++out) {
        fusion::Region r;
        r.kind = RegionKind::reduction;
        r.inputs = {x};
        r.nodes = {g.outputs()[out]};
        r.outputs = {g.outputs()[out]};
        fusejit::test::generate_and_compile(g, r);
      }
    }
  }
}

TEST_CASE("a reduction fuses its prologue and epilogue", "[templates][reduction]") {
  for (const Layout& layout : layouts()) {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, layout.shape);
    const NodeId w = add_input(g, DType::bf16, {layout.shape.back()});
    const NodeId xw = add_binary(g, Op::mul, x, w);
    const NodeId s = add_reduce(g, Op::sum, xw, layout.axes, false);
    const NodeId m = add_reduce(g, Op::max, add_unary(g, Op::abs, xw), layout.axes, false);
    const NodeId e =
        add_binary(g, Op::div, s, add_binary(g, Op::add, m, add_constant(g, DType::f32, 1e-6)));
    g.add_output(xw);  // a prologue value, written while it is reduced
    g.add_output(e);   // the epilogue
    g.add_output(m);
    INFO(layout.name);
    compile_graph(g, RegionKind::reduction);
    CHECK(reduction_schedule(g).scheduler->name() == layout.scheduler);
  }
}

namespace {

struct ColumnCase {
  const char* name;
  DType dtype;
  Shape shape;
  std::vector<int64_t> axes;
  // The column scheduler's parameters: tiles of tx x v columns, ty rows of threads; split:
  // S pieces of `piece` rows each (1: not split).
  int64_t tx, v, ty, split, piece;
  int64_t work_blocks;
};

Graph column_sum_of(const ColumnCase& c) {
  Graph g;
  const NodeId x = add_input(g, c.dtype, c.shape);
  g.add_output(add_reduce(g, Op::sum, x, c.axes, false));
  return g;
}

}  // namespace

TEST_CASE("column reductions split long narrow columns over blocks", "[templates][reduction]") {
  // Too few tiles of columns to fill the device: the reduced axis is cut into S pieces. S from
  // 1024 (tile, piece) blocks, at least 8 rows per thread; tiles narrow (128 bytes per row to
  // 32) until a tile's last block folds at most 64 KiB of partials.
  const std::vector<ColumnCase> cases = {
      {"narrow bf16", DType::bf16, {2097152, 64}, {0}, 4, 8, 128, 512, 4096, 2 * 512},
      {"narrow f16", DType::f16, {2097152, 64}, {0}, 4, 8, 128, 512, 4096, 2 * 512},
      {"narrow f32", DType::f32, {2097152, 64}, {0}, 8, 4, 64, 512, 4096, 2 * 512},
      {"three columns, prime length", DType::f32, {1000003, 3}, {0}, 4, 1, 128, 869, 1152, 869},
      {"four columns", DType::f32, {1 << 20, 4}, {0}, 1, 4, 512, 256, 4096, 256},
      // bf16: even 32-byte tiles are too few (192), so full 128-byte tiles are split.
      {"middle axis bf16", DType::bf16, {64, 4096, 48}, {1}, 8, 8, 64, 8, 512, 64 * 8},
      // f32: 384 tiles of 32 bytes fill the device without a split.
      {"middle axis f32", DType::f32, {64, 4096, 48}, {1}, 2, 4, 256, 1, 4096, 384},
      {"wide f32", DType::f32, {8192, 16384}, {0}, 8, 4, 64, 1, 8192, 512},
      {"wide bf16", DType::bf16, {8192, 16384}, {0}, 8, 8, 128, 1, 8192, 256},
  };
  for (const ColumnCase& c : cases) {
    INFO(c.name);
    const Graph g = column_sum_of(c);
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    const templates::Schedule s = reduction_schedule(g);
    REQUIRE(s.scheduler->name() == "column");
    const auto& p = std::get<templates::ColumnParams>(s.params);
    CHECK(p.tx == c.tx);
    CHECK(p.v == c.v);
    CHECK(p.ty == c.ty);
    CHECK(p.split == c.split);
    CHECK(p.piece == c.piece);
    CHECK(k.work_blocks == c.work_blocks);
    const std::string text = kernel_text(k);
    if (c.split > 1) {
      CHECK(text.find("__device__ unsigned int fj_arrivals[") != std::string::npos);
      CHECK(k.serial_launches);
      CHECK(k.block == 512);
    } else {
      CHECK_FALSE(has(text, "__device__"));  // no module-scope scratch
      CHECK_FALSE(k.serial_launches);
    }
  }
}

TEST_CASE("split columns: integer sum and max, and a mean with an epilogue",
          "[templates][reduction]") {
  SECTION("i32 sum (i64 partials) and max in one kernel") {
    Graph g;
    const NodeId x = add_input(g, DType::i32, {65536, 8});
    g.add_output(add_reduce(g, Op::sum, x, {0}, false));
    g.add_output(add_reduce(g, Op::max, x, {0}, false));
    const auto k = compile_graph(g, RegionKind::reduction);
    const std::string text = kernel_text(k);
    const auto p = test::params_of<templates::ColumnParams>(g, RegionKind::reduction);
    CHECK(p.split == 32);
    CHECK(p.piece == 2048);
    CHECK(text.find("__device__ long long fj_partial") != std::string::npos);
    CHECK(text.find("__device__ int fj_partial") != std::string::npos);
    CHECK(k.serial_launches);
  }
  SECTION("sqrt of the mean of squares, bf16, 64 and 3 columns") {
    for (const Shape& shape : {Shape{2097152, 64}, Shape{1000003, 3}}) {
      Graph g;
      const NodeId x = add_input(g, DType::bf16, shape);
      const NodeId ms = add_reduce(g, Op::mean, add_binary(g, Op::mul, x, x), {0}, false);
      g.add_output(add_unary(g, Op::sqrt, ms));
      INFO(shape[0] << " x " << shape[1]);
      const auto k = compile_graph(g, RegionKind::reduction);
      const std::string text = kernel_text(k);
      CHECK(test::params_of<templates::ColumnParams>(g, RegionKind::reduction).split > 1);
      // The epilogue runs in the tile's last block only, after the fold.
      const size_t last = text.find("if (!fj_last) {");
      REQUIRE(last != std::string::npos);
      CHECK(text.find("fj_sqrt", last) != std::string::npos);
      CHECK(text.find("fj_sqrt") > last);
    }
  }
}

TEST_CASE("the epilogue reads inputs at its row", "[templates][reduction]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {256, 128, 32});
  const NodeId scale = add_input(g, DType::f32, {128, 1});
  const NodeId s = add_reduce(g, Op::sum, x, {0}, true);  // [1, 128, 32]
  g.add_output(add_binary(g, Op::mul, s, scale));
  CHECK(scheduler_of(compile_graph(g, RegionKind::reduction)) == "column");
}

TEST_CASE("row reductions choose their group from the row length", "[templates][reduction]") {
  struct Case {
    int64_t length;
    int64_t threads;  // per row
  };
  for (const Case& c : {Case{4, 1}, Case{1000, 32}, Case{16384, 512}, Case{1 << 20, 512}}) {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {1024, c.length});
    g.add_output(add_reduce(g, Op::sum, x, {1}, false));
    INFO(c.length);
    const auto k = compile_graph(g, RegionKind::reduction);
    CHECK(schedule_count(k, "threads_per_row") == c.threads);
    CHECK_FALSE(k.serial_launches);
  }
}

TEST_CASE("few long rows are split over several blocks", "[templates][reduction]") {
  SECTION("eight rows of 2^20") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {8, 1 << 20});
    g.add_output(add_reduce(g, Op::max, x, {1}, false));
    const auto k = compile_graph(g, RegionKind::reduction);
    const std::string text = kernel_text(k);
    CHECK(schedule_count(k, "split_blocks") == 64);
    CHECK(schedule_count(k, "piece") == 16384);
    CHECK(k.serial_launches);
    CHECK(k.work_blocks == 8 * 64);
  }
  SECTION("a full reduction with an epilogue: mean of squares, and its square root") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {16384, 16384});
    const NodeId ms = add_reduce(g, Op::mean, add_binary(g, Op::mul, x, x), {0, 1}, false);
    g.add_output(ms);
    g.add_output(add_unary(g, Op::sqrt, ms));
    const auto k = compile_graph(g, RegionKind::reduction);
    const std::string text = kernel_text(k);
    CHECK(schedule_count(k, "split_blocks") == 1024);
    CHECK(text.find("#pragma unroll 4") != std::string::npos);  // 64 vectors per thread: a loop
    CHECK(k.work_blocks == 1024);
  }
  SECTION("integer sums and min in one kernel") {
    Graph g;
    const NodeId x = add_input(g, DType::i32, {2, 1 << 22});
    g.add_output(add_reduce(g, Op::sum, x, {1}, true));
    g.add_output(add_reduce(g, Op::min, x, {1}, true));
    const auto k = compile_graph(g, RegionKind::reduction);
    CHECK(kernel_text(k).find("__device__ long long fj_partial") != std::string::npos);
    CHECK(kernel_text(k).find("__device__ int fj_partial") != std::string::npos);
  }
}

TEST_CASE("vectorized and scalar reductions", "[templates][reduction]") {
  for (const Layout& layout : layouts()) {
    Graph g;
    const NodeId x = add_input(g, DType::f32, layout.shape);
    g.add_output(add_reduce(g, Op::sum, x, layout.axes, false));
    INFO(layout.name);
    const std::string scalar =
        kernel_text(compile_graph(g, RegionKind::reduction, {.vectorize = false}));
    CHECK(scalar.find("fj_load_vec") == std::string::npos);
    const std::string vec = kernel_text(compile_graph(g, RegionKind::reduction));
    if (std::string(layout.name) != "generic {0,2}")
      CHECK(vec.find("fj_load_vec") != std::string::npos);
  }
}

TEST_CASE("reductions that read each other take one pass each", "[templates][reduction]") {
  // sum((x - mean(x))^2) over rows, written by hand: a two-pass row kernel.
  Graph g;
  const NodeId x = add_input(g, DType::f32, {128, 2048});
  const NodeId mu = add_reduce(g, Op::mean, x, {1}, true);
  const NodeId d = add_binary(g, Op::sub, x, mu);
  g.add_output(add_reduce(g, Op::sum, add_binary(g, Op::mul, d, d), {1}, false));
  compile_graph(g, RegionKind::reduction);
  CHECK(test::row_passes(g, RegionKind::reduction) == 2);
  // Held in registers between them: the register cache, an array of the row's values.
  CHECK(test::declared_type(test::kernel_ir(g, RegionKind::reduction).fn, "cache0") == "float");
}

TEST_CASE("regions a reduction kernel cannot compute are internal errors",
          "[templates][reduction]") {
  SECTION("two different reduced shapes") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {8, 16});
    g.add_output(add_reduce(g, Op::sum, x, {1}, false));
    g.add_output(add_reduce(g, Op::sum, x, {0}, false));
    REQUIRE_THROWS_AS(templates::generate(g, test::whole_graph_region(g, RegionKind::reduction)),
                      InternalError);
  }
  SECTION("a reduction read at another row") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {8, 8});
    const NodeId s = add_reduce(g, Op::sum, x, {1}, false);  // [8]
    g.add_output(add_binary(g, Op::add, add_permute(g, add_reshape(g, s, {2, 4}), {1, 0}),
                            add_input(g, DType::f32, {4, 2})));  // s read transposed
    REQUIRE_THROWS_AS(templates::generate(g, test::whole_graph_region(g, RegionKind::reduction)),
                      InternalError);
  }
  SECTION("a gemm region") {
    Graph g;
    const NodeId a = add_input(g, DType::f32, {8, 8});
    g.add_output(add_matmul(g, a, a));
    REQUIRE_THROWS_AS(templates::generate(g, test::whole_graph_region(g, RegionKind::gemm)),
                      InternalError);
  }
  SECTION("a reduce node in a pointwise region") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::f32, {8, 8}), {1}, false));
    REQUIRE_THROWS_AS(templates::generate(g, test::whole_graph_region(g, RegionKind::pointwise)),
                      InternalError);
  }
}

namespace {

// The statistics of a softmax over `axis`: M = max(X) and sum(exp(X - M)), X the input (cast to
// f32 for half types, as the API records softmax), both written: what the partitioner gives a
// column softmax's first kernel (fusion/recompute.h).
struct ColumnStats {
  Graph g;
  NodeId max = -1, sum = -1;
};
ColumnStats column_stats(DType dt, const Shape& shape, int64_t axis) {
  ColumnStats s;
  const NodeId in = add_input(s.g, dt, shape);
  const NodeId x = dt == DType::f32 ? in : add_cast(s.g, in, DType::f32);
  s.max = add_reduce(s.g, Op::max, x, {axis}, true);
  const NodeId e = add_unary(s.g, Op::exp, add_binary(s.g, Op::sub, x, s.max));
  s.sum = add_reduce(s.g, Op::sum, e, {axis}, true);
  s.g.set_outputs({s.max, s.sum});
  return s;
}

}  // namespace

TEST_CASE("column softmax statistics accumulate online, in one pass, split or not",
          "[templates][reduction][online]") {
  struct Case {
    const char* name;
    DType dtype;
    Shape shape;
    int64_t axis;
    bool split;
  };
  const std::vector<Case> cases = {
      {"wide bf16 (colsoftmax)", DType::bf16, {8192, 8192}, 0, false},
      {"wide f16", DType::f16, {8192, 8192}, 0, false},
      {"wide f32", DType::f32, {8192, 16384}, 0, false},
      {"narrow bf16", DType::bf16, {2097152, 64}, 0, true},
      {"narrow f16", DType::f16, {524288, 64}, 0, true},
      {"narrow f32", DType::f32, {2097152, 64}, 0, true},
      {"three columns, prime length", DType::f32, {1000003, 3}, 0, true},
      {"odd sizes f16", DType::f16, {1001, 333}, 0, true},
      {"odd sizes f32, wide", DType::f32, {999, 40001}, 0, false},
      {"odd sizes bf16, long", DType::bf16, {300007, 17}, 0, true},
      {"middle axis bf16", DType::bf16, {64, 4096, 48}, 1, true},
      {"middle axis f32", DType::f32, {64, 4096, 48}, 1, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const ColumnStats s = column_stats(c.dtype, c.shape, c.axis);
    const templates::Kernel k = compile_graph(s.g, RegionKind::reduction);
    const std::string text = kernel_text(k);
    // The kernel names a node by its place among the region's nodes (v<k>, a<k>, ...).
    const fusion::Region region = test::whole_graph_region(s.g, RegionKind::reduction);
    const auto place = [&](NodeId id) {
      return std::find(region.nodes.begin(), region.nodes.end(), id) - region.nodes.begin();
    };
    const auto max = place(s.max), sum = place(s.sum);
    CHECK(scheduler_of(k) == "column");
    // The online pair: an accumulator of the max, which the sum rides with.
    const templates::KernelBody ir = test::kernel_ir(s.g, RegionKind::reduction);
    CHECK(test::declared_type(ir.fn, fmt::format("a{}", max)) == "fj_max_sum");
    CHECK(test::declared_type(ir.fn, fmt::format("a{}", sum)).empty());
    // One accumulator pair per column and lane, fed X itself: exp(X - M) is never evaluated.
    CHECK(has(text, fmt::format("fj_max_sum a{}[", max)));
    CHECK(has(text, "fj_op_max_sum<false>()"));  // f32 statistics: precise exponentials
    CHECK_FALSE(has(text, "fj_exp("));
    CHECK_FALSE(has(text, "fj_fast_exp("));
    CHECK(has(text, fmt::format("fj_max_sum_total(a{}[j])", max)));
    CHECK(has(text, fmt::format("a{}[j].m", max)));
    CHECK(k.serial_launches == c.split);
    CHECK((schedule_count(k, "split") > 1) == c.split);
    if (c.split) {
      CHECK(has(text, fmt::format("__device__ fj_max_sum fj_partial{}[", max)));
      CHECK(has(text, fmt::format("fj_volatile_load(&fj_partial{}[", max)));
      CHECK_FALSE(has(text, fmt::format("fj_partial{}", sum)));  // the sum rides with its max
    }
  }
}

TEST_CASE("column online pairs share a kernel with other reductions and an epilogue",
          "[templates][reduction][online]") {
  SECTION("logsumexp over columns, with the column sum of x") {
    for (const Shape& shape : {Shape{4096, 1024}, Shape{2097152, 64}}) {
      Graph g;
      const NodeId x = add_input(g, DType::bf16, shape);
      const NodeId xf = add_cast(g, x, DType::f32);
      const NodeId m = add_reduce(g, Op::max, xf, {0}, false);
      const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, xf, m));
      const NodeId s = add_reduce(g, Op::sum, e, {0}, false);
      const NodeId lse = add_binary(g, Op::add, add_unary(g, Op::log, s), m);
      g.set_outputs({add_cast(g, lse, DType::bf16), add_reduce(g, Op::sum, xf, {0}, false)});
      INFO(shape[0] << " x " << shape[1]);
      const templates::Kernel k = compile_graph(g, RegionKind::reduction);
      const std::string text = kernel_text(k);
      CHECK(scheduler_of(k) == "column");
      // The online pair's accumulator (the sum rides with its max).
      CHECK(test::count_declared(test::kernel_ir(g, RegionKind::reduction).fn, "a", "fj_max_sum") ==
            1);
      CHECK(has(text, "fj_op_sum()"));
      CHECK(has(text, "fj_log"));
    }
  }
  SECTION("with per-node rounding the pair is two passes of a row-style kernel") {
    const ColumnStats s = column_stats(DType::bf16, {4096, 1024}, 0);
    const templates::CodegenOptions node{.rounding = Rounding::node};
    const templates::Kernel k = compile_graph(s.g, RegionKind::reduction, node);
    const std::string text = kernel_text(k);
    CHECK(scheduler_of(k) == "rows");
    CHECK(test::row_passes(s.g, RegionKind::reduction, node) == 2);
    CHECK_FALSE(has(text, "fj_max_sum"));
  }
  SECTION("over axes {0, 2}: row-style; over four long columns: split column-style") {
    for (const Shape& shape : {Shape{16, 32, 24}, Shape{1 << 20, 4}}) {
      Graph g;
      const NodeId x = add_input(g, DType::f32, shape);
      const std::vector<int64_t> axes =
          shape.size() == 3 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{0};
      const NodeId m = add_reduce(g, Op::max, x, axes, true);
      const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
      g.set_outputs({m, add_reduce(g, Op::sum, e, axes, true)});
      INFO((shape.size() == 3 ? "axes {0, 2}" : "four long columns"));
      const templates::Kernel k = compile_graph(g, RegionKind::reduction);
      CHECK(scheduler_of(k) == (shape.size() == 3 ? "rows" : "column"));
      if (shape.size() != 3) CHECK(schedule_count(k, "split") > 1);
    }
  }
  SECTION("bf16 statistics allow the approximate exponential") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {8192, 8192});
    const NodeId m = add_reduce(g, Op::max, x, {0}, true);
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
    g.set_outputs({m, add_reduce(g, Op::sum, e, {0}, true)});
    CHECK(has(kernel_text(compile_graph(g, RegionKind::reduction)), "fj_op_max_sum<true>()"));
  }
}
