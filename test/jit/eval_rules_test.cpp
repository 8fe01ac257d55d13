// The two rules every eval keeps (fusejit/tensor.h, Tensor::eval): it reads caller memory as it
// is at that eval, whatever views were taken of it and whatever was evaluated before; and it
// writes what was asked for, not the temporaries of the C++ expression still held while it
// runs. The buffers are "the Context's memory" (support/context_memory.h), so the same tests
// check the CPU path here and the GPU path where one is.
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "fusejit/fusejit.h"
#include "support/catch.h"
#include "support/context_memory.h"
#include "support/gpu.h"
#include "support/quiet.h"

using namespace fusejit;
using fusejit::testing::ContextMemory;
using fusejit::testing::quiet;

namespace {

// The elements of a strided layout over `buf` (from element `offset`), in row-major order.
std::vector<double> strided(const std::vector<float>& buf, int64_t offset, const Shape& shape,
                            const std::vector<int64_t>& strides) {
  const int64_t count =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  std::vector<double> out;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, at = offset;
    for (size_t d = shape.size(); d-- > 0;) {
      at += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    out.push_back(buf[static_cast<size_t>(at)]);
  }
  return out;
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// A wrapped view, and where it reads from: (offset, shape, strides) over the buffer.
struct View {
  std::string kind;
  int64_t offset;
  Shape shape;
  std::vector<int64_t> strides;
  Tensor tensor;
};

}  // namespace

TEST_CASE("every eval reads a wrapped buffer as it is then, through every kind of view",
          "[jit][embed][eval-rules]") {
  Context ctx(quiet());
  // A fused QKV buffer [B, S, 3H].
  const int64_t B = 2, S = 3, H = 4, W = 3 * H;
  const size_t count = static_cast<size_t>(B * S * W);
  ContextMemory mem(ctx, count * sizeof(float));
  std::vector<float> buf(count);
  std::iota(buf.begin(), buf.end(), 0.0f);
  mem.put(buf);
  const auto at = [&](int64_t offset) { return static_cast<float*>(mem.data()) + offset; };

  std::vector<View> views = {
      {"dense", 0, {B, S, W}, {S * W, W, 1}, {}},
      {"dense with a size-1 dim", 0, {1, B * S, W}, {B * S * W, W, 1}, {}},
      {"permuted", 0, {W, S, B}, {1, W, S * W}, {}},
      {"sliced (every other row)", 0, {B * S / 2, W}, {2 * W, 1}, {}},
      {"q, a strided column block", 0, {B, S, H}, {S * W, W, 1}, {}},
      {"k, a strided column block", H, {B, S, H}, {S * W, W, 1}, {}},
      {"broadcast (the first row, 4 times)", 0, {4, W}, {0, 1}, {}},
  };
  for (View& v : views) v.tensor = ctx.wrap(at(v.offset), v.shape, DType::f32, v.strides);
  const Tensor& q = views[4].tensor;
  const Tensor& k = views[5].tensor;

  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    // q + k first: an eval while every view is held, which must not turn them into copies.
    CHECK((q + k).to_host() == plus(strided(buf, 0, {B, S, H}, {S * W, W, 1}),
                                    strided(buf, H, {B, S, H}, {S * W, W, 1})));
    for (const View& v : views) {
      INFO(v.kind);
      CHECK((v.tensor * 1.0).to_host() == strided(buf, v.offset, v.shape, v.strides));
    }
    // The caller rewrites its buffer between evals.
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((round + 2) * 100) - buf[i];
    mem.put(buf);
  }
}

