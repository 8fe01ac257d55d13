// Embedding (fusejit/context.h): caller memory wrapped in place, results computed into caller
// memory, data_ptr, the Context's device and stream. The buffers are "the Context's memory"
// (support/context_memory.h): host memory here on the CPU path, device memory where a GPU is,
// so the same tests check both paths.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <numeric>
#include <string>
#include <thread>

#include "fusejit/fusejit.h"
#include "support/catch.h"
#include "support/context_memory.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;
using fj::Shape;
using fj::testing::ContextMemory;
using fusejit::testing::quiet;

namespace {

std::vector<float> floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

std::vector<float> iota_floats(size_t count) {
  std::vector<float> v(count);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

std::vector<double> read_floats(fj::Context& ctx, const void* ptr, size_t count) {
  std::vector<float> host(count);
  fj::testing::read_context_memory(ctx, ptr, host.data(), count * sizeof(float));
  return {host.begin(), host.end()};
}

}  // namespace

TEST_CASE("wrap reads caller memory in place, at each eval", "[jit][embed]") {
  fj::Context ctx(quiet());
  ContextMemory x_mem(ctx, 6 * sizeof(float));
  x_mem.put(floats({1, -2, 3, -4, 5, -6}));
  const auto x = ctx.wrap(x_mem.data(), {2, 3}, DType::f32);
  CHECK(x.shape() == Shape{2, 3});
  CHECK(x.data_ptr() == x_mem.data());  // dense: the tensor is the caller's buffer
  CHECK(fj::relu(x).to_host() == std::vector<double>{1, 0, 3, 0, 5, 0});
  // The caller changes its buffer after that result was computed: the next eval reads the new
  // values.
  x_mem.put(floats({-1, 2, -3, 4, -5, 6}));
  CHECK(fj::relu(x).to_host() == std::vector<double>{0, 2, 0, 4, 0, 6});
  CHECK(x.to_host() == std::vector<double>{-1, 2, -3, 4, -5, 6});
}

TEST_CASE("wrap maps strides onto views of the dense buffer", "[jit][embed]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 6 * sizeof(float));
  mem.put(floats({0, 1, 2, 3, 4, 5}));  // dense [2,3]: rows {0,1,2}, {3,4,5}

  SECTION("a transposed buffer") {
    const auto t = ctx.wrap(mem.data(), {3, 2}, DType::f32, {1, 3});
    CHECK(t.to_host() == std::vector<double>{0, 3, 1, 4, 2, 5});
    CHECK(t.data_ptr() != mem.data());  // a strided view is computed into a dense buffer
  }
  SECTION("a 3-D permutation with a size-1 dimension of any stride") {
    // dense [2,3] seen as [3,1,2] with strides (1, 99, 3)
    const auto t = ctx.wrap(mem.data(), {3, 1, 2}, DType::f32, {1, 99, 3});
    CHECK(t.to_host() == std::vector<double>{0, 3, 1, 4, 2, 5});
  }
  SECTION("stride 0 broadcasts") {
    const auto t = ctx.wrap(mem.data(), {2, 3}, DType::f32, {0, 1});  // the first row, twice
    CHECK(t.to_host() == std::vector<double>{0, 1, 2, 0, 1, 2});
    const auto col = ctx.wrap(mem.data(), {2, 3}, DType::f32, {1, 0});  // {0, 1} as a column
    CHECK(col.to_host() == std::vector<double>{0, 0, 0, 1, 1, 1});
    // Column 0 of the [2,3] buffer, repeated: a slice with a broadcast.
    const auto col0 = ctx.wrap(mem.data(), {2, 3}, DType::f32, {3, 0});
    CHECK(col0.to_host() == std::vector<double>{0, 0, 0, 3, 3, 3});
  }
  SECTION("dense strides given explicitly are the fast path") {
    const auto t = ctx.wrap(mem.data(), {2, 3}, DType::f32, {3, 1});
    CHECK(t.data_ptr() == mem.data());
    CHECK((t * 2.0).to_host() == std::vector<double>{0, 2, 4, 6, 8, 10});
  }
}

TEST_CASE("wrap reads sliced buffers (strides with gaps) in place", "[jit][embed]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 72 * sizeof(float));
  mem.put(iota_floats(72));
  const auto at = [&](int64_t offset) { return static_cast<float*>(mem.data()) + offset; };

  SECTION("q, k and v as column blocks of a fused QKV buffer [B, S, 3H]") {
    const int64_t B = 2, S = 3, H = 4, W = 3 * H;
    for (int64_t j = 0; j < 3; ++j) {
      const auto t = ctx.wrap(at(j * H), {B, S, H}, DType::f32, {S * W, W, 1});
      std::vector<double> want, sums;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t s = 0; s < S; ++s) {
          const double row = static_cast<double>(b * S * W + s * W + j * H);
          for (int64_t h = 0; h < H; ++h) want.push_back(row + static_cast<double>(h));
          sums.push_back(4 * row + 6);
        }
      }
      CHECK(t.to_host() == want);
      CHECK(fj::sum(t, {2}).to_host() == sums);
    }
  }
  SECTION("every other row, every other element") {
    CHECK(ctx.wrap(at(0), {3, 3}, DType::f32, {6, 1}).to_host() ==
          std::vector<double>{0, 1, 2, 6, 7, 8, 12, 13, 14});
    CHECK(ctx.wrap(at(0), {9}, DType::f32, {2}).to_host() ==
          std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16});
    CHECK(ctx.wrap(at(1), {3, 2}, DType::f32, {6, 2}).to_host() ==
          std::vector<double>{1, 3, 7, 9, 13, 15});
  }
  SECTION("a transposed slice") {
    // Columns 1..3 of a [4, 6] matrix, transposed; then every other column, transposed.
    CHECK(ctx.wrap(at(1), {3, 4}, DType::f32, {1, 6}).to_host() ==
          std::vector<double>{1, 7, 13, 19, 2, 8, 14, 20, 3, 9, 15, 21});
    CHECK(ctx.wrap(at(0), {2, 4}, DType::f32, {2, 6}).to_host() ==
          std::vector<double>{0, 6, 12, 18, 2, 8, 14, 20});
  }
  SECTION("k's heads of a [S, 3, NH, D] buffer, as [NH, S, D]") {
    const int64_t S = 2, NH = 2, D = 3, W = 3 * NH * D;
    const auto k = ctx.wrap(at(NH * D), {NH, S, D}, DType::f32, {D, W, 1});
    std::vector<double> want;
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t d = 0; d < D; ++d)
          want.push_back(static_cast<double>(s * W + NH * D + h * D + d));
      }
    }
    CHECK(k.to_host() == want);
  }
  SECTION("a slice with a broadcast dimension") {
    // Column 2 of a [3, 6] block, broadcast over a new middle dim of 2.
    CHECK(ctx.wrap(at(2), {3, 2, 1}, DType::f32, {6, 0, 1}).to_host() ==
          std::vector<double>{2, 2, 8, 8, 14, 14});
  }
}

