// Thread-block clusters (rowwise.cpp, row_schedule.cpp, device/fj_cluster.cuh): on sm_90 a
// normalization row that one block cannot hold in registers, and larger than the SM's share of
// L2, is split over a cluster of 2 to 8 blocks that exchange their partial statistics through
// distributed shared memory. The cluster code is exercised for every dtype and width on a
// Target whose L2 share is 0 (so that only the register cache decides); the default sm_90
// Target's choices are checked separately. Every kernel is compiled by NVRTC for sm_90; the same
// regions for sm_80 keep the schedules they had.
#include <fmt/format.h>

#include "test/templates/norms.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::count;
using fusion::RegionKind;

namespace {

enum class Norm { softmax, layer_norm, rms_norm, logsumexp };

// Exchanges per row: one per reduction depth (softmax and logsumexp: max, then the sum of
// exponentials; layer norm: mean and variance together, fusion/welford.h; RMS norm: the mean
// of squares).
int exchanges(Norm n) { return n == Norm::rms_norm || n == Norm::layer_norm ? 1 : 2; }

std::string norm_name(Norm n) {
  switch (n) {
    case Norm::softmax: return "softmax";
    case Norm::layer_norm: return "layer_norm";
    case Norm::rms_norm: return "rms_norm";
    case Norm::logsumexp: return "logsumexp";
  }
  return "?";
}

Graph norm_graph(Norm n, DType d, int64_t rows, int64_t width) {
  Graph g;
  const NodeId x = add_input(g, d, {rows, width});
  switch (n) {
    case Norm::softmax:
      g.add_output(test::softmax(g, x));
      break;
    case Norm::layer_norm:
      g.add_output(test::layer_norm(g, x, add_input(g, d, {width}), add_input(g, d, {width})));
      break;
    case Norm::rms_norm:
      g.add_output(test::rms_norm(g, x, add_input(g, d, {width})));
      break;
    case Norm::logsumexp:
      g.add_output(test::logsumexp(g, x));
      break;
  }
  return g;
}

// The schedule a row width gets on sm_90 (2048 threads per SM: blocks of 512, two per SM).
struct Expected {
  int64_t width;
  DType dtype;
  int cluster;
  int block;
  int64_t piece;  // elements per block
};

const std::vector<Expected>& expected_schedules() {
  static const std::vector<Expected> e = {
      // 16-byte vectors, 32 values per thread (16 f32 ones would take 16 blocks).
      {128256, DType::bf16, 8, 512, 16032},
      {128256, DType::f16, 8, 512, 16032},
      {128256, DType::f32, 8, 512, 16032},
      // Odd widths: scalar accesses, 16 values per thread; the last piece is shorter.
      {50257, DType::bf16, 8, 512, 6283},
      {50257, DType::f32, 8, 512, 6283},
      // 6251 threads: more than 8 blocks of 512, so 8 blocks of 1024 (one per SM).
      {100003, DType::f16, 8, 1024, 12501},
      {100003, DType::f32, 8, 1024, 12501},
  };
  return e;
}

// sm_90 with no L2 to re-read a row from: every row one block cannot hold takes a cluster.
templates::CodegenOptions no_l2() {
  templates::CodegenOptions o;
  o.target = templates::target_for_arch("sm_90");
  o.target.l2_bytes_per_sm = 0;
  return o;
}

}  // namespace

