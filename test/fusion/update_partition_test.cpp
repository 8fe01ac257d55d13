// update_slice in the IR and the partitioner: what the op accepts, that the value's producers
// and the write are one pointwise kernel over the value's elements (the destination is neither
// read nor copied), and that a region reading the destination's old values runs before the
// write, wherever it was recorded (fusion/order_writes.h).
#include <string>

#include "fusejit/error.h"
#include "fusion/order_writes.h"
#include "fusion/partition.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// The error Graph::add gives for update_slice(dst, src, start) along `axis`, or "".
std::string update_error(DType dst_type, Shape dst_shape, DType src_type, Shape src_shape,
                         DType start_type, Shape start_shape, int64_t axis,
                         bool computed_dst = false) {
  Graph g;
  NodeId dst = ir::add_input(g, dst_type, dst_shape);
  if (computed_dst) dst = ir::add_unary(g, Op::neg, dst);
  const NodeId src = ir::add_input(g, src_type, std::move(src_shape));
  const NodeId start = ir::add_input(g, start_type, std::move(start_shape));
  try {
    ir::add_update_slice(g, dst, src, axis, start);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A KV-cache append as a decoder records it: k = x * scale (a stand-in for rope), written into
// cache [B, H, S, D] at position pos along axis 2.
struct Append {
  Graph g;
  NodeId cache, x, pos, k, write;
};

Append kv_append(int64_t tokens) {
  Append a;
  a.cache = ir::add_input(a.g, DType::bf16, {2, 4, 64, 32});
  a.x = ir::add_input(a.g, DType::bf16, {2, tokens, 4, 32});
  a.pos = ir::add_input(a.g, DType::i32, {});
  a.k = ir::add_permute(a.g, bin(a.g, Op::mul, a.x, ir::add_constant(a.g, DType::bf16, 0.5)),
                        {0, 2, 1, 3});
  a.write = ir::add_update_slice(a.g, a.cache, a.k, 2, a.pos);
  return a;
}

}  // namespace

TEST_CASE("update_slice says what is wrong with its operands", "[fusion][update]") {
  using enum DType;
  CHECK(update_error(f32, {2, 8}, f32, {2, 3}, i64, {}, 1).empty());
  CHECK(update_error(f32, {2, 8}, f32, {2, 8}, i32, {1}, -1).empty());
  CHECK(has(update_error(f32, {2, 8}, f32, {2, 3}, i64, {}, 1, true), "must be data"));
  CHECK(has(update_error(f32, {2, 8}, f32, {3}, i64, {}, 0), "must have the rank"));
  CHECK(has(update_error(f32, {2, 8}, f32, {2, 9}, i64, {}, 1), "at most as long along 1"));
  CHECK(has(update_error(f32, {2, 8}, f32, {1, 3}, i64, {}, 1), "match every axis but 1"));
  CHECK(has(update_error(bf16, {2, 8}, f32, {2, 3}, i64, {}, 1), "cast the value to bf16"));
  CHECK(has(update_error(f32, {2, 8}, f32, {2, 3}, f32, {}, 1), "one i32 or i64"));
  CHECK(has(update_error(f32, {2, 8}, f32, {2, 3}, i64, {2}, 1), "one i32 or i64"));
  CHECK(has(update_error(f32, {2, 8}, f32, {2, 3}, i64, {}, 2), "update_slice"));
}

TEST_CASE("a KV-cache append is one pointwise kernel over the new entries", "[fusion][update]") {
  for (int64_t tokens : {1, 7}) {
    INFO(tokens << " tokens");
    Append a = kv_append(tokens);
    a.g.add_output(a.write);
    const Plan plan = plan_of(a.g);
    REQUIRE(plan.kernel_count() == 1);
    const Region& r = plan.regions[0];
    CHECK(r.kind == RegionKind::pointwise);
    CHECK(r.shape == Shape{2, 4, tokens, 32});           // the value's elements, not the cache's
    CHECK(r.inputs == std::vector<NodeId>{a.x, a.pos});  // the cache is written, never read
    CHECK(r.outputs == std::vector<NodeId>{a.write});
  }
}

TEST_CASE("a reader of the written cache runs after the write, in its own kernel",
          "[fusion][update]") {
  Append a = kv_append(1);
  const NodeId total = ir::add_reduce(a.g, Op::sum, a.write, {3}, false);
  a.g.add_output(total);
  const Plan plan = plan_of(a.g);  // checked against the reference, region by region
  REQUIRE(plan.kernel_count() == 2);
  CHECK(plan.regions[0].outputs == std::vector<NodeId>{a.write});
  CHECK(plan.regions[1].inputs == std::vector<NodeId>{a.write});
}

TEST_CASE("reads of the old values run before the write, wherever they were recorded",
          "[fusion][update]") {
  // `before` reads the cache as it was: recorded after the update, it must still run first.
  Append a = kv_append(1);
  const NodeId before = ir::add_reduce(a.g, Op::max, a.cache, {3}, false);
  const NodeId after = ir::add_reduce(a.g, Op::sum, a.write, {3}, false);
  a.g.set_outputs({after, before});
  const Graph ordered = order_writes(a.g);
  CHECK_FALSE(ordered == a.g);
  const Plan plan = plan_of(a.g);  // run_plan writes in place: a late read would differ
  REQUIRE(plan.kernel_count() == 3);
  size_t reader = 0, writer = 0;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    for (NodeId out : plan.regions[i].outputs) {
      if (plan.graph.node(out).op == Op::update_slice) writer = i;
      if (plan.graph.node(out).op == Op::max) reader = i;
    }
  }
  CHECK(reader < writer);
  // The same through views of the cache (a transpose, then a slice), read by a pointwise
  // consumer recorded last.
  Append c = kv_append(1);
  const NodeId view = ir::add_slice(c.g, ir::add_permute(c.g, c.cache, {0, 1, 3, 2}), 3, 0, 8);
  const NodeId old_values = bin(c.g, Op::mul, view, ir::add_constant(c.g, DType::bf16, 3));
  c.g.set_outputs({c.write, old_values});
  CHECK_FALSE(order_writes(c.g) == c.g);
  const Plan viewed = plan_of(c.g);
  for (size_t i = 0; i < viewed.regions.size(); ++i) {
    for (NodeId out : viewed.regions[i].outputs) {
      if (viewed.graph.node(out).op == Op::mul) CHECK(i == 0);  // before the write
    }
  }
  // Already in order: the pass returns its input.
  Append b = kv_append(1);
  ir::add_reduce(b.g, Op::sum, b.write, {3}, false);
  b.g.set_outputs({b.write});
  CHECK(order_writes(b.g) == b.g);
}

