// Dynamic kernels (generate_dynamic): regions whose outer extent is a runtime argument. Each
// graph is written once over its symbols' values and planned at one instance of them; the
// kernel, built once there, must come back, compile with NVRTC, carry no symbol's value, and be
// the same source when built at another instance. Regions whose kernel depends on its sizes
// beyond its parameters (fj_outer, the runtime extents) must be refused, with the reason.
#include <cctype>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "support/symbolic_graph.h"
#include "test/templates/norms.h"
#include "templates/emit.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusejit::test::compile_and_check;
using fusejit::test::has;
using fusejit::test::kernel_text;
using fusejit::test::spills;

using fusejit::testing::outer_extent;
using fusejit::testing::plan_at;
using fusejit::testing::GraphAtSizes;

namespace {

// The plan's one generated region (the graphs here plan to one kernel).
const fusion::Region& only_region(const fusion::Plan& p) {
  REQUIRE(p.kernel_count() == 1);
  REQUIRE(p.library_call_count() == 0);
  return p.regions.front();
}

// True when `text` holds the number `v` on its own (not inside a longer number or a name).
bool has_number(const std::string& text, int64_t v) {
  const std::string n = std::to_string(v);
  const auto part = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.'; };
  for (size_t at = text.find(n); at != std::string::npos; at = text.find(n, at + 1)) {
    const bool before = at > 0 && part(text[at - 1]);
    const bool after = at + n.size() < text.size() && part(text[at + n.size()]);
    if (!before && !after) return true;
  }
  return false;
}

struct Outcome {
  std::optional<templates::Kernel> kernel;
  std::string why;
};

Outcome dynamic_at(const GraphAtSizes& build, const std::vector<int64_t>& a,
                   const templates::CodegenOptions& options = {}, int row_path = 0,
                   const std::vector<int64_t>& alignment = {}) {
  const fusion::Plan pa = plan_at(build, a);
  const fusion::Region& region = only_region(pa);
  Outcome out;
  const templates::DynamicSizes sizes{
      .outer = outer_extent(a), .symbols = a, .alignment = alignment, .row_path = row_path};
  out.kernel = templates::generate_dynamic(pa.graph, region, sizes, options, &out.why);
  return out;
}

// Symbol values: instances of one or two symbols; primes that divide no static extent of the
// graphs below, as jit/runtime/dynamic.cpp chooses them, so that a count changes with the
// symbols exactly where one of them divides it.
const std::vector<int64_t> kA1 = {4099}, kB1 = {3001}, kC1 = {2053};
const std::vector<int64_t> kA2 = {131, 67}, kC2 = {79, 37};

// Requires a dynamic kernel at `a` that compiles and names none of the symbols' values, and
// the same source built at `c`; returns it.
templates::Kernel require_dynamic(const GraphAtSizes& build, const std::vector<int64_t>& a,
                                  const std::vector<int64_t>& c,
                                  const templates::CodegenOptions& options = {}, int row_path = 0) {
  const Outcome first = dynamic_at(build, a, options, row_path);
  INFO("refused: " << first.why);
  REQUIRE(first.kernel.has_value());
  const templates::Kernel& k = *first.kernel;
  compile_and_check(k, only_region(plan_at(build, a)));
  const std::string text = kernel_text(k);
  INFO(text);
  CHECK(k.dynamic);
  CHECK(k.max_outer == outer_extent(a));
  CHECK(k.items_per_outer >= 1);
  CHECK(k.work_blocks == templates::work_blocks_at(k, outer_extent(a)));
  CHECK(has(text, "long long fj_outer"));
  for (int64_t v : a) CHECK_FALSE(has_number(text, v));
  const Outcome second = dynamic_at(build, c, options, row_path);
  INFO("refused at the second instance: " << second.why);
  REQUIRE(second.kernel.has_value());
  CHECK(second.kernel->source == k.source);
  CHECK(second.kernel->items_per_outer == k.items_per_outer);
  return k;
}

std::string refusal(const GraphAtSizes& build, const std::vector<int64_t>& a) {
  const Outcome o = dynamic_at(build, a);
  if (o.kernel) FAIL("a dynamic kernel was made:\n" << kernel_text(*o.kernel));
  CHECK_FALSE(o.why.empty());
  return o.why;
}

}  // namespace

TEST_CASE("pointwise chains with broadcast weights are dynamic", "[templates][dynamic]") {
  for (const DType d : {DType::f32, DType::bf16}) {
    const GraphAtSizes build = [d](Graph& g, const std::vector<int64_t>& s) {
      const NodeId x = add_input(g, d, {s[0], 1024});
      const NodeId w = add_input(g, d, {1024});
      const NodeId y = add_unary(g, Op::relu, add_binary(g, Op::mul, x, w));
      g.set_outputs({add_binary(g, Op::add, y, add_constant(g, d, 0.5))});
    };
    INFO(dtype_name(d));
    const templates::Kernel k = require_dynamic(build, kA1, kC1);
    const int v = d == DType::f32 ? 4 : 8;
    CHECK(k.items_per_outer == 1024 / v);
    CHECK(has(kernel_text(k), fmt::format("t < {} * (int)fj_outer", 1024 / v)));
  }
}

TEST_CASE("an odd row length keeps the vector width its rows allow", "[templates][dynamic]") {
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], 1030});
    g.set_outputs({add_unary(g, Op::exp, x)});
  };
  const templates::Kernel k = require_dynamic(build, kA1, kC1);
  CHECK(k.items_per_outer == 1030 / 2);  // two f32 per vector: 1030 is even, not a multiple of 4
}

