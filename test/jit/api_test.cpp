// The lazy tensor API: recording, evaluation, composites against hand-computed values, and the
// errors thrown at record time.
#include <cmath>

#include "fusejit/fusejit.h"
#include "jit/api/context_impl.h"
#include "ir/random.h"
#include "ir/text.h"
#include "support/catch.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;
using fj::Shape;
using fusejit::testing::quiet;

namespace {
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}
}  // namespace

TEST_CASE("ops record and evaluate lazily", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, -2, 3, -4, 5, -6}, {2, 3});
  const auto b = ctx.from_vector(std::vector<double>{10, 20, 30}, {3});
  auto y = fj::relu(x * 2.0 + b);
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.dtype() == DType::f32);
  CHECK(ctx.stats().traces_evaluated == 0);  // nothing ran yet
  check_close(y.to_host(), {12, 16, 36, 2, 30, 18}, 0);
  CHECK(ctx.stats().traces_evaluated == 1);
  y.to_host();  // already materialized
  CHECK(ctx.stats().traces_evaluated == 1);
}

TEST_CASE("a recorded tensor's shape outlives later ops and the eval", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto y = fj::exp(x);
  auto z = fj::sum(y, {1});  // recorded before y's shape is first asked for
  const Shape& held = y.shape();
  for (int i = 0; i < 100; ++i) z = z + 1.0;  // the trace grows (and moves) under the reference
  CHECK(held == Shape{2, 3});
  CHECK(z.shape() == Shape{2});
  auto never_asked = fj::tanh(y);
  z.eval();  // the trace restarts; the held tensors keep their shapes
  CHECK(&y.shape() == &held);
  CHECK(held == Shape{2, 3});
  CHECK(never_asked.shape() == Shape{2, 3});
  CHECK(ctx.impl().trace.size() == 0);
}

TEST_CASE("a held intermediate is computed when asked for, or with the result", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const auto y = ctx.from_vector(std::vector<double>{4, 3, 2, 1}, {2, 2});
  const auto s = x + y;
  const auto out = fj::layer_norm(s);
  out.to_host();
  CHECK(ctx.stats().traces_evaluated == 1);
  CHECK(ctx.stats().outputs_computed == 1);  // only what was asked for
  check_close(s.to_host(), {5, 5, 5, 5}, 0);
  CHECK(ctx.stats().traces_evaluated == 2);  // s, still pending, computed from x and y
  const auto s2 = x * y;
  const auto out2 = fj::layer_norm(s2);
  fj::eval({out2, s2});  // both in one pass
  CHECK(ctx.stats().traces_evaluated == 3);
  CHECK(ctx.stats().outputs_computed == 4);
  check_close(s2.to_host(), {4, 6, 6, 4}, 0);
  CHECK(ctx.stats().traces_evaluated == 3);
  // Work recorded on a materialized tensor starts a new trace that reads it.
  const auto z = s * 2.0;
  check_close(z.to_host(), {10, 10, 10, 10}, 0);
  CHECK(ctx.stats().traces_evaluated == 4);
}

TEST_CASE("scalars take the tensor's dtype category", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto h = ctx.from_vector(std::vector<double>{1, 2}, {2}, DType::bf16);
  CHECK((h * 0.5).dtype() == DType::bf16);
  const auto i = ctx.from_vector(std::vector<double>{1, 2}, {2}, DType::i32);
  CHECK((i + 3.0).dtype() == DType::i32);
  CHECK((i + 0.5).dtype() == DType::f32);
  CHECK((i / 2.0).dtype() == DType::f32);
  check_close((i / 2.0).to_host(), {0.5, 1.0}, 0);
}

