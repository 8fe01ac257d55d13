// python/replay: fusejit.Replay, a trace recorded once and run many times (fusejit/replay.h).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

using namespace nb::literals;

// A Replay and the Context it runs on. Like a PyTensor (bindings.h), it holds its Context,
// declared first so that it is destroyed last: the C++ Replay must not outlive its Context.
struct PyReplay {
  std::shared_ptr<Context> ctx;
  Replay replay;
};

// Plans, compiles and loads the trace without the GIL, as an eval does.
void init_replay(PyReplay* self, const std::vector<PyTensor>& outputs) {
  std::vector<Tensor> ts = handles(outputs);
  // No outputs: the C++ constructor names the mistake.
  std::shared_ptr<Context> ctx = outputs.empty() ? nullptr : outputs.front().ctx;
  Replay replay = without_gil([&] { return Replay(ts); });
  new (self) PyReplay{std::move(ctx), std::move(replay)};
}

}  // namespace

void bind_replay(nb::module_& m) {
  nb::class_<PyReplay>(m, "Replay",
                       "A trace recorded once and run many times: Replay(outputs) takes the "
                       "trace computing the pending `outputs` (every update_slice recorded "
                       "included) and builds it; each run() computes it again into the same "
                       "buffers, with no recording, planning or compile.")
      .def("__init__", &init_replay, "outputs"_a)
      .def(
          "run", [](PyReplay& r) { without_gil([&] { r.replay.run(); }); },
          "Queues one run on the Context's stream (the CPU path: runs it).")
      .def_prop_ro(
          "outputs",
          [](const PyReplay& r) {
            std::vector<PyTensor> out;
            for (const Tensor& t : r.replay.outputs()) out.push_back(PyTensor{r.ctx, t});
            return out;
          },
          "The outputs, in the order given: evaluated Tensors that every run writes again.")
      .def_prop_ro(
          "runs", [](const PyReplay& r) { return r.replay.runs(); }, "Runs so far.")
      .def_prop_ro(
          "graph", [](const PyReplay& r) { return r.replay.graph(); },
          "Whether runs after the first are one CUDA graph launch.")
      .def_prop_ro(
          "why_not_graph", [](const PyReplay& r) { return r.replay.why_not_graph(); },
          "Why runs are not one CUDA graph launch ('' when they are).")
      .def("__repr__", [](const PyReplay& r) {
        return "fusejit.Replay(outputs=" + std::to_string(r.replay.outputs().size()) +
               ", runs=" + std::to_string(r.replay.runs()) +
               ", graph=" + (r.replay.graph() ? "True" : "False") + ")";
      });
}

}  // namespace fusejit::python
