// CUDA graph replay on the GPU ([gpu]: they skip, saying so, without one): a plan of several
// kernels replayed as one graph gives, eval after eval on changing data, exactly what launching
// the kernels one by one gives; on the caller's stream, into caller memory, from several
// threads; and never when per-step events are asked for.
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "fusejit/fusejit.h"
#include "ir/graph.h"
#include "jit/api/context_impl.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"
#include "support/gpu.h"

namespace fj = fusejit;

namespace {

#define CUDA_OK(call) REQUIRE((call) == cudaSuccess)

constexpr int64_t kElems = 1000;  // not a multiple of a vector width: tails are covered too

// Every op its own kernel (FUSEJIT_DISABLE=fusion), so a chain of n ops launches n kernels;
// graphs on from one launch, or off.
fj::Options unfused(bool graphs) {
  fj::Options o = fj::Options::parse({{"FUSEJIT_LOG", "error"}, {"FUSEJIT_DISABLE", "fusion"}});
  o.disable.graphs = !graphs;
  o.graph_min_launches = 1;
  return o;
}

std::vector<float> data(int round) {
  std::vector<float> v(static_cast<size_t>(kElems));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.001f * static_cast<float>((i * 7 + round) % 991);
  return v;
}

// Five kernels: two outputs, one intermediate read twice.
std::vector<fj::Tensor> program(const fj::Tensor& x, const fj::Tensor& b) {
  const fj::Tensor e = fj::exp(x);
  const fj::Tensor s = e * b;
  return {fj::tanh(s) + e, fj::sigmoid(s)};
}

std::vector<std::vector<double>> run(fj::Context& ctx, int round) {
  const fj::Tensor x = ctx.from_vector(data(round), {kElems});
  const fj::Tensor b = ctx.from_vector(data(round + 17), {kElems});
  std::vector<fj::Tensor> outs = program(x, b);
  fj::eval(outs);
  return {outs[0].to_host(), outs[1].to_host()};
}

}  // namespace

TEST_CASE("graph replay gives what launches one by one give, eval after eval", "[gpu][graphs]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context graphs(unfused(true)), launches(unfused(false));
  for (int round = 0; round < 6; ++round) {
    INFO("round " << round);
    CHECK(run(graphs, round) == run(launches, round));
  }
  CHECK(graphs.stats().plans_built == 1);
  CHECK(graphs.stats().graph_launches == 6);
  CHECK(launches.stats().graph_launches == 0);
}

TEST_CASE("graph replay on the caller's stream and into caller memory", "[gpu][graphs]") {
  FUSEJIT_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* out = nullptr;
  CUDA_OK(cudaMalloc(&out, 2 * kElems * sizeof(float)));
  {
    fj::Context graphs(unfused(true), fj::Placement{.stream = stream});
    fj::Context launches(unfused(false));
    for (int round = 0; round < 4; ++round) {
      INFO("round " << round);
      const fj::Tensor x = graphs.from_vector(data(round), {kElems});
      const fj::Tensor b = graphs.from_vector(data(round + 17), {kElems});
      std::vector<fj::Tensor> outs = program(x, b);
      // The destinations alternate, so the graph's output nodes change address each round.
      float* first = out + (round % 2) * kElems;
      float* second = out + ((round + 1) % 2) * kElems;
      fj::eval_into({{outs[0], first, kElems * sizeof(float)},
                     {outs[1], second, kElems * sizeof(float)}});
      std::vector<float> got(2 * kElems);
      CUDA_OK(cudaMemcpyAsync(got.data(), out, got.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      const std::vector<std::vector<double>> want = run(launches, round);
      for (int64_t i = 0; i < kElems; ++i) {
        REQUIRE(static_cast<double>(got[static_cast<size_t>(((round % 2) * kElems) + i)]) ==
                static_cast<float>(want[0][static_cast<size_t>(i)]));
        REQUIRE(static_cast<double>(got[static_cast<size_t>((((round + 1) % 2) * kElems) + i)]) ==
                static_cast<float>(want[1][static_cast<size_t>(i)]));
      }
    }
    CHECK(graphs.stats().graph_launches == 4);
  }
  cudaFree(out);
  cudaStreamDestroy(stream);
}

TEST_CASE("graph replay from several threads on one Context", "[gpu][graphs]") {
  FUSEJIT_REQUIRE_GPU();
  fj::Context graphs(unfused(true));
  std::vector<std::vector<std::vector<double>>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 25; ++round) got[static_cast<size_t>(t)] = run(graphs, t);
    });
  }
  for (auto& th : threads) th.join();
  fj::Context launches(unfused(false));
  for (int t = 0; t < 4; ++t) CHECK(got[static_cast<size_t>(t)] == run(launches, t));
  // Threads record into one trace, so an eval may compute another thread's tensors too (and
  // that thread's eval then has nothing left to do): at most one replay per eval.
  CHECK(graphs.stats().graph_launches > 0);
  CHECK(graphs.stats().graph_launches <= 100);
}

TEST_CASE("no graph when each step is timed", "[gpu][graphs]") {
  FUSEJIT_REQUIRE_GPU();
  fj::jit::Runtime& rt = *fj::testing::gpu_runtime();
  fj::ir::Graph g;
  fj::ir::NodeId y = fj::ir::add_input(g, fj::DType::f32, {kElems});
  for (fj::ir::Op op : {fj::ir::Op::exp, fj::ir::Op::tanh, fj::ir::Op::neg}) {
    y = fj::ir::add_unary(g, op, y);
  }
  g.set_outputs({y});
  const auto exe = rt.executable_for(g);
  const std::vector<std::shared_ptr<fj::jit::DeviceBuffer>> inputs{
      rt.upload(fj::ir::HostTensor(fj::DType::f32, {kElems}))};
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  fj::jit::RunOptions timed{.step_events = &events, .graph_min_launches = 1};
  fj::jit::run_executable(*exe, inputs, rt.device(), rt.blas(), timed);
  CHECK(events.size() == exe->steps.size());
  CHECK(!exe->graph);
  fj::jit::RunOptions plain{.graph_min_launches = static_cast<int>(exe->steps.size())};
  fj::jit::run_executable(*exe, inputs, rt.device(), rt.blas(), plain);
  CHECK(exe->graph != nullptr);
  rt.device().synchronize();
  for (auto& [a, b] : events) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
}
