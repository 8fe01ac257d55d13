// jit/prologue: see prologue.h.
#include "jit/libs/prologue.h"

#include <algorithm>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "jit/libs/gemm_call.h"

namespace fusejit::jit {

namespace {

bool reads(const fusion::Region& r, ir::NodeId id) {
  return std::find(r.inputs.begin(), r.inputs.end(), id) != r.inputs.end();
}

// Why region j, which computes A, cannot be gemm region i's prologue, or "" when it can (`spec`:
// the skinny-GEMM kernel's for region i).
std::string refuse(const fusion::Plan& plan, size_t i, const GemmCall& call,
                   const templates::GemvSpec& spec) {
  const fusion::Region& producer = plan.regions[i - 1];
  const ir::NodeId a = call.a;
  if (call.b == a || call.bias == a || call.residual == a || call.scale == a)
    return fmt::format("%{} is also another operand", a);
  const auto& outs = plan.graph.outputs();
  if (std::find(outs.begin(), outs.end(), a) != outs.end())
    return fmt::format("%{} is a graph output", a);
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (k != i && reads(plan.regions[k], a)) return fmt::format("region {} reads %{} too", k, a);
  }
  return templates::refuse_prologue(spec, plan.graph, producer);
}

// `from`'s nodes added to `into`'s, in graph order (node ids are).
void add_nodes(fusion::Region& into, const fusion::Region& from) {
  std::vector<ir::NodeId> mine = into.nodes, theirs = from.nodes, nodes;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  std::set_union(theirs.begin(), theirs.end(), mine.begin(), mine.end(), std::back_inserter(nodes));
  into.nodes = std::move(nodes);
}

// Region i - 1 merged into region i (see absorb_prologues); returns the producer as it was.
fusion::Region merge(fusion::Plan& plan, size_t i) {
  fusion::Region producer = plan.regions[i - 1];
  fusion::Region& gemm = plan.regions[i];
  for (ir::NodeId id : producer.inputs) {
    if (!reads(gemm, id)) gemm.inputs.push_back(id);
  }
  add_nodes(gemm, producer);
  plan.regions.erase(plan.regions.begin() + static_cast<std::ptrdiff_t>(i - 1));
  return producer;
}

}  // namespace

std::map<size_t, fusion::Region> absorb_prologues(fusion::Plan& plan,
                                                  const templates::CodegenOptions& codegen,
                                                  bool allow_tf32) {
  std::map<size_t, fusion::Region> producers;
  if (!codegen.gemv_prologue) return producers;
  size_t i = 1;
  while (i < plan.regions.size()) {
    const fusion::Region& r = plan.regions[i];
    const fusion::Region& before = plan.regions[i - 1];
    if (r.kind != fusion::RegionKind::gemm) {
      ++i;
      continue;
    }
    const GemmCall call = describe_gemm_call(plan, r, allow_tf32);
    const auto spec = gemv_spec(call, codegen.gemv);
    if (!spec || before.outputs.empty() ||
        std::find(before.outputs.begin(), before.outputs.end(), call.a) == before.outputs.end()) {
      ++i;
      continue;
    }
    if (const std::string why = refuse(plan, i, call, *spec); !why.empty()) {
      plan.decisions.push_back(
          {call.a, call.d, false,
           fmt::format("the {} region computing %{} stays a kernel of its own before the gemv "
                       "kernel computing %{}: {}",
                       fusion::region_kind_name(before.kind), call.a, call.d, why)});
      ++i;
      continue;
    }
    plan.decisions.push_back(
        {call.a, call.d, true,
         fmt::format("the {} region computing %{} runs in the gemv kernel computing %{}, as it "
                     "stages A (a prologue): %{} is never written",
                     fusion::region_kind_name(before.kind), call.a, call.d, call.a)});
    producers.emplace(i - 1, merge(plan, i));
  }
  return producers;
}