TEST_CASE("composites against hand-computed values", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 0, 0, 0}, {2, 3});

  const double e = std::exp(1.0), s = 1 + e + e * e;
  check_close(fj::softmax(x).to_host(), {1 / s, e / s, e * e / s, 1. / 3, 1. / 3, 1. / 3}, 1e-6);
  check_close(fj::log_softmax(x).to_host(),
              {-std::log(s), 1 - std::log(s), 2 - std::log(s), -std::log(3.), -std::log(3.),
               -std::log(3.)},
              1e-6);

  // Row 0: mean 2, biased variance 2/3.
  const double inv = 1 / std::sqrt(2.0 / 3 + 1e-5);
  const auto w = ctx.from_vector(std::vector<double>{1, 2, 3}, {3});
  const auto b = ctx.from_vector(std::vector<double>{0, 1, 0}, {3});
  check_close(fj::layer_norm(x, w, b).to_host(), {-inv, 1, 3 * inv, 0, 1, 0}, 1e-5);

  const double rms = 1 / std::sqrt(14.0 / 3 + 1e-6);
  check_close(fj::rms_norm(x, w).to_host(), {rms, 4 * rms, 9 * rms, 0, 0, 0}, 1e-5);

  check_close(fj::var(x, {1}).to_host(), {1.0, 0.0}, 1e-6);
  check_close(fj::var(x, {1}, 0.0).to_host(), {2.0 / 3, 0.0}, 1e-6);

  const auto wt = ctx.from_vector(std::vector<double>{1, 0, 0, 0, 1, 1}, {2, 3});  // [out=2, in=3]
  const auto bias = ctx.from_vector(std::vector<double>{100, 200}, {2});
  check_close(fj::linear(x, wt, bias).to_host(), {101, 205, 100, 200}, 0);

  check_close(fj::addcmul(x, x, x, 0.5).to_host(), {1.5, 4, 7.5, 0, 0, 0}, 0);
  check_close(fj::gelu(x, fj::GeluApprox::none).to_host(),
              {0.8413447460685429, 1.9544997361036416, 2.9959502000696, 0, 0, 0}, 1e-6);
}

TEST_CASE("views", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3});
  check_close(fj::transpose(x, 0, 1).to_host(), {0, 3, 1, 4, 2, 5}, 0);
  CHECK(fj::reshape(x, {3, -1}).shape() == Shape{3, 2});
  CHECK(fj::unsqueeze(x, 1).shape() == Shape{2, 1, 3});
  CHECK(fj::squeeze(fj::unsqueeze(x, -1), -1).shape() == Shape{2, 3});
  CHECK(fj::expand(fj::unsqueeze(x, 0), {4, -1, -1}).shape() == Shape{4, 2, 3});
  check_close(fj::sum(x).to_host(), {15}, 0);
  check_close(fj::max(x, {0}).to_host(), {3, 4, 5}, 0);
  check_close(fj::mean(x, {-1}, true).to_host(), {1, 4}, 0);
  check_close(fj::matmul(x, fj::transpose(x, 0, 1)).to_host(), {5, 14, 14, 50}, 0);
}

TEST_CASE("errors are thrown at record time and name the op and shapes", "[jit][api][errors]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>(6, 1.0), {2, 3});
  const auto y = ctx.from_vector(std::vector<double>(8, 1.0), {2, 4});
  REQUIRE_THROWS_WITH(x + y, ContainsSubstring("add: shapes [2,3] and [2,4] do not broadcast"));
  REQUIRE_THROWS_WITH(fj::sum(x, {5}), ContainsSubstring("sum: axis 5 is out of range"));
  REQUIRE_THROWS_WITH(fj::matmul(x, x), ContainsSubstring("matmul: inner dimensions differ"));
  REQUIRE_THROWS_WITH(fj::squeeze(x, 0), ContainsSubstring("squeeze: dimension 0 of f32[2,3] is 2"));
  REQUIRE_THROWS_WITH(fj::reshape(x, {4, -1}), ContainsSubstring("cannot infer the -1"));
  REQUIRE_THROWS_WITH(fj::layer_norm(x, y), ContainsSubstring("layer_norm: weight has shape [2,4]"));
  REQUIRE_THROWS_WITH(fj::linear(x, y),
                      ContainsSubstring("linear: weight f32[2,4] has 4 in_features but the input "
                                        "f32[2,3] has 3"));
  REQUIRE_THROWS_WITH(ctx.from_vector(std::vector<double>(5, 1.0), {2, 3}),
                      ContainsSubstring("from_vector: 5 values given for shape [2,3]"));
  REQUIRE_THROWS_WITH(fj::relu(fj::Tensor()), ContainsSubstring("empty Tensor handle"));
  fj::Context other(quiet());
  const auto z = other.from_vector(std::vector<double>(6, 1.0), {2, 3});
  REQUIRE_THROWS_WITH(x + z, ContainsSubstring("two different Contexts"));
}

