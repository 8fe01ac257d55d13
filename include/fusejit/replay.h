// fusejit/replay: a trace recorded once and run many times, for a loop whose every iteration is
// the same computation on new data (a decode step): no recording, no lookup, and on the GPU one
// CUDA graph launch per run, GEMMs included.
//
//   fusejit::Tensor pos = ctx.from_vector({0.0}, {1}, fusejit::DType::i32).eval();
//   fusejit::Tensor next = step(ctx, tokens, pos);                 // record it once
//   fusejit::update_slice(pos, 0, ctx.scalar(0, fusejit::DType::i32), pos + 1);
//   fusejit::Replay replay({next});                                // plan and build it
//   for (int i = 0; i < n; ++i) replay.run();                      // queue it, n times
//   std::vector<double> last = replay.outputs()[0].to_host();
//
// Construction takes the trace that computes `outputs` out of their Context, as eval would
// (with every update_slice recorded into it), and plans, compiles and loads it; nothing runs.
// Then:
// - Inputs are the buffers the trace reads, bound for the Replay's lifetime: weights, caches,
//   wrapped caller memory (which must stay valid until the Replay is gone). Each run reads
//   them as they are when it runs, so a run sees what the caller or an earlier run wrote
//   there. A value that changes from run to run (a position, a token, a random key) is such a
//   buffer, written by the caller (in stream order) or by the trace itself (update_slice).
// - Outputs are the Tensors of outputs(), materialized: each run writes them again, in the
//   same buffers (an update_slice's output is its destination). They hold no values until the
//   first run. Read them in stream order (to_host waits for the runs queued before it), or use
//   them in ordinary traces like any evaluated tensor.
// - On the GPU, every region output keeps its buffer from one run to the next. Intermediates
//   whose lives do not overlap share one (an output computed after the last reader of the one
//   before; the buffer sized for the largest), so a Replay holds about what an eval holds at
//   its peak. The first run launches the steps one by one; the second captures them from the
//   Context's stream into a CUDA graph, and from then on a run is that graph's launch, cuDNN
//   attention steps included. A stream that something else is capturing, or a capture the
//   driver refuses, runs step by step (why_not_graph says why).
// - On the CPU path a run evaluates the trace with the reference interpreter.
// - Runs are ordered with the Context's evals (its lock and its stream), from any thread.
//   Context::stats counts them (replay_runs, replay_graph_launches); a run plans and compiles
//   nothing. Like eval, construction takes every write recorded into the Context's trace so far,
//   another thread's too: build a Replay while no other thread records into its Context.
// - A Replay must not outlive its Context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusejit/export.h"
#include "fusejit/tensor.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

namespace detail {
struct ReplayState;
}

class Replay {
 public:
  Replay();  // an empty handle; run() throws
  // Takes the trace computing `outputs` (pending tensors of one Context) out of the Context and
  // builds it. Throws fusejit::UsageError for no outputs, an output already evaluated, outputs
  // of different Contexts, or a trace that reads a placeholder; errors of planning and
  // compiling as eval would.
  explicit Replay(const std::vector<Tensor>& outputs);
  ~Replay();
  Replay(Replay&&) noexcept;
  Replay& operator=(Replay&&) noexcept;
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  // Queues one run on the Context's stream (the CPU path: runs it).
  void run();
  // The outputs, in the order given, materialized in the Replay's buffers.
  const std::vector<Tensor>& outputs() const;
  int64_t runs() const;
  // Whether runs after the first are one CUDA graph launch; when not, why.
  bool graph() const;
  std::string why_not_graph() const;

 private:
  std::unique_ptr<detail::ReplayState> state_;
};

}  // namespace fusejit
FUSEJIT_PUBLIC_END
