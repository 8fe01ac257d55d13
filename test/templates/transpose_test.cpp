// The tiled transpose (templates/schedulers/transpose.cpp): which regions take it, what the tiles
// look like, and that every kernel compiles, vectorized and not. The GPU test "transposed reads
// through shared-memory tiles match the reference" (test/jit/gpu_test.cpp) runs the same graphs.
#include <array>

#include "support/transpose_graphs.h"
#include "templates/schedulers/registry.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::has;
using fusejit::test::kernel_text;
using fusion::RegionKind;

namespace {

// The schedule of the whole graph as one pointwise region.
templates::Schedule pointwise_schedule(const Graph& g, const templates::CodegenOptions& o = {}) {
  return templates::schedule(g, fusejit::test::whole_graph_region(g, RegionKind::pointwise), o);
}

// The cut of the output's linear index, ((outer * r + r_i) * mid + m) * c + c_i
// (TransposeParams): c, r, mid, outer.
using Axes = std::array<int64_t, 4>;
Axes axes_of(const Graph& g) {
  const auto p = std::get<templates::TransposeParams>(pointwise_schedule(g).params);
  return {p.c, p.r, p.mid, p.outer};
}

}  // namespace

TEST_CASE("transposed reads take the tiled path, others the linear sweep",
          "[templates][transpose]") {
  for (const testing::TransposeGraph& t : testing::transpose_graphs()) {
    for (bool vectorize : {true, false}) {
      INFO(t.name << (vectorize ? "" : ", vectorize off"));
      const templates::Kernel k =
          compile_graph(t.graph, RegionKind::pointwise, {.vectorize = vectorize});
      const std::string text = kernel_text(k);
      const std::string_view scheduler =
          pointwise_schedule(t.graph, {.vectorize = vectorize}).scheduler->name();
      CHECK(scheduler == (t.tiled ? "tiled_transpose" : "pointwise"));
      CHECK(has(text, "__shared__") == t.tiled);
      if (t.tiled) {
        CHECK(has(text, "__syncthreads();"));
        CHECK(k.shared_bytes == 0);  // static shared memory
        CHECK(k.blocks_per_sm >= 1);
      }
    }
  }
}

TEST_CASE("the tiles of a 2-D transpose", "[templates][transpose]") {
  SECTION("f32: 64 x 64 tiles, 16-byte chunks in and out, 8 blocks per SM") {
    const Graph g = testing::permute_combine(DType::f32, {4096, 12288}, {1, 0});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    const std::string text = kernel_text(k);
    const auto p = std::get<templates::TransposeParams>(pointwise_schedule(g).params);
    CHECK(p.tile == 64);
    CHECK(p.outputs_per_thread == 4);
    CHECK(p.blocks_per_sm == 8);
    CHECK(has(text, "__shared__ __align__(16) float tile0[4096];"));
    CHECK(has(text, "fj_load_vec(w0[p], in0 + c * 12288 + r);"));  // along x's rows
    CHECK(has(text, "fj_store_vec(out0 + r * 4096 + c0, s0);"));   // along the output's rows
    CHECK(has(text, "fj_load_vec(r0, in1 + r * 4096 + c0);"));     // z: straight
    CHECK(has(text, "int t ="));
    CHECK(!has(text, " if ("));  // 4096 and 12288 are whole tiles: no guards
    CHECK(k.block == 256);
    CHECK(k.blocks_per_sm == 8);
    CHECK(has(text, "__launch_bounds__(256, 8)"));
    CHECK(k.work_blocks == 64 * 192);
  }
  SECTION("bf16: 8 outputs per thread, packed stores") {
    const Graph g = testing::permute_combine(DType::bf16, {4096, 12288}, {1, 0});
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(has(text, "unsigned short tile0[4096];"));
    CHECK(std::get<templates::TransposeParams>(pointwise_schedule(g).params).outputs_per_thread ==
          8);
    CHECK(has(text, "fj_store_bf16_vec(out0 + r * 4096 + c0, s0);"));
  }
  SECTION("edge tiles are guarded") {
    const Graph g = testing::permute_combine(DType::f32, {1000, 37}, {1, 0});
    const std::string text = kernel_text(compile_graph(g, RegionKind::pointwise));
    CHECK(has(text, "cb + cl < 1000"));
    CHECK(has(text, "rb + q * 1 < 37"));  // 37 elements a row: 1-element chunks
    CHECK(has(text, "r < 37 && c0 < 1000"));
  }
  SECTION("i64 tiles of 64 x 64 would take 32 KiB: 32 x 32") {
    const Graph g = testing::permute_combine(DType::i64, {512, 512}, {1, 0});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(std::get<templates::TransposeParams>(pointwise_schedule(g).params).tile == 32);
    CHECK(has(kernel_text(k), "long long tile0[1024];"));
  }
  SECTION("more than 2^30 elements: 64-bit indices") {
    const Graph g = testing::permute_combine(DType::bf16, {32768, 65536}, {1, 0});
    CHECK(has(kernel_text(compile_graph(g, RegionKind::pointwise)), "long long t ="));
  }
}

