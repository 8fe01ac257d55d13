// The select a concat's kernel evaluates (templates/lower.cpp): a balanced tree over the
// operands, so that its depth, and the recursion of every walk over it (the kernel IR's
// verifier, its printer), grows as log2 of the operand count. A chain of 20,000 selects
// overflowed the stack.
#include <algorithm>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/catch.h"
#include "templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::kernel_text;
using fusejit::test::whole_graph_region;

namespace {

// The deepest nesting of parentheses in `text`.
int paren_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  for (char ch : text) {
    if (ch == '(') deepest = std::max(deepest, ++depth);
    if (ch == ')') --depth;
  }
  return deepest;
}

Graph concat_of(const std::vector<int64_t>& extents) {
  Graph g;
  std::vector<NodeId> parts;
  const NodeId x = add_input(g, DType::f32, {3, 1});
  for (int64_t e : extents) parts.push_back(e == 1 ? x : add_expand(g, x, {3, e}));
  g.add_output(add_concat(g, parts, 1));
  return g;
}

}  // namespace

TEST_CASE("a concat of thousands of operands selects through a balanced tree",
          "[templates][index_ops]") {
  const Graph small = concat_of({1, 1, 1});
  const Graph wide = concat_of(std::vector<int64_t>(3000, 1));
  const std::string three = kernel_text(templates::generate(
      small, whole_graph_region(small, fusion::RegionKind::pointwise)));
  const std::string many = kernel_text(templates::generate(
      wide, whole_graph_region(wide, fusion::RegionKind::pointwise)));
  INFO(three);
  // Up to three operands, the chain it always was.
  CHECK(fusejit::test::has(three, " < 1 ? "));
  CHECK(fusejit::test::has(three, " < 2 ? "));
  // 3,000 operands: some 12 levels of selects, each adding a group, not 3,000.
  CHECK(fusejit::test::count(many, " ? ") >= 2999);
  CHECK(paren_depth(many) < 2 * 12 + paren_depth(three));
}