TEST_CASE("reshapes within the outer block and two symbols are dynamic", "[templates][dynamic]") {
  const GraphAtSizes reshaped = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], s[1], 256});
    const NodeId b = add_input(g, DType::f32, {256});
    const NodeId flat = add_reshape(g, x, {s[0] * s[1], 256});
    g.set_outputs({add_unary(g, Op::tanh, add_binary(g, Op::add, flat, b))});
  };
  require_dynamic(reshaped, kA2, kC2);
  const GraphAtSizes two = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::bf16, {s[0], s[1], 128});
    const NodeId y = add_input(g, DType::bf16, {s[0], s[1], 128});
    const NodeId w = add_input(g, DType::bf16, {1, 1, 128});
    const NodeId sum = add_binary(g, Op::add, x, y);
    g.set_outputs({sum, add_binary(g, Op::mul, sum, w)});
  };
  require_dynamic(two, kA2, kC2);
}

TEST_CASE("norms and softmax over the last axis are dynamic", "[templates][dynamic]") {
  using test::layer_norm;
  using test::rms_norm;
  using test::softmax;
  const GraphAtSizes soft = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({softmax(g, add_input(g, DType::f32, {s[0], 4096}))});
  };
  require_dynamic(soft, kA1, kC1);
  const GraphAtSizes narrow = [](Graph& g, const std::vector<int64_t>& s) {  // rows per block > 1
    g.set_outputs({softmax(g, add_input(g, DType::f32, {s[0], 24}))});
  };
  const templates::Kernel k = require_dynamic(narrow, kA1, kC1);
  CHECK(k.items_per_block > 1);
  CHECK(has(kernel_text(k), "row < (int)fj_outer"));  // the guard on the last block's rows
  const GraphAtSizes ln = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::bf16, {s[0], 1024});
    const NodeId w = add_input(g, DType::f32, {1024});
    const NodeId b = add_input(g, DType::f32, {1024});
    g.set_outputs({layer_norm(g, x, w, b)});
  };
  require_dynamic(ln, kA1, kC1);
  const GraphAtSizes rms = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::bf16, {s[0], s[1], 512});
    const NodeId w = add_input(g, DType::bf16, {512});
    g.set_outputs({rms_norm(g, x, w)});
  };
  require_dynamic(rms, kA2, kC2);
  const GraphAtSizes sum = [](Graph& g, const std::vector<int64_t>& s) {  // a reduction region
    const NodeId x = add_input(g, DType::f32, {s[0], 768});
    g.set_outputs({add_reduce(g, Op::sum, add_unary(g, Op::abs, x), {-1}, false)});
  };
  require_dynamic(sum, kA1, kC1);
}

// Requires `k` to take exactly `extents` (static coefficient, powers of the symbols) as runtime
// extents, with the fast-division helper pasted in and its arguments declared.
void require_extents(const templates::Kernel& k, const std::vector<ir::DimTerms>& extents) {
  const std::string text = kernel_text(k);
  INFO(text);
  REQUIRE(k.runtime_extents.size() == extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    CHECK(k.runtime_extents[i].coefficient == extents[i].coefficient);
    CHECK(k.runtime_extents[i].exponents == extents[i].exponents);
    CHECK(has(text, fmt::format("int fj_e{}", i)));
    CHECK(has(text, fmt::format("unsigned long long fj_m{}", i)));
  }
  CHECK(has(k.source, "fj_fastdiv.cuh"));
  CHECK_FALSE(k.dividend_bounds.empty());
  CHECK(k.max_elements == templates::kNarrowIndexLimit);
}

TEST_CASE("a table broadcast over one symbol of two takes that dim at run time",
          "[templates][dynamic]") {
  // x[B,S,H] + table[S,H]: the table's element is i % (S*H), a modulo by a runtime extent.
  for (const DType d : {DType::f32, DType::bf16}) {
    const GraphAtSizes build = [d](Graph& g, const std::vector<int64_t>& s) {
      const NodeId x = add_input(g, d, {s[0], s[1], 64});
      const NodeId pos = add_input(g, d, {s[1], 64});
      g.set_outputs({add_binary(g, Op::add, x, pos)});
    };
    INFO(dtype_name(d));
    const templates::Kernel k = require_dynamic(build, kA2, kC2);
    require_extents(k, {DimTerms{.coefficient = 64, .exponents = {0, 1}}});
    CHECK(has(kernel_text(k), "fj_fastmod(i0, fj_e0, fj_m0)"));  // vector loads of the table too
    CHECK(k.items_per_outer == 64 / (d == DType::f32 ? 4 : 8));
  }
}

