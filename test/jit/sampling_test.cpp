// argmax and Gumbel-max sampling through the public API, on whatever the machine has (the GPU,
// or the CPU reference on CI): argmax against hand-computed positions (ties, NaN, axes, dtypes),
// one kernel for a vocabulary row, and sampled frequencies against softmax(logits / t).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "fusion/pipeline.h"
#include "ir/text.h"
#include "support/catch.h"
#include "support/quiet.h"
#include "templates/support.h"

namespace fj = fusejit;
using fj::DType;

TEST_CASE("argmax picks the first largest value, NaN counting as the largest", "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const fj::Tensor x = ctx.from_vector(std::vector<double>{1, 3, 3, 2,      //
                                                           -5, -1, -7, -1,  //
                                                           0, nan, 9, nan},
                                       {3, 4});
  CHECK(fj::argmax(x).dtype() == DType::i64);
  CHECK(fj::argmax(x).to_host() == std::vector<double>{1, 1, 1});
  CHECK(fj::argmax(x, 0).to_host() == std::vector<double>{0, 2, 2, 2});
  const fj::Tensor kept = fj::argmax(x, -1, true);
  CHECK(kept.shape() == fj::Shape{3, 1});
  for (DType dtype : {DType::bf16, DType::i32}) {
    const fj::Tensor y = ctx.from_vector(std::vector<double>{4, -2, 8, 8, 1, 0}, {2, 3}, dtype);
    CHECK(fj::argmax(y).to_host() == std::vector<double>{2, 0});
    CHECK(fj::argmax(y, 0).to_host() == std::vector<double>{1, 1, 0});
  }
  CHECK_THROWS_AS(fj::argmax(ctx.scalar(1.0)), fj::UsageError);
  CHECK_THROWS_AS(fj::argmax(x, 2), fj::UsageError);
}

TEST_CASE("argmax over a vocabulary row is one kernel", "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  const fj::Tensor logits = ctx.placeholder({4, 32000}, DType::bf16);
  const ir::Graph g = ir::parse(ctx.trace_text({fj::argmax(logits)}), "argmax");
  const fusion::Plan plan = fusion::make_plan(g);
  CHECK(plan.kernel_count() == 1);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].kind == fusion::RegionKind::normalization);
  fusejit::test::generate_and_compile(plan.graph, plan.regions[0]);  // NVRTC, sm_90
  // Sampling adds the draw and the Gumbel noise to the same row kernel.
  const ir::Graph s = ir::parse(ctx.trace_text({fj::sample(logits, 0.8, 1, 2)}), "sample");
  const fusion::Plan sampled = fusion::make_plan(s);
  CHECK(sampled.kernel_count() == 1);
  for (const fusion::Region& r : sampled.regions) {
    fusejit::test::generate_and_compile(sampled.graph, r);
  }
  // Top-k then top-p over a Llama-3 vocabulary: every kernel compiles; the count is printed.
  const fj::Tensor wide = ctx.placeholder({1, 128256}, DType::bf16);
  const fj::Tensor filtered = fj::top_p_filter(fj::top_k_filter(wide, 200), 0.9);
  const ir::Graph f = ir::parse(ctx.trace_text({fj::sample(filtered, 0.8, 1, 2)}), "filters");
  const fusion::Plan filters = fusion::make_plan(f);
  WARN("top-k, top-p and a draw over 128256 logits: " << filters.kernel_count() << " kernels");
  CHECK(filters.kernel_count() <= 23);  // 35 before the search's kernels were cut (below)
  for (const fusion::Region& r : filters.regions) {
    fusejit::test::generate_and_compile(filters.graph, r);
  }
}