TEST_CASE("a sliced wrap reads only the addressed elements' span", "[jit][embed]") {
  fj::Context ctx(quiet());
  // A [3, 2] column block of rows 5 wide, at offset 10 of a NaN guard: it addresses offsets
  // 10 + {0, 1, 5, 6, 10, 11}. The gaps and everything past offset 21 stay NaN; the dense base
  // [3, 5] would end 3 elements past the last addressed one.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ContextMemory guard(ctx, 64 * sizeof(float));
  guard.put(std::vector<float>(64, nan));
  const std::vector<size_t> addressed = {10, 11, 15, 16, 20, 21};
  for (size_t i = 0; i < addressed.size(); ++i) {
    guard.put(std::vector<float>{static_cast<float>(i + 1)}, addressed[i] * sizeof(float));
  }
  const auto t = ctx.wrap(static_cast<float*>(guard.data()) + 10, {3, 2}, DType::f32, {5, 1});
  CHECK(t.to_host() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(fj::sum(t * 2.0, {0}).to_host() == std::vector<double>{18, 24});
  CHECK(fj::sum(fj::exp(t * 0.0), {0, 1}).to_host() == std::vector<double>{6});

  SECTION("on the CPU path, a buffer that ends at an unreadable page") {
    if (ctx.has_gpu()) return;  // the guard page is host memory
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* pages =
        mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(pages != MAP_FAILED);
    REQUIRE(mprotect(static_cast<char*>(pages) + page, page, PROT_NONE) == 0);
    // The span is 12 elements: they end exactly at the page boundary.
    auto* data = reinterpret_cast<float*>(static_cast<char*>(pages) + page) - 12;
    for (size_t i = 0; i < addressed.size(); ++i)
      data[addressed[i] - 10] = static_cast<float>(i + 1);
    {
      const auto u = ctx.wrap(data, {3, 2}, DType::f32, {5, 1});
      CHECK((u + 1.0).to_host() == std::vector<double>{2, 3, 4, 5, 6, 7});
    }
    ctx.eval_all();
    munmap(pages, 2 * page);
  }
}

TEST_CASE("wrap refuses what it cannot read, naming it, and keeps the memory the caller's",
          "[jit][embed][errors]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 64 * sizeof(float));
  int released = 0;
  const auto count = [&] { ++released; };
  CHECK_THROWS_WITH(ctx.wrap(nullptr, {2}, DType::f32), ContainsSubstring("null"));
  CHECK_THROWS_AS(ctx.wrap(mem.data(), {2, 0}, DType::f32), fj::UsageError);
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {2, 3}, DType::f32, {2, 1}, count),
                    ContainsSubstring("overlap") && ContainsSubstring("contiguous"));
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {2, 2}, DType::f32, {1, 1}, count),
                    ContainsSubstring("overlap"));
  // Offsets {0, 2, 4} + {0, 3}: no element twice, but the dims interleave (no dense base).
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {3, 2}, DType::f32, {2, 3}, count),
                    ContainsSubstring("interleave") && ContainsSubstring("dimension 0"));
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {2, 3}, DType::f32, {int64_t{1} << 62, 1}, count),
                    ContainsSubstring("2^63"));
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {2, 3}, DType::f32, {-3, 1}, count),
                    ContainsSubstring("negative"));
  CHECK_THROWS_WITH(ctx.wrap(mem.data(), {2, 3}, DType::f32, {1}, count),
                    ContainsSubstring("1 strides given"));
  CHECK(released == 0);  // on an error, release is not called
}