TEST_CASE("placeholders build traces without data", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.placeholder({4, 8}, DType::bf16);
  const auto b = ctx.placeholder({8}, DType::bf16);
  const auto y = fj::relu(x + b);
  const std::string text = ctx.trace_text({y});
  CHECK(text == "fusejit-trace 1\n"
                "%0 : bf16[4,8] = input\n"
                "%1 : bf16[8] = input\n"
                "%2 : bf16[4,8] = add %0, %1\n"
                "%3 : bf16[4,8] = relu %2\n"
                "output %3\n");
  REQUIRE_THROWS_WITH(y.to_host(), ContainsSubstring("placeholder %0"));
}

TEST_CASE("zeros, ones and clamp", "[jit][api]") {
  fj::Context ctx(quiet());
  CHECK(ctx.zeros({2, 3}).to_host() == std::vector<double>(6, 0.0));
  const auto o = ctx.ones({4}, DType::bf16);
  CHECK(o.dtype() == DType::bf16);
  CHECK(o.to_host() == std::vector<double>(4, 1.0));
  const auto x = ctx.from_vector(std::vector<double>{-3, -0.5, 0.25, 2, 7, NAN}, {6});
  const std::vector<double> both = fj::clamp(x, -1.0, 2.5).to_host();
  CHECK(std::vector<double>(both.begin(), both.end() - 1) ==
        std::vector<double>{-1, -0.5, 0.25, 2, 2.5});
  CHECK(std::isnan(both.back()));  // NaN stays NaN, as in torch.clamp
  CHECK(fj::clamp(x, std::nullopt, 0.0).to_host()[4] == 0.0);
  CHECK(fj::clamp(x, 1.0, std::nullopt).to_host()[0] == 1.0);
  // An integer tensor keeps its dtype for integral bounds and promotes to f32 for others.
  const auto i = ctx.from_vector(std::vector<double>{-5, 0, 5}, {3}, DType::i32);
  CHECK(fj::clamp(i, -2.0, 3.0).dtype() == DType::i32);
  CHECK(fj::clamp(i, -2.0, 3.0).to_host() == std::vector<double>{-2, 0, 3});
  CHECK(fj::clamp(i, 0.5, std::nullopt).dtype() == DType::f32);
  CHECK_THROWS_AS(fj::clamp(x, 2.0, 1.0), fj::UsageError);
  CHECK_THROWS_AS(fj::clamp(x, std::nullopt, std::nullopt), fj::UsageError);
}

TEST_CASE("gather, index_select and embedding against hand-computed values", "[jit][api][gather]") {
  fj::Context ctx(quiet());
  // x = [[0,1,2],[3,4,5],[6,7,8],[9,10,11]]
  std::vector<double> iota(12);
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<double>(i);
  const auto x = ctx.from_vector(iota, {4, 3});
  const auto rows = ctx.from_vector(std::vector<double>{3, -4, 1}, {3}, DType::i64);
  check_close(fj::index_select(x, 0, rows).to_host(), {9, 10, 11, 0, 1, 2, 3, 4, 5}, 0);
  const auto cols = ctx.from_vector(std::vector<double>{2, 0}, {2}, DType::i32);
  check_close(fj::index_select(x, -1, cols).to_host(), {2, 0, 5, 3, 8, 6, 11, 9}, 0);
  // torch.gather along 1 with an index shorter than x along 0.
  const auto idx = ctx.from_vector(std::vector<double>{0, 2, 1, 1}, {2, 2}, DType::i32);
  check_close(fj::gather(x, 1, idx).to_host(), {0, 2, 4, 4}, 0);
  // embedding: ids of any shape, result ids.shape + [dim]; out-of-range ids clamp (documented),
  // -1 is the last row.
  const auto ids = ctx.from_vector(std::vector<double>{1, -1, 7, -9}, {2, 2}, DType::i32);
  const auto e = fj::embedding(x, ids);
  CHECK(e.shape() == Shape{2, 2, 3});
  // Recorded with what follows: one trace, the gather inside it.
  const auto y = e * 2.0 + ctx.from_vector(std::vector<double>{1, 1, 1}, {3});
  CHECK(ctx.trace_text({y}).find("gather") != std::string::npos);
  check_close(y.to_host(), {7, 9, 11, 19, 21, 23, 19, 21, 23, 1, 3, 5}, 0);
  check_close(e.to_host(), {3, 4, 5, 9, 10, 11, 9, 10, 11, 0, 1, 2}, 0);
}

