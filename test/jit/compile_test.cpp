// With no GPU (as in CI): every kernel the pipeline generates for the seed traces
// (examples/traces), the layout suite (bench/traces), the odd-shapes suite (test/traces/odd), in
// both rounding modes, and for 220
// randomly generated graphs of pointwise, broadcast, view and reduction ops compiles with NVRTC
// for sm_90, and spills no register (ptxas -v through NVRTC: the row schedules count what a
// thread keeps live against the registers its launch bounds leave it, row_schedule.cpp).
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "fusejit_test_paths.h"
#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "jit/runtime/nvrtc.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"
#include "support/random_graph.h"
#include "templates/kernel.h"

using namespace fusejit;

namespace {

// Plans `g`, generates every kernel region and compiles it, checking with ptxas's report that
// no row-style kernel (the schedules of row_schedule.cpp, which count registers) spills to
// local memory; returns how many kernels compiled. (Column-style kernels are not held to it
// yet: the narrow column sum of the layout suite spills 8 bytes.) With `checked`, a kernel
// whose name and source are already in it counts without being compiled again: what is checked
// depends on those alone, and the second rounding mode of an f32 kernel is the same source.
int compile_all(const ir::Graph& g, const templates::CodegenOptions& options = {},
                std::set<std::string>* checked = nullptr) {
  const fusion::Plan plan = fusion::make_plan(g);
  int compiled = 0;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind == fusion::RegionKind::gemm) continue;
    const templates::Kernel k = templates::generate(plan.graph, r, options);
    if (checked != nullptr && !checked->insert(k.name + '\n' + k.source).second) {
      ++compiled;
      continue;
    }
    const jit::CompiledKernel c = jit::compile(k, "sm_90", {.ptx = true, .extra = {"--ptxas-options=-v"}});
    CHECK_FALSE(c.cubin.empty());
    CHECK(c.ptx.find(k.name) != std::string::npos);
    INFO(k.name << " (" << fusion::region_kind_name(r.kind) << "): ptxas says\n" << c.log);
    CHECK(jit::stack_frame_bytes(c.cubin) >= 0);  // a CUBIN whose resources can be read
    if (k.source.find(", row-style:") != std::string::npos) CHECK_FALSE(jit::spills(c));
    ++compiled;
  }
  return compiled;
}

}  // namespace

// Every kernel of every trace in `folder` (under the source tree), compiled in both rounding
// modes; returns {traces, kernels per mode}.
std::pair<int, int> compile_folder(const std::string& folder) {
  int kernels = 0, traces = 0;
  std::set<std::string> checked;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(FUSEJIT_SOURCE_DIR) + "/" + folder)) {
    if (entry.path().extension() != ".trace") continue;
    INFO(entry.path());
    const ir::Graph g = ir::parse_file(entry.path().string());
    kernels += compile_all(g, {}, &checked);
    CHECK(compile_all(g, {.rounding = Rounding::node}, &checked) >= 0);
    ++traces;
  }
  return {traces, kernels};
}

// The generated kernels of the plan of `trace`, in region order.
std::vector<templates::Kernel> kernels_of(const std::string& trace) {
  const fusion::Plan plan = fusion::make_plan(ir::parse(trace));
  std::vector<templates::Kernel> kernels;
  for (const fusion::Region& r : plan.regions) {
    if (r.kind != fusion::RegionKind::gemm) kernels.push_back(templates::generate(plan.graph, r));
  }
  return kernels;
}