TEST_CASE("normalizations split rows one block cannot hold over thread-block clusters",
          "[templates][cluster]") {
  const int64_t rows = 37;  // a multiple of nothing the schedule uses
  for (const Expected& e : expected_schedules()) {
    for (Norm n : {Norm::softmax, Norm::layer_norm, Norm::rms_norm}) {
      INFO(fmt::format("{} {} [{}, {}]", norm_name(n), dtype_name(e.dtype), rows, e.width));
      const Graph g = norm_graph(n, e.dtype, rows, e.width);
      const templates::Kernel k = test::compile_graph(g, RegionKind::normalization, no_l2());
      const std::string text = test::kernel_text(k);
      CHECK(k.cluster == e.cluster);
      CHECK(k.block == e.block);
      CHECK(k.work_blocks == rows * e.cluster);
      CHECK(test::has(text, fmt::format("__cluster_dims__({}, 1, 1) __launch_bounds__({}, {})",
                                  e.cluster, e.block, 1024 / e.block)));
      CHECK(test::schedule_count(k, "cluster") == e.cluster);
      CHECK(test::schedule_count(k, "piece") == e.piece);
      CHECK(test::schedule_flag(k, "register_cache"));
      CHECK(test::has(k.source, "// ==== fj_cluster.cuh ===="));
      // Each exchange folds the cluster's partials in rank order; one more barrier at exit.
      CHECK(count(text, fmt::format("fj_cluster_fold<{}>", e.cluster)) ==
            static_cast<size_t>(exchanges(n)));
      CHECK(count(text, "fj_cluster_sync();") == static_cast<size_t>(exchanges(n) + 1));
      CHECK(test::count_intrinsics(test::kernel_ir(g, RegionKind::normalization, no_l2()).fn,
                                   templates::kir::Intrinsic::sync_cluster) ==
            static_cast<size_t>(exchanges(n) + 1));
      // A single exchange per row alternates between two slots.
      CHECK(test::has(text, "fj_phase ^= 1;") == (exchanges(n) == 1));
      // The last block's piece ends past the row: its accesses stop at the row's end.
      CHECK(test::has(text, fmt::format("k0 < {}", e.width)) == (e.piece * e.cluster != e.width));
      CHECK(templates::launch_grid(k, 132) % e.cluster == 0);
    }
  }
}

TEST_CASE("without clusters (sm_80) the same rows keep today's schedule", "[templates][cluster]") {
  const templates::CodegenOptions a100{.target = templates::target_for_arch("sm_80")};
  for (const Expected& e : expected_schedules()) {
    for (Norm n : {Norm::softmax, Norm::layer_norm, Norm::rms_norm, Norm::logsumexp}) {
      INFO(fmt::format("{} {} width {}", norm_name(n), dtype_name(e.dtype), e.width));
      const Graph g = norm_graph(n, e.dtype, 37, e.width);
      const templates::Kernel k =
          templates::generate(g, test::whole_graph_region(g, RegionKind::normalization), a100);
      CHECK(k.cluster == 1);
      CHECK(k.work_blocks == 37);
      CHECK(!test::has(k.source, "cluster"));
    }
  }
  SECTION("and compile for sm_80") {
    const Graph g = norm_graph(Norm::layer_norm, DType::bf16, 37, 32000);
    const templates::Kernel k =
        templates::generate(g, test::whole_graph_region(g, RegionKind::normalization), a100);
    jit::CompiledKernel c;
    REQUIRE_NOTHROW(c = jit::compile(k, "sm_80"));
    CHECK(c.log.find("warning") == std::string::npos);
  }
}

TEST_CASE("which rows get no cluster", "[templates][cluster]") {
  const templates::CodegenOptions a100{.target = templates::target_for_arch("sm_80")};
  SECTION("bf16 rows of 16384: the sm_80 kernel, byte for byte") {
    Graph g;
    g.add_output(test::softmax(g, add_input(g, DType::bf16, {64, 16384})));
    const templates::Kernel h200 = test::compile_graph(g, RegionKind::normalization);
    const templates::Kernel a = test::compile_graph(g, RegionKind::normalization, a100);
    CHECK(h200.cluster == 1);
    CHECK(h200.source == a.source);
  }
  SECTION("short rows share blocks") {
    Graph g;
    g.add_output(test::rms_norm(g, add_input(g, DType::f16, {4096, 1024}),
                                add_input(g, DType::f16, {1024})));
    const templates::Kernel k = test::compile_graph(g, RegionKind::normalization);
    CHECK(k.cluster == 1);
  }
  SECTION("rows longer than a cluster of 8 blocks of 1024 threads holds keep the online schedule") {
    Graph g;
    g.add_output(test::softmax(g, add_input(g, DType::f32, {16, 300000})));
    const templates::Kernel k = test::compile_graph(g, RegionKind::normalization);
    CHECK(k.cluster == 1);
    CHECK(test::schedule_flag(k, "online"));
    CHECK(test::has(test::kernel_text(k), "fj_max_sum a"));
  }
  SECTION("integer statistics are not exchanged") {
    Graph g;
    const NodeId x = add_input(g, DType::i32, {16, 128256});
    const NodeId s = add_reduce(g, Op::sum, x, {1}, true);
    g.add_output(add_binary(g, Op::sub, add_cast(g, x, DType::i64), s));
    const templates::Kernel k = test::compile_graph(g, RegionKind::normalization);
    CHECK(k.cluster == 1);
  }
}