// The threshold search of top_k_filter (jit/api/ops.cpp, search_threshold), as planned: the row's
// bounds one kernel (max and min are siblings), each of the 4 rounds two kernels (the count of
// the row at or above 256 candidates, a column reduction, then the candidates that reached k,
// counted, with the next bounds as its epilogue), and no kernel of one element or of the
// candidates' positions. Before, a round was three kernels and the row's bounds three, and the
// counts summed along the row, reading it once per candidate.
TEST_CASE("top-k's threshold search is two kernels a round, its counts column reductions",
          "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  for (int64_t batch : {1, 8}) {
    INFO("batch " << batch);
    const fj::Tensor logits = ctx.placeholder({batch, 128256}, DType::bf16);
    const ir::Graph g = ir::parse(ctx.trace_text({fj::top_k_filter(logits, 200)}), "top_k_filter");
    const fusion::Plan plan = fusion::make_plan(g);
    INFO(fusion::plan_to_text(plan));
    // The bounds, 4 x 2 rounds, the filter; the cast of the bf16 logits to f32 is evaluated in
    // each of them (fusion/recompute.h), not written by a kernel of its own.
    CHECK(plan.kernel_count() == 10);
    int counts = 0;
    for (const fusion::Region& r : plan.regions) {
      CHECK(ir::numel(r.shape) >= 256);
      if (r.shape == fj::Shape{batch, 128256, 256}) {
        ++counts;
        CHECK(r.kind == fusion::RegionKind::reduction);
        CHECK(r.reduce_axes == std::vector<int64_t>{1});
      }
      for (ir::NodeId o : r.outputs) CHECK(plan.graph.node(o).op != ir::Op::arange);
    }
    CHECK(counts == 4);
  }
  // Other vocabularies and batches (GPT-2's, Llama-2's, Qwen's; odd, one, many rows), f16 and
  // f32 logits, top-p's weighted counts: every kernel compiles for sm_90.
  struct Logits {
    int64_t batch, vocab;
    DType dtype;
  };
  for (const Logits& s : {Logits{3, 50257, DType::bf16}, Logits{64, 32000, DType::f16},
                          Logits{1, 151936, DType::f32}, Logits{5, 1000, DType::bf16}}) {
    INFO(s.batch << " x " << s.vocab << " " << fj::dtype_name(s.dtype));
    const fj::Tensor logits = ctx.placeholder({s.batch, s.vocab}, s.dtype);
    const fj::Tensor kept = fj::top_p_filter(fj::top_k_filter(logits, 50), 0.9);
    const ir::Graph g = ir::parse(ctx.trace_text({kept}), "filters");
    const fusion::Plan plan = fusion::make_plan(g);
    for (const fusion::Region& r : plan.regions) fusejit::test::generate_and_compile(plan.graph, r);
  }
}