TEST_CASE("dropout drawn with any seed is one set of kernels", "[jit][nvrtc][random]") {
  // What a training step records: layer_norm(dropout(x) + residual), with a new seed and offset
  // every step. Planned and generated from two steps' traces, the kernels are the same source,
  // so the kernel cache compiles them once.
  Context ctx(Options::parse({{"FUSEJIT_LOG", "error"}}));
  const Tensor x = ctx.placeholder({64, 768});
  const Tensor residual = ctx.placeholder({64, 768});
  const Tensor w = ctx.placeholder({768});
  const Tensor b = ctx.placeholder({768});
  auto step = [&](uint64_t seed, uint64_t offset) {
    return kernels_of(ctx.trace_text({layer_norm(dropout(x, 0.1, seed, offset) + residual, w, b)}));
  };
  const std::vector<templates::Kernel> first = step(1, 0);
  const std::vector<templates::Kernel> other = step(0xfedcba9876543210ull, 12345);
  REQUIRE(!first.empty());
  REQUIRE(other.size() == first.size());
  int drawing = 0;
  for (size_t k = 0; k < first.size(); ++k) {
    CHECK(other[k].source == first[k].source);
    CHECK(other[k].name == first[k].name);
    drawing += first[k].source.find("fj_philox4x32_10") != std::string::npos ? 1 : 0;
    CHECK_FALSE(jit::compile(first[k], "sm_90").cubin.empty());
  }
  CHECK(drawing >= 1);
}

TEST_CASE("every kernel of the seed traces compiles for sm_90", "[jit][nvrtc]") {
  const auto [traces, kernels] = compile_folder("examples/traces");
  CHECK(traces >= 23);
  CHECK(kernels >= 19);
}

TEST_CASE("every kernel of the layout suite compiles for sm_90", "[jit][nvrtc]") {
  const auto [traces, kernels] = compile_folder("bench/traces");
  CHECK(traces >= 72);
  CHECK(kernels >= 72);
}

// bench/sampling: top-k 200 and a draw over a 128k vocabulary, the search as it is (columns) and
// as it was (rows), batch 1 and 8: 12 + 12 + 17 + 18 kernels, deduplicated by the compile.
TEST_CASE("every kernel of the sampling traces compiles for sm_90", "[jit][nvrtc]") {
  const auto [traces, kernels] = compile_folder("bench/sampling");
  CHECK(traces == 4);
  CHECK(kernels >= 26);
}

TEST_CASE("every kernel of the odd-shapes suite compiles for sm_90", "[jit][nvrtc]") {
  const auto [traces, kernels] = compile_folder("test/traces/odd");
  CHECK(traces >= 78);
  CHECK(kernels >= 78);
}

// The GPU test's 1200 wide random graphs (gpu_test.cpp) cover what they claim: every dtype,
// reductions over every axis of ranks 1 to 4 in every numeric dtype, permutes and broadcasts in
// every numeric dtype, bool outputs; and a sample of them compiles for sm_90.
TEST_CASE("the wide random graphs cover every dtype and axis with permutes and broadcasts",
          "[jit][nvrtc][random]") {
  constexpr uint64_t kGraphs = 1200;  // as in gpu_test.cpp
  std::set<std::tuple<DType, size_t, int64_t>> reduced;  // (input dtype, rank, axis)
  std::set<DType> permuted, broadcast, outputs;
  int kernels = 0;
  for (uint64_t seed = 1; seed <= kGraphs; ++seed) {
    const ir::Graph g = testing::random_graph(seed, testing::RandomGraphs::wide);
    INFO("wide random graph seed " << seed << "\n" << ir::print(g));
    for (const ir::Node& n : g.nodes()) {
      const auto operand = [&](size_t i) -> const ir::Node& { return g.node(n.inputs[i]); };
      if (ir::op_kind(n.op) == ir::OpKind::reduce) {
        for (int64_t axis : n.axes) reduced.insert({operand(0).dtype, operand(0).shape.size(), axis});
      } else if (n.op == ir::Op::permute) {
        permuted.insert(n.dtype);
      } else if ((ir::op_kind(n.op) == ir::OpKind::binary || ir::op_kind(n.op) == ir::OpKind::compare) &&
                 operand(0).shape != operand(1).shape) {
        broadcast.insert(operand(0).dtype);
      }
    }
    for (ir::NodeId out : g.outputs()) outputs.insert(g.node(out).dtype);
    if (seed % 40 == 0) kernels += compile_all(g);
  }
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    INFO(dtype_name(t));
    CHECK(permuted.count(t) == 1);
    CHECK(broadcast.count(t) == 1);
    CHECK(outputs.count(t) == 1);
    for (size_t rank = 1; rank <= 4; ++rank) {
      for (int64_t axis = 0; axis < static_cast<int64_t>(rank); ++axis) {
        INFO("reduction over axis " << axis << " of rank " << rank);
        CHECK(reduced.count({t, rank, axis}) == 1);
      }
    }
  }
  CHECK(outputs.count(DType::boolean) == 1);
  CHECK(kernels >= 30);
}

