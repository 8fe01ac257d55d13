// Normalization kernels: softmax, layer norm (weight and bias), RMS norm and log-softmax, as
// the API decomposes them into primitives, in f32 and bf16, over rows of 1000, 4096 and
// 16384 elements; each row is read from memory once (a register cache) where it fits. Every
// kernel is compiled by NVRTC.
#include <fmt/format.h>

#include "templates/schedulers/registry.h"
#include "test/templates/norms.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_graph;
using fusejit::test::kernel_text;
using fusejit::test::layer_norm;
using fusejit::test::log_softmax;
using fusejit::test::rms_norm;
using fusejit::test::scalar;
using fusejit::test::softmax;
using fusion::RegionKind;

namespace {

// A GPU without thread-block clusters: rows too long for one block keep the schedules below
// (from sm_90 on they are split over clusters: cluster_test.cpp).
templates::CodegenOptions no_clusters() { return {.target = templates::target_for_arch("sm_80")}; }

// The row scheduler's parameters for the whole graph as one normalization region
// (templates/schedulers/registry.h): what the tests below assert on, rather than the kernel's
// comments.
templates::RowParams norm_row_params(const Graph& g,
                                     const templates::CodegenOptions& options = {}) {
  const templates::Schedule s = templates::schedule(
      g, fusejit::test::whole_graph_region(g, RegionKind::normalization), options);
  REQUIRE(s.scheduler->name() == "rows");
  return std::get<templates::RowParams>(s.params);
}

}  // namespace

TEST_CASE("softmax and layer norm and RMS norm and log-softmax compile",
          "[templates][normalization]") {
  for (DType d : {DType::f32, DType::bf16}) {
    for (int64_t n : {1000, 4096, 16384}) {
      const Shape shape = {64, n};
      SECTION(fmt::format("{} rows of {}", dtype_name(d), n)) {
        {
          Graph g;
          g.add_output(softmax(g, add_input(g, d, shape)));
          INFO("softmax");
          compile_graph(g, RegionKind::normalization);
          CHECK(test::row_passes(g, RegionKind::normalization) == 3);
          CHECK(norm_row_params(g).config.cached());
          CHECK(!norm_row_params(g).online);  // held rows keep a pass per reduction
        }
        {
          Graph g;
          g.add_output(log_softmax(g, add_input(g, d, shape)));
          INFO("log_softmax");
          compile_graph(g, RegionKind::normalization);
          CHECK(norm_row_params(g).config.cached());
        }
        {
          Graph g;
          const NodeId x = add_input(g, d, shape);
          const NodeId w = add_input(g, d, {n});
          const NodeId b = add_input(g, d, {n});
          g.add_output(layer_norm(g, x, w, b));
          INFO("layer_norm");
          compile_graph(g, RegionKind::normalization);
          // Mean and variance in one pass (fusion/welford.h), then the outputs: no third.
          CHECK(test::row_passes(g, RegionKind::normalization) == 2);
          CHECK(norm_row_params(g).config.cached());
        }
        {
          Graph g;
          const NodeId x = add_input(g, d, shape);
          g.add_output(rms_norm(g, x, add_input(g, d, {n})));
          INFO("rms_norm");
          compile_graph(g, RegionKind::normalization);
          CHECK(test::row_passes(g, RegionKind::normalization) == 2);
          CHECK(norm_row_params(g).config.cached());
        }
      }
    }
  }
}

