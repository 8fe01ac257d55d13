// jit/executor's buffer_slots: which region outputs a replay's fixed run lets share a buffer.
// Checked against an independent reading of each plan: two nodes share a slot only when their
// storages' lives do not overlap (a storage lives from the region that computes it to the last
// region reading it or an update written into it; a graph output's lives to the end), every
// slot holds each of its nodes, and chains of intermediates need only a few slots. The traces:
// examples/traces, the attention suite, and test/traces/replay (examples/generate's tiny config,
// recorded with FUSEJIT_RECORD_DIR: a prefill and a decode step, KV-cache updates included).
#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/runtime/executor.h"
#include "support/catch.h"

using namespace fusejit;

namespace {

struct Life {
  int from = -1, to = -1;  // regions; to = max for graph outputs
};

// Every slot-holding storage's life, and each node's storage, read straight from the plan.
void check_slots(const fusion::Plan& plan, const std::string& what) {
  INFO(what);
  const ir::Graph& g = plan.graph;
  const jit::BufferSlots s = jit::buffer_slots(plan);
  REQUIRE(s.slot.size() == g.size());
  std::vector<ir::NodeId> storage(g.size());
  std::vector<int> computed(g.size(), -1);
  for (size_t id = 0; id < g.size(); ++id) storage[id] = static_cast<ir::NodeId>(id);
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    for (ir::NodeId id : plan.regions[i].outputs) {
      computed[static_cast<size_t>(id)] = static_cast<int>(i);
      const ir::Node& n = g.node(id);
      if (n.op == ir::Op::update_slice) {
        storage[static_cast<size_t>(id)] = storage[static_cast<size_t>(n.inputs[0])];
      }
    }
  }
  std::vector<Life> life(g.size());
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const auto touch = [&](ir::NodeId id) {
      Life& l = life[static_cast<size_t>(storage[static_cast<size_t>(id)])];
      if (l.from < 0) l.from = static_cast<int>(i);
      l.to = std::max(l.to, static_cast<int>(i));
    };
    for (ir::NodeId id : plan.regions[i].outputs) touch(id);
    for (ir::NodeId id : plan.regions[i].inputs) touch(id);
  }
  for (ir::NodeId id : g.outputs()) {
    life[static_cast<size_t>(storage[static_cast<size_t>(id)])].to =
        std::numeric_limits<int>::max();
  }
  std::vector<std::vector<ir::NodeId>> by_slot(s.bytes.size());
  for (size_t id = 0; id < g.size(); ++id) {
    const bool own = computed[id] >= 0 && storage[id] == static_cast<ir::NodeId>(id);
    if (!own) continue;  // inputs, nodes inside regions, updates (their destination's)
    INFO("%" << id);
    REQUIRE(s.slot[id] >= 0);
    REQUIRE(static_cast<size_t>(s.slot[id]) < s.bytes.size());
    const ir::Node& n = g.node(static_cast<ir::NodeId>(id));
    const size_t bytes = static_cast<size_t>(ir::numel(n.shape)) * dtype_size(n.dtype);
    CHECK(s.bytes[static_cast<size_t>(s.slot[id])] >= bytes);
    by_slot[static_cast<size_t>(s.slot[id])].push_back(static_cast<ir::NodeId>(id));
  }
  for (size_t slot = 0; slot < by_slot.size(); ++slot) {
    std::vector<ir::NodeId>& ids = by_slot[slot];
    CHECK(!ids.empty());
    std::sort(ids.begin(), ids.end(), [&](ir::NodeId a, ir::NodeId b) {
      return life[static_cast<size_t>(a)].from < life[static_cast<size_t>(b)].from;
    });
    for (size_t j = 1; j < ids.size(); ++j) {
      const Life& before = life[static_cast<size_t>(ids[j - 1])];
      const Life& after = life[static_cast<size_t>(ids[j])];
      INFO("slot " << slot << ": %" << ids[j - 1] << " lives in regions [" << before.from << ", "
                   << before.to << "], %" << ids[j] << " from " << after.from);
      CHECK(before.to < after.from);
    }
  }
  // An update's slot is its destination storage's (none for an input).
  for (size_t id = 0; id < g.size(); ++id) {
    if (computed[id] >= 0 && storage[id] != static_cast<ir::NodeId>(id)) {
      CHECK(s.slot[id] == s.slot[static_cast<size_t>(storage[id])]);
    }
  }
}

// n unfused elementwise ops in a chain on [rows, 64] f32, each read by the next one and by the
// one after it (two live at once), then an update of a buffer input with the result.
std::string chain_trace(int n) {
  std::string t = "fusejit-trace 1\n%0 : f32[32,64] = input\n%1 : f32[32,64] = input\n";
  t += "%2 : f32[32,64] = exp %0\n%3 : f32[32,64] = tanh %2\n";
  int last = 3;
  for (int i = 0; i < n; ++i) {
    t += fmt::format("%{} : f32[32,64] = add %{}, %{}\n", last + 1, last, last - 1);
    ++last;
  }
  t += fmt::format("%{} : i32[] = const 0\n", last + 1);
  t += fmt::format("%{} : f32[32,64] = update_slice %1, %{}, %{} axis=0\n", last + 2, last,
                   last + 1);
  t += fmt::format("output %{}, %{}\n", last + 2, last - 1);
  return t;
}

}  // namespace

TEST_CASE("buffer slots: no two live values share one", "[jit][executor][replay]") {
  int traces = 0;
  for (const std::string& dir :
       {std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces", std::string(FUSEJIT_ATTENTION_TRACES),
        std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/replay"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".trace") continue;
      const ir::Graph g = ir::parse_file(entry.path().string());
      check_slots(fusion::make_plan(g), entry.path().filename().string());
      fusion::PlanOptions unfused;
      unfused.fusion = false;
      check_slots(fusion::make_plan(g, unfused), entry.path().filename().string() + " unfused");
      ++traces;
    }
  }
  CHECK(traces >= 22);
}

TEST_CASE("buffer slots: a chain of same-sized values needs a few", "[jit][executor][replay]") {
  fusion::PlanOptions unfused;
  unfused.fusion = false;
  const fusion::Plan plan = fusion::make_plan(ir::parse(chain_trace(40)), unfused);
  REQUIRE(plan.regions.size() >= 40);
  check_slots(plan, "chain of 40");
  const jit::BufferSlots s = jit::buffer_slots(plan);
  // Two values of the chain live at once, a third is being written, and the graph output
  // (the second to last value) keeps its own: at most 4 slots for 42 values.
  CHECK(s.bytes.size() <= 4);
  // The update writes into its input destination: no slot of its own.
  const ir::NodeId update = plan.graph.outputs().at(0);
  CHECK(s.slot[static_cast<size_t>(update)] == -1);
}
