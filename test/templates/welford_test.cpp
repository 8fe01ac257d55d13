// One-pass mean and variance in row kernels (fusion/welford.h, rowwise.cpp,
// device/fj_welford.cuh): layer norm (with and without weight and bias, f32, f16, bf16, one or
// two normalized axes) and var (with a correction, keepdim or not) reduce their mean and
// variance together in every row schedule: rows of a few threads (warp shuffles), rows held in
// registers (exact per-thread statistics), rows streamed (Welford's update), rows split over
// blocks (scratch) and over thread-block clusters. Every kernel is compiled by NVRTC for sm_90.
#include <fmt/format.h>

#include "test/templates/norms.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::count;
using fusion::RegionKind;

namespace {

Graph layer_norm_graph(DType d, const Shape& shape, int64_t rank, bool affine) {
  Graph g;
  const NodeId x = add_input(g, d, shape);
  Shape param(shape.end() - rank, shape.end());
  const NodeId w = affine ? add_input(g, d, param) : -1;
  const NodeId b = affine ? add_input(g, d, param) : -1;
  g.add_output(test::layer_norm_over(g, x, rank, w, b));
  return g;
}

Graph var_graph(DType d, const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Graph g;
  g.add_output(test::variance(g, add_input(g, d, shape), axes, 1.0, keepdim));
  return g;
}

// The graph's kernel as one normalization region, compiled; checks what every kernel with a
// pair shows: the helpers, one accumulator, one reduction of it over the group, the mean read
// from the row's shifted statistics, `passes` passes over the row.
templates::Kernel check_one_pass(const Graph& g, const templates::CodegenOptions& options,
                                 int passes) {
  const templates::Kernel k = test::compile_graph(g, RegionKind::normalization, options);
  const std::string text = test::kernel_text(k);
  CHECK(test::has(k.source, "// ==== fj_welford.cuh ===="));
  CHECK(test::row_passes(g, RegionKind::normalization, options) == passes);
  const templates::KernelBody ir = test::kernel_ir(g, RegionKind::normalization, options);
  CHECK(test::count_declared(ir.fn, "a", "fj_welford") == 1);
  using templates::kir::Intrinsic;
  CHECK(test::count_intrinsics(ir.fn, Intrinsic::block_reduce) +
            test::count_intrinsics(ir.fn, Intrinsic::warp_reduce) ==
        1);
  CHECK(count(text, "fj_welford a") == 1);
  CHECK(count(text, "fj_block_reduce<") + count(text, "fj_warp_reduce<") == 1);
  CHECK(count(text, "fj_op_welford()") >= 1);
  return k;
}

// How the kernel's threads accumulate their share of a pair: exactly, from the register cache
// (sums, then squared deviations from the thread's mean: fj_op_count_sum, fj_welford_center,
// fj_op_deviation), or by Welford's update per element (fj_op_welford).
struct PairUpdate {
  size_t exact = 0, centered = 0, deviations = 0, welford = 0;
};
PairUpdate pair_update(const Graph& g, const templates::CodegenOptions& options = {}) {
  const templates::KernelBody ir = test::kernel_ir(g, RegionKind::normalization, options);
  return {
      test::count_calls(ir.fn, "fj_op_count_sum()"), test::count_calls(ir.fn, "fj_welford_center"),
      test::count_calls(ir.fn, "fj_op_deviation()"), test::count_calls(ir.fn, "fj_op_welford()")};
}

templates::CodegenOptions arch(const char* name) {
  return {.target = templates::target_for_arch(name)};
}

}  // namespace

TEST_CASE("layer norm reduces its mean and variance in one pass", "[templates][welford]") {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : {16, 1000, 4096, 16384, 32000}) {
      for (bool affine : {true, false}) {
        INFO(fmt::format("{} rows of {}, {}", dtype_name(d), n, affine ? "weight and bias" : "plain"));
        const Graph g = layer_norm_graph(d, {64, n}, 1, affine);
        const templates::Kernel k = check_one_pass(g, {}, 2);
        // Held in registers: per-thread statistics exact from the cache, no load in pass 1.
        CHECK(test::schedule_flag(k, "register_cache"));
        const PairUpdate u = pair_update(g);
        CHECK(u.exact >= 1);
        CHECK(u.centered == 1);
        CHECK(u.deviations >= 1);  // squared deviations from the thread's mean
        CHECK(u.welford == 0);
      }
    }
  }
}

