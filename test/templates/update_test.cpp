// Kernels that write an update_slice: every one compiles with NVRTC for sm_90, the value's
// producers and the store are one kernel over the value's elements (one per thread and
// iteration: the store lands at a position loaded at run time), and the destination is a
// parameter written, never read.
#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "support/catch.h"
#include "templates/emit.h"
#include "templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::generate_and_compile;
using fusejit::test::has;

namespace {

// cache[:, :, pos:pos+tokens] = (x * 0.5) permuted to [B, H, tokens, D], as a decoder's KV
// append (with a stand-in for rope).
Graph kv_append(DType dtype, DType index, int64_t tokens, int64_t capacity) {
  Graph g;
  const NodeId cache = add_input(g, dtype, {2, 8, capacity, 128});
  const NodeId x = add_input(g, dtype, {2, tokens, 8, 128});
  const NodeId pos = add_input(g, index, {});
  const NodeId k =
      add_permute(g, add_binary(g, Op::mul, x, add_constant(g, dtype, 0.5)), {0, 2, 1, 3});
  g.add_output(add_update_slice(g, cache, k, 2, pos));
  return g;
}

}  // namespace

TEST_CASE("a KV-cache append compiles as one kernel over the new entries", "[templates][update]") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (DType index : {DType::i32, DType::i64}) {
      for (int64_t tokens : {1, 5, 128}) {
        INFO(dtype_name(dtype) << " cache, " << dtype_name(index) << " start, " << tokens
                               << " tokens");
        const Graph g = kv_append(dtype, index, tokens, 4096);
        const fusion::Plan plan = fusion::make_plan(g);
        REQUIRE(plan.kernel_count() == 1);
        const templates::Kernel k = generate_and_compile(plan.graph, plan.regions[0]);
        CHECK(k.schedule.find("pointwise") == 0);
        CHECK(has(k.schedule, "vector_widths=[1]"));
        // Parameters: x and the start read, the cache written; one thread per new element.
        CHECK(k.params.size() == 3);
        CHECK(k.work_blocks == (2 * 8 * tokens * 128 + 255) / 256);
      }
    }
  }
}

TEST_CASE("an update along the last axis, and a whole-buffer one, compile", "[templates][update]") {
  Graph g;
  const NodeId row = add_input(g, DType::bf16, {3, 1000});
  const NodeId v = add_input(g, DType::bf16, {3, 17});
  const NodeId start = add_input(g, DType::i64, {1});
  g.add_output(add_update_slice(g, row, add_unary(g, Op::neg, v), 1, start));
  const NodeId whole = add_input(g, DType::f32, {4, 4});
  g.add_output(add_update_slice(g, whole, add_input(g, DType::f32, {4, 4}), 0, start));
  const fusion::Plan plan = fusion::make_plan(g);
  // Two iteration spaces, independent: one kernel with a sweep each.
  REQUIRE(plan.kernel_count() == 1);
  REQUIRE(plan.regions.front().outputs.size() == 2);
  for (const fusion::Region& r : plan.regions) generate_and_compile(plan.graph, r);
}