TEST_CASE("on the H200's sm_90, clusters only for rows re-read from DRAM otherwise",
          "[templates][cluster]") {
  // 388 KiB of L2 per SM: f32 rows of 128256 (513 KB) take clusters, bf16 ones (256 KB) are
  // re-read from L2 by the online schedule; rows one block holds, and logsumexp, which reads
  // its rows once anyway, never take one.
  for (Norm n : {Norm::softmax, Norm::layer_norm, Norm::rms_norm, Norm::logsumexp}) {
    for (DType d : {DType::f32, DType::bf16}) {
      for (int64_t width : {int64_t{16384}, int64_t{32000}, int64_t{128256}}) {
        INFO(fmt::format("{} {} width {}", norm_name(n), dtype_name(d), width));
        const templates::Kernel k =
            test::compile_graph(norm_graph(n, d, 37, width), RegionKind::normalization);
        const bool expected = n != Norm::logsumexp && d == DType::f32 && width == 128256;
        CHECK(k.cluster == (expected ? 8 : 1));
      }
    }
  }
}

TEST_CASE("a cluster kernel's per-row outputs come from one block", "[templates][cluster]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {37, 128256});
  const NodeId xf = add_cast(g, x, DType::f32);
  const NodeId mu = add_reduce(g, Op::mean, xf, {1}, false);
  const NodeId c = add_binary(g, Op::sub, xf, add_reshape(g, mu, {37, 1}));
  const NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, c, c), {1}, false);
  const NodeId rstd = add_unary(g, Op::rsqrt, add_binary(g, Op::add, var, test::scalar(g, 1e-5)));
  const NodeId y = add_binary(g, Op::mul, c, add_expand(g, add_reshape(g, rstd, {37, 1}), {37, 128256}));
  g.add_output(add_cast(g, y, DType::bf16));
  g.add_output(mu);
  g.add_output(rstd);
  const templates::Kernel k = test::compile_graph(g, RegionKind::normalization);
  CHECK(k.cluster == 8);
  CHECK(test::has(test::kernel_text(k), "if (s == 0 && g == 0) {"));
}

TEST_CASE("launch_grid gives whole clusters", "[templates][cluster]") {
  templates::Kernel k;
  k.cluster = 8;
  k.blocks_per_sm = 4;
  k.work_blocks = 524 * 8;
  CHECK(templates::launch_grid(k, 132) == 4 * 132 * 4);  // 2112 = 264 clusters
  CHECK(templates::launch_grid(k, 114) % 8 == 0);        // 1824
  CHECK(templates::launch_grid(k, 114) == 1824);
  k.waves = 1;
  CHECK(templates::launch_grid(k, 113) == 448);  // 452 blocks a wave, 56 whole clusters
  k.work_blocks = 3 * 8;
  CHECK(templates::launch_grid(k, 132) == 24);
  k.blocks_per_sm = 1;
  CHECK(templates::launch_grid(k, 1) == 8);  // never less than one cluster
  k.waves = 0;  // uncapped: still whole clusters
  k.work_blocks = 20;
  CHECK(templates::launch_grid(k, 132) == 16);
}
