// Kernels over more than 2^31 elements: every template switches its index arithmetic to 64 bits
// (RegionInfo::wide_index) and still compiles for sm_90. Nothing runs here; the sizes are the
// point (tens of GB of data, more than a test GPU should be asked for).
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::has;
using fusejit::test::kernel_text;
using fusion::RegionKind;

namespace {

NodeId softmax_rows(Graph& g, NodeId x) {
  const NodeId m = add_reduce(g, Op::max, x, {1}, true);
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
  return add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {1}, true));
}

}  // namespace

TEST_CASE("kernels over more than 2^31 elements use 64-bit indices", "[templates][wide]") {
  SECTION("tiled transpose") {
    Graph g;
    const NodeId x = add_input(g, DType::f16, {50000, 50000});
    const NodeId z = add_input(g, DType::f16, {50000, 50000});
    g.add_output(add_binary(g, Op::add, add_permute(g, x, {1, 0}), z));
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(has(text, "tiled transpose"));
    CHECK(has(text, "64-bit index arithmetic"));
  }
  SECTION("3-D broadcast") {
    Graph g;
    const NodeId a = add_input(g, DType::bf16, {2, 1, 40000});
    const NodeId b = add_input(g, DType::bf16, {1, 40000, 40000});
    g.add_output(add_binary(g, Op::mul, a, b));
    CHECK(has(kernel_text(compile_graph(g, RegionKind::pointwise)), "64-bit index arithmetic"));
  }
  SECTION("rows held in registers") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::bf16, {200000, 16384})));
    const std::string text = kernel_text(compile_graph(g, RegionKind::normalization));
    CHECK(has(text, "row cached in registers"));
    CHECK(has(text, "64-bit index arithmetic"));
  }
  SECTION("vocabulary-wide rows with online statistics (no clusters before sm_90)") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::f32, {20000, 128256})));
    const std::string text = kernel_text(compile_graph(
        g, RegionKind::normalization, {.target = templates::target_for_arch("sm_80")}));
    CHECK(has(text, "fj_max_sum"));
    CHECK(has(text, "64-bit index arithmetic"));
  }
  SECTION("vocabulary-wide rows split over a thread-block cluster") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::f32, {20000, 128256})));
    const templates::Kernel k = compile_graph(g, RegionKind::normalization);
    CHECK(k.cluster == 8);
    CHECK(has(kernel_text(k), "row cached in registers"));
    CHECK(has(kernel_text(k), "64-bit index arithmetic"));
  }
  SECTION("column softmax statistics, online, split over blocks") {
    Graph g;
    const NodeId x = add_cast(g, add_input(g, DType::bf16, {40000000, 64}), DType::f32);
    const NodeId m = add_reduce(g, Op::max, x, {0}, true);
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
    g.set_outputs({m, add_reduce(g, Op::sum, e, {0}, true)});
    const std::string text = kernel_text(compile_graph(g, RegionKind::reduction));
    CHECK(has(text, "online softmax pair"));
    CHECK(has(text, "columns split in"));
    CHECK(has(text, "64-bit index arithmetic"));
  }
  SECTION("a narrow column reduction split over blocks") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::bf16, {40000000, 64}), {0}, false));
    const std::string text = kernel_text(compile_graph(g, RegionKind::reduction));
    CHECK(has(text, "64-bit index arithmetic"));
  }
}

// At the size limit (2^62 bytes, ir/shape.h) every template still generates a kernel that
// compiles, with 64-bit indices, and a grid CUDA can launch (the rest is a grid-stride loop).
TEST_CASE("kernels at the 2^62-byte tensor limit compile and launch within CUDA's grid",
          "[templates][wide][limits]") {
  constexpr int64_t k2to30 = int64_t{1} << 30;
  SECTION("pointwise") {
    Graph g;
    g.add_output(add_unary(g, Op::exp, add_input(g, DType::f32, {k2to30, k2to30})));
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(has(kernel_text(k), "64-bit index arithmetic"));
    CHECK(k.work_blocks > (int64_t{1} << 31));
    CHECK(templates::launch_grid(k, 132) == (int64_t{1} << 31) - 1);
  }
  SECTION("row reduction") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::f32, {k2to30, k2to30}), {1}, false));
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    CHECK(has(kernel_text(k), "64-bit index arithmetic"));
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
  SECTION("column reduction") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::bf16, {int64_t{1} << 59, 4}), {0},
                            false));
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    CHECK(has(kernel_text(k), "64-bit index arithmetic"));
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
  SECTION("transpose") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {k2to30, k2to30});
    g.add_output(add_permute(g, x, {1, 0}));
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(has(kernel_text(k), "64-bit index arithmetic"));
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
}