TEST_CASE("normalization variants", "[templates][normalization]") {
  SECTION("residual add, layer norm, and both outputs") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {128, 4096});
    const NodeId res = add_input(g, DType::bf16, {128, 4096});
    const NodeId h = add_binary(g, Op::add, x, res);
    g.add_output(h);  // the residual stream continues
    g.add_output(
        layer_norm(g, h, add_input(g, DType::bf16, {4096}), add_input(g, DType::bf16, {4096})));
    compile_graph(g, RegionKind::normalization);
    CHECK(norm_row_params(g).config.cached());
  }
  SECTION("statistics as outputs (one value per row)") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {32, 2048});
    const NodeId mu = add_reduce(g, Op::mean, x, {1}, false);
    const NodeId c = add_binary(g, Op::sub, x, add_reshape(g, mu, {32, 1}));
    const NodeId var = add_reduce(g, Op::mean, add_binary(g, Op::mul, c, c), {1}, false);
    const NodeId rstd = add_unary(g, Op::rsqrt, add_binary(g, Op::add, var, scalar(g, 1e-5)));
    g.add_output(
        add_binary(g, Op::mul, c, add_expand(g, add_reshape(g, rstd, {32, 1}), {32, 2048})));
    g.add_output(mu);
    g.add_output(rstd);
    compile_graph(g, RegionKind::normalization);
  }
  SECTION("rows too long for registers are read again from L2") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::f32, {8, 131072})));
    compile_graph(g, RegionKind::normalization, no_clusters());
    const templates::RowParams p = norm_row_params(g, no_clusters());
    CHECK(!p.config.cached());
    CHECK(p.online);  // read twice rather than three times
    // The widest block: half the SM's threads, 64 registers per thread.
    CHECK(p.config.group == 1024);
  }
  SECTION("odd-length bf16 and f16 rows stay in the register cache") {
    // Scalars: a half type's 64-byte share would be 32 values per thread, more than the 16
    // vectors a register cache unrolls, and the row would be read again in every pass.
    for (DType d : {DType::bf16, DType::f16}) {
      for (const auto& [n, threads, values] : std::vector<std::tuple<int64_t, int, int>>{
               {1025, 128, 9}, {2049, 256, 9}, {3001, 256, 12}, {4097, 512, 9}, {257, 32, 9}}) {
        INFO(dtype_name(d) << " rows of " << n);
        Graph g;
        g.add_output(softmax(g, add_input(g, d, {31, n})));
        compile_graph(g, RegionKind::normalization);
        const templates::RowParams p = norm_row_params(g);
        CHECK(p.config.cached());
        CHECK(p.config.group == threads);
        CHECK(p.config.v == 1);
        CHECK(p.config.chunks == values);
      }
    }
  }
  SECTION("a row of 16384 elements fits in registers, two blocks per SM") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::bf16, {8, 16384})));
    const auto k = compile_graph(g, RegionKind::normalization);
    CHECK(norm_row_params(g).config.cached());
    CHECK(kernel_text(k).find("__launch_bounds__(512, 2)") != std::string::npos);
    CHECK(k.blocks_per_sm == 4);
  }
  SECTION("rows held in 3 vectors of 8 on 512 threads ask for three blocks per SM") {
    // bf16 rows of 10,000 and 12,288: three quarters of the register cache. ptxas fits the
    // softmax of rows of 10,000 and 12,288 in the 40 registers of three blocks per SM (at
    // 10,000 since the passes predicate the last vectors rather than branch around them); a
    // layer norm with weight and bias at 12,288 would spill, so that kernel is compiled again
    // asking for two. f32 rows of 8,192 (4 vectors of 4) ask for three too; rows that take
    // the whole cache ask for two.
    struct Case {
      DType dtype;
      int64_t rows, length;
      int asked;
      bool relaxed;
      bool norm = false;  // a layer norm with bf16 weight and bias, else a softmax
    };
    for (const Case& c : std::vector<Case>{{DType::bf16, 64, 10000, 3, false},
                                           {DType::bf16, 64, 12288, 3, false},
                                           {DType::bf16, 64, 12288, 3, true, true},
                                           {DType::f32, 64, 8192, 3, false},
                                           {DType::bf16, 64, 16384, 2, false}}) {
      INFO(dtype_name(c.dtype) << ": " << c.rows << " rows of " << c.length
                               << (c.norm ? ", layer norm" : ", softmax"));
      Graph g;
      const NodeId x = add_input(g, c.dtype, {c.rows, c.length});
      if (c.norm) {
        const NodeId w = add_cast(g, add_input(g, c.dtype, {c.length}), DType::f32);
        const NodeId b = add_cast(g, add_input(g, c.dtype, {c.length}), DType::f32);
        g.add_output(layer_norm(g, x, w, b));
      } else {
        g.add_output(softmax(g, x));
      }
      const auto k = compile_graph(g, RegionKind::normalization);
      const std::string text = kernel_text(k);
      CHECK(k.block == 512);
      CHECK(norm_row_params(g).config.cached());
      // 0: min_resident_blocks, two blocks of 512 threads.
      CHECK(norm_row_params(g).config.min_blocks == (c.asked == 3 ? 3 : 0));
      if (c.asked == 3) {
        CHECK(k.relaxed_min_blocks == std::vector<int>{2});
        CHECK(text.find("__launch_bounds__(512, FJ_MIN_BLOCKS)") != std::string::npos);
        CHECK(k.source.find("#define FJ_MIN_BLOCKS 3") != std::string::npos);
      } else {
        CHECK(k.relaxed_min_blocks.empty());
        CHECK(text.find("__launch_bounds__(512, 2)") != std::string::npos);
      }
      const jit::CompiledKernel compiled = jit::compile(k, "sm_90");
      CHECK(compiled.relaxed == c.relaxed);
      CHECK(compiled.log.find("ptxas info") == std::string::npos);  // the report is not passed on
      CHECK_FALSE(test::spills(k));
    }
  }
  SECTION("a row its threads' vectors overrun computes each exponential once") {
    // bf16 rows of 10,000 in 3 vectors of 8 on 512 threads (12,288 places): the passes compute
    // every vector and predicate the updates and the stores, so that the output pass reuses
    // the sum pass's exponentials: 24 ex2 per thread, not 48.
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::bf16, {64, 10000})));
    const auto k = compile_graph(g, RegionKind::normalization);
    const std::string text = kernel_text(k);
    INFO(text);
    CHECK(norm_row_params(g).config.chunks == 3);
    CHECK(norm_row_params(g).config.v == 8);
    CHECK(text.find("min(") != std::string::npos);  // the fill loads the last vector again
    CHECK(text.find("fj_in ? ") != std::string::npos);
    CHECK(text.find("if (k0 < 10000)") == std::string::npos);
    const jit::CompiledKernel c = jit::compile(k, "sm_90", {.ptx = true});
    CHECK(test::count(c.ptx, "ex2.approx") == 24);
  }
  SECTION("a GPU with 1536 threads per SM gets narrower blocks") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::f32, {8, 16384})));
    // 2048 threads per SM: two blocks of 512, 32 values per thread (the softmax fits them).
    compile_graph(g, RegionKind::normalization, no_clusters());
    CHECK(norm_row_params(g, no_clusters()).config.group == 512);
    const templates::CodegenOptions sm89{.target = templates::target_for_arch("sm_89")};
    const auto ada = compile_graph(g, RegionKind::normalization, sm89);
    CHECK(norm_row_params(g, sm89).config.group == 512);
    CHECK(ada.blocks_per_sm == 3);
  }
  SECTION("two blocks per SM where what a thread keeps live fits their registers") {
    // f32 rows of 16384: 32 values per thread in blocks of 512 (64 registers each, two per
    // SM), or 16 in blocks of 1024 (one per SM). Softmax keeps its cache and an output vector;
    // RMS norm's weight and layer norm's weight and bias, hoisted out of the row loop, would
    // take 32 registers each more, and spill (row_schedule.cpp, live_registers).
    for (int kind = 0; kind < 3; ++kind) {
      Graph g;
      const NodeId x = add_input(g, DType::f32, {64, 16384});
      const auto param = [&] { return add_input(g, DType::f32, {16384}); };
      g.add_output(kind == 0   ? softmax(g, x)
                   : kind == 1 ? rms_norm(g, x, param())
                               : layer_norm(g, x, param(), param()));
      INFO(kind);
      const auto k = compile_graph(g, RegionKind::normalization);
      CHECK(k.block == (kind == 0 ? 512 : 1024));
      CHECK(kernel_text(k).find(kind == 0 ? "__launch_bounds__(512, 2)"
                                          : "__launch_bounds__(1024, 1)") != std::string::npos);
      CHECK(norm_row_params(g).config.cached());
    }
  }
  SECTION("softmax over the first axis") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {512, 96});
    const NodeId m = add_reduce(g, Op::max, x, {0}, true);
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
    g.add_output(add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {0}, true)));
    compile_graph(g, RegionKind::normalization);
  }
  SECTION("short rows share a warp") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::f16, {4096, 40})));
    const std::string text = kernel_text(compile_graph(g, RegionKind::normalization));
    CHECK(text.find("fj_warp_reduce<1, 8>") != std::string::npos);  // 5 vectors of 8: one each
  }
  SECTION("not vectorized") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::bf16, {64, 4096})));
    const std::string text =
        kernel_text(compile_graph(g, RegionKind::normalization, {.vectorize = false}));
    CHECK(text.find("fj_load_vec") == std::string::npos);
  }
}

