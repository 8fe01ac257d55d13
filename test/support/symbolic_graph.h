// Graphs written once over the values of their symbolic dims (B, or B and S) and planned at any
// of them, shared by the templates tests of dynamic kernels (generate_dynamic) and the GPU tests
// that run them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fusion/pipeline.h"
#include "ir/graph.h"

namespace fusejit::testing {

// Builds the graph with its symbols at the values `sym`.
using GraphAtSizes = std::function<void(ir::Graph&, const std::vector<int64_t>& sym)>;

inline fusion::Plan plan_at(const GraphAtSizes& build, const std::vector<int64_t>& sym) {
  ir::Graph g;
  build(g, sym);
  return fusion::make_plan(g);
}

// The outer extent at those values: the product of the symbols'.
inline int64_t outer_extent(const std::vector<int64_t>& sym) {
  int64_t p = 1;
  for (int64_t v : sym) p *= v;
  return p;
}

}  // namespace fusejit::testing