namespace {

// The one region other than region i that reads `d`, or -1 (none, or several).
std::ptrdiff_t only_reader(const fusion::Plan& plan, size_t i, ir::NodeId d) {
  std::ptrdiff_t found = -1;
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (k == i || !reads(plan.regions[k], d)) continue;
    if (found >= 0) return -1;
    found = static_cast<std::ptrdiff_t>(k);
  }
  return found;
}

// Why region j, which reads gemm region i's D, cannot be its epilogue region, or "".
std::string refuse_consumer(const fusion::Plan& plan, size_t i, size_t j, const GemmCall& call,
                            const templates::GemvSpec& spec, const templates::Target& target) {
  const auto& outs = plan.graph.outputs();
  if (std::find(outs.begin(), outs.end(), call.d) != outs.end())
    return fmt::format("%{} is a graph output", call.d);
  if (j < i) return fmt::format("region {} runs before the GEMM", j);
  return templates::refuse_epilogue(spec, plan.graph, plan.regions[j], target);
}

// Region j merged into gemm region i (see absorb_epilogues); returns the consumer as it was.
fusion::Region merge_consumer(fusion::Plan& plan, size_t i, size_t j) {
  fusion::Region consumer = plan.regions[j];
  fusion::Region& gemm = plan.regions[i];
  gemm.outputs = consumer.outputs;
  add_nodes(gemm, consumer);
  plan.regions.erase(plan.regions.begin() + static_cast<std::ptrdiff_t>(j));
  return consumer;
}

}  // namespace

std::map<size_t, fusion::Region> absorb_epilogues(fusion::Plan& plan,
                                                  const templates::CodegenOptions& codegen,
                                                  bool allow_tf32) {
  std::map<size_t, fusion::Region> consumers;
  if (!codegen.gemv_epilogue) return consumers;
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const fusion::Region& r = plan.regions[i];
    if (r.kind != fusion::RegionKind::gemm) continue;
    const GemmCall call = describe_gemm_call(plan, r, allow_tf32);
    const auto spec = gemv_spec(call, codegen.gemv);
    const std::ptrdiff_t reader = spec ? only_reader(plan, i, call.d) : -1;
    if (reader < 0) continue;
    const size_t j = static_cast<size_t>(reader);
    const fusion::Region& consumer = plan.regions[j];
    const ir::NodeId out = consumer.outputs.empty() ? -1 : consumer.outputs[0];
    if (const std::string why = refuse_consumer(plan, i, j, call, *spec, codegen.target);
        !why.empty()) {
      plan.decisions.push_back(
          {call.d, out, false,
           fmt::format("the {} region reading %{} stays a kernel of its own after the gemv "
                       "kernel computing it: {}",
                       fusion::region_kind_name(consumer.kind), call.d, why)});
      continue;
    }
    plan.decisions.push_back(
        {call.d, out, true,
         fmt::format("the {} region computing %{} runs in the gemv kernel computing %{}, at its "
                     "store (an epilogue region): %{} is never written",
                     fusion::region_kind_name(consumer.kind), out, call.d, call.d)});
    consumers.emplace(i, merge_consumer(plan, i, j));  // j > i: i's index stays
  }
  return consumers;
}

AbsorbedRegions absorb_regions(fusion::Plan& plan, const templates::CodegenOptions& codegen,
                               bool allow_tf32) {
  AbsorbedRegions out;
  out.consumers = absorb_epilogues(plan, codegen, allow_tf32);
  out.producers = absorb_prologues(plan, codegen, allow_tf32);
  // The prologues merged in order, each into the gemm region then at f + 1, which became f
  // (its key) as the producer before it left: every region after f moved down by one.
  for (const auto& [f, producer] : out.producers) {
    std::map<size_t, fusion::Region> moved;
    for (auto& [k, consumer] : out.consumers) moved.emplace(k > f ? k - 1 : k, consumer);
    out.consumers = std::move(moved);
  }
  return out;
}

}  // namespace fusejit::jit