// bench/sampling holds the trace of top-k 200 and a draw as the API records it (the "columns"
// files, timed by `fusejit run` against the "rows" ones, the search as it was before): they must
// stay what the API records, or the timing says nothing about it.
TEST_CASE("bench/sampling's top-k traces are what the API records", "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  for (int64_t batch : {1, 8}) {
    const fj::Tensor logits = ctx.placeholder({batch, 128256}, DType::bf16);
    const std::string recorded =
        ctx.trace_text({fj::sample(fj::top_k_filter(logits, 200), 0.8, 1, 2)});
    const std::string path = std::string(FUSEJIT_SOURCE_DIR) +
                             "/bench/sampling/topk200_sample_columns_b" + std::to_string(batch) +
                             "_bf16.trace";
    INFO(path << " (write the recorded text there when the API's search changes)");
    std::ifstream file(path);
    REQUIRE(file);
    const std::string saved((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    CHECK(saved == recorded);
  }
}

TEST_CASE("sampled tokens follow softmax(logits / temperature)", "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.0625, 0.0625};
  const int64_t rows = 20000, vocab = static_cast<int64_t>(p.size());
  std::vector<double> logits;
  for (int64_t r = 0; r < rows; ++r) {
    for (double q : p) logits.push_back(std::log(q) + 3.0);  // a shift changes nothing
  }
  const fj::Tensor x = ctx.from_vector(logits, {rows, vocab}, DType::bf16);
  for (double t : {1.0, 2.0}) {
    INFO("temperature " << t);
    const std::vector<double> drawn = fj::sample(x, t, 1234, static_cast<uint64_t>(t)).to_host();
    std::vector<double> count(p.size(), 0.0);
    for (double d : drawn) count.at(static_cast<size_t>(d)) += 1;
    double norm = 0;
    for (double q : p) norm += std::pow(q, 1.0 / t);
    for (size_t k = 0; k < p.size(); ++k) {
      const double want = std::pow(p[k], 1.0 / t) / norm;
      const double sigma = std::sqrt(want * (1 - want) / static_cast<double>(rows));
      INFO("token " << k << ": " << count[k] / rows << " drawn, " << want << " wanted");
      CHECK(std::abs(count[k] / static_cast<double>(rows) - want) < 5 * sigma);
    }
  }
  // Same seed and offset, same draws; temperature 0 is argmax.
  CHECK(fj::sample(x, 1.0, 7, 1).to_host() == fj::sample(x, 1.0, 7, 1).to_host());
  CHECK(fj::sample(x, 1.0, 7, 1).to_host() != fj::sample(x, 1.0, 7, 2).to_host());
  CHECK(fj::sample(x, 0.0, 7).to_host() == std::vector<double>(static_cast<size_t>(rows), 0.0));
  CHECK_THROWS_AS(fj::sample(x, -1.0, 7), fj::UsageError);
  CHECK_THROWS_AS(fj::sample(ctx.zeros({2, 3}, DType::i32), 1.0, 7), fj::UsageError);
}

namespace {

// The k-th largest of each row of `x` [rows, v], and the smallest threshold whose softmax mass
// reaches p, computed on the host by sorting.
std::vector<double> host_kth(const std::vector<double>& x, int64_t v, int64_t k) {
  std::vector<double> out;
  for (size_t r = 0; r * v < x.size(); ++r) {
    std::vector<double> row(x.begin() + long(r * v), x.begin() + long((r + 1) * v));
    std::sort(row.rbegin(), row.rend());
    out.push_back(row[size_t(k - 1)]);
  }
  return out;
}

std::vector<double> host_nucleus(const std::vector<double>& x, int64_t v, double p) {
  std::vector<double> out;
  for (size_t r = 0; r * v < x.size(); ++r) {
    std::vector<double> row(x.begin() + long(r * v), x.begin() + long((r + 1) * v));
    std::sort(row.rbegin(), row.rend());
    double total = 0;
    for (double e : row) total += std::exp(e - row[0]);
    double mass = 0;
    size_t i = 0;
    for (; i < row.size(); ++i) {
      mass += std::exp(row[i] - row[0]) / total;
      if (mass >= p) break;
    }
    out.push_back(row[std::min(i, row.size() - 1)]);
  }
  return out;
}

}  // namespace

TEST_CASE("top-k and top-p filters keep what sorting says they should", "[jit][sampling]") {
  fj::Context ctx(fusejit::testing::quiet());
  const int64_t rows = 6, vocab = 3001;
  std::vector<double> x;
  uint64_t state = 12345;
  for (int64_t i = 0; i < rows * vocab; ++i) {  // distinct values, a few rows with big spreads
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x.push_back(
        double(float(double(state >> 40) / double(1 << 24) * (i / vocab % 2 == 0 ? 8.0 : 30.0) -
                     4.0)));  // f32 values
  }
  const fj::Tensor logits = ctx.from_vector(x, {rows, vocab});
  for (int64_t k : {1, 2, 50, 200, 3000}) {
    INFO("k = " << k);
    const std::vector<double> kept = fj::top_k_filter(logits, k).to_host();
    const std::vector<double> kth = host_kth(x, vocab, k);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t count = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        const size_t e = size_t(r * vocab + i);
        const bool keep = x[e] >= kth[size_t(r)];
        CHECK((kept[e] == (keep ? x[e] : -INFINITY)));
        count += std::isinf(kept[e]) ? 0 : 1;
      }
      CHECK(count == k);
    }
  }
  for (double p : {0.05, 0.5, 0.9, 0.999}) {
    INFO("p = " << p);
    const std::vector<double> kept = fj::top_p_filter(logits, p).to_host();
    const std::vector<double> pivot = host_nucleus(x, vocab, p);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < vocab; ++i) {
        const size_t e = size_t(r * vocab + i);
        CHECK((kept[e] == (x[e] >= pivot[size_t(r)] ? x[e] : -INFINITY)));
      }
    }
  }
  // Chained: top-p over what top-k left (the -inf of the first are never kept), then sampled.
  const std::vector<double> both = fj::top_p_filter(fj::top_k_filter(logits, 20), 0.9).to_host();
  const std::vector<double> kth20 = host_kth(x, vocab, 20);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const size_t e = size_t(r * vocab + i);
      if (x[e] < kth20[size_t(r)]) CHECK(std::isinf(both[e]));
    }
  }
  const std::vector<double> drawn = fj::sample(fj::top_k_filter(logits, 3), 1.0, 99, 0).to_host();
  const std::vector<double> kth3 = host_kth(x, vocab, 3);
  for (int64_t r = 0; r < rows; ++r)
    CHECK(x[size_t(r * vocab) + size_t(drawn[size_t(r)])] >= kth3[size_t(r)]);
  CHECK_THROWS_AS(fj::top_k_filter(logits, 0), fj::UsageError);
  CHECK_THROWS_AS(fj::top_p_filter(logits, 0.0), fj::UsageError);
  CHECK_THROWS_AS(fj::top_p_filter(ctx.zeros({2, 3}, DType::i32), 0.5), fj::UsageError);
}