TEST_CASE("softmax statistics are accumulated online, in one pass", "[templates][normalization]") {
  SECTION("softmax over rows too long for registers: max and sum in pass 1, output in pass 2") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::f32, {16, 131072})));
    const std::string text =
        kernel_text(compile_graph(g, RegionKind::normalization, no_clusters()));
    CHECK(test::row_passes(g, RegionKind::normalization, no_clusters()) == 2);
    CHECK(norm_row_params(g, no_clusters()).online);
    CHECK(text.find("fj_op_max_sum<false>") != std::string::npos);  // f32 output: precise exp
    CHECK(text.find("fj_max_sum_total(a") != std::string::npos);
  }
  SECTION("rows held in registers keep a pass per reduction") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::f32, {64, 4096})));
    const std::string text = kernel_text(compile_graph(g, RegionKind::normalization));
    CHECK(test::row_passes(g, RegionKind::normalization) == 3);
    CHECK(norm_row_params(g).config.cached());
    CHECK(!norm_row_params(g).online);
    CHECK(text.find("fj_max_sum") == std::string::npos);
  }
  SECTION("a bf16 output allows the approximate exponential") {
    Graph g;
    g.add_output(add_cast(g, softmax(g, add_input(g, DType::f32, {16, 131072})), DType::bf16));
    const std::string text =
        kernel_text(compile_graph(g, RegionKind::normalization, no_clusters()));
    CHECK(text.find("fj_op_max_sum<true>") != std::string::npos);
  }
  SECTION("logsumexp over vocabulary-wide rows reads each row once") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {16, 128256});
    const NodeId m = add_reduce(g, Op::max, x, {1}, true);
    const NodeId s = add_reduce(g, Op::sum, add_unary(g, Op::exp, add_binary(g, Op::sub, x, m)),
                                {1}, true);
    g.add_output(add_binary(g, Op::add, add_unary(g, Op::log, s), m));
    const std::string text =
        kernel_text(compile_graph(g, RegionKind::normalization, no_clusters()));
    CHECK(test::row_passes(g, RegionKind::normalization, no_clusters()) == 1);
    CHECK(text.find("fj_max_sum a") != std::string::npos);
    CHECK(norm_row_params(g, no_clusters()).online);
    CHECK(norm_row_params(g, no_clusters()).config.split == 1);  // pairs are not split over blocks
  }
  SECTION("with per-node rounding the sum keeps its own pass") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::bf16, {16, 131072})));
    const templates::CodegenOptions node{.rounding = Rounding::node};
    const std::string text = kernel_text(compile_graph(g, RegionKind::normalization, node));
    CHECK(text.find("fj_max_sum") == std::string::npos);
    CHECK(!norm_row_params(g, node).online);
    CHECK(test::row_passes(g, RegionKind::normalization, node) == 3);
  }
  SECTION("a sum of exponentials against another maximum is not paired") {
    Graph g;
    const NodeId x = add_input(g, DType::f32, {16, 131072});
    const NodeId y = add_input(g, DType::f32, {16, 131072});
    const NodeId m = add_reduce(g, Op::max, y, {1}, true);
    const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
    g.add_output(add_binary(g, Op::div, e, add_reduce(g, Op::sum, e, {1}, true)));
    const std::string text = kernel_text(compile_graph(g, RegionKind::normalization));
    CHECK(text.find("fj_max_sum") == std::string::npos);
  }
}