TEST_CASE("an eval writes only what was asked for, not the expression's temporaries",
          "[jit][eval-rules]") {
  Context ctx(quiet());
  const std::vector<double> in = {1, -2, 3, -4, 5, -6};
  const auto x = ctx.from_vector(in, {2, 3});

  (exp(x * 2 + 1) * 3).eval();
  CHECK(ctx.stats().outputs_computed == 1);
  CHECK(ctx.stats().traces_evaluated == 1);

  const std::vector<double> norm = layer_norm(x * 2 + 1).to_host();
  CHECK(ctx.stats().outputs_computed == 2);
  CHECK(norm.size() == 6);

  ContextMemory out(ctx, sizeof(float) * 6);  // the GPU's memory, or the host's on the CPU path
  (x * 2 + 1).eval_into(out.data(), out.bytes());
  CHECK(ctx.stats().outputs_computed == 3);
  CHECK(out.get<float>(1)[0] == 3.0f);

  SECTION("a held tensor not asked for stays pending and is computed when used") {
    const auto a = x * 2.0;
    auto b = exp(a);
    b.eval();
    CHECK(ctx.stats().outputs_computed == 4);
    // a is carried out of that trace: a later expression reads it with a computed tensor.
    const std::vector<double> c = (a + b).to_host();
    REQUIRE(c.size() == 6);
    for (size_t i = 0; i < 6; ++i) CHECK(c[i] == Approx(2 * in[i] + std::exp(2 * in[i])));
    CHECK(ctx.stats().outputs_computed == 5);
    CHECK(a.to_host() == std::vector<double>{2, -4, 6, -8, 10, -12});
    CHECK(ctx.stats().outputs_computed == 6);
  }
  SECTION("several held tensors carried together share their nodes") {
    const auto s = sum(x, {1});
    const auto p = s + 1.0;
    const auto m = s * 2.0;
    (x + 1.0).eval();
    eval({p, m});
    CHECK(ctx.stats().outputs_computed == 6);
    CHECK(p.to_host() == std::vector<double>{3, -4});
    CHECK(m.to_host() == std::vector<double>{4, -10});
    CHECK(ctx.stats().traces_evaluated == 5);
  }
  SECTION("eval_all computes the held tensors of earlier traces too") {
    const auto p = x + 1.0;
    (x * 3.0).eval();
    ctx.eval_all();
    CHECK(ctx.stats().outputs_computed == 5);
    const int64_t traces = ctx.stats().traces_evaluated;
    CHECK(p.to_host() == std::vector<double>{2, -1, 4, -3, 6, -5});
    CHECK(ctx.stats().traces_evaluated == traces);  // computed by eval_all
  }
}

TEST_CASE("a carried view keeps its wrapped buffer until it is dropped", "[jit][embed][eval-rules]") {
  Context ctx(quiet());
  ContextMemory mem(ctx, 4 * sizeof(float));
  mem.put(std::vector<float>{1, 2, 3, 4});
  int released = 0;
  Tensor t;
  {
    const auto x = ctx.wrap(mem.data(), {2, 2}, DType::f32, {1, 2}, [&] { ++released; });
    t = transpose(x, 0, 1) + 0.0;
    CHECK((x * 2.0).to_host() == std::vector<double>{2, 6, 4, 8});
  }
  CHECK(released == 0);  // t, pending, still reads the buffer
  mem.put(std::vector<float>{5, 6, 7, 8});
  CHECK(t.to_host() == std::vector<double>{5, 6, 7, 8});
  ctx.synchronize();
  CHECK(released == 1);
}

TEST_CASE("a carried tensor keeps only the buffers it reads", "[jit][embed][eval-rules]") {
  Context ctx(quiet());
  ContextMemory mem(ctx, 4 * sizeof(float));
  mem.put(std::vector<float>{1, 2, 3, 4});
  int released = 0;
  const auto y = ctx.from_vector(std::vector<double>{1, 2}, {2});
  const auto p = y + 1.0;  // held, never asked for: carried out of the next eval
  {
    const auto x = ctx.wrap(mem.data(), {4}, DType::f32, {}, [&] { ++released; });
    CHECK((x * 2.0 + sum(y)).to_host() == std::vector<double>{5, 7, 9, 11});
  }
  // That eval's temporaries, carried with p, read the buffer; they are gone by the next eval.
  CHECK((y * 3.0).to_host() == std::vector<double>{3, 6});
  ctx.synchronize();
  CHECK(released == 1);  // p does not read the buffer: it is let go
  CHECK(p.to_host() == std::vector<double>{2, 3});
}

TEST_CASE("repeating an expression with temporaries hits the trace memo", "[gpu][jit][eval-rules]") {
  FUSEJIT_REQUIRE_GPU();
  Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>(4096, 0.5), {64, 64});
  for (int i = 0; i < 5; ++i) (exp(x * 2 + 1) * 3).eval();
  const Context::Stats s = ctx.stats();
  CHECK(s.outputs_computed == 5);
  CHECK(s.plans_built == 1);
  CHECK(s.trace_memo_hits == 4);
}
