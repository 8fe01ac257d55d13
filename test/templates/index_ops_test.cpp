// Kernels of regions with slices, concats and aranges (templates/kir/index.h: index arithmetic, a
// select over index ranges, a value from the position), compiled by NVRTC for sm_90.
#include <algorithm>
#include <string>

#include "ir/graph.h"
#include "ir/text.h"
#include "support/catch.h"
#include "templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::fusion::RegionKind;
using fusejit::test::compile_graph;
using fusejit::test::kernel_text;

namespace {

// y = x * cos + concat(-x2, x1) * sin, x1 and x2 the halves of x's last axis.
Graph rotary(DType d, int64_t head_dim) {
  Graph g;
  const NodeId x = add_input(g, d, {8, 16, head_dim});
  const NodeId cos = add_input(g, d, {16, head_dim});
  const NodeId sin = add_input(g, d, {16, head_dim});
  const NodeId x1 = add_slice(g, x, -1, 0, head_dim / 2);
  const NodeId x2 = add_slice(g, x, -1, head_dim / 2, head_dim);
  const NodeId rot = add_concat(g, {add_unary(g, Op::neg, x2), x1}, -1);
  g.add_output(add_binary(g, Op::add, add_binary(g, Op::mul, x, cos),
                          add_binary(g, Op::mul, rot, sin)));
  return g;
}

}  // namespace

namespace {

// The value the kernel IR gives node `id` of the whole graph as a pointwise region: the first
// let of v<k>, k its place among the region's nodes; null where none.
templates::kir::ExprP value_of(const Graph& g, NodeId id) {
  const fusion::Region r = test::whole_graph_region(g, RegionKind::pointwise);
  const auto place = std::find(r.nodes.begin(), r.nodes.end(), id) - r.nodes.begin();
  const std::string name = "v" + std::to_string(place);
  templates::kir::ExprP value;
  const templates::KernelBody ir = test::kernel_ir(g, r);
  test::visit_stmts(ir.fn, [&](const templates::kir::Stmt& s) {
    if (!value && s.kind == templates::kir::StmtKind::let && s.var->name == name) value = s.value;
  });
  return value;
}

}  // namespace

TEST_CASE("the rotary embedding is one vectorized kernel", "[templates][index_ops]") {
  const templates::Kernel k = compile_graph(rotary(DType::bf16, 128), RegionKind::pointwise);
  const std::string text = kernel_text(k);
  INFO(text);
  // The halves are picked by the position along the last axis; every load is a vector load.
  CHECK(text.find("i % 128 < 64 ? ") != std::string::npos);
  CHECK(text.find("fj_load_vec") != std::string::npos);
  CHECK(text.find("= in0[") == std::string::npos);
  // An odd half (head_dim 6, halves of 3) is read per element.
  compile_graph(rotary(DType::f32, 6), RegionKind::pointwise);
}

TEST_CASE("concats of any count, axis and dtype compile", "[templates][index_ops]") {
  for (int64_t axis : {0, 1, 2}) {
    Graph g;
    const NodeId a = add_input(g, DType::f16, {4, 6, 8});
    Shape bs = {4, 6, 8};
    bs[static_cast<size_t>(axis)] = 3;
    const NodeId b = add_input(g, DType::i32, bs);
    const NodeId c = add_input(g, DType::f32, {4, 6, 8});
    const NodeId cat = add_concat(g, {a, b, add_unary(g, Op::exp, c)}, axis);
    CHECK(g.node(cat).dtype == DType::f32);
    g.add_output(add_unary(g, Op::relu, cat));
    g.add_output(cat);
    INFO("axis " << axis);
    compile_graph(g, RegionKind::pointwise);
    // Computed in the kernel: the operand picked by the position along the axis.
    const templates::kir::ExprP v = value_of(g, cat);
    REQUIRE(v != nullptr);
    CHECK(v->kind == templates::kir::ExprKind::select);
  }
  Graph g;  // bools and one operand
  const NodeId p = add_input(g, DType::boolean, {5, 7});
  g.add_output(add_concat(g, {p, p}, 0));
  g.add_output(add_concat(g, {p}, 1));
  compile_graph(g, RegionKind::pointwise);
}

TEST_CASE("strided slices and aranges compile", "[templates][index_ops]") {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    Graph g;
    const NodeId x = add_input(g, d, {12, 40});
    const NodeId s = add_slice(g, add_slice(g, x, 1, 3, 40, 3), 0, -5, 12, 2);  // [3,13]
    const NodeId r = add_arange(g, 13, d);
    g.add_output(add_binary(g, Op::add, s, r));
    g.add_output(add_arange(g, 1000, d));
    INFO(dtype_name(d));
    compile_graph(g, RegionKind::pointwise);
    // Computed in the kernel from the element's index, not read.
    for (NodeId a : {r, g.outputs()[1]}) {
      const templates::kir::ExprP v = value_of(g, a);
      REQUIRE(v != nullptr);
      CHECK(test::reads_named(v, "i"));
      CHECK_FALSE(test::reads_named(v, "in0"));
    }
  }
}

TEST_CASE("a slice and a concat fuse into a row reduction's prologue", "[templates][index_ops]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {64, 512});
  const NodeId gate = add_slice(g, x, 1, 0, 256);
  const NodeId up = add_slice(g, x, 1, 256, 512);
  const NodeId y = add_binary(g, Op::mul, add_unary(g, Op::silu, gate), up);
  const NodeId both = add_concat(g, {y, up}, 1);
  g.add_output(add_reduce(g, Op::sum, add_binary(g, Op::mul, both, both), {1}, false));
  compile_graph(g, RegionKind::reduction);
}