TEST_CASE("3-D permutes: the batch axes go to the grid", "[templates][transpose]") {
  SECTION("[0,2,1]: the batch is the outer axis") {
    const Graph g = testing::permute021_broadcast(DType::bf16, {32, 2048, 1024});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    const std::string text = kernel_text(k);
    CHECK(axes_of(g) == Axes{2048, 1024, 1, 32});
    CHECK(has(text, "in0 + b * 2097152 + c * 1024 + r"));
    CHECK(has(text, "fj_load_vec(r0, in1 + c0);"));  // w along the output's rows
    CHECK(k.work_blocks == 32 * 16 * 32);
  }
  SECTION("[2,0,1]: the two outer input axes are one run along c") {
    const Graph g = testing::permute_scale(DType::f32, {256, 256, 1024}, {2, 0, 1});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    const std::string text = kernel_text(k);
    CHECK(axes_of(g) == Axes{65536, 1024, 1, 1});
    CHECK(has(text, "in0 + c * 1024 + r"));
    CHECK(has(text, "out0 + r * 65536 + c0"));
    CHECK(k.work_blocks == 16 * 1024);
  }
  SECTION("[2,1,0]: the batch sits between the two tiled axes") {
    const Graph g = testing::permute_scale(DType::f32, {40, 24, 64}, {2, 1, 0});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    const std::string text = kernel_text(k);
    CHECK(axes_of(g) == Axes{40, 64, 24, 1});
    CHECK(has(text, "in0 + c * 1536 + b * 64 + r"));
    CHECK(has(text, "out0 + r * 960 + b * 40 + c0"));
    CHECK(k.work_blocks == 24 * 1 * 1);
  }
  SECTION("[1,0,2] keeps the inner axis: linear sweep with vector loads") {
    const Graph g = testing::permute_combine(DType::f32, {48, 64, 80}, {1, 0, 2});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(test::scheduler_of(k) == "pointwise");
    CHECK(has(kernel_text(k), "fj_load_vec(r0, in0 +"));
  }
}

TEST_CASE("regions the tiles cannot serve fall back to the linear sweep",
          "[templates][transpose]") {
  SECTION("outputs of two sizes") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {256, 384});
    const NodeId s = add_unary(g, Op::exp, add_input(g, DType::f32, {7}));
    g.set_outputs({add_unary(g, Op::neg, add_permute(g, x, {1, 0})), s});
    const templates::Kernel k = compile_graph(g, RegionKind::pointwise);
    CHECK(test::scheduler_of(k) == "pointwise");
    // A sweep each: 384 * 256 elements in vectors of 4; 7 in one vector and a tail of 3.
    CHECK(test::schedule_field(k, "vector_widths") == "[4, 4]");
    CHECK(test::loop_bounds(test::kernel_ir(g, RegionKind::pointwise).fn, "t") ==
          std::vector<int64_t>{384 * 256 / 4, 1, 3});
  }
  SECTION("a transposition of an 8-wide axis") {
    const Graph g = testing::permute_combine(DType::f32, {4096, 8}, {1, 0});
    CHECK(test::scheduler_of(compile_graph(g, RegionKind::pointwise)) == "pointwise");
  }
}