TEST_CASE("a permute that moves a dynamic axis inward takes its dims at run time",
          "[templates][dynamic]") {
  // [B,S,96] read as [S,B,96] (the contiguous axis stays innermost: the linear sweep): the
  // output's s is i / (96*B), its b is (i / 96) % B, and the input's place of b is 96*S.
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], s[1], 96});
    g.set_outputs({add_unary(g, Op::exp, add_permute(g, x, {1, 0, 2}))});
  };
  const templates::Kernel k = require_dynamic(build, kA2, kC2);
  const std::string text = kernel_text(k);
  CHECK(has(text, "fj_fastdiv("));
  CHECK(has(text, "fj_fastmod("));
  // In order of first use: b's modulo (B), the input's place of b (96*S), s's divisor (96*B).
  require_extents(k, {DimTerms{.coefficient = 1, .exponents = {1, 0}},
                      DimTerms{.coefficient = 96, .exponents = {0, 1}},
                      DimTerms{.coefficient = 96, .exponents = {1, 0}}});
  CHECK(has(text,
            "fj_fastmod(i0 / 96, fj_e0, fj_m0) * fj_e1 + fj_fastdiv(i0, fj_m2) * 96 + i0 % 96"));
  // Heads moved past the sequence: [B,S,NH,D] -> [B,NH,S,D], one symbol.
  const GraphAtSizes heads = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::bf16, {s[0], 128, 8, 64});
    g.set_outputs({add_unary(g, Op::neg, add_permute(g, x, {0, 2, 1, 3}))});
  };
  require_dynamic(heads, kA1, kC1);
  const GraphAtSizes seq = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::bf16, {4, s[0], 8, 64});
    g.set_outputs({add_unary(g, Op::neg, add_permute(g, x, {0, 2, 1, 3}))});
  };
  require_dynamic(seq, kA1, kC1);
}

TEST_CASE("a softmax over scores plus a mask broadcast over one symbol of two is dynamic",
          "[templates][dynamic]") {
  // softmax(x[B,S,512] + mask[S,512]) over the last axis: one row per (b, s), the mask's row is
  // row % S, a modulo by a runtime extent in a row kernel.
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], s[1], 512});
    const NodeId mask = add_input(g, DType::f32, {s[1], 512});
    g.set_outputs({test::softmax(g, add_binary(g, Op::add, x, mask))});
  };
  const templates::Kernel k = require_dynamic(build, kA2, kC2);
  require_extents(k, {DimTerms{.coefficient = 1, .exponents = {0, 1}}});
  CHECK(has(kernel_text(k), "fj_fastmod(row, fj_e0, fj_m0)"));
}

TEST_CASE("a dynamic dim in the middle takes its dims at run time", "[templates][dynamic]") {
  // x[4,S,64] * w[4,1,64]: w's element is (i / (64*S)) * 64 + i % 64.
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {4, s[0], 64});
    const NodeId w = add_input(g, DType::f32, {4, 1, 64});
    g.set_outputs({add_binary(g, Op::mul, x, w)});
  };
  const templates::Kernel k = require_dynamic(build, kA1, kC1);
  require_extents(k, {DimTerms{.coefficient = 64, .exponents = {1}}});
  CHECK(has(kernel_text(k), "fj_fastdiv(i0, fj_m0)"));
  // The static kernel of the same region divides by constants, and takes no runtime extent.
  const fusion::Plan p = plan_at(build, kA1);
  const templates::Kernel fixed = templates::generate(p.graph, only_region(p));
  CHECK(fixed.runtime_extents.empty());
  CHECK_FALSE(has(fixed.source, "fj_fastdiv.cuh"));
}

TEST_CASE("a row length that changes with the sizes is taken at run time",
          "[templates][dynamic]") {
  // softmax over attention scores [B,8,S,S]: the row length S and the row count 8*B*S are
  // kernel arguments; each thread strides over the row in a loop bounded at run time.
  for (const DType d : {DType::f32, DType::bf16}) {
    const GraphAtSizes scores = [d](Graph& g, const std::vector<int64_t>& s) {
      const NodeId x = add_input(g, d, {s[0], 8, s[1], s[1]});
      g.set_outputs({add_cast(g, test::softmax(g, add_cast(g, x, DType::f32)), d)});
    };
    INFO(dtype_name(d));
    const templates::Kernel k = require_dynamic(scores, kA2, kC2);
    const std::string text = kernel_text(k);
    INFO(text);
    REQUIRE(k.runtime_extents.size() == 2);
    CHECK(k.runtime_extents[0].coefficient == 8);  // the rows, 8*B*S
    CHECK(k.runtime_extents[0].exponents == std::vector<int>{1, 1});
    CHECK(k.runtime_extents[1].coefficient == 1);  // the row length, S
    CHECK(k.runtime_extents[1].exponents == std::vector<int>{0, 1});
    CHECK(has(text, "row0 < fj_e0"));
    CHECK(has(text, "k0 < fj_e1; k0 += 32"));  // a warp per row, scalar: S may be odd
    CHECK(has(text, "row * fj_e1 + k0"));
    CHECK(has(text, "fj_max_sum"));  // online softmax: two passes over the row, not three
    CHECK(test::schedule_flag(k, "online"));
    CHECK_FALSE(has(text, "cache"));  // the row is read from memory in each pass
    CHECK_FALSE(test::schedule_flag(k, "register_cache"));
    CHECK(k.items_per_outer == 8);   // elements per B*S*S
  }
  // A layer norm over a dynamic hidden size D, on N rows: the mean divides by D at run time.
  // Its static coefficient 16 gives vectors of 4 f32.
  const GraphAtSizes ln = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], 16 * s[1]});
    g.set_outputs({test::layer_norm_over(g, x, 1)});
  };
  const templates::Kernel k = require_dynamic(ln, kA2, kC2);
  const std::string text = kernel_text(k);
  INFO(text);
  CHECK(has(text, "(float)fj_e"));
  CHECK(has(text, "k0 += 128"));  // 32 threads x 4 lanes
  CHECK(has(text, "fj_load_vec"));
  // Few static rows of a dynamic length: a block per row, when they fill the device.
  const GraphAtSizes few = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {2048, s[0]});
    g.set_outputs({add_reduce(g, Op::sum, x, {1}, false)});
  };
  const templates::Kernel block_rows = require_dynamic(few, kA1, kC1);
  CHECK(has(kernel_text(block_rows), "fj_block_reduce<512>"));
}

