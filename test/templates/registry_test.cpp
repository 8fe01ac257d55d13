// The scheduler registry (templates/schedulers/registry.h): which scheduler takes a region, why
// the ones asked before it refused, and the parameters it picks; the parameters' text, hash and
// JSON. Nothing here reads kernel text: the kernels themselves are the other tests'.
#include <fmt/format.h>

#include "fusejit_test_paths.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "support/transpose_graphs.h"
#include "templates/schedulers/schedule_json.h"
#include "test/templates/norms.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::has;
using fusejit::test::whole_graph_region;
using fusion::RegionKind;
using templates::AttentionMaskKind;
using templates::AttentionParams;
using templates::ColumnParams;
using templates::PointwiseParams;
using templates::RowParams;
using templates::Schedule;
using templates::TransposeParams;

namespace {

templates::CodegenOptions for_arch(std::string_view arch) {
  return {.target = templates::target_for_arch(arch)};
}

// The schedule of the whole graph as one region of `kind`, and every scheduler's verdict.
struct Chosen {
  Schedule schedule;
  std::vector<templates::Verdict> verdicts;
};

Chosen schedule_of(const Graph& g, RegionKind kind, const templates::CodegenOptions& options = {}) {
  const fusion::Region region = whole_graph_region(g, kind);
  const templates::RegionInfo info(g, region, options);
  return {templates::schedule(info, options), templates::verdicts(info, options)};
}

std::string scheduler_name(const Chosen& c) { return std::string(c.schedule.scheduler->name()); }

// The reason `scheduler` gave, or "" when it takes the region.
std::string refusal_of(const Chosen& c, std::string_view scheduler) {
  for (const templates::Verdict& v : c.verdicts) {
    if (v.scheduler == scheduler) return v.refusal.value_or("");
  }
  FAIL("no scheduler " << scheduler);
  return "";
}

Graph softmax_graph(DType d, int64_t rows, int64_t width) {
  Graph g;
  g.add_output(test::softmax(g, add_input(g, d, {rows, width})));
  return g;
}

Graph column_sum_graph(DType d, const Shape& shape) {
  Graph g;
  g.add_output(add_reduce(g, Op::sum, add_input(g, d, shape), {0}, false));
  return g;
}

// The plan of test/traces/attention/<name>.trace with attention fused, and its attention region.
struct AttentionPlan {
  fusion::Plan plan;
  size_t region = 0;
  const fusion::Region& attention() const { return plan.regions.at(region); }
};

AttentionPlan attention_plan(const std::string& name) {
  fusion::PlanOptions o;
  o.attention = true;
  AttentionPlan p{
      fusion::make_plan(parse_file(fmt::format("{}/{}.trace", FUSEJIT_ATTENTION_TRACES, name)), o)};
  while (p.region < p.plan.regions.size() &&
         p.plan.regions[p.region].kind != RegionKind::attention) {
    ++p.region;
  }
  REQUIRE(p.region < p.plan.regions.size());
  return p;
}

// The schedule of the trace's attention region, and every scheduler's verdict.
Chosen attention_schedule(const AttentionPlan& p, const templates::CodegenOptions& options = {}) {
  const templates::RegionInfo info(p.plan.graph, p.attention(), options);
  return {templates::schedule(info, options), templates::verdicts(info, options)};
}

}  // namespace

TEST_CASE("the registry asks its schedulers in order", "[templates][registry]") {
  std::vector<std::string> names;
  for (const templates::Scheduler* s : templates::schedulers()) names.emplace_back(s->name());
  CHECK(names ==
        std::vector<std::string>{"tiled_transpose", "pointwise", "column", "rows", "attention"});
}

