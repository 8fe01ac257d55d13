// A kernel's source names values by their place in the region (RegionInfo::value_name), never
// by node id: the same region wherever it sits in a trace is the same source, and so the same
// kernel name and cache key, while a region that differs in anything the kernel computes with
// (a dtype, a shape, a constant, an operand's order, an axis) is another source and key.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cache/key.h"
#include "fusion/pipeline.h"
#include "ir/graph.h"
#include "support/catch.h"
#include "templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusion::RegionKind;

namespace {

// Builds a region's nodes into `g` (its inputs included) and returns its outputs.
using Build = std::function<std::vector<NodeId>(Graph&)>;

// The region that `build` makes, after `unrelated` input nodes that it does not read (so every
// node id it makes is `unrelated` higher): its input nodes are its inputs, the rest its nodes.
templates::Kernel kernel_after(int unrelated, RegionKind kind, const Build& build) {
  Graph g;
  for (int i = 0; i < unrelated; ++i) add_input(g, DType::f16, {5});
  const auto first = static_cast<NodeId>(g.size());
  for (NodeId out : build(g)) g.add_output(out);
  fusion::Region r;
  r.kind = kind;
  for (auto id = first; id < static_cast<NodeId>(g.size()); ++id) {
    (g.node(id).op == Op::input ? r.inputs : r.nodes).push_back(id);
  }
  r.outputs = g.outputs();
  r.welford = fusion::welford_pairs(g, r);
  return templates::generate(g, r);
}

cache::KernelKey key_of(const templates::Kernel& k) {
  return cache::make_key({.source = k.source,
                          .arch = "sm_90",
                          .compiler = "nvrtc test",
                          .codegen_version = templates::kCodegenVersion,
                          .compile_flags = {"--gpu-architecture=sm_90"}});
}

// Whether `text` holds a node id as the generated code used to print one: '%' then a digit.
bool names_a_node(const std::string& text) {
  for (size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 1)) {
    if (at + 1 < text.size() && text[at + 1] >= '0' && text[at + 1] <= '9') return true;
  }
  return false;
}

NodeId softmax_rows(Graph& g, NodeId x) {
  const NodeId m = add_reduce(g, Op::max, x, {1}, true);
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
  return add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {1}, true));
}

NodeId layer_norm_rows(Graph& g, NodeId x) {
  const NodeId mean = add_reduce(g, Op::mean, x, {1}, true);
  const NodeId centered = add_binary(g, Op::sub, x, mean);
  const NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, centered, centered), {1}, true);
  return add_binary(g, Op::div, centered, add_unary(g, Op::sqrt, var));
}

struct Case {
  std::string name;
  RegionKind kind;
  Build build;
};

// One region per template and per feature that names something after a node: values, reduce
// accumulators, split scratch, online softmax and Welford pairs, gathers, draws, concats.
std::vector<Case> cases() {
  return {
      {"elementwise chain with a constant", RegionKind::pointwise,
       [](Graph& g) -> std::vector<NodeId> {
         const NodeId x = add_input(g, DType::f32, {64, 256});
         const NodeId b = add_input(g, DType::f32, {256});
         const NodeId c = add_constant(g, DType::f32, 0.5);
         return {add_unary(g, Op::relu, add_binary(g, Op::add, add_binary(g, Op::mul, x, c), b))};
       }},
      {"row softmax (an online pair)", RegionKind::normalization,
       [](Graph& g) -> std::vector<NodeId> {
         return {softmax_rows(g, add_input(g, DType::bf16, {8, 1024}))};
       }},
      {"layer norm (a Welford pair)", RegionKind::normalization,
       [](Graph& g) -> std::vector<NodeId> {
         return {layer_norm_rows(g, add_input(g, DType::f32, {16, 768}))};
       }},
      {"long rows split over blocks", RegionKind::reduction,
       [](Graph& g) -> std::vector<NodeId> {
         return {add_reduce(g, Op::sum, add_input(g, DType::f32, {2, 1 << 20}), {1}, false)};
       }},
      {"column sum", RegionKind::reduction,
       [](Graph& g) -> std::vector<NodeId> {
         return {add_reduce(g, Op::sum, add_input(g, DType::f32, {4096, 64}), {0}, false)};
       }},
      {"transpose", RegionKind::pointwise,
       [](Graph& g) -> std::vector<NodeId> {
         return {
             add_unary(g, Op::exp, add_permute(g, add_input(g, DType::f32, {256, 512}), {1, 0}))};
       }},
      {"gather", RegionKind::pointwise,
       [](Graph& g) -> std::vector<NodeId> {
         const NodeId x = add_input(g, DType::f32, {64, 32});
         const NodeId i = add_input(g, DType::i64, {64, 8});
         return {add_gather(g, x, 1, i)};
       }},
      {"a draw", RegionKind::pointwise,
       [](Graph& g) -> std::vector<NodeId> {
         const NodeId key = add_input(g, DType::i64, {2});
         return {add_binary(g, Op::add, add_input(g, DType::f32, {1024}),
                            add_random(g, Op::rand, DType::f32, {1024}, key))};
       }},
      {"concat of distinct inputs", RegionKind::pointwise,
       [](Graph& g) -> std::vector<NodeId> {
         std::vector<NodeId> parts;
         for (int i = 0; i < 5; ++i) parts.push_back(add_input(g, DType::f32, {3, 4}));
         return {add_concat(g, parts, 1)};
       }},
  };
}

}  // namespace