TEST_CASE("gather and friends reject malformed operands at record time", "[jit][api][gather]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const auto f = ctx.from_vector(std::vector<double>{0, 1}, {2});
  const auto i2 = ctx.from_vector(std::vector<double>{0, 1, 1, 0}, {2, 2}, DType::i32);
  CHECK_THROWS_WITH(fj::index_select(x, 0, f), ContainsSubstring("i32 or i64"));
  CHECK_THROWS_WITH(fj::index_select(x, 0, i2), ContainsSubstring("must be 1-D"));
  CHECK_THROWS_WITH(fj::embedding(f, i2), ContainsSubstring("must be 2-D"));
  CHECK_THROWS_WITH(fj::gather(x, 2, i2), ContainsSubstring("gather"));
  CHECK_THROWS_WITH(fj::dropout(x, 1.5, 1), ContainsSubstring("[0, 1]"));
  CHECK_THROWS_WITH(fj::dropout(i2, 0.5, 1), ContainsSubstring("floating"));
  CHECK_THROWS_WITH(ctx.rand({2}, 1, 0, DType::i32),
                    ContainsSubstring("random values are f32"));
}

TEST_CASE("dropout with a new seed each step is one trace, planned once", "[jit][api][random]") {
  // The seed and offset are data (the draw's key input): twenty seeds record one trace text, so
  // the trace memo plans it once on a GPU (the CPU path interprets and plans nothing), and the
  // numbers still follow each seed, as the reference draws them.
  fj::Context ctx(quiet());
  const int64_t n = 2000;
  const auto x = ctx.from_vector(std::vector<double>(static_cast<size_t>(n), 1.0), {n});
  std::string first;
  std::vector<std::vector<double>> drawn;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    const auto y = fj::dropout(x, 0.5, seed, 40 - seed);
    const std::string text = ctx.trace_text({y});
    if (first.empty()) first = text;
    CHECK(text == first);
    drawn.push_back(y.to_host());
    int64_t wrong = 0;
    for (int64_t e = 0; e < n; ++e) {
      const bool keep = fj::ir::random_uniform(seed, 40 - seed, static_cast<uint64_t>(e)) < 0.5f;
      wrong += drawn.back()[static_cast<size_t>(e)] != (keep ? 2.0 : 0.0) ? 1 : 0;
    }
    CHECK(wrong == 0);
  }
  for (size_t k = 1; k < drawn.size(); ++k) CHECK(drawn[k] != drawn[0]);
  CHECK(first.find(" : i64[2] = input\n") != std::string::npos);
  CHECK(first.find("seed") == std::string::npos);
  const fj::Context::Stats s = ctx.stats();
  CHECK(s.traces_evaluated == 20);
  CHECK(s.plans_built == (ctx.has_gpu() ? 1 : 0));
  CHECK(s.trace_memo_hits == (ctx.has_gpu() ? 19 : 0));
}

