// fusejit::Replay: a step recorded once and run many times gives, run after run, what recording
// and evaluating the same step each time gives; it reads and writes its buffers in place (its
// own position, random key and state), plans and compiles nothing after it is built, and on the
// GPU replays as one CUDA graph launch, GEMMs and cuDNN attention included. Its errors name what
// was wrong.
#include <cstdint>
#include <vector>

#include "fusejit/fusejit.h"
#include "support/catch.h"
#include "support/cudnn.h"
#include "support/gpu.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;

namespace {

constexpr int64_t kRows = 4, kWidth = 8, kSteps = 6;

std::vector<double> values(int64_t n, double scale, int64_t salt) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(scale * static_cast<double>((i * 7 + salt) % 11 - 5));
  return v;
}

// The buffers a step reads and writes.
struct State {
  fj::Tensor x, w, bias, pos, key, history;
};

State make_state(fj::Context& ctx) {
  return {ctx.from_vector(values(kRows * kWidth, 0.1, 1), {kRows, kWidth}).eval(),
          ctx.from_vector(values(kWidth * kWidth, 0.05, 3), {kWidth, kWidth}).eval(),
          ctx.from_vector(values(kWidth, 0.2, 5), {kWidth}).eval(),
          ctx.from_vector(std::vector<double>{0.0}, {1}, DType::i32).eval(),
          ctx.from_vector(std::vector<double>{77.0, 1.0}, {2}, DType::i64).eval(),
          ctx.zeros({kRows, kSteps}).eval()};
}

// One step: x <- tanh(x @ w + bias) * (1 + pos / 8) + noise / 16 (a GEMM and its epilogue, then
// an elementwise kernel with a draw keyed by `key`); history[:, pos] <- the new x's row sums;
// pos <- pos + 1; key's offset <- offset + 1. Returns the new x (pending).
fj::Tensor record_step(fj::Context& ctx, State& s) {
  const fj::Tensor grow = fj::cast(s.pos, DType::f32) * (1.0 / 8.0) + 1.0;
  const fj::Tensor noise = ctx.rand({kRows, kWidth}, s.key) * (1.0 / 16.0);
  const fj::Tensor y = fj::tanh(fj::matmul(s.x, s.w) + s.bias) * grow + noise;
  fj::update_slice(s.history, 1, s.pos, fj::sum(y, {1}, true));
  fj::update_slice(s.x, 0, ctx.scalar(0, DType::i32), y);
  fj::update_slice(s.pos, 0, ctx.scalar(0, DType::i32), s.pos + ctx.scalar(1, DType::i32));
  fj::update_slice(s.key, 0, ctx.scalar(1, DType::i32),
                   fj::slice(s.key, 0, 1, 2) + ctx.scalar(1, DType::i64));
  return y;
}

// kSteps steps, each recorded and evaluated: the history, then x.
std::vector<double> evaluated(fj::Context& ctx) {
  State s = make_state(ctx);
  for (int64_t i = 0; i < kSteps; ++i) {
    fj::Tensor y = record_step(ctx, s);
    y.eval();
  }
  std::vector<double> out = s.history.to_host();
  for (double v : s.x.to_host()) out.push_back(v);
  return out;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).margin(tol));
  }
}

}  // namespace