TEST_CASE("a value computed from the old cache is written by a kernel that does not read it",
          "[fusion][update]") {
  // cache[:, :, pos] = cache[:, :, 0] * 2: the read of the cache and the write cannot share a
  // kernel (other threads would be writing what it reads).
  Graph g;
  const NodeId cache = ir::add_input(g, DType::f32, {2, 4, 64, 32});
  const NodeId pos = ir::add_input(g, DType::i64, {1});
  const NodeId first = ir::add_slice(g, cache, 2, 0, 1);
  const NodeId doubled = bin(g, Op::mul, first, ir::add_constant(g, DType::f32, 2));
  g.add_output(ir::add_update_slice(g, cache, doubled, 2, pos));
  const Plan plan = plan_of(g);
  REQUIRE(plan.kernel_count() == 2);
  CHECK(any_decision(plan, false, "the buffer update_slice"));
}

TEST_CASE("writes that cannot be ordered are refused, saying why", "[fusion][update]") {
  {
    // Reads the cache both before and after the write.
    Append a = kv_append(1);
    const NodeId mixed = bin(a.g, Op::add, a.cache, a.write);
    a.g.set_outputs({mixed});
    try {
      make_plan(a.g);
      FAIL("no error");
    } catch (const UsageError& e) {
      CHECK(has(e.what(), "both before the write"));
    }
  }
  {
    // Two writes into one buffer.
    Append a = kv_append(1);
    const NodeId again = ir::add_update_slice(a.g, a.cache, a.k, 2, a.pos);
    a.g.set_outputs({a.write, again});
    try {
      make_plan(a.g, PlanOptions{.passes = false});
      FAIL("no error");
    } catch (const UsageError& e) {
      CHECK(has(e.what(), "both write"));
    }
  }
}