// A row cached in a block that has its SM to itself (or in a cluster's blocks) stages the
// inputs of its register cache in shared memory one row ahead: the fill reads this row's from
// shared memory and issues the next row's copies (cp.async), which land while the passes run.
TEST_CASE("rows of one block per SM stage their inputs one row ahead",
          "[templates][normalization]") {
  using fusejit::test::has;
  const auto g_of = [](const Shape& shape, DType d) {
    Graph g;
    g.add_output(softmax(g, add_input(g, d, shape)));
    return g;
  };
  const auto softmax_kernel = [&](const Shape& shape, DType d, std::string_view arch) {
    return compile_graph(g_of(shape, d), RegionKind::normalization,
                         {.target = templates::target_for_arch(arch), .stage_rows = true});
  };
  // The inputs staged: the row buffers the kernel IR declares in its shared memory (fj_stage<k>).
  const auto staged_inputs = [](const Graph& g, std::string_view arch) {
    return test::count_declared(
        test::kernel_ir(g, RegionKind::normalization,
                        {.target = templates::target_for_arch(arch), .stage_rows = true})
            .fn,
        "fj_stage", "*");
  };
  SECTION("a bf16 softmax over rows of 32,000: one input, 1024 threads of 4 vectors of 8") {
    const auto k = softmax_kernel({64, 32000}, DType::bf16, "sm_90");
    const std::string text = kernel_text(k);
    INFO(text);
    const templates::RowParams p =
        norm_row_params(g_of({64, 32000}, DType::bf16),
                        {.target = templates::target_for_arch("sm_90"), .stage_rows = true});
    CHECK(p.config.staged);
    CHECK(p.config.group == 1024);
    CHECK(p.config.chunks == 4);
    CHECK(p.config.v == 8);
    CHECK(staged_inputs(g_of({64, 32000}, DType::bf16), "sm_90") == 1);
    CHECK(has(text, "fj_stage_vec<unsigned short, 8>(fj_stage0 + fj_slot, in0 + row * 32000 + k0)"));
    CHECK(has(text, "fj_stage_vec<unsigned short, 8>(fj_stage0 + fj_slot, in0 + fj_next * 32000 + k0)"));
    CHECK(has(text, "fj_load_vec(r0, fj_stage0 + fj_slot)"));
    // The slot is the thread's own vector, never the clamped position the copy reads from.
    CHECK(has(text, "const int fj_slot = (static_cast<int>(c) * 1024 + g) * 8;"));
    CHECK(has(text, "min((static_cast<int>(c) * 1024 + g) * 8, 31992)"));
    CHECK(k.shared_bytes == 4 * 1024 * 8 * 2);  // a slot per thread and vector
    CHECK(k.blocks_per_sm == 1);
    CHECK(k.waves == 1);  // each resident block takes many rows
    const jit::CompiledKernel c = jit::compile(k, "sm_90", {.ptx = true});
    CHECK(test::count(c.ptx, "cp.async.cg.shared.global") == 8);  // first row, next row
    CHECK(test::count(c.ptx, "cp.async.wait_all") == 1);
  }
  SECTION("a bf16 layer norm of a sum: both full-size inputs staged, the weights not") {
    Graph g;
    const NodeId x = add_input(g, DType::bf16, {64, 32000});
    const NodeId r = add_input(g, DType::bf16, {64, 32000});
    const NodeId w = add_input(g, DType::bf16, {32000});
    const NodeId b = add_input(g, DType::bf16, {32000});
    g.add_output(layer_norm(g, add_binary(g, Op::add, x, r), w, b));
    const auto k = compile_graph(g, RegionKind::normalization, {.stage_rows = true});
    const std::string text = kernel_text(k);
    INFO(text);
    CHECK(
        test::count_declared(test::kernel_ir(g, RegionKind::normalization, {.stage_rows = true}).fn,
                             "fj_stage", "*") == 2);
    CHECK(k.shared_bytes == 2 * 4 * 1024 * 8 * 2);
    CHECK(has(text, ", in2 + k0);"));  // the weight, read from global memory where it is needed
  }
  SECTION("a bf16 softmax over rows of 128,256: a cluster of 8 blocks, each staging its piece") {
    const auto k = softmax_kernel({16, 128256}, DType::bf16, "sm_90");
    const std::string text = kernel_text(k);
    INFO(text);
    const templates::RowParams p =
        norm_row_params(g_of({16, 128256}, DType::bf16),
                        {.target = templates::target_for_arch("sm_90"), .stage_rows = true});
    CHECK(p.config.cluster == 8);
    CHECK(p.config.piece == 16032);
    CHECK(p.config.staged);
    CHECK(staged_inputs(g_of({16, 128256}, DType::bf16), "sm_90") == 1);
    CHECK(has(text, "in0 + fj_next * 128256 + k0"));
    CHECK(has(text, "const int fj_next = row + static_cast<int>(fj_cluster_count());"));
    CHECK(k.cluster == 8);
    CHECK(k.shared_bytes == 4 * 512 * 8 * 2);
  }
  SECTION("not by default, nor where other blocks share the SM, nor without cp.async, nor for "
          "rows read again") {
    Graph g;
    g.add_output(softmax(g, add_input(g, DType::bf16, {64, 32000})));
    CHECK(compile_graph(g, RegionKind::normalization).shared_bytes == 0);
    const auto staged = [&](const Shape& shape, DType d, std::string_view arch) {
      const auto k = softmax_kernel(shape, d, arch);
      INFO(kernel_text(k));
      CHECK(test::schedule_flag(k, "staged") == (k.shared_bytes > 0));
      return k.shared_bytes > 0;
    };
    CHECK(staged({64, 32000}, DType::bf16, "sm_80"));
    CHECK_FALSE(staged({64, 32000}, DType::bf16, "sm_75"));   // no cp.async
    CHECK_FALSE(staged({64, 16384}, DType::f32, "sm_89"));    // blocks of 512 on 1536 threads
    CHECK_FALSE(staged({64, 4096}, DType::bf16, "sm_90"));    // blocks of 512, two per SM
    CHECK_FALSE(staged({64, 400000}, DType::f32, "sm_80"));   // not in registers: read twice
  }
}