TEST_CASE("a replayed step gives what evaluating it each time gives", "[jit][replay]") {
  fj::Context ctx(fusejit::testing::quiet());
  State s = make_state(ctx);
  const fj::Tensor y = record_step(ctx, s);
  const int64_t plans = ctx.stats().plans_built;
  fj::Replay step({y});
  REQUIRE(step.outputs().size() == 1);
  const int64_t built = ctx.stats().plans_built;
  CHECK(built - plans <= 1);
  for (int64_t i = 0; i < kSteps; ++i) {
    step.run();
    // The output is the new x, each run.
    require_close(step.outputs()[0].to_host(), s.x.to_host(), 0.0);
  }
  CHECK(step.runs() == kSteps);
  CHECK(ctx.stats().replay_runs == kSteps);
  CHECK(ctx.stats().plans_built == built);
  CHECK(s.pos.to_host() == std::vector<double>{double(kSteps)});
  CHECK(s.key.to_host() == std::vector<double>{77.0, 1.0 + kSteps});
  std::vector<double> got = s.history.to_host();
  for (double v : s.x.to_host()) got.push_back(v);
  // Every history column was written, and the runs drew different noise (the key advanced).
  for (int64_t c = 0; c < kSteps; ++c) CHECK(got[static_cast<size_t>(c)] != 0.0);
  fj::Context again(fusejit::testing::quiet());
  require_close(got, evaluated(again), 1e-5);
  if (ctx.has_gpu()) {
    CHECK(step.graph());
    CHECK(ctx.stats().replay_graph_launches == kSteps - 1);
    // The GPU's runs against the CPU reference's evals of the same steps.
    fj::Context cpu(fusejit::testing::quiet(), fj::Placement{.device = fj::Placement::kCpu});
    require_close(got, evaluated(cpu), 1e-4);
  } else {
    CHECK(!step.graph());
    CHECK(step.why_not_graph().find("no GPU") != std::string::npos);
  }
}

TEST_CASE("a replay's outputs are tensors like any other, read in order", "[jit][replay]") {
  fj::Context ctx(fusejit::testing::quiet());
  fj::Tensor counter = ctx.from_vector(std::vector<double>{0.0}, {1}).eval();
  const fj::Tensor next = counter + 1.0;
  fj::update_slice(counter, 0, ctx.scalar(0, DType::i32), next);
  fj::Replay step({counter});
  CHECK(counter.to_host() == std::vector<double>{0.0});  // nothing runs until run()
  step.run();
  step.run();
  step.run();
  CHECK(step.outputs()[0].to_host() == std::vector<double>{3.0});
  // An ordinary trace reads it as it is when evaluated.
  CHECK((counter * 2.0).to_host() == std::vector<double>{6.0});
  step.run();
  CHECK((counter * 2.0).to_host() == std::vector<double>{8.0});
}

TEST_CASE("Replay's errors name what was wrong", "[jit][replay][errors]") {
  fj::Context ctx(fusejit::testing::quiet()), other(fusejit::testing::quiet());
  const fj::Tensor done = ctx.from_vector(std::vector<double>{1.0, 2.0}, {2}).eval();
  CHECK_THROWS_WITH(fj::Replay(std::vector<fj::Tensor>{}), ContainsSubstring("no outputs"));
  CHECK_THROWS_WITH(fj::Replay(std::vector<fj::Tensor>{fj::Tensor()}),
                    ContainsSubstring("empty Tensor handle"));
  CHECK_THROWS_WITH(fj::Replay(std::vector<fj::Tensor>{done}),
                    ContainsSubstring("already evaluated"));
  CHECK_THROWS_WITH(fj::Replay(std::vector<fj::Tensor>{
                        done * 2.0, other.from_vector(std::vector<double>{1.0}, {1}) * 2.0}),
                    ContainsSubstring("different Contexts"));
  fj::Replay empty;
  CHECK_THROWS_WITH(empty.run(), ContainsSubstring("empty Replay"));
  CHECK_THROWS_WITH(
      ctx.rand({3}, ctx.from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}, DType::i64)),
      ContainsSubstring("must be i64[2]"));
  CHECK_THROWS_WITH(ctx.rand({3}, ctx.from_vector(std::vector<double>{1.0, 2.0}, {2}, DType::i32)),
                    ContainsSubstring("must be i64[2]"));
  CHECK_THROWS_WITH(
      ctx.rand({3}, other.from_vector(std::vector<double>{1.0, 2.0}, {2}, DType::i64)),
      ContainsSubstring("another Context"));
}