TEST_CASE("a wrapped buffer's release is called exactly once, when nothing needs it",
          "[jit][embed]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 4 * sizeof(float));
  mem.put(floats({1, 2, 3, 4}));
  std::atomic<int> released{0};
  fj::Tensor y;
  {
    const auto x = ctx.wrap(mem.data(), {4}, DType::f32, {}, [&] { ++released; });
    y = x * 3.0;  // pending, reads x
  }
  CHECK(released == 0);  // the pending result still needs the buffer
  CHECK(y.to_host() == std::vector<double>{3, 6, 9, 12});
  CHECK(released == 1);  // computed: nothing reads the buffer any more
  y = fj::Tensor();
  ctx.eval_all();
  CHECK(released == 1);

  SECTION("a strided wrap releases once too") {
    {
      const auto t = ctx.wrap(mem.data(), {2, 2}, DType::f32, {1, 2}, [&] { ++released; });
      CHECK(t.to_host() == std::vector<double>{1, 3, 2, 4});
    }
    CHECK(released == 2);
  }
}

TEST_CASE("eval_into computes into caller memory", "[jit][embed]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, -2, 3, -4}, {2, 2});
  ContextMemory out(ctx, 4 * sizeof(float));

  SECTION("a pending tensor") {
    auto y = fj::relu(x) + 1.0;
    y.eval_into(out.data(), out.bytes());
    CHECK(read_floats(ctx, out.data(), 4) == std::vector<double>{2, 1, 4, 1});
    CHECK(y.to_host() == std::vector<double>{2, 1, 4, 1});
    CHECK(ctx.stats().traces_evaluated == 1);
  }
  SECTION("a tensor already computed is copied") {
    auto y = x * 2.0;
    y.eval();
    const int64_t copied = ctx.stats().outputs_copied;
    y.eval_into(out.data(), out.bytes());
    CHECK(read_floats(ctx, out.data(), 4) == std::vector<double>{2, -4, 6, -8});
    CHECK(ctx.stats().outputs_copied == copied + 1);
  }
  SECTION("several outputs of one eval, and a wrapped input updated in place") {
    ContextMemory in(ctx, 4 * sizeof(float));
    in.put(floats({1, 2, 3, 4}));
    const auto w = ctx.wrap(in.data(), {2, 2}, DType::f32);
    const auto s = fj::sum(w * x, {1});
    const auto d = w - x;
    ContextMemory s_out(ctx, 2 * sizeof(float));
    fj::eval_into({{s, s_out.data(), s_out.bytes()}, {d, in.data(), in.bytes()}});
    CHECK(ctx.stats().traces_evaluated == 1);
    CHECK(read_floats(ctx, s_out.data(), 2) == std::vector<double>{1 - 4, 9 - 16});
    CHECK(read_floats(ctx, in.data(), 4) == std::vector<double>{0, 4, 0, 8});
  }
  SECTION("the same tensor into two buffers") {
    ContextMemory again(ctx, 4 * sizeof(float));
    auto y = -x;
    fj::eval_into({{y, out.data(), out.bytes()}, {y, again.data(), again.bytes()}});
    CHECK(read_floats(ctx, out.data(), 4) == std::vector<double>{-1, 2, -3, 4});
    CHECK(read_floats(ctx, again.data(), 4) == std::vector<double>{-1, 2, -3, 4});
  }
}