TEST_CASE("layer norm over two axes, and in node rounding", "[templates][welford]") {
  const Graph g = layer_norm_graph(DType::bf16, {8, 32, 256}, 2, true);
  check_one_pass(g, {}, 2);
  const Graph h = layer_norm_graph(DType::bf16, {64, 4096}, 1, true);
  check_one_pass(h, {.rounding = Rounding::node}, 2);
}

TEST_CASE("rows the registers cannot hold accumulate by Welford's update",
          "[templates][welford]") {
  // sm_80 has no clusters: a row of 131072 f32 values is streamed, twice (statistics, then the
  // outputs) instead of three times.
  for (DType d : {DType::f32, DType::bf16}) {
    INFO(dtype_name(d));
    const Graph g = layer_norm_graph(d, {8, 131072}, 1, true);
    const templates::Kernel k = check_one_pass(g, arch("sm_80"), 2);
    const std::string text = test::kernel_text(k);
    CHECK(!test::schedule_flag(k, "register_cache"));
    const PairUpdate u = pair_update(g, arch("sm_80"));
    CHECK(u.welford >= 1);  // Welford's update
    CHECK(u.exact + u.centered + u.deviations == 0);
    CHECK(test::has(text, "fj_op_welford()(a"));
  }
}

TEST_CASE("layer norm rows split over a cluster exchange one partial per row",
          "[templates][welford][cluster]") {
  const Graph g = layer_norm_graph(DType::f32, {37, 128256}, 1, true);
  const templates::Kernel k = check_one_pass(g, arch("sm_90"), 2);
  const std::string text = test::kernel_text(k);
  CHECK(k.cluster == 8);
  CHECK(test::has(text, "__shared__ fj_welford fj_exchange"));
  CHECK(count(text, "fj_cluster_fold<8>") == 1);
  CHECK(test::has(text, "fj_phase ^= 1;"));  // one exchange per row: its slots alternate
}

TEST_CASE("var reduces in one pass over the row, split when rows are few",
          "[templates][welford]") {
  for (DType d : {DType::f32, DType::bf16}) {
    for (bool keepdim : {true, false}) {
      INFO(fmt::format("{} keepdim {}", dtype_name(d), keepdim));
      // Many rows: one streaming pass, no register cache.
      const Graph many = var_graph(d, {256, 4096}, {1}, keepdim);
      check_one_pass(many, {}, 1);
      CHECK(pair_update(many).welford >= 1);  // Welford's update
      CHECK(pair_update(many).exact == 0);
      // Few long rows: split over blocks, the partials are fj_welford values in scratch.
      const templates::Kernel few = check_one_pass(var_graph(d, {4, 1 << 20}, {1}, keepdim), {}, 1);
      const std::string text = test::kernel_text(few);
      CHECK(test::schedule_count(few, "split_blocks") > 1);
      CHECK(test::has(text, "__device__ fj_welford fj_partial"));
      CHECK(test::has(text, "fj_volatile_load"));
      CHECK(few.serial_launches);
    }
  }
  // Over every axis: one row.
  const templates::Kernel all =
      check_one_pass(var_graph(DType::f32, {512, 1024}, {0, 1}, false), {}, 1);
  CHECK(test::schedule_count(all, "split_blocks") > 1);
}

TEST_CASE("kernels without a pair are unchanged by it", "[templates][welford]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {64, 4096});
  g.add_output(test::rms_norm(g, x, add_input(g, DType::bf16, {4096})));
  const templates::Kernel k = test::compile_graph(g, RegionKind::normalization);
  CHECK(!test::has(k.source, "fj_welford"));
}

TEST_CASE("a region that pairs values which are not a mean and its variance is refused",
          "[templates][welford]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {64, 256});
  const NodeId m = add_reduce(g, Op::max, x, {1}, true);
  const NodeId d = add_binary(g, Op::sub, x, m);
  const NodeId v = add_reduce(g, Op::sum, add_binary(g, Op::mul, d, d), {1}, true);
  g.add_output(add_binary(g, Op::mul, d, v));
  fusion::Region r = test::whole_graph_region(g, RegionKind::normalization);
  CHECK(r.welford.empty());
  r.welford = {{m, v}};
  CHECK_THROWS_AS(templates::generate(g, r), InternalError);
}