TEST_CASE("two draws with different keys in one trace stay two draws", "[jit][api][random]") {
  fj::Context ctx(quiet());
  const int64_t n = 512;
  const auto a = ctx.rand({n}, 5, 0);
  const auto b = ctx.rand({n}, 6, 0);
  const auto c = ctx.rand({n}, 5, 1);
  const auto by_seed = a - b;
  const auto by_offset = a - c;
  fj::eval({by_seed, by_offset, a});  // one trace reading the three draws
  const std::vector<double> diff_seed = by_seed.to_host();
  CHECK(ctx.stats().traces_evaluated == 1);
  const std::vector<double> diff_offset = by_offset.to_host();
  const std::vector<double> ua = a.to_host();
  CHECK(ctx.stats().traces_evaluated == 1);
  int64_t zeros_seed = 0, zeros_offset = 0;
  for (int64_t e = 0; e < n; ++e) {
    const auto k = static_cast<size_t>(e);
    const auto p = static_cast<uint64_t>(e);
    CHECK(ua[k] == fj::ir::random_uniform(5, 0, p));
    CHECK(diff_seed[k] == Approx(ua[k] - fj::ir::random_uniform(6, 0, p)).margin(1e-7));
    CHECK(diff_offset[k] == Approx(ua[k] - fj::ir::random_uniform(5, 1, p)).margin(1e-7));
    zeros_seed += diff_seed[k] == 0.0 ? 1 : 0;
    zeros_offset += diff_offset[k] == 0.0 ? 1 : 0;
  }
  CHECK(zeros_seed < 4);
  CHECK(zeros_offset < 4);
  // A failed draw leaves the trace as it was: no key bound for it.
  const auto y = ctx.rand({4}, 1, 0) * 2.0;
  const size_t before = ctx.impl().trace.size();
  CHECK_THROWS_WITH(ctx.randn({4}, 1, 0, DType::i64), ContainsSubstring("random values are f32"));
  CHECK(ctx.impl().trace.size() == before);
}

// On a GPU these compare the device's bits with the reference's (the uniforms exactly).
TEST_CASE("rand, randn and dropout are pure functions of seed, offset and position",
          "[jit][api][random]") {
  fj::Context ctx(quiet());
  const int64_t n = 4099;
  const std::vector<double> u = ctx.rand({n}, 42, 3).to_host();
  const std::vector<double> z = (ctx.randn({n}, 42, 3) * 1.0).to_host();
  for (int64_t e = 0; e < n; ++e) {
    INFO("element " << e);
    CHECK(u[static_cast<size_t>(e)] == fj::ir::random_uniform(42, 3, static_cast<uint64_t>(e)));
    CHECK(z[static_cast<size_t>(e)] ==
          Approx(fj::ir::random_normal(42, 3, static_cast<uint64_t>(e))).margin(1e-5));
  }
  CHECK(ctx.rand({n}, 42, 4).to_host() != u);
  CHECK(ctx.rand({n}, 43, 3).to_host() != u);
  // A reshape of a draw is the same numbers: values follow the row-major position.
  check_close(fj::reshape(ctx.rand({n}, 42, 3), {1, n}).to_host(), u, 0);

  const auto x = ctx.full({n}, 3.0);
  const std::vector<double> d = fj::dropout(x, 0.25, 42, 3).to_host();
  for (size_t e = 0; e < d.size(); ++e) {
    INFO("element " << e);
    CHECK(d[e] == (u[e] < 0.75 ? 4.0 : 0.0));
  }
  check_close(fj::dropout(x, 0.0, 42, 3).to_host(), std::vector<double>(n, 3.0), 0);
  const auto inf = ctx.from_vector(std::vector<double>{1, INFINITY}, {2});
  const std::vector<double> dropped = fj::dropout(inf, 1.0, 42, 3).to_host();
  CHECK(dropped[0] == 0.0);
  CHECK(std::isnan(dropped[1]));  // x * 0, as torch
}

