// argmax and Gumbel-max sampling through the public API, on whatever the machine has (the GPU,
// or the CPU reference on CI): argmax against hand-computed positions (ties, NaN, axes, dtypes),
// one kernel for a vocabulary row, and sampled frequencies against softmax(logits / t).
#include <cmath>
#include <limits>
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
