// jit::TraceMemo on the CPU, with executables built from real plans by a loader that compiles
// nothing: lookup by hash then by the whole trace, collisions kept apart, the cap forgetting the
// least recently used trace, and a forgotten trace's executable and kernels living on while
// someone still holds them.
#include <memory>
#include <vector>

#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "jit/runtime/trace_memo.h"
#include "support/catch.h"

using namespace fusejit;
using jit::Executable;
using jit::TraceMemo;

namespace {

// A distinct one-kernel trace per `variant`: y = unary(x * variant).
ir::Graph trace(int variant) {
  ir::Graph g;
  const ir::NodeId x = ir::add_input(g, DType::f32, {16, 32});
  const ir::NodeId c = ir::add_constant(g, DType::f32, static_cast<double>(variant));
  g.set_outputs({ir::add_unary(g, ir::Op::exp, ir::add_binary(g, ir::Op::mul, x, c))});
  return g;
}

// An executable whose kernels are generated but never compiled or loaded; `kernels` collects
// them (a LoadedKernel with no module unloads nothing).
std::shared_ptr<const Executable> executable(
    const ir::Graph& g, std::vector<std::weak_ptr<jit::LoadedKernel>>* kernels = nullptr) {
  return std::make_shared<const Executable>(
      jit::build_executable(
          fusion::make_plan(g),
          jit::KernelLoader{[](const templates::Kernel&) { return nullptr; },
                            [](const templates::Kernel&) { return jit::ObtainedKernel{}; },
                            [kernels](const templates::Kernel& k, const jit::ObtainedKernel&) {
                              auto loaded = std::make_shared<jit::LoadedKernel>();
                              loaded->kernel = k;
                              if (kernels) kernels->push_back(loaded);
                              return loaded;
                            }},
          {}));
}

}  // namespace

TEST_CASE("TraceMemo: a hit needs the same trace, not only the same hash", "[jit][memo]") {
  TraceMemo memo(8);
  const ir::Graph a = trace(1), b = trace(2);
  REQUIRE_FALSE(a == b);
  const uint64_t ha = ir::structural_hash(a);
  CHECK(memo.lookup(a, ha) == nullptr);
  const auto exe_a = executable(a);
  CHECK(memo.insert(a, ha, exe_a) == 0);
  CHECK(memo.lookup(a, ha) == exe_a);
  CHECK(memo.lookup(trace(1), ha) == exe_a);  // an equal trace recorded again
  CHECK(memo.lookup(b, ha) == nullptr);       // another trace under a's hash: no hit

  // Two traces under one hash (a collision) are both kept and never confused.
  const auto exe_b = executable(b);
  memo.insert(b, ha, exe_b);
  CHECK(memo.size() == 2);
  CHECK(memo.lookup(a, ha) == exe_a);
  CHECK(memo.lookup(b, ha) == exe_b);
  // A trace already kept keeps its executable.
  memo.insert(a, ha, executable(a));
  CHECK(memo.lookup(a, ha) == exe_a);
  CHECK(memo.size() == 2);
}

TEST_CASE("TraceMemo: the cap forgets the least recently used trace", "[jit][memo]") {
  TraceMemo memo(2);
  CHECK(memo.capacity() == 2);
  std::vector<ir::Graph> g;
  std::vector<uint64_t> h;
  std::vector<std::shared_ptr<const Executable>> exe;
  for (int i = 0; i < 4; ++i) {
    g.push_back(trace(i));
    h.push_back(ir::structural_hash(g.back()));
    exe.push_back(executable(g.back()));
  }
  CHECK(memo.insert(g[0], h[0], exe[0]) == 0);
  CHECK(memo.insert(g[1], h[1], exe[1]) == 0);
  CHECK(memo.insert(g[2], h[2], exe[2]) == 1);  // g0 goes
  CHECK(memo.size() == 2);
  CHECK(memo.lookup(g[0], h[0]) == nullptr);
  CHECK(memo.lookup(g[1], h[1]) == exe[1]);     // g1 is now more recent than g2
  CHECK(memo.insert(g[3], h[3], exe[3]) == 1);  // g2 goes
  CHECK(memo.lookup(g[2], h[2]) == nullptr);
  CHECK(memo.lookup(g[1], h[1]) == exe[1]);
  CHECK(memo.lookup(g[3], h[3]) == exe[3]);
  CHECK(memo.evictions() == 2);
  memo.clear();
  CHECK(memo.size() == 0);
  CHECK(memo.evictions() == 2);
}

TEST_CASE("TraceMemo: a forgotten executable lives while it is held", "[jit][memo]") {
  TraceMemo memo(1);
  const ir::Graph a = trace(1), b = trace(2);
  std::vector<std::weak_ptr<jit::LoadedKernel>> kernels_a, kernels_b;
  auto held = executable(a, &kernels_a);  // a run in progress, say
  std::weak_ptr<const Executable> unheld;
  {
    auto exe_b = executable(b, &kernels_b);
    unheld = exe_b;
    memo.insert(b, ir::structural_hash(b), std::move(exe_b));
  }
  memo.insert(a, ir::structural_hash(a), held);
  REQUIRE_FALSE(kernels_a.empty());
  REQUIRE_FALSE(kernels_b.empty());
  // b was forgotten and nobody held it: its executable and kernels are gone.
  CHECK(unheld.expired());
  for (const auto& k : kernels_b) CHECK(k.expired());

  // a is forgotten while still held: it and its kernels stay usable until let go.
  memo.insert(b, ir::structural_hash(b), executable(b));
  CHECK(memo.lookup(a, ir::structural_hash(a)) == nullptr);
  REQUIRE(held->steps.size() == held->plan.regions.size());
  for (const auto& k : kernels_a) CHECK_FALSE(k.expired());
  held.reset();
  for (const auto& k : kernels_a) CHECK(k.expired());
}