TEST_CASE("a pointwise region: the linear sweep", "[templates][registry]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {64, 256});
  const NodeId y = add_input(g, DType::f32, {64, 256});
  g.add_output(add_binary(g, Op::add, x, y));
  const Chosen c = schedule_of(g, RegionKind::pointwise);
  CHECK(scheduler_name(c) == "pointwise");
  CHECK(has(refusal_of(c, "tiled_transpose"), "no input through a transposition"));
  CHECK(refusal_of(c, "pointwise").empty());
  CHECK(refusal_of(c, "column") == "not a reduction or normalization region");
  CHECK(refusal_of(c, "rows") == "not a reduction or normalization region");
  REQUIRE(c.schedule.refused.size() == 1);  // only the tiled transpose was asked before
  const auto& p = std::get<PointwiseParams>(c.schedule.params);
  CHECK(p.vector_widths == std::vector<int64_t>{4});  // 16 bytes of f32
  CHECK(p.block == 256);
  CHECK(p.waves == 0);

  SECTION("outputs of two element counts: two sweeps, no tiles") {
    Graph h;
    h.add_output(add_unary(h, Op::neg, add_input(h, DType::bf16, {64, 256})));
    h.add_output(add_unary(h, Op::neg, add_input(h, DType::bf16, {64})));
    const fusion::Region region = whole_graph_region(h, RegionKind::pointwise);
    const templates::RegionInfo info(h, region, {});
    const auto verdicts = templates::verdicts(info, {});
    CHECK(has(verdicts[0].refusal.value_or(""), "different element counts"));
  }
  SECTION("vectorizing off: scalars") {
    const Chosen scalar = schedule_of(g, RegionKind::pointwise, {.vectorize = false});
    CHECK(std::get<PointwiseParams>(scalar.schedule.params).vector_widths ==
          std::vector<int64_t>{1});
  }
}

TEST_CASE("a transposed read: the tiled transpose", "[templates][registry]") {
  SECTION("f32 [4096, 12288] transposed: 64 x 64 tiles, 4 outputs per thread") {
    const Chosen c = schedule_of(testing::permute_combine(DType::f32, {4096, 12288}, {1, 0}),
                                 RegionKind::pointwise);
    CHECK(scheduler_name(c) == "tiled_transpose");
    CHECK(c.schedule.refused.empty());
    CHECK(refusal_of(c, "pointwise").empty());  // it would take it too: it is asked later
    const auto& p = std::get<TransposeParams>(c.schedule.params);
    CHECK(p.tile == 64);
    CHECK(p.outputs_per_thread == 4);
    CHECK(p.tiled_inputs == 1);
    CHECK(p.tiles == 64 * 192);
    CHECK(p.shared_bytes == 64 * 64 * 4);
    CHECK(p.blocks_per_sm == 8);
  }
  SECTION("bf16: 8 outputs per thread") {
    const Chosen c = schedule_of(testing::permute_combine(DType::bf16, {4096, 12288}, {1, 0}),
                                 RegionKind::pointwise);
    CHECK(std::get<TransposeParams>(c.schedule.params).outputs_per_thread == 8);
  }
  SECTION("every graph of the transpose suite") {
    for (const testing::TransposeGraph& t : testing::transpose_graphs()) {
      INFO(t.name);
      const Chosen c = schedule_of(t.graph, RegionKind::pointwise);
      CHECK((scheduler_name(c) == "tiled_transpose") == t.tiled);
      CHECK(refusal_of(c, "tiled_transpose").empty() == t.tiled);
    }
  }
}

