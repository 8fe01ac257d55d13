// One Context used from many threads, and a Context per thread (fusejit/context.h): every
// thread's results are its own, whatever the interleaving of recording and evaluation. On the
// CPU path (no GPU needed; CI runs them under ThreadSanitizer too); with a GPU the same code runs
// on the device, and the [gpu] case runs the 8 threads x 1,000 evals there.
#include <atomic>
#include <thread>
#include <vector>

#include "fusejit/fusejit.h"
#include "jit/api/context_mutex.h"
#include "support/catch.h"
#include "support/gpu.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fusejit::testing::quiet;

namespace {

// Thread `id`'s work, repeated: relu(x * k + shared), evaluated, checked against the values it
// must give. Returns how many evaluations were wrong.
int work(fj::Context& ctx, const fj::Tensor& shared, int id, int evals) {
  int wrong = 0;
  for (int i = 0; i < evals; ++i) {
    const double k = id + 1 + 0.5 * (i % 3);
    const std::vector<double> xs = {1.0 * id, -2.0, 3.0, -4.0 + i};
    const auto x = ctx.from_vector(xs, {4});
    const std::vector<double> got = fj::relu(x * k + shared).to_host();
    const std::vector<double> base = {1, 2, 3, 4};  // `shared`
    for (size_t j = 0; j < xs.size(); ++j) {
      const double want = std::max(0.0, xs[j] * k + base[j]);
      if (got[j] != want) ++wrong;
    }
  }
  return wrong;
}

}  // namespace

TEST_CASE("one Context used from 8 threads gives every thread its own results",
          "[jit][threads]") {
  fj::Context ctx(quiet());
  const auto shared = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] { wrong += work(ctx, shared, id, 200); });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(ctx.stats().traces_evaluated >= 1);
}

TEST_CASE("one Context on the GPU from 8 threads x 1,000 evals", "[gpu][jit][threads]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context ctx(quiet());
  REQUIRE(ctx.has_gpu());
  const auto shared = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] { wrong += work(ctx, shared, id, 1000); });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("a Context per thread", "[jit][threads]") {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] {
      fj::Context ctx(quiet());
      const auto shared = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
      wrong += work(ctx, shared, id, 100);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("threads that record while another evaluates", "[jit][threads]") {
  // One thread builds long chains without evaluating; others evaluate all the time, which
  // materializes the builder's pending tensors under it.
  fj::Context ctx(quiet());
  std::atomic<bool> done{false};
  std::vector<std::thread> evaluators;
  for (int e = 0; e < 3; ++e) {
    evaluators.emplace_back([&] {
      while (!done) ctx.eval_all();
    });
  }
  auto y = ctx.from_vector(std::vector<double>{0, 1, 2}, {3});
  for (int i = 0; i < 500; ++i) y = y + 1.0;
  done = true;
  for (auto& t : evaluators) t.join();
  CHECK(y.to_host() == std::vector<double>{500, 501, 502});
}

TEST_CASE("replays run from several threads while others evaluate", "[jit][threads][replay]") {
  // Each Replay advances its own counter; they are built one after the other (each takes the
  // Context's trace, every write recorded into it included), then run concurrently.
  fj::Context ctx(quiet());
  const auto shared = ctx.from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  std::vector<fj::Tensor> counters;
  std::vector<fj::Replay> replays;
  for (int id = 0; id < 4; ++id) {
    fj::Tensor c = ctx.from_vector(std::vector<double>{double(id)}, {1}).eval();
    fj::update_slice(c, 0, ctx.scalar(0, fj::DType::i32), c + 1.0);
    replays.emplace_back(std::vector<fj::Tensor>{c});
    counters.push_back(c);
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([&, id] {
      for (int i = 0; i < 100; ++i) replays[static_cast<size_t>(id)].run();
    });
    threads.emplace_back([&, id] { wrong += work(ctx, shared, id, 50); });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  for (int id = 0; id < 4; ++id) {
    CHECK(counters[static_cast<size_t>(id)].to_host() == std::vector<double>{id + 100.0});
  }
  CHECK(ctx.stats().replay_runs == 400);
}

TEST_CASE("the Context's lock is recursive and lets one thread in at a time", "[jit][threads]") {
  fj::detail::ContextMutex mutex;
  SECTION("held twice by one thread, it is free only when given back twice") {
    mutex.lock();
    mutex.lock();
    CHECK(mutex.try_lock());  // a third time, still this thread's
    mutex.unlock();
    mutex.unlock();
    bool other = true;
    std::thread([&] { other = mutex.try_lock(); }).join();
    CHECK_FALSE(other);
    mutex.unlock();
    std::thread([&] {
      other = mutex.try_lock();
      if (other) mutex.unlock();
    }).join();
    CHECK(other);
  }
  SECTION("8 threads taking it 20,000 times each, nested, never overlap") {
    constexpr int kThreads = 8, kTimes = 20000;
    std::atomic<int> inside{0}, overlaps{0};
    int64_t count = 0;  // plain: only the lock orders the increments
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kTimes; ++i) {
          const std::lock_guard<fj::detail::ContextMutex> outer(mutex);
          if (inside.fetch_add(1) != 0) ++overlaps;
          {
            const std::lock_guard<fj::detail::ContextMutex> inner(mutex);
            ++count;
          }
          inside.fetch_sub(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(overlaps == 0);
    CHECK(count == int64_t{kThreads} * kTimes);
  }
}