TEST_CASE("eval_into calls a destination's release once, when it is done with the memory",
          "[jit][embed]") {
  int released = 0;
  int refused = 0;
  {
    fj::Context ctx(quiet());
    const auto x = ctx.from_vector(std::vector<double>{1, -2, 3, -4}, {2, 2});
    ContextMemory out(ctx, 4 * sizeof(float));
    {
      auto y = fj::relu(x) + 1.0;
      y.eval_into(out.data(), out.bytes(), [&] { ++released; });
      CHECK(read_floats(ctx, out.data(), 4) == std::vector<double>{2, 1, 4, 1});
      // The CPU path copies the result in: nothing holds the memory once the call returns. On
      // the GPU, y may read its values from it: held while y lives.
      CHECK(released == (ctx.has_gpu() ? 0 : 1));
    }
    CHECK_THROWS_AS((x + 1.0).eval_into(out.data(), 3, [&] { ++refused; }), fj::UsageError);
    CHECK(refused == 1);  // refused before anything was queued: released at once
  }
  CHECK(released == 1);  // a Context's end calls every release still queued
}

TEST_CASE("eval_into refuses bad destinations", "[jit][embed][errors]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  ContextMemory out(ctx, 8 * sizeof(float));
  auto y = x + 1.0;
  CHECK_THROWS_WITH(y.eval_into(out.data(), 3 * sizeof(float)),
                    ContainsSubstring("12 bytes") && ContainsSubstring("needs 16"));
  CHECK_THROWS_WITH(y.eval_into(nullptr, 4 * sizeof(float)), ContainsSubstring("null"));
  auto z = x * 2.0;
  auto* base = static_cast<char*>(out.data());
  CHECK_THROWS_WITH(fj::eval_into({{y, base, 16}, {z, base + 8, 16}}),
                    ContainsSubstring("overlap"));
  fj::Context other(quiet());
  const auto w = other.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  CHECK_THROWS_WITH(fj::eval_into({{y, base, 16}, {w, base + 16, 16}}),
                    ContainsSubstring("different Contexts"));
  CHECK_THROWS_AS(fj::Tensor().eval_into(base, 16), fj::UsageError);
  CHECK(ctx.stats().traces_evaluated == 0);  // nothing ran for a refused call
}

TEST_CASE("eval_into a larger destination writes its start, from a const Tensor too",
          "[jit][embed]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  ContextMemory out(ctx, 8 * sizeof(float));
  out.put(std::vector<float>(8, -1.0f));
  const fj::Tensor y = x + 1.0;
  y.eval_into(out.data(), out.bytes());
  CHECK(read_floats(ctx, out.data(), 8) == std::vector<double>{2, 3, 4, 5, -1, -1, -1, -1});
  // Two results in one buffer sized for more: only the written bytes must not overlap.
  auto* base = static_cast<char*>(out.data());
  fj::eval_into({{x * 2.0, base, 32}, {x * 3.0, base + 16, 16}});
  CHECK(read_floats(ctx, out.data(), 8) == std::vector<double>{2, 4, 6, 8, 3, 6, 9, 12});
}