TEST_CASE("a region generates the same source wherever its nodes sit in the trace",
          "[templates][names]") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const templates::Kernel here = kernel_after(0, c.kind, c.build);
    const templates::Kernel later = kernel_after(37, c.kind, c.build);
    INFO(test::kernel_text(later));
    CHECK(test::kernel_text(here) == test::kernel_text(later));
    CHECK(here.source == later.source);
    CHECK(here.name == later.name);
    CHECK(key_of(here) == key_of(later));
    CHECK_FALSE(names_a_node(test::kernel_text(later)));
    // Each kernel launches on its own region's buffers.
    CHECK(here.params != later.params);
  }
}

TEST_CASE("regions that compute differently generate different sources and keys",
          "[templates][names]") {
  // relu(x * c + b), x f32[64,256], b f32[256], with one ingredient changed at a time.
  struct Variant {
    std::string what;
    DType x_dtype = DType::f32;
    Shape x_shape = {64, 256};
    Shape b_shape = {256};
    double c = 0.5;
    bool swapped = false;  // b + x * c: the operands of the add in the other order
    Op act = Op::relu;
  };
  const std::vector<Variant> variants = {
      {.what = "as it is"},
      {.what = "another dtype", .x_dtype = DType::f16},
      {.what = "another shape", .x_shape = {32, 256}},
      {.what = "another broadcast", .b_shape = {64, 256}},
      {.what = "another constant", .c = 0.25},
      {.what = "the operands swapped", .swapped = true},
      {.what = "another op", .act = Op::exp},
  };
  std::set<std::string> sources, names;
  std::set<std::string> keys;
  for (const Variant& v : variants) {
    INFO(v.what);
    const templates::Kernel k = kernel_after(3, RegionKind::pointwise, [&](Graph& g) {
      const NodeId x = add_input(g, v.x_dtype, v.x_shape);
      const NodeId b = add_input(g, DType::f32, v.b_shape);
      const NodeId xc = add_binary(g, Op::mul, x, add_constant(g, DType::f32, v.c));
      const NodeId sum = v.swapped ? add_binary(g, Op::add, b, xc) : add_binary(g, Op::add, xc, b);
      return std::vector<NodeId>{add_unary(g, v.act, sum)};
    });
    CHECK(sources.insert(test::kernel_text(k)).second);
    CHECK(names.insert(k.name).second);
    CHECK(keys.insert(key_of(k).hex()).second);
  }
  // A reduction over another axis.
  const auto sum_over = [](int64_t axis) {
    return kernel_after(0, RegionKind::reduction, [axis](Graph& g) {
      return std::vector<NodeId>{
          add_reduce(g, Op::sum, add_input(g, DType::f32, {128, 128}), {axis}, false)};
    });
  };
  CHECK(key_of(sum_over(0)) != key_of(sum_over(1)));
}

TEST_CASE("the pieces of a concat of 4,000 distinct inputs share a few kernels",
          "[templates][names][hostile]") {
  // One input node each: planned as some sixty kernels of up to 64 operands (fusion/simplify,
  // fusion/partition), whose sources differed only in node ids, and NVRTC compiled every one
  // (`fusejit warm` took seconds per thousand inputs, growing with the trace).
  Graph g;
  std::vector<NodeId> parts;
  for (int i = 0; i < 4000; ++i) parts.push_back(add_input(g, DType::f32, {2}));
  g.add_output(add_concat(g, parts, 0));
  const fusion::Plan plan = fusion::make_plan(g);
  REQUIRE(plan.kernel_count() >= 60);  // 61 today
  std::set<std::string> sources;
  for (const fusion::Region& r : plan.regions) {
    const templates::Kernel k = templates::generate(plan.graph, r);
    std::vector<NodeId> buffers = r.inputs;
    buffers.insert(buffers.end(), r.outputs.begin(), r.outputs.end());
    CHECK(k.params == buffers);
    sources.insert(k.source);
  }
  // The full pieces are one kernel; the last piece and what joins the pieces, one or two more.
  CHECK(sources.size() <= 3);
}