TEST_CASE("multi-pass kernels over a row length given at launch keep rows in registers",
          "[templates][dynamic]") {
  using test::layer_norm;
  using test::log_softmax;
  using test::logsumexp;
  using test::rms_norm;
  using test::softmax;
  // Rows of [s0, s1] (or [s0, 4, s1]) along s1, in every dtype a row kernel reads: each kernel
  // compiles, and each has register paths of 4 to 256 threads per row before its loop.
  struct Case {
    std::string name;
    GraphAtSizes build;
  };
  std::vector<Case> cases;
  for (const DType d : {DType::f32, DType::bf16, DType::f16}) {
    const std::string dn(dtype_name(d));
    cases.push_back({"softmax " + dn, [d](Graph& g, const std::vector<int64_t>& s) {
                       g.set_outputs({softmax(g, add_input(g, d, {s[0], s[1]}))});
                     }});
    cases.push_back({"layer norm with weight and bias " + dn,
                     [d](Graph& g, const std::vector<int64_t>& s) {
                       const NodeId x = add_input(g, d, {s[0], s[1]});
                       const NodeId w = add_cast(g, add_input(g, d, {s[1]}), DType::f32);
                       const NodeId b = add_cast(g, add_input(g, d, {s[1]}), DType::f32);
                       g.set_outputs({layer_norm(g, x, w, b)});
                     }});
  }
  cases.push_back({"RMS norm, 3-D", [](Graph& g, const std::vector<int64_t>& s) {
                     const NodeId x = add_input(g, DType::bf16, {s[0], 4, s[1]});
                     const NodeId w = add_cast(g, add_input(g, DType::bf16, {s[1]}), DType::f32);
                     g.set_outputs({rms_norm(g, x, w)});
                   }});
  cases.push_back({"log-softmax", [](Graph& g, const std::vector<int64_t>& s) {
                     g.set_outputs({log_softmax(g, add_input(g, DType::f32, {s[0], s[1]}))});
                   }});
  cases.push_back({"softmax of scores plus a mask along the row",
                   [](Graph& g, const std::vector<int64_t>& s) {
                     const NodeId x = add_input(g, DType::f32, {s[0], s[1]});
                     const NodeId mask = add_input(g, DType::f32, {s[1]});
                     g.set_outputs({softmax(g, add_binary(g, Op::add, x, mask))});
                   }});
  cases.push_back({"logsumexp and softmax, one value and one row per row",
                   [](Graph& g, const std::vector<int64_t>& s) {
                     const NodeId x = add_input(g, DType::bf16, {s[0], s[1]});
                     g.set_outputs({logsumexp(g, x), softmax(g, add_cast(g, x, DType::f32))});
                   }});
  for (const Case& c : cases) {
    INFO(c.name);
    // Paths 1 to 4, groups of 4, 8, 16 and 32 threads per row (64 to 8 rows per block of 256);
    // paths 5 to 7, a block of 64, 128 and 256 threads on one row; then blocks of 512 and
    // 1,024 (below).
    for (int path = 1; path <= 7; ++path) {
      INFO("path " << path);
      const templates::Kernel k = require_dynamic(c.build, kA2, kC2, {}, path);
      const std::string text = kernel_text(k);
      INFO(text);
      const int group = 2 << path;
      CHECK(test::schedule_count(k, "register_path") == path);
      CHECK(test::schedule_flag(k, "looped"));
      CHECK(test::schedule_count(k, "threads_per_row") == group);
      CHECK(k.block == (group <= 32 ? 256 : group));
      CHECK(test::schedule_flag(k, "register_cache"));
      CHECK(has(text, "min("));  // a vector past the end loads the last one
      CHECK(has(text, group <= 32 ? fmt::format("fj_warp_reduce<1, {}>", group)
                                  : fmt::format("fj_block_reduce<{}>", group)));
      // s1 is odd: scalars, 16 per thread.
      CHECK(test::schedule_count(k, "vectors_per_thread") == 16);
      CHECK(test::schedule_count(k, "vector_width") == 1);
      CHECK(k.max_row_length == 16 * group);
      CHECK(k.row_length.exponents == std::vector<int>{0, 1});  // s1
      CHECK(k.row_length.coefficient == 1);
    }
    // Wider blocks, each holding as many scalars per thread as its registers allow (512
    // threads at most 12 of the 16), and only where that holds longer rows than the path
    // before: the 1,024-thread block is the last. Their values and the margin fit 32
    // registers a thread, so they ask for the SM's 2,048 threads: four blocks of 512, two of
    // 1,024. None spills.
    int64_t longest = 16 * 256;
    int path = 8;
    for (;; ++path) {
      INFO("path " << path);
      const Outcome o = dynamic_at(c.build, kA2, {}, path);
      if (!o.kernel) {
        CHECK(o.why ==
              fmt::format("the row kernel has {} register path(s), not {}", path - 1, path));
        break;
      }
      const templates::Kernel& k = *o.kernel;
      const std::string text = kernel_text(k);
      INFO(text);
      CHECK((k.block == 512 || k.block == 1024));
      CHECK(test::schedule_count(k, "register_path") == path);
      CHECK(test::schedule_count(k, "threads_per_row") == k.block);
      CHECK(has(text, fmt::format("fj_block_reduce<{}>", k.block)));
      CHECK(has(text, fmt::format("__launch_bounds__({}, FJ_MIN_BLOCKS)", k.block)));
      CHECK(has(k.source, fmt::format("#define FJ_MIN_BLOCKS {}", 2048 / k.block)));
      CHECK(k.max_row_length > longest);
      CHECK(k.max_row_length % k.block == 0);
      CHECK(test::schedule_count(k, "vectors_per_thread") == k.max_row_length / k.block);
      CHECK(test::schedule_count(k, "vector_width") == 1);
      CHECK_FALSE(spills(k));
      longest = k.max_row_length;
    }
    CHECK(path >= 9);  // one wider path at least
    CHECK(longest == 1024 * (c.name == "layer norm with weight and bias f32" ? 8 : 16));
  }
  // The same regions at lengths that are multiples of 8 (16-byte vectors where the dtype has
  // them): the 512- and 1,024-thread paths, which ask for three and one block per SM, do not
  // spill either.
  for (const Case& c : cases) {
    INFO(c.name << ", aligned");
    int wide = 0;
    for (int path = 1;; ++path) {
      const Outcome o = dynamic_at(c.build, {257, 8 * 1031}, {}, path, {1, 8});
      if (!o.kernel) break;
      if (o.kernel->block < 512) continue;
      INFO("path " << path << "\n" << kernel_text(*o.kernel));
      CHECK_FALSE(spills(*o.kernel));
      ++wide;
    }
    // (The f32 layer norm's weight and bias, 32 registers each at 8 vectors of 4, leave no
    // wider block room for rows longer than the 256-thread path's 8,192; the others get one
    // or both.)
    if (c.name == "layer norm with weight and bias f32") {
      CHECK(wide == 0);
    } else {
      CHECK(wide >= 1);
    }
  }
  // The softmax: 12 scalars per thread on 512 threads, 16 on 1,024.
  for (int path = 8; path <= 9; ++path) {
    const auto k = dynamic_at(cases.front().build, kA2, {}, path).kernel;
    REQUIRE(k.has_value());
    CHECK(k->max_row_length == (path == 8 ? 12 * 512 : 16 * 1024));
  }
  // Lengths that are multiples of 8 (an aligned variant, jit/runtime/dynamic.cpp): 16-byte vectors,
  // so first one vector per thread on 16 and 32 threads; then the five groups of 16 to 256
  // threads with a static row's share, 4 vectors of 4 f32 (64 bytes) each, as row_config lays
  // out rows of up to 4,096 (2,048 takes 128 threads of 16 values, not 64 of 32; groups of 4
  // and 8 would hold no longer rows than the 32 threads of one vector); then the 256-thread
  // block with the whole cache, 8 vectors of 4, and the wider blocks. The same paths as a GPU
  // test runs (test/jit/dynamic_gpu_test.cpp).
  const GraphAtSizes rows = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({softmax(g, add_input(g, DType::f32, {s[0], s[1]}))});
  };
  const std::vector<int64_t> bounds = {64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 32768};
  const std::vector<int64_t> groups = {16, 32, 16, 32, 64, 128, 256, 256, 512, 1024};
  for (int path = 1; path <= 11; ++path) {
    INFO("aligned path " << path);
    const Outcome o = dynamic_at(rows, {257, 8 * 1031}, {}, path, {1, 8});
    if (path == 11) {
      CHECK_FALSE(o.kernel.has_value());
      continue;
    }
    REQUIRE(o.kernel.has_value());
    CHECK(o.kernel->max_row_length == bounds[static_cast<size_t>(path) - 1]);
    CHECK(test::schedule_count(*o.kernel, "threads_per_row") ==
          groups[static_cast<size_t>(path) - 1]);
    CHECK(has(kernel_text(*o.kernel), "fj_load_vec("));
    CHECK(has(kernel_text(*o.kernel), " - 4))"));  // the last vector of 4 f32
    compile_and_check(*o.kernel, only_region(plan_at(rows, {257, 8 * 1031})));
    if (path >= 9) CHECK_FALSE(spills(*o.kernel));  // 24 f32 on 512 threads, 32 on 1,024
  }
  // Few static rows: the block per row already, so one register path.
  const GraphAtSizes few = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({layer_norm(g, add_input(g, DType::f32, {2048, s[0]}),
                              add_input(g, DType::f32, {s[0]}), add_input(g, DType::f32, {s[0]}))});
  };
  const templates::Kernel one = require_dynamic(few, kA1, kC1, {}, 1);
  CHECK(test::schedule_count(one, "threads_per_row") == 512);
  CHECK(one.max_row_length == 512 * 16);  // 16 scalars per thread (s0 is odd)
  CHECK_FALSE(dynamic_at(few, kA1, {}, 2).kernel.has_value());
  // A single pass reads the row once: no register path; nor has a kernel without a row length
  // given at launch.
  const GraphAtSizes sums = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({add_reduce(g, Op::sum, add_input(g, DType::f32, {s[0], s[1]}), {1}, false)});
  };
  const Outcome single = dynamic_at(sums, kA2, {}, 1);
  CHECK_FALSE(single.kernel.has_value());
  CHECK(single.why == "a single-pass row kernel reads the row once: no register path");
  const GraphAtSizes fixed = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({test::softmax(g, add_input(g, DType::f32, {s[0], 1000}))});
  };
  const Outcome static_length = dynamic_at(fixed, kA1, {}, 1);
  CHECK_FALSE(static_length.kernel.has_value());
  CHECK(static_length.why.find("has no register path") != std::string::npos);
}