TEST_CASE("data_ptr: where a result is, in the Context's memory", "[jit][embed]") {
  fj::Context ctx(quiet());
  const auto x = ctx.from_vector(std::vector<double>{1, 2, 3}, {3});
  const auto y = fj::exp(x * 0.0) + x;  // pending: data_ptr evaluates
  const void* p = y.data_ptr();
  REQUIRE(p != nullptr);
  CHECK(read_floats(ctx, p, 3) == std::vector<double>{2, 3, 4});
  CHECK(y.data_ptr() == p);  // stable while the tensor lives
  CHECK(read_floats(ctx, x.data_ptr(), 3) == std::vector<double>{1, 2, 3});  // uploaded if needed
  CHECK_THROWS_AS(fj::Tensor().data_ptr(), fj::UsageError);
}

TEST_CASE("the Context's device and stream", "[jit][embed]") {
  fj::Context ctx(quiet());
  ctx.synchronize();
  if (ctx.has_gpu()) {
    CHECK(ctx.device() == 0);
    CHECK(ctx.stream() != nullptr);
  } else {
    CHECK(ctx.device() == -1);
    CHECK(ctx.stream() == nullptr);
    ctx.record_event(nullptr);  // nothing to wait for: the same program runs without a GPU
    // A stream with no GPU is a contradiction; a device ordinal alone is not (CPU path).
    auto* fake = reinterpret_cast<CUstream_st*>(0x1);
    CHECK_THROWS_WITH(fj::Context(quiet(), {.device = 0, .stream = fake}),
                      ContainsSubstring("no GPU"));
    CHECK_THROWS_WITH(fj::Context(quiet(), fj::Placement::on(0, fake)), ContainsSubstring("no GPU"));
    CHECK_FALSE(fj::Context(quiet(), {.device = 3}).has_gpu());
    std::string why;
    CHECK_FALSE(fj::Context::gpu_available(0, &why));
    CHECK_FALSE(why.empty());
  }
  // The static check agrees with a Context, without one.
  CHECK(fj::Context::gpu_available() == ctx.has_gpu());
  CHECK_FALSE(fj::Context::gpu_available(1 << 20));  // no such device, on any machine
  const fj::Placement p = fj::Placement::on(2);
  CHECK(p.device == 2);
  CHECK(p.stream == nullptr);
  CHECK(ctx.stats().inputs_realigned == 0);
}

TEST_CASE("Placement::kCpu runs the CPU reference on any machine", "[jit][embed]") {
  fj::Context ctx(quiet(), {.device = fj::Placement::kCpu});
  CHECK_FALSE(ctx.has_gpu());
  CHECK(ctx.device() == -1);
  CHECK(ctx.stream() == nullptr);
  const fj::Tensor x =
      ctx.from_vector(std::vector<double>{1.0, -2.0, 3.0}, fj::Shape{3}, fj::DType::f32);
  CHECK(fj::relu(x * 2.0).to_host() == std::vector<double>{2.0, 0.0, 6.0});
  CHECK(ctx.stats().kernels_compiled == 0);
  std::string why;
  CHECK_FALSE(fj::Context::gpu_available(fj::Placement::kCpu, &why));
  CHECK_THAT(why, ContainsSubstring("CPU reference"));
  auto* fake = reinterpret_cast<CUstream_st*>(0x1);
  CHECK_THROWS_WITH(fj::Context(quiet(), fj::Placement::on(fj::Placement::kCpu, fake)),
                    ContainsSubstring("pass no stream"));
}

TEST_CASE("wrap, eval_into and data_ptr from 8 threads on one Context", "[jit][embed][threads]") {
  fj::Context ctx(quiet());
  const auto shared = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  std::atomic<int> wrong{0};
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] {
      ContextMemory in(ctx, 4 * sizeof(float));
      ContextMemory out(ctx, 4 * sizeof(float));
      for (int i = 0; i < 50; ++i) {
        const float k = static_cast<float>(id * 100 + i);
        in.put(std::vector<float>{k, k + 1, k + 2, k + 3});
        auto y = ctx.wrap(in.data(), {4}, DType::f32, {}, [&] { ++released; }) + shared;
        y.eval_into(out.data(), out.bytes());
        const auto got = out.get<float>(4);
        for (int j = 0; j < 4; ++j) {
          if (got[static_cast<size_t>(j)] != k + static_cast<float>(2 * j + 1)) ++wrong;
        }
        if (read_floats(ctx, y.data_ptr(), 4) != std::vector<double>(got.begin(), got.end())) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ctx.eval_all();
  CHECK(wrong == 0);
  CHECK(released == 8 * 50);
}
