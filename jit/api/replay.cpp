#include "fusejit/replay.h"

#include <mutex>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/interp.h"
#include "jit/api/context_impl.h"

namespace fusejit {

namespace detail {

void ReplayState::run() {
  ++runs;
  if (gpu) {
    ctx->runtime->run_replay(*gpu);
    // The device buffers hold the new values; host copies taken earlier are stale.
    for (const auto& r : results) r->host_valid = false;
    return;
  }
  ++ctx->stats.replay_runs;
  std::vector<ir::HostTensor> values = ir::interpret(graph, ctx->host_inputs(bound));
  for (size_t i = 0; i < values.size(); ++i) store_host(*results[i], std::move(values[i]));
}

}  // namespace detail

Replay::Replay(const std::vector<Tensor>& outputs) {
  if (outputs.empty()) throw UsageError("Replay: no outputs; pass the pending tensors it computes");
  std::vector<std::shared_ptr<detail::TensorImpl>> impls;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) {
      throw UsageError(
          fmt::format("Replay: output {} is an empty Tensor handle "
                      "(default-constructed); pass tensors recorded through a Context",
                      i));
    }
    if (outputs[i].impl()->ctx != outputs.front().impl()->ctx) {
      throw UsageError(
          "Replay: the outputs belong to different Contexts; make one Replay per "
          "Context");
    }
    impls.push_back(outputs[i].impl());
  }
  detail::ContextImpl& ctx = *impls.front()->ctx;
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  state_ = ctx.replay(impls);
}

Replay::Replay() = default;

Replay::~Replay() {
  if (!state_) return;
  const std::lock_guard<detail::ContextMutex> lock(state_->ctx->mutex);
  state_.reset();
}

Replay::Replay(Replay&&) noexcept = default;
Replay& Replay::operator=(Replay&& other) noexcept {
  if (this != &other) {
    Replay gone(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

void Replay::run() {
  if (!state_) throw UsageError("Replay::run: an empty Replay (default-constructed or moved from)");
  const std::lock_guard<detail::ContextMutex> lock(state_->ctx->mutex);
  state_->run();
}

const std::vector<Tensor>& Replay::outputs() const {
  static const std::vector<Tensor> none;
  return state_ ? state_->outputs : none;
}

int64_t Replay::runs() const { return state_ ? state_->runs : 0; }

bool Replay::graph() const { return state_ && state_->gpu && state_->gpu->why_not_graph().empty(); }

std::string Replay::why_not_graph() const {
  if (!state_) return "an empty Replay";
  if (!state_->gpu) return "no GPU: runs are the CPU reference's";
  return state_->gpu->why_not_graph();
}

}  // namespace fusejit
