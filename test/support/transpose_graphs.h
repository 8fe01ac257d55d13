// Regions that read inputs through permutes, shared by the templates tests (which kernel each
// one gets, and that it compiles) and the GPU tests (that it matches the CPU reference): 2-D
// transposes, 3-D permutes that move the inner axis ([0,2,1], [2,0,1], [2,1,0]) or keep it
// ([1,0,2]), odd and prime extents, every storage width.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusejit::testing {

struct TransposeGraph {
  std::string name;
  ir::Graph graph;
  bool tiled = false;  // templates/schedulers/transpose.cpp should take it
};

// a + b, or a != b for bool (bool arithmetic is rejected).
inline ir::NodeId combine(ir::Graph& g, ir::NodeId a, ir::NodeId b) {
  const bool is_bool = g.node(a).dtype == DType::boolean;
  return ir::add_binary(g, is_bool ? ir::Op::ne : ir::Op::add, a, b);
}

// y = permute(x, perm) (+) z, z of the output's shape.
inline ir::Graph permute_combine(DType d, const Shape& x_shape, const std::vector<int64_t>& perm) {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, d, x_shape);
  const ir::NodeId p = ir::add_permute(g, x, perm);
  const ir::NodeId z = ir::add_input(g, d, g.node(p).shape);
  g.set_outputs({combine(g, p, z)});
  return g;
}

// y = permute(x, [0,2,1]) (+) w, w broadcast along the output's inner axis.
inline ir::Graph permute021_broadcast(DType d, const Shape& x_shape) {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, d, x_shape);
  const ir::NodeId w = ir::add_input(g, d, {x_shape[1]});
  g.set_outputs({combine(g, ir::add_permute(g, x, {0, 2, 1}), w)});
  return g;
}

// y = permute(x, perm) (+) a constant.
inline ir::Graph permute_scale(DType d, const Shape& x_shape, const std::vector<int64_t>& perm) {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, d, x_shape);
  const ir::NodeId p = ir::add_permute(g, x, perm);
  g.set_outputs({combine(g, p, ir::add_constant(g, d, 0.5))});
  return g;
}

inline std::vector<TransposeGraph> transpose_graphs() {
  std::vector<TransposeGraph> out;
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i64, DType::boolean}) {
    const std::string n(dtype_name(d));
    out.push_back({"transpose_add [256,384] " + n, permute_combine(d, {256, 384}, {1, 0}), true});
    out.push_back({"transpose_add [1000,37] " + n, permute_combine(d, {1000, 37}, {1, 0}), true});
    out.push_back({"transpose_add [37,1000] " + n, permute_combine(d, {37, 1000}, {1, 0}), true});
    out.push_back({"permute021 [6,96,160] " + n, permute021_broadcast(d, {6, 96, 160}), true});
    out.push_back({"permute201 [24,40,64] " + n, permute_scale(d, {24, 40, 64}, {2, 0, 1}), true});
    out.push_back({"permute210 [40,24,64] " + n, permute_scale(d, {40, 24, 64}, {2, 1, 0}), true});
    out.push_back(
        {"permute102 [48,64,80] " + n, permute_combine(d, {48, 64, 80}, {1, 0, 2}), false});
  }
  for (DType d : {DType::f32, DType::bf16}) {
    const std::string n(dtype_name(d));
    out.push_back({"permute021 [3,100,33] " + n, permute021_broadcast(d, {3, 100, 33}), true});
    out.push_back({"permute201 [3,5,7] " + n, permute_scale(d, {3, 5, 7}, {2, 0, 1}), false});
    out.push_back({"permute021 [3,5,7] " + n, permute021_broadcast(d, {3, 5, 7}), false});
    out.push_back({"permute120 [17,64,40] " + n, permute_scale(d, {17, 64, 40}, {1, 2, 0}), true});
  }
  {
    // x + x^T: one read through the tile, the other straight.
    ir::Graph g;
    const ir::NodeId x = ir::add_input(g, DType::f32, {128, 128});
    g.set_outputs({ir::add_binary(g, ir::Op::add, x, ir::add_permute(g, x, {1, 0}))});
    out.push_back({"x + x^T [128,128] f32", std::move(g), true});
  }
  {
    // Two transposed inputs of different widths, and a second output of the same size.
    ir::Graph g;
    const ir::NodeId a = ir::add_input(g, DType::f32, {96, 200});
    const ir::NodeId b = ir::add_input(g, DType::bf16, {96, 200});
    const ir::NodeId s = ir::add_binary(g, ir::Op::mul, ir::add_permute(g, a, {1, 0}),
                                        ir::add_permute(g, b, {1, 0}));
    g.set_outputs({s, ir::add_cast(g, ir::add_unary(g, ir::Op::exp, s), DType::bf16)});
    out.push_back({"two transposed inputs f32 bf16 [96,200]", std::move(g), true});
  }
  return out;
}

}  // namespace fusejit::testing
