// Kernels with gathers and random sources: every one compiles with NVRTC for sm_90, the gather
// is inside the consumer's kernel (the position loaded, wrapped and clamped, then the data read
// there), and the generator is pasted only into kernels that draw numbers.
#include "ir/graph.h"
#include "support/catch.h"
#include "templates/device_sources.h"
#include "templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::has;
using fusejit::test::kernel_text;

namespace {

// embedding(table, ids) * scale + pos, as the API records it: ids flattened, laid along axis 0
// and broadcast over the embedding dim, gathered, reshaped back.
Graph embedding_graph(DType dtype, DType index, int64_t rows, int64_t dim) {
  Graph g;
  const NodeId table = add_input(g, dtype, {rows, dim});
  const NodeId ids = add_input(g, index, {8, 16});
  const NodeId pos = add_input(g, dtype, {16, dim});
  const NodeId flat = add_reshape(g, ids, {128});
  const NodeId along = add_expand(g, add_reshape(g, flat, {128, 1}), {128, dim});
  const NodeId rows_read = add_reshape(g, add_gather(g, table, 0, along), {8, 16, dim});
  const NodeId scaled = add_binary(g, Op::mul, rows_read, add_constant(g, dtype, 0.125));
  g.add_output(add_binary(g, Op::add, scaled, pos));
  return g;
}

}  // namespace

TEST_CASE("an embedding lookup compiles inside its consumer's kernel", "[templates][gather]") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (DType index : {DType::i32, DType::i64}) {
      INFO(dtype_name(dtype) << " table, " << dtype_name(index) << " ids");
      const Graph g = embedding_graph(dtype, index, 50257, 64);
      const templates::Kernel k = compile_graph(g, fusion::RegionKind::pointwise);
      const std::string text = kernel_text(k);
      // The id is wrapped once, clamped, and the table read at it: in0 is the table.
      CHECK(has(text, "gw0 < 0 ? 0 : gw0 < 50257 ? (int)gw0 : 50256"));
      CHECK(has(text, "in0[gi0 * 64 + "));
      CHECK(!has(k.source, "fj_philox4x32_10"));
    }
  }
}

TEST_CASE("gathers along any axis, with shorter or computed indices, compile",
          "[templates][gather]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {6, 7, 5});
  const NodeId idx = add_input(g, DType::i64, {4, 7, 3});
  const NodeId shifted = add_binary(g, Op::sub, idx, add_constant(g, DType::i64, 1));
  g.add_output(add_gather(g, x, 1, shifted));                                   // middle axis
  g.add_output(add_gather(g, add_permute(g, x, {2, 1, 0}), 0, add_permute(g, idx, {2, 1, 0})));
  const templates::Kernel k = compile_graph(g, fusion::RegionKind::pointwise);
  CHECK(has(kernel_text(k), "gi1"));
  // 64-bit index arithmetic: the position is a long long too.
  Graph wide;
  const NodeId big = add_input(wide, DType::f16, {int64_t{1} << 20, 4096});
  const NodeId ids = add_input(wide, DType::i32, {16, 1});
  wide.add_output(add_gather(wide, big, 0, add_expand(wide, ids, {16, 4096})));
  CHECK(has(kernel_text(compile_graph(wide, fusion::RegionKind::pointwise)), "(long long)gw0"));
}

TEST_CASE("rand, randn and dropout kernels paste the generator and compile", "[templates][random]") {
  for (const auto rounding : {Rounding::store, Rounding::node}) {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {33, 130});
    const NodeId u = add_random(g, Op::rand, DType::f32, {33, 130}, 0xdeadbeefcafef00dull, 17);
    const NodeId keep = add_binary(g, Op::lt, u, add_constant(g, DType::f32, 0.9));
    const NodeId kept = add_binary(g, Op::mul, add_cast(g, x, DType::f32),
                                   add_constant(g, DType::f32, 1 / 0.9));
    g.add_output(add_cast(g, add_where(g, keep, kept, add_constant(g, DType::f32, 0)), DType::bf16));
    g.add_output(add_random(g, Op::randn, DType::f16, {33, 130}, 5, 0));
    templates::CodegenOptions options;
    options.rounding = rounding;
    const templates::Kernel k = compile_graph(g, fusion::RegionKind::pointwise, options);
    CHECK(has(k.source, std::string(templates::device_source("fj_random.cuh"))));
    CHECK(has(kernel_text(k), "fj_rand(16045690984503111693ull, 17ull, (unsigned long long)("));
    CHECK(has(kernel_text(k), "fj_randn(5ull, 0ull"));
  }
}