// The scores softmax of test/traces/dynamic: B x 4 x S x S bf16, rows of S.
const GraphAtSizes kScores = [](Graph& g, const std::vector<int64_t>& s) {
  const NodeId x = add_cast(g, add_input(g, DType::bf16, {s[0], 4, s[1], s[1]}), DType::f32);
  g.set_outputs({add_cast(g, test::softmax(g, x), DType::bf16)});
};

TEST_CASE("register paths compute what their passes share once, at the residency they ask for",
          "[templates][dynamic]") {
  // The scores softmax of test/traces/dynamic (B x 4 x S x S, bf16): rows whose length is a
  // multiple of 8, and a multiple of 32 rows. A path's passes compute every vector and
  // predicate their updates and stores, so that the exponentials of the sum's pass are the
  // output pass's too: one ex2 per value a thread holds, as in a static kernel, in each copy
  // of the row loop (one per count of vectors per thread the launch may pick). And each path
  // asks for the blocks per SM that about 16 registers beyond its values allow (five of 256
  // threads at 32 values, three of 512 at 24), which ptxas meets without spilling, so that
  // none falls back to the usual residency.
  const std::regex layout(R"((\d+) thread\(s\) per row, (\d+) vector\(s\) of (\d+) per thread)");
  const std::regex counts(R"(the fewest of (\d+) to (\d+) that hold the row)");
  int paths = 0;
  int chosen = 0;  // paths whose vectors per thread are chosen at launch
  int whole_first = 0;  // those whose first copy has whole vectors
  for (int path = 1;; ++path) {
    const Outcome o = dynamic_at(kScores, {5, 8 * 131}, {}, path, {1, 8});
    if (!o.kernel) break;
    ++paths;
    const templates::Kernel& k = *o.kernel;
    const std::string text = kernel_text(k);
    INFO("path " << path << "\n" << text);
    std::smatch m;
    REQUIRE(std::regex_search(text, m, layout));
    const int64_t chunks = std::stoll(m[2]), v = std::stoll(m[3]);
    // The copies' values: v per vector, for each count from the fewest to the path's own.
    int64_t values = chunks * v;
    if (std::smatch c; std::regex_search(text, c, counts)) {
      ++chosen;
      const int64_t fewest = std::stoll(c[1]);
      REQUIRE(std::stoll(c[2]) == chunks);
      CHECK(fewest >= (chunks + 1) / 2);
      CHECK(fewest < chunks);
      values = (fewest + chunks) * (chunks - fewest + 1) / 2 * v;
      // A copy after the first takes rows longer than the one before it holds: its vectors but
      // the last are whole, unpredicated and unclamped.
      CHECK(has(text, fmt::format("c < {} ||", chunks - 1)));
      // The first copy's rows are at least the path's shortest, so the vectors those fill are
      // whole there too (at S=520, 2 of the 3 vectors of 8 on 32 threads).
      const int64_t step = std::stoll(m[1]) * v;
      const int64_t whole = std::min(fewest - 1, k.min_row_length / step);
      if (whole > 0) {
        ++whole_first;
        CHECK(has(text, fmt::format("c < {} ||", whole)));
      }
    }
    const jit::CompiledKernel c =
        jit::compile(k, "sm_90", {.ptx = true, .extra = {"--ptxas-options=-v"}});
    INFO("ptxas says\n" << c.log);
    CHECK_FALSE(jit::spills(c));
    CHECK_FALSE(c.relaxed);
    CHECK(test::count(c.ptx, "ex2.approx") == static_cast<size_t>(values));
    if (k.block == 256 && chunks * v == 32) CHECK(has(k.source, "#define FJ_MIN_BLOCKS 5"));
    if (k.block == 512) CHECK(has(k.source, "#define FJ_MIN_BLOCKS 3"));
  }
  CHECK(paths == 9);
  // All but the narrow paths of one vector per thread and the blocks of 512 (3 vectors, past
  // paths of 4 on 256 threads: 3 is its fewest).
  CHECK(chosen == 6);
  CHECK(whole_first >= 1);
}

