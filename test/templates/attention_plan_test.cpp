// Fused attention end to end without a GPU: each trace of test/traces/attention/ (but refused_*,
// which plans no attention region) is planned with attention fused (fusion/partition.h), its
// attention region's kernel generated through
// templates::generate (the region's layout: strides through views, grouped heads, the mask's
// broadcast, the scales before and after the mask), and that kernel emulated on the CPU
// (emulate/cuda_shim.h) on random inputs; its output is compared with the CPU reference
// interpreter's value of the same node, as `fusejit run --check` compares on a GPU.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "fusion/pipeline.h"
#include "ir/interp.h"
#include "ir/text.h"
#include "templates/kernel.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

using namespace fusejit;

namespace {

struct Planned {
  std::string name;
  ir::Graph graph;  // the plan's (optimized) graph, its output set to the attention's
  fusion::Region region;
  templates::Kernel kernel;
};

std::vector<Planned> planned_traces() {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(FUSEJIT_ATTENTION_TRACES)) {
    if (e.path().extension() == ".trace") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Planned> out;
  for (const auto& p : paths) {
    fusion::PlanOptions o;
    o.attention = true;
    fusion::Plan plan = fusion::make_plan(ir::parse_file(p.string()), o);
    for (const fusion::Region& r : plan.regions) {
      if (r.kind != fusion::RegionKind::attention) continue;
      Planned x{p.stem().string(), plan.graph, r, templates::generate(plan.graph, r)};
      x.graph.set_outputs(r.outputs);
      out.push_back(std::move(x));
    }
  }
  return out;
}

ir::HostTensor random_input(const ir::Node& n, std::mt19937& rng) {
  ir::HostTensor t(n.dtype, n.shape);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.set(i, n.dtype == DType::boolean ? double(u(rng) > -1.2) : u(rng));
  }
  return t;
}

}  // namespace

TEST_CASE("attention traces: the planned kernel, emulated, matches the CPU reference",
          "[templates][attention]") {
  FUSEJIT_REQUIRE_HOST_COMPILER();
  const std::vector<Planned> traces = planned_traces();
  REQUIRE(traces.size() >= 20);  // every trace of the suite but refused_* has its attention fused
  std::string source = test::shim_include();
  for (const Planned& t : traces) source += test::emulated_kernel(t.kernel, source);
  void* so = test::open_shared_object(source, "attention-plan");

  std::mt19937 rng(20261201);
  for (const Planned& t : traces) {
    INFO(t.name << ": kernel " << t.kernel.name);
    std::vector<ir::HostTensor> inputs;
    for (ir::NodeId id : t.graph.inputs()) inputs.push_back(random_input(t.graph.node(id), rng));
    const ir::HostTensor ref = ir::interpret(t.graph, inputs).at(0);
    // The kernel's arguments: its parameters' buffers (region inputs, then the output,
    // poisoned with NaN).
    const ir::Node& o = t.graph.node(t.region.outputs[0]);
    ir::HostTensor out(o.dtype, o.shape);
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, NAN);
    std::vector<void*> args;
    for (ir::NodeId id : t.region.inputs) {
      const auto& ids = t.graph.inputs();
      const size_t k = std::find(ids.begin(), ids.end(), id) - ids.begin();
      REQUIRE(k < ids.size());  // the suite's attention reads graph inputs only
      args.push_back(const_cast<std::byte*>(inputs[k].bytes.data()));
    }
    args.push_back(out.bytes.data());
    using Entry = void (*)(void* const*, int);
    auto entry = reinterpret_cast<Entry>(dlsym(so, ("run_" + t.kernel.name).c_str()));
    REQUIRE(entry != nullptr);
    // Fewer blocks than the work at times: the grid-stride loop.
    const int grid = static_cast<int>(std::min<int64_t>(t.kernel.work_blocks, 7));
    entry(args.data(), grid);
    double err = 0, norm = 0;
    int64_t nan_mismatch = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double r = ref.get(i), g = out.get(i);
      if (std::isnan(r) || std::isnan(g)) {
        nan_mismatch += std::isnan(r) != std::isnan(g);
        continue;
      }
      err += (g - r) * (g - r);
      norm += r * r;
    }
    const double rel = std::sqrt(err / norm);
    std::printf("attention plan emulation: %-34s grid %d: rel L2 %.2e\n", t.name.c_str(), grid,
                rel);
    CHECK(nan_mismatch == 0);
    CHECK(rel <= 1e-2);
  }
  dlclose(so);
}