TEST_CASE("softmax rows: the row scheduler, the register cache", "[templates][registry]") {
  for (DType d : {DType::f32, DType::bf16}) {
    for (int64_t width : {1000, 4096, 16384}) {
      INFO(dtype_name(d) << " rows of " << width);
      const Chosen c =
          schedule_of(softmax_graph(d, 64, width), RegionKind::normalization, for_arch("sm_80"));
      CHECK(scheduler_name(c) == "rows");
      CHECK(refusal_of(c, "column") == "the reduced axes are the trailing ones");
      CHECK(refusal_of(c, "pointwise") == "not a pointwise region");
      CHECK(refusal_of(c, "tiled_transpose") == "not a pointwise region");
      const auto& p = std::get<RowParams>(c.schedule.params);
      CHECK(p.config.cached());
      CHECK(!p.online);  // rows held in registers keep separate passes
      CHECK(p.config.cluster == 1);
      CHECK(p.config.split == 1);
      CHECK(!p.config.looped);
      CHECK(p.register_path == 0);
      CHECK(p.config.v == (d == DType::f32 ? 4 : 8));  // 16 bytes: every width is a multiple
      CHECK(p.config.chunks * p.config.group * p.config.v >= width);
    }
  }
  SECTION("rows too long for the register cache: streamed, online pairs") {
    const Chosen c = schedule_of(softmax_graph(DType::f32, 64, 262144), RegionKind::normalization,
                                 for_arch("sm_80"));
    const auto& p = std::get<RowParams>(c.schedule.params);
    CHECK(!p.config.cached());
    CHECK(p.online);
    CHECK(p.config.cluster == 1);
  }
  SECTION("sm_90, no L2 share to re-read rows from: a bf16 row of 128256 over a cluster") {
    templates::CodegenOptions no_l2 = for_arch("sm_90");
    no_l2.target.l2_bytes_per_sm = 0;
    const Chosen c =
        schedule_of(softmax_graph(DType::bf16, 37, 128256), RegionKind::normalization, no_l2);
    const auto& p = std::get<RowParams>(c.schedule.params);
    CHECK(p.config.cluster == 8);
    CHECK(p.config.block == 512);
    CHECK(p.config.piece == 16032);
    CHECK(p.config.cached());
    CHECK(!p.online);
    // The same row on sm_80: no cluster, and too long for one block's registers.
    const Chosen old = schedule_of(softmax_graph(DType::bf16, 37, 128256),
                                   RegionKind::normalization, for_arch("sm_80"));
    const auto& q = std::get<RowParams>(old.schedule.params);
    CHECK(q.config.cluster == 1);
    CHECK(!q.config.cached());
    CHECK(q.online);
  }
}

TEST_CASE("layer norm: rows, one pass of statistics", "[templates][registry]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {128, 4096});
  g.add_output(
      test::layer_norm(g, x, add_input(g, DType::bf16, {4096}), add_input(g, DType::bf16, {4096})));
  const Chosen c = schedule_of(g, RegionKind::normalization, for_arch("sm_80"));
  CHECK(scheduler_name(c) == "rows");
  CHECK(refusal_of(c, "column") == "the reduced axes are the trailing ones");
  const auto& p = std::get<RowParams>(c.schedule.params);
  CHECK(p.config.cached());
  CHECK(p.config.v == 8);
  CHECK(p.config.cluster == 1);
}

TEST_CASE("column sums: the column scheduler, or rows where it does not pay",
          "[templates][registry]") {
  SECTION("sum over the leading axis of [1000, 256]") {
    const Chosen c = schedule_of(column_sum_graph(DType::f32, {1000, 256}), RegionKind::reduction);
    CHECK(scheduler_name(c) == "column");
    REQUIRE(c.schedule.refused.size() == 2);
    CHECK(refusal_of(c, "rows").empty());  // the row scheduler takes every reduction
    const auto& p = std::get<ColumnParams>(c.schedule.params);
    CHECK(p.v == 4);
    CHECK(p.split == 1);
    CHECK(p.piece == 1000);
    CHECK(p.tx * p.v * p.tiles_n >= 256);
  }
  SECTION("few long narrow columns split over blocks") {
    const Chosen c =
        schedule_of(column_sum_graph(DType::f32, {2097152, 64}), RegionKind::reduction);
    CHECK(scheduler_name(c) == "column");
    const auto& p = std::get<ColumnParams>(c.schedule.params);
    CHECK(p.split == 512);
    CHECK(p.piece == 4096);
  }
  SECTION("a variance over the leading axis: two passes, rows") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {1000, 256});
    g.add_output(test::variance(g, x, {0}, 0.0, false));
    const Chosen c = schedule_of(g, RegionKind::reduction);
    CHECK(scheduler_name(c) == "rows");
    CHECK(has(refusal_of(c, "column"), "2 passes"));
  }
}