TEST_CASE("a register path of few values asks for the residency of 32 registers, then 40",
          "[templates][dynamic]") {
  // The scores softmax's scalar path of 256 threads holding 9 to 16 values each (rows of
  // 2,049 to 4,096 elements): its launch bounds ask for eight blocks per SM (32 registers a
  // thread), as the static kernel of 9 values gets, and only should ptxas spill for six (40),
  // then the usual four. ptxas fits it in 32 without spilling.
  const std::regex used(R"(Used (\d+) registers)");
  int found = 0;
  for (int path = 1;; ++path) {
    const Outcome o = dynamic_at(kScores, kA2, {}, path);
    if (!o.kernel) break;
    const templates::Kernel& k = *o.kernel;
    if (k.max_row_length != 4096) continue;
    ++found;
    INFO(kernel_text(k));
    CHECK(k.block == 256);
    CHECK(has(k.source, "#define FJ_MIN_BLOCKS 8"));
    CHECK(k.relaxed_min_blocks == std::vector<int>{6, 4});
    const jit::CompiledKernel c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
    INFO("ptxas says\n" << c.log);
    CHECK_FALSE(jit::spills(c));
    CHECK_FALSE(c.relaxed);
    std::smatch m;
    REQUIRE(std::regex_search(c.log, m, used));
    CHECK(std::stoi(m[1]) <= 32);
  }
  CHECK(found == 1);
}