TEST_CASE("a draw keyed by a tensor is the draw of its seed and offset", "[jit][replay]") {
  fj::Context ctx(fusejit::testing::quiet());
  const fj::Tensor key = ctx.from_vector(std::vector<double>{5.0, 9.0}, {2}, DType::i64);
  CHECK(ctx.rand({3, 7}, key).to_host() == ctx.rand({3, 7}, 5, 9).to_host());
  CHECK(ctx.randn({3, 7}, key).to_host() == ctx.randn({3, 7}, 5, 9).to_host());
  const fj::Tensor logits = ctx.from_vector(values(2 * 50, 0.3, 2), {2, 50});
  CHECK(fj::sample(logits, 0.7, key).to_host() == fj::sample(logits, 0.7, 5, 9).to_host());
}

TEST_CASE("a replay writes wrapped caller memory in place, run after run", "[jit][replay]") {
  // The CPU reference as the device, so that the caller's memory is host memory.
  fj::Context ctx(fusejit::testing::quiet(), fj::Placement{.device = fj::Placement::kCpu});
  std::vector<float> counts = {1.0f, 2.0f, 3.0f};
  fj::Tensor held = ctx.wrap(counts.data(), {3}, DType::f32);
  fj::update_slice(held, 0, ctx.scalar(0, DType::i32), held * 2.0);
  fj::Replay step({held});
  step.run();
  CHECK(counts == std::vector<float>{2.0f, 4.0f, 6.0f});
  // The caller changes its memory between runs; the next run reads it as it is then.
  counts[0] = 10.0f;
  step.run();
  CHECK(counts == std::vector<float>{20.0f, 8.0f, 12.0f});
  CHECK(step.outputs()[0].to_host() == std::vector<double>{20.0, 8.0, 12.0});
}

TEST_CASE("a replay with a cuDNN attention step is one graph launch", "[jit][replay][cudnn][gpu]") {
  FUSEJIT_REQUIRE_GPU();
  FUSEJIT_REQUIRE_CUDNN();
  const fj::Shape shape = {1, 2, 96, 64};  // [batch, heads, seq, head dim]
  const int64_t n = 2 * 96 * 64;
  const auto attention = [&](fj::Context& ctx) {
    const fj::Tensor q = ctx.from_vector(values(n, 0.05, 1), shape, DType::bf16).eval();
    const fj::Tensor k = ctx.from_vector(values(n, 0.04, 2), shape, DType::bf16).eval();
    const fj::Tensor v = ctx.from_vector(values(n, 0.1, 3), shape, DType::bf16).eval();
    return fj::matmul(fj::softmax(fj::matmul(q, fj::transpose(k, 2, 3)) * 0.125, -1), v);
  };
  fj::Context cpu(fusejit::testing::quiet(), fj::Placement{.device = fj::Placement::kCpu});
  const std::vector<double> want = attention(cpu).to_host();
  fj::Context ctx(fj::Options::parse({{"FUSEJIT_ATTENTION", "cudnn"}, {"FUSEJIT_LOG", "error"}}));
  const fj::Tensor out = attention(ctx);
  const auto kernels_loaded = [&] {
    return ctx.stats().kernels_compiled + ctx.stats().kernel_cache_hits;
  };
  const int64_t loaded = kernels_loaded();
  fj::Replay replay({out});
  INFO("a generated kernel was loaded: cuDNN did not take the attention region");
  REQUIRE(kernels_loaded() == loaded);
  fj::Tensor o = replay.outputs()[0];
  for (int run = 0; run < 4; ++run) {
    // Zeros first, so that a run which skipped the attention step shows.
    fj::update_slice(o, 0, ctx.scalar(0, DType::i32), ctx.zeros(shape, DType::bf16));
    ctx.eval_all();
    REQUIRE(o.to_host() == std::vector<double>(want.size(), 0.0));
    replay.run();
    INFO("run " << run);
    require_close(o.to_host(), want, 2e-2);
  }
  INFO(replay.why_not_graph());
  CHECK(replay.graph());
  CHECK(ctx.stats().replay_graph_launches == 3);
}