TEST_CASE("slice, narrow, chunk, concat and arange", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  CHECK(fj::slice(x, -1, 1, 3).to_host() == std::vector<double>{1, 2, 5, 6});
  CHECK(fj::slice(x, 1, -3, 100, 2).to_host() == std::vector<double>{1, 3, 5, 7});
  CHECK(fj::narrow(x, 0, -1, 1).to_host() == std::vector<double>{4, 5, 6, 7});
  CHECK_THROWS_AS(fj::narrow(x, 1, 2, 3), fj::UsageError);
  CHECK_THROWS_AS(fj::slice(x, 1, 3, 1), fj::UsageError);  // empty
  CHECK_THROWS_AS(fj::slice(x, 1, 0, 4, 0), fj::UsageError);
  // SwiGLU's split and rotary's rotate_half.
  const std::vector<fj::Tensor> halves = fj::chunk(x, 2, -1);
  REQUIRE(halves.size() == 2);
  CHECK(halves[1].to_host() == std::vector<double>{2, 3, 6, 7});
  CHECK(fj::chunk(ctx.arange(0, 5), 2).size() == 2);  // sizes 3 and 2
  CHECK(fj::chunk(ctx.arange(0, 5), 4).size() == 3);  // sizes 2, 2 and 1, as torch.chunk
  const auto rot = fj::concat({-halves[1], halves[0]}, -1);
  CHECK(rot.to_host() == std::vector<double>{-2, -3, 0, 1, -6, -7, 4, 5});
  const auto i = ctx.from_vector(std::vector<double>{9, 8}, {1, 2}, DType::i32);
  const auto rows = fj::concat({halves[0], i}, 0);  // promoted as torch.cat: f32
  CHECK(rows.dtype() == DType::f32);
  CHECK(rows.to_host() == std::vector<double>{0, 1, 4, 5, 9, 8});
  CHECK_THROWS_AS(fj::concat({x, i}, 0), fj::UsageError);
  CHECK_THROWS_AS(fj::concat({}, 0), fj::UsageError);
  CHECK(ctx.arange(0, 4, 1, DType::i64).to_host() == std::vector<double>{0, 1, 2, 3});
  CHECK(ctx.arange(1, 2, 0.25).to_host() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(ctx.arange(5, 0, -2, DType::i32).to_host() == std::vector<double>{5, 3, 1});
  CHECK(ctx.arange(0, 3, 1, DType::bf16).dtype() == DType::bf16);
  CHECK_THROWS_AS(ctx.arange(0, 1, 0.5, DType::i32), fj::UsageError);
  CHECK_THROWS_AS(ctx.arange(0, 1, 0), fj::UsageError);
  CHECK_THROWS_AS(ctx.arange(3, 1), fj::UsageError);
}

TEST_CASE("a materialized tensor binds once per trace, in every trace that reads it",
          "[jit][api]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3}, {3});
  const fj::Tensor alias = x;  // the same storage through a second handle
  for (int round = 1; round <= 3; ++round) {
    const auto y = x * alias + x;
    CHECK(ctx.trace_text({y}) == "fusejit-trace 1\n"
                                 "%0 : f32[3] = input\n"
                                 "%1 : f32[3] = mul %0, %0\n"
                                 "%2 : f32[3] = add %1, %0\n"
                                 "output %2\n");
    check_close(y.to_host(), {2, 6, 12}, 0);
    CHECK(ctx.impl().trace.size() == 0);  // the trace restarts after each eval
    CHECK(ctx.stats().traces_evaluated == round);
  }
}

TEST_CASE("an eval that throws leaves the trace as it was", "[jit][api]") {
  fj::Context ctx(quiet());
  const auto p = ctx.placeholder({2});
  const auto x = ctx.from_vector(std::vector<double>{1, 2}, {2});
  const auto y = p + x;
  const auto z = x * 3.0;
  REQUIRE(ctx.impl().trace.size() == 5);  // two inputs, add, the constant 3, mul
  REQUIRE_THROWS_WITH(z.to_host(), ContainsSubstring("placeholder %0"));
  CHECK(ctx.impl().trace.size() == 5);
  CHECK(ctx.impl().trace.outputs().empty());
  CHECK(ctx.trace_text({y}).find("add %0, %1") != std::string::npos);
}