TEST_CASE("regions whose kernel depends on the outer extent are refused", "[templates][dynamic]") {
  SECTION("a reduction over the dynamic axis") {
    refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          g.set_outputs({add_reduce(g, Op::sum, add_input(g, DType::f32, {s[0], 256}), {0}, false)});
        },
        kA1);
  }
  SECTION("a dynamic row length over too few rows to fill the device") {
    const std::string why = refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          g.set_outputs({add_reduce(g, Op::sum, add_input(g, DType::f32, {64, s[0]}), {1}, false)});
        },
        kA1);
    CHECK(has(why, "too few"));
  }
  SECTION("a reduction over every axis") {
    refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          g.set_outputs({add_reduce(g, Op::max, add_input(g, DType::f32, {s[0], 256}), {0, 1},
                                    false)});
        },
        kA1);
  }
  SECTION("a transpose of the contiguous axis (tiled through shared memory)") {
    refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_permute(g, add_input(g, DType::f32, {s[0], 96}), {1, 0});
          g.set_outputs({add_unary(g, Op::exp, x)});
        },
        kA1);
  }
  SECTION("a slice along the dynamic axis") {
    const std::string why = refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], 64});
          g.set_outputs({add_unary(g, Op::neg, add_slice(g, x, 0, 1, s[0]))});
        },
        kA1);
    CHECK(has(why, "not a multiple of the outer extent"));
  }
  SECTION("a concat along the dynamic axis") {
    // Its operands' boundary along the axis (s0) would be a constant of the kernel.
    const std::string why = refusal(
        [](Graph& g, const std::vector<int64_t>& s) {
          const NodeId x = add_input(g, DType::f32, {s[0], 64});
          const NodeId y = add_input(g, DType::f32, {s[0], 64});
          g.set_outputs({add_unary(g, Op::neg, add_concat(g, {x, y}, 0))});
        },
        kA1);
    CHECK(has(why, "beyond its loop bounds"));
    CHECK(has(why, fmt::format("the constant {} in `i / 64 < {} ?", kA1[0], kA1[0])));
  }
}

TEST_CASE("a dynamic kernel's grid follows its outer extent", "[templates][dynamic]") {
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({add_unary(g, Op::exp, add_input(g, DType::f32, {s[0], 4096}))});
  };
  const Outcome o = dynamic_at(build, kA1);
  REQUIRE(o.kernel.has_value());
  const templates::Kernel& k = *o.kernel;
  REQUIRE(k.items_per_outer == 1024);  // 4096 f32 in vectors of 4
  REQUIRE(k.items_per_block == 256);
  CHECK(templates::launch_grid(k, 132, 1) == 4);
  CHECK(templates::launch_grid(k, 132, 7) == 28);
  CHECK(templates::launch_grid(k, 132, kA1[0]) == 4 * kA1[0]);  // no wave cap: one block each
  CHECK_THROWS_AS(templates::launch_grid(k, 132, kA1[0] + 1), InternalError);
  CHECK_THROWS_AS(templates::launch_grid(k, 132, 0), InternalError);
  templates::Kernel fixed = k;
  fixed.dynamic = false;
  CHECK_THROWS_AS(templates::launch_grid(fixed, 132, 5), InternalError);
}

TEST_CASE("generate_dynamic checks its sizes", "[templates][dynamic]") {
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({add_unary(g, Op::exp, add_input(g, DType::f32, {s[0], 64}))});
  };
  const fusion::Plan p = plan_at(build, {101});
  const fusion::Region& r = only_region(p);
  const auto sizes = [](int64_t outer, std::vector<int64_t> symbols) {
    return templates::DynamicSizes{.outer = outer, .symbols = std::move(symbols)};
  };
  CHECK_THROWS_AS(templates::generate_dynamic(p.graph, r, sizes(102, {101})), InternalError);
  // The outer extent is made of the symbols, and without their values nothing tells which
  // counts change with them.
  CHECK_THROWS_AS(templates::generate_dynamic(p.graph, r, sizes(101, {})), InternalError);
  CHECK_THROWS_AS(templates::generate_dynamic(p.graph, r, sizes(101, {97})), InternalError);
  templates::DynamicSizes misaligned = sizes(101, {101});
  misaligned.alignment = {8, 8};
  CHECK_THROWS_AS(templates::generate_dynamic(p.graph, r, misaligned), InternalError);
  CHECK(templates::generate_dynamic(p.graph, r, sizes(101, {101})).has_value());
}

TEST_CASE("index width is decided at the sizes the kernel is built at", "[templates][dynamic]") {
  // 4099 rows of 2^18 f32 pass 2^30 elements (64-bit indices); 3001 rows do not: the kernel
  // built there has 32-bit index arithmetic, and serves up to 3001 rows.
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({add_unary(g, Op::exp, add_input(g, DType::f32, {s[0], 262144}))});
  };
  const templates::Kernel k = require_dynamic(build, kA1, kA1);
  CHECK(has(kernel_text(k), "for (long long t = "));
  CHECK(has(kernel_text(k), "t < 65536 * fj_outer"));
  const Outcome narrow = dynamic_at(build, kB1);
  REQUIRE(narrow.kernel.has_value());
  CHECK(has(kernel_text(*narrow.kernel), "t < 65536 * (int)fj_outer"));
  CHECK(narrow.kernel->max_outer == kB1[0]);
}

