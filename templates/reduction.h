// templates/reduction: what reduction and normalization regions have in common: the shape
// they reduce, the passes their reductions need, where each output is written, and the index
// of an element of the reduced tensor in terms of the kernel's loop variables.
#pragma once

#include <map>
#include <vector>

#include "templates/emit.h"
#include "templates/index.h"

namespace fusejit::templates {

enum class ReduceLayout {
  row,      // the reduced axes are the trailing ones: each output reduces a contiguous run
  column,   // a block of leading or middle axes: coalesced along the kept inner axes
  generic,  // anything else (e.g. axes {0, 2} of a rank-3 tensor)
};

struct ReduceOutput {
  size_t position = 0;  // in region.outputs
  ir::NodeId id = -1;
  bool full = false;  // one value per element of the reduced tensor (else one per output row)
  int pass = 0;       // full outputs: the element pass that writes it (1 .. passes + 1)
};

struct ReduceSpace {
  Shape shape;                // the operand shape of every reduce node
  std::vector<int64_t> axes;  // reduced axes, ascending
  std::vector<ir::NodeId> reduces;
  std::map<ir::NodeId, int> depth;  // 1 + the deepest reduce its operand reads
  std::map<ir::NodeId, int> reach;  // per region node: the deepest reduce it depends on (0: none)
  // Online softmax statistics: sum(exp(X - M)) -> M = max(X). The sum is accumulated in M's
  // pass with M, rescaled as the running maximum grows, instead of in a pass of its own
  // (see online_partner in reduction.cpp).
  std::map<ir::NodeId, ir::NodeId> online;
  int passes = 1;                   // the deepest reduce
  int64_t rows = 1;                 // elements of the result (kept axes)
  int64_t length = 1;               // elements reduced into each
  ReduceLayout layout = ReduceLayout::row;
  int64_t prefix = 1;  // column layout: kept elements before the reduced block
  int64_t suffix = 1;  // column layout: kept elements after it (the coalesced ones)
  std::vector<ReduceOutput> outputs;
};

ReduceSpace analyze_reduction(const RegionInfo& info);

bool is_reduced_axis(const ReduceSpace& space, size_t axis);

// The index of an element of the reduced tensor: each axis draws its digits from the root of
// its group (group_of(axis) picks the position in `roots`); each root is split over the
// extents of its group's axes, in order. Axes of extent 1 get no digits.
template <class GroupOf>
Index grouped_index(const Shape& shape, const std::vector<BasePtr>& roots, GroupOf group_of) {
  std::vector<Shape> extents(roots.size());
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] != 1) extents[group_of(a)].push_back(shape[a]);
  }
  std::vector<Index> parts;
  for (size_t r = 0; r < roots.size(); ++r) parts.push_back(index_from_root(roots[r], extents[r]));
  Index out{shape, std::vector<Digits>(shape.size())};
  std::vector<size_t> next(roots.size(), 0);
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == 1) continue;
    const size_t r = group_of(a);
    out.axes[a] = parts[r].axes[next[r]++];
  }
  return out;
}

}  // namespace fusejit::templates