TEST_CASE("parameters print, hash and convert to JSON", "[templates][registry]") {
  const Chosen c = schedule_of(column_sum_graph(DType::f32, {1000, 256}), RegionKind::reduction);
  const std::string text = templates::schedule_text(c.schedule);
  CHECK(text.rfind("column{vector_width=4, tx=", 0) == 0);
  CHECK(text.back() == '}');
  CHECK(text.find('\n') == std::string::npos);
  const nlohmann::ordered_json j = templates::schedule_json(c.schedule);
  CHECK(j["scheduler"] == "column");
  CHECK(j["params"]["vector_width"] == 4);
  CHECK(j["params"]["split"] == 1);
  REQUIRE(j["refused"].size() == 2);
  CHECK(j["refused"][0]["scheduler"] == "tiled_transpose");
  CHECK(j["refused"][1]["reason"] == "not a pointwise region");

  const Chosen rows = schedule_of(softmax_graph(DType::f32, 64, 4096), RegionKind::normalization);
  const nlohmann::ordered_json r = templates::params_json(rows.schedule.params);
  CHECK(r["register_cache"] == true);
  CHECK(r["cluster"] == 1);
  CHECK(r.size() == templates::param_fields(rows.schedule.params).size());

  // Equal parameters hash alike, every run; one field more or less changes the hash.
  ColumnParams p = std::get<ColumnParams>(c.schedule.params);
  const uint64_t h = templates::params_hash("column", p);
  CHECK(h == templates::params_hash("column", c.schedule.params));
  p.split = 2;
  CHECK(templates::params_hash("column", p) != h);
  CHECK(templates::params_hash("rows", c.schedule.params) != h);
  // ... and in every run and build: XXH3 of the text, not of anything in memory.
  CHECK(templates::params_hash("pointwise", PointwiseParams{.vector_widths = {8, 1}}) ==
        0x1da6aba33b3aa7baULL);  // XXH3-64 (seed 0) of the text checked next
  CHECK(templates::params_text("pointwise", PointwiseParams{.vector_widths = {8, 1}}) ==
        "pointwise{vector_widths=[8, 1], block=256, waves=0}");
}

TEST_CASE("generate names the schedule of its kernel", "[templates][registry]") {
  const Graph g = softmax_graph(DType::f32, 64, 4096);
  const fusion::Region region = whole_graph_region(g, RegionKind::normalization);
  const templates::Kernel k = templates::generate(g, region);
  CHECK(k.schedule == templates::schedule_text(templates::schedule(g, region)));
  CHECK(k.source.find(k.schedule) == std::string::npos);  // never in the source
}

TEST_CASE("an attention region: the attention scheduler, after the four that refuse",
          "[templates][registry][attention]") {
  SECTION("head dim 64, causal") {
    const AttentionPlan p = attention_plan("causal_2x4x77_d64_bf16");
    const Chosen c = attention_schedule(p);
    INFO(templates::schedule_text(c.schedule));
    CHECK(scheduler_name(c) == "attention");
    REQUIRE(c.schedule.refused.size() == 4);
    CHECK(refusal_of(c, "tiled_transpose") == "not a pointwise region");
    CHECK(refusal_of(c, "pointwise") == "not a pointwise region");
    CHECK(refusal_of(c, "column") == "not a reduction or normalization region");
    CHECK(refusal_of(c, "rows") == "not a reduction or normalization region");
    const auto& a = std::get<AttentionParams>(c.schedule.params);
    CHECK(a.block == 128);
    CHECK(a.warps == 4);
    CHECK(a.rows == 64);
    CHECK(a.head_dim == 64);
    CHECK(a.value_dim == 64);
    CHECK(a.block_n == 64);
    CHECK(a.k_pitch == 72);  // 64 + 8: a fragment read's rows in distinct banks
    CHECK(a.v_pitch == 72);
    CHECK(a.shared_bytes == 2 * 64 * (72 + 72));
    CHECK(a.k_vec == 8);  // contiguous k, v: 16-byte cp.async
    CHECK(a.v_vec == 8);
    CHECK(a.mask == AttentionMaskKind::causal);
    CHECK(a.skip_above_diagonal);  // filled with -inf: tiles past the diagonal are skipped
    CHECK(a.k_head_group == 1);
    CHECK(a.q_tiles == 2);  // 77 query rows
    CHECK(a.kv_tiles == 2);
    CHECK(a.work == 2 * 4 * 2);
    CHECK(a.blocks_per_sm == 2);
  }
  SECTION("head dim 128, no mask") {
    const Chosen c = attention_schedule(attention_plan("none_2x4x77_d128_bf16"));
    INFO(templates::schedule_text(c.schedule));
    const auto& a = std::get<AttentionParams>(c.schedule.params);
    CHECK(a.head_dim == 128);
    CHECK(a.value_dim == 128);
    CHECK(a.block_n == 64);
    CHECK(a.k_pitch == 136);
    CHECK(a.shared_bytes == 2 * 64 * (136 + 136));
    CHECK(a.mask == AttentionMaskKind::none);
    CHECK_FALSE(a.skip_above_diagonal);
    CHECK(a.blocks_per_sm == 2);
  }
  SECTION("grouped heads: 8 query heads read 2 key and value heads") {
    const Chosen c = attention_schedule(attention_plan("gqa_causal_2x8x65_d128_bf16"));
    const auto& a = std::get<AttentionParams>(c.schedule.params);
    CHECK(a.k_head_group == 4);
    CHECK(a.v_head_group == 4);
    CHECK(a.work == 2 * 8 * 2);
  }
  SECTION("an additive mask") {
    const Chosen c = attention_schedule(attention_plan("additive_2x4x77_d64_bf16"));
    CHECK(std::get<AttentionParams>(c.schedule.params).mask == AttentionMaskKind::additive);
  }
  SECTION("before sm_80 no scheduler takes it, and the error says why") {
    const AttentionPlan p = attention_plan("causal_2x4x77_d64_bf16");
    const templates::CodegenOptions sm75 = for_arch("sm_75");
    const templates::RegionInfo info(p.plan.graph, p.attention(), sm75);
    for (const templates::Verdict& v : templates::verdicts(info, sm75)) {
      if (v.scheduler == "attention") CHECK(has(v.refusal.value_or(""), "needs sm_80"));
    }
    REQUIRE_THROWS_WITH(templates::generate(p.plan.graph, p.attention(), sm75),
                        ContainsSubstring("attention: sm_75 has no m16n8k16"));
  }
}