TEST_CASE("every kernel of 220 random graphs compiles for sm_90", "[jit][nvrtc][random]") {
  int kernels = 0;
  std::map<ir::Op, int> index_ops;  // the graphs do exercise slice, concat and arange
  for (uint64_t seed = 1; seed <= 220; ++seed) {
    const ir::Graph g = testing::random_graph(seed);
    INFO("random graph seed " << seed << "\n" << ir::print(g));
    kernels += compile_all(g);
    for (const ir::Node& n : g.nodes()) {
      if (n.op == ir::Op::slice || n.op == ir::Op::concat || n.op == ir::Op::arange) {
        ++index_ops[n.op];
      }
    }
  }
  CHECK(kernels >= 220);
  CHECK(index_ops[ir::Op::slice] >= 10);
  CHECK(index_ops[ir::Op::concat] >= 5);
  CHECK(index_ops[ir::Op::arange] >= 5);
}

TEST_CASE("kernels of programmatic dependent launch wait for the grid ahead first",
          "[jit][nvrtc][pdl]") {
  // CodegenOptions::grid_dependency (FUSEJIT_PDL=1): each kernel first lets the grid after it be
  // scheduled, then, before its first statement reads or writes anything, waits for the grid
  // ahead; it is marked for the launcher. With the option off nothing of it is in the source.
  int kinds = 0;
  std::set<std::string> seen;
  for (const char* name : {"layernorm_bf16", "softmax_f32", "ew_chain_f32", "sumsq_f32"}) {
    INFO(name);
    const fusion::Plan plan = fusion::make_plan(
        ir::parse_file(std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces/" + name + ".trace"));
    for (const fusion::Region& r : plan.regions) {
      if (r.kind == fusion::RegionKind::gemm) continue;
      const templates::Kernel off = templates::generate(plan.graph, r);
      CHECK_FALSE(off.programmatic);
      CHECK(off.source.find("griddepcontrol") == std::string::npos);
      const templates::Kernel on = templates::generate(plan.graph, r, {.grid_dependency = true});
      CHECK(on.programmatic);
      CHECK(on.name != off.name);  // another source, so another cache key
      const size_t signature = on.source.find("__global__");
      REQUIRE(signature != std::string::npos);
      // The body's first line follows the line that opens it (a comment may end that one).
      const size_t opened = on.source.find(") {", signature);
      REQUIRE(opened != std::string::npos);
      const size_t first = on.source.find_first_not_of(' ', on.source.find('\n', opened) + 1);
      CHECK(on.source.compare(first, 29, "fj_grid_dependents_launch(); ") == 0);
      const size_t second = on.source.find_first_not_of(' ', on.source.find('\n', first) + 1);
      CHECK(on.source.compare(second, 26, "fj_grid_dependency_wait();") == 0);
      CHECK_FALSE(jit::compile(on, "sm_90").cubin.empty());
      // FUSEJIT_PDL=gemv: only the first line, and launched as before.
      const templates::Kernel trigger =
          templates::generate(plan.graph, r, {.gemv_grid_dependency = true});
      CHECK_FALSE(trigger.programmatic);
      CHECK(trigger.source.find("fj_grid_dependency_wait();") == std::string::npos);
      const size_t at = trigger.source.find(") {", trigger.source.find("__global__"));
      REQUIRE(at != std::string::npos);
      const size_t line = trigger.source.find_first_not_of(' ', trigger.source.find('\n', at) + 1);
      CHECK(trigger.source.compare(line, 29, "fj_grid_dependents_launch(); ") == 0);
      CHECK_FALSE(jit::compile(trigger, "sm_90").cubin.empty());
      if (seen.insert(std::string(fusion::region_kind_name(r.kind))).second) ++kinds;
    }
  }
  CHECK(kinds >= 3);
}
