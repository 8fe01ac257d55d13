// Kernels over more than 2^31 elements: every template switches its index arithmetic to 64 bits
// (RegionInfo::wide_index) and still compiles for sm_90. Nothing runs here; the sizes are the
// point (tens of GB of data, more than a test GPU should be asked for).
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::has;
using fusejit::test::index_bits;
using fusejit::test::kernel_ir;
using fusejit::test::kernel_text;
using fusejit::test::schedule_flag;
using fusejit::test::scheduler_of;
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
    CHECK(scheduler_of(compile_graph(g, RegionKind::pointwise)) == "tiled_transpose");
    CHECK(index_bits(kernel_ir(g, RegionKind::pointwise).fn) == 64);
  }
  SECTION("and 32-bit ones below (the same templates, smaller)") {
    Graph t;
    const NodeId x = add_input(t, DType::f16, {500, 500});
    t.add_output(
        add_binary(t, Op::add, add_permute(t, x, {1, 0}), add_input(t, DType::f16, {500, 500})));
    CHECK(scheduler_of(compile_graph(t, RegionKind::pointwise)) == "tiled_transpose");
    CHECK(index_bits(kernel_ir(t, RegionKind::pointwise).fn) == 32);
    Graph r;
    r.add_output(softmax_rows(r, add_input(r, DType::bf16, {2000, 16384})));
    compile_graph(r, RegionKind::normalization);
    CHECK(index_bits(kernel_ir(r, RegionKind::normalization).fn) == 32);
  }
  SECTION("3-D broadcast") {
    Graph g;
    const NodeId a = add_input(g, DType::bf16, {2, 1, 40000});
    const NodeId b = add_input(g, DType::bf16, {1, 40000, 40000});
    g.add_output(add_binary(g, Op::mul, a, b));
    compile_graph(g, RegionKind::pointwise);
    CHECK(index_bits(kernel_ir(g, RegionKind::pointwise).fn) == 64);
  }
  SECTION("rows held in registers") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::bf16, {200000, 16384})));
    CHECK(schedule_flag(compile_graph(g, RegionKind::normalization), "register_cache"));
    CHECK(index_bits(kernel_ir(g, RegionKind::normalization).fn) == 64);
  }
  SECTION("vocabulary-wide rows with online statistics (no clusters before sm_90)") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::f32, {20000, 128256})));
    const templates::CodegenOptions sm80{.target = templates::target_for_arch("sm_80")};
    const templates::Kernel k = compile_graph(g, RegionKind::normalization, sm80);
    CHECK(schedule_flag(k, "online"));
    CHECK(has(kernel_text(k), "fj_max_sum a"));
    CHECK(index_bits(kernel_ir(g, RegionKind::normalization, sm80).fn) == 64);
  }
  SECTION("vocabulary-wide rows split over a thread-block cluster") {
    Graph g;
    g.add_output(softmax_rows(g, add_input(g, DType::f32, {20000, 128256})));
    const templates::Kernel k = compile_graph(g, RegionKind::normalization);
    CHECK(k.cluster == 8);
    CHECK(schedule_flag(k, "register_cache"));
    CHECK(index_bits(kernel_ir(g, RegionKind::normalization).fn) == 64);
  }
  SECTION("column softmax statistics, online, split over blocks") {
    Graph g;
    const NodeId x = add_cast(g, add_input(g, DType::bf16, {40000000, 64}), DType::f32);
    const NodeId m = add_reduce(g, Op::max, x, {0}, true);
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
    g.set_outputs({m, add_reduce(g, Op::sum, e, {0}, true)});
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    CHECK(scheduler_of(k) == "column");
    CHECK(test::schedule_count(k, "split") > 1);
    const templates::KernelBody ir = kernel_ir(g, RegionKind::reduction);
    CHECK(test::count_declared(ir.fn, "a", "fj_max_sum") == 1);  // the online pair's accumulator
    CHECK(index_bits(ir.fn) == 64);
  }
  SECTION("a narrow column reduction split over blocks") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::bf16, {40000000, 64}), {0}, false));
    compile_graph(g, RegionKind::reduction);
    CHECK(index_bits(kernel_ir(g, RegionKind::reduction).fn) == 64);
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
    CHECK(index_bits(kernel_ir(g, RegionKind::pointwise).fn) == 64);
    CHECK(k.work_blocks > (int64_t{1} << 31));
    CHECK(templates::launch_grid(k, 132) == (int64_t{1} << 31) - 1);
  }
  SECTION("row reduction") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::f32, {k2to30, k2to30}), {1}, false));
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    CHECK(index_bits(kernel_ir(g, RegionKind::reduction).fn) == 64);
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
  SECTION("column reduction") {
    Graph g;
    g.add_output(add_reduce(g, Op::sum, add_input(g, DType::bf16, {int64_t{1} << 59, 4}), {0},
                            false));
    const templates::Kernel k = compile_graph(g, RegionKind::reduction);
    CHECK(scheduler_of(k) == "column");
    CHECK(index_bits(kernel_ir(g, RegionKind::reduction).fn) == 64);
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
  SECTION("transpose") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {k2to30, k2to30});
    g.add_output(add_permute(g, x, {1, 0}));
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(scheduler_of(k) == "tiled_transpose");
    CHECK(index_bits(kernel_ir(g, RegionKind::pointwise).fn) == 64);
    CHECK(templates::launch_grid(k, 132) <= (int64_t{1} << 31) - 1);
  }
}