TEST_CASE("an attention region has no dynamic kernel: one is generated for each size",
          "[templates][registry][attention]") {
  const AttentionPlan p = attention_plan("causal_2x4x77_d64_bf16");
  const templates::CodegenOptions options;
  templates::RegionInfo info(p.plan.graph, p.attention(), options);
  const templates::DynamicSizes sizes{.outer = 3, .symbols = {3}};
  info.make_dynamic(sizes);  // a dynamic kernel's instance
  const templates::Scheduler& s = templates::scheduler_for(info, options);
  CHECK(s.name() == "attention");
  CHECK(s.variants(info, options) == 0);
  REQUIRE_THROWS_AS(s.params(info, options), templates::NotSizeIndependent);
  REQUIRE_THROWS_WITH(s.params(info, options), "an attention kernel is generated for each size");
}

TEST_CASE("the attention scheduler refuses every other region",
          "[templates][registry][attention]") {
  const Chosen rows = schedule_of(softmax_graph(DType::f32, 64, 4096), RegionKind::normalization);
  CHECK(refusal_of(rows, "attention") == "not an attention region");
  Graph g;
  const NodeId x = add_input(g, DType::f32, {64, 256});
  g.add_output(add_unary(g, Op::exp, x));
  CHECK(refusal_of(schedule_of(g, RegionKind::pointwise), "attention") ==
        "not an attention region");
}

TEST_CASE("attention parameters print, convert to JSON and name the kernel's schedule",
          "[templates][registry][attention]") {
  const AttentionPlan p = attention_plan("causal_2x4x77_d64_bf16");
  const Chosen c = attention_schedule(p);
  const std::string text = templates::schedule_text(c.schedule);
  CHECK(text.rfind("attention{block=128, warps=4, rows=64, block_n=64, key_split=false, stages=1, "
                   "head_dim=64, ",
                   0) == 0);
  CHECK(has(text, "mask=causal, skip_above_diagonal=true"));
  const nlohmann::ordered_json j = templates::params_json(c.schedule.params);
  CHECK(j["mask"] == "causal");
  CHECK(j["k_vector"] == 8);
  CHECK(j.size() == templates::param_fields(c.schedule.params).size());
  AttentionParams other = std::get<AttentionParams>(c.schedule.params);
  other.mask = AttentionMaskKind::none;
  CHECK(templates::params_hash("attention", other) !=
        templates::params_hash("attention", c.schedule.params));

  const templates::Kernel k = templates::generate(p.plan.graph, p.attention());
  CHECK(k.schedule == text);
  CHECK(k.name.rfind("fj_attention_", 0) == 0);
  CHECK(k.source.find(k.schedule) == std::string::npos);  // never in the source
}