TEST_CASE("a dynamic kernel is built once, its sizes parameters of the IR",
          "[templates][dynamic]") {
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    const NodeId x = add_input(g, DType::f32, {s[0], s[1], 64});
    const NodeId y = add_input(g, DType::f32, {s[1], 64});
    g.set_outputs({add_binary(g, Op::add, x, y)});
  };
  templates::CodegenOptions options;
  options.keep_kir = true;
  const Outcome o = dynamic_at(build, kA2, options);
  INFO("refused: " << o.why);
  REQUIRE(o.kernel.has_value());
  const std::string& steps = o.kernel->kir;
  INFO(steps);
  // One build, its declarations placed, its indices lowered: each step once.
  const auto count = [&](std::string_view step) {
    size_t n = 0;
    for (size_t at = steps.find(step); at != std::string::npos; at = steps.find(step, at + 1)) ++n;
    return n;
  };
  CHECK(count("// ==== built ====") == 1);
  CHECK(count("// ==== declarations placed ====") == 1);
  CHECK(count("// ==== indices lowered (runtime extents as arguments) ====") == 1);
  // The broadcast's `% (64*S1)` is a runtime extent, decoded to its dims.
  REQUIRE(o.kernel->runtime_extents.size() == 1);
  CHECK(o.kernel->runtime_extents[0].coefficient == 64);
  CHECK(o.kernel->runtime_extents[0].exponents == std::vector<int>{0, 1});
  CHECK(o.kernel->max_outer == outer_extent(kA2));
}

TEST_CASE("a dynamic region's sizes are handed out only where they hold at every size",
          "[templates][dynamic]") {
  const GraphAtSizes build = [](Graph& g, const std::vector<int64_t>& s) {
    g.set_outputs({add_unary(g, Op::exp, add_input(g, DType::f32, {s[0], s[1], 64}))});
  };
  const fusion::Plan p = plan_at(build, kA2);
  const templates::DynamicSizes sizes{.outer = kA2[0], .symbols = kA2};
  templates::RegionInfo info(p.graph, only_region(p), {});
  CHECK_FALSE(info.dynamic());
  CHECK(info.fixed_extent(kA2[1] * 64, "a count") == kA2[1] * 64);  // static kernel: any count
  info.make_dynamic(sizes);
  CHECK(info.dynamic());
  CHECK(info.symbolic(kA2[1] * 64));
  CHECK_FALSE(info.symbolic(64));
  CHECK(info.type_str(p.graph.outputs().front()) == "f32[?,?,64]");
  CHECK(info.per_outer(kA2[0] * 64, "a sweep's elements") == 64);
  CHECK(info.fixed_extent(64, "a row length") == 64);
  const auto refusal_of = [](const auto& ask) -> std::string {
    try {
      ask();
    } catch (const templates::NotSizeIndependent& e) {
      return e.what();
    }
    return "";
  };
  // A builder that needs a size which changes with the symbols is refused, naming what asked.
  CHECK(refusal_of([&] { (void)info.per_outer(kA2[0] * kA2[1] * 64, "the sweep's elements"); }) ==
        fmt::format("the sweep's elements per unit of the outer extent ({} of {}) change with the "
                    "sizes",
                    kA2[1] * 64, kA2[0] * kA2[1] * 64));
  CHECK(has(refusal_of([&] { (void)info.per_outer(64 * 3, "the rows"); }),
            "is not a multiple of the outer extent"));
  CHECK(refusal_of([&] { (void)info.fixed_extent(kA2[1] * 64, "the unrolled count"); }) ==
        fmt::format("the unrolled count ({}) change(s) with the sizes, and the kernel would be "
                    "built on its value",
                    kA2[1] * 64));
  CHECK(info.fixed_per_outer(kA2[0] * 64));
  CHECK_FALSE(info.fixed_per_outer(kA2[0] * kA2[1]));
}

TEST_CASE("a size held as a constant of a dynamic kernel's IR is named", "[templates][dynamic]") {
  namespace kir = templates::kir;
  const auto function = [](kir::ExprP bound) {
    kir::Function f;
    f.name = "k";
    kir::Block& body = f.body.loop("int", "i", kir::lit(0), std::move(bound));
    body.eval(kir::sync_block());
    return f;
  };
  templates::RuntimeExtents runtime{.symbols = {4099}};
  const auto is_size = [](int64_t n) { return n % 4099 == 0; };
  // A count taken as an extent becomes the runtime extent fj_e0.
  kir::Function as_extent = function(kir::extent(4099 * 3));
  kir::lower_indices(as_extent, &runtime);
  CHECK_FALSE(kir::symbolic_constant(as_extent, is_size).has_value());
  CHECK(runtime.extents == std::vector<int64_t>{4099 * 3});
  // The same count as a literal is a size the kernel would be built on.
  kir::Function as_literal = function(kir::lit(4099 * 3));
  kir::lower_indices(as_literal, &runtime);
  const std::optional<std::string> where = kir::symbolic_constant(as_literal, is_size);
  REQUIRE(where.has_value());
  CHECK(*where == "the constant 12297 in `12297`");
  CHECK_FALSE(kir::symbolic_constant(function(kir::lit(4096)), is_size).has_value());
}
