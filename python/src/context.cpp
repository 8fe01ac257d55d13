// python/context: fusejit.Context, its factories and its state.
#include <cstring>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

using namespace nb::literals;

// Options: every FUSEJIT_* variable of os.environ (which a program may have changed since it
// started), then `overrides` on top (names with or without the FUSEJIT_ prefix).
Options options_of(nb::handle overrides) {
  std::vector<std::pair<std::string, std::string>> vars;
  nb::object environ = nb::module_::import_("os").attr("environ");
  for (nb::handle key : environ) {
    std::string name = nb::cast<std::string>(key);
    if (name.rfind("FUSEJIT_", 0) == 0)
      vars.emplace_back(name, nb::cast<std::string>(environ[key]));
  }
  if (!overrides.is_none()) {
    for (auto [key, value] : nb::cast<nb::dict>(overrides)) {
      std::string name = nb::cast<std::string>(nb::str(key));
      if (name.rfind("FUSEJIT_", 0) != 0) name = "FUSEJIT_" + name;
      vars.emplace_back(name, nb::cast<std::string>(nb::str(value)));
    }
  }
  return Options::parse(vars);
}

// A cudaStream_t from None, an int (its address) or an object with .cuda_stream (torch's).
CUstream_st* stream_of(nb::handle stream) {
  if (stream.is_none()) return nullptr;
  nb::handle value = nb::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
  return reinterpret_cast<CUstream_st*>(nb::cast<uintptr_t>(value));
}

void init_context(PyContext* self, int device, nb::handle stream, nb::handle options) {
  // The stream's owner (a torch.cuda.Stream) is kept as long as the Context, which may be
  // let go on a thread without the GIL.
  auto* ctx = new Context(options_of(options), Placement::on(device, stream_of(stream)));
  PyObject* owner = nb::borrow(stream).release().ptr();
  new (self) PyContext{std::shared_ptr<Context>(ctx, [owner](Context* c) {
    delete c;
    with_gil([owner] { Py_DECREF(owner); });
  })};
}

// Context::Stats as a dict, by the members' names.
nb::dict stats_of(const Context& ctx) {
  using S = Context::Stats;
  static constexpr std::pair<const char*, int64_t S::*> kMembers[] = {
      {"traces_evaluated", &S::traces_evaluated},
      {"outputs_computed", &S::outputs_computed},
      {"plans_built", &S::plans_built},
      {"trace_memo_hits", &S::trace_memo_hits},
      {"dynamic_instances", &S::dynamic_instances},
      {"kernels_compiled", &S::kernels_compiled},
      {"kernel_cache_hits", &S::kernel_cache_hits},
      {"trace_memo_evictions", &S::trace_memo_evictions},
      {"kernel_evictions", &S::kernel_evictions},
      {"outputs_copied", &S::outputs_copied},
      {"graph_launches", &S::graph_launches},
      {"inputs_realigned", &S::inputs_realigned},
      {"replay_runs", &S::replay_runs},
      {"replay_graph_launches", &S::replay_graph_launches}};
  const S s = ctx.stats();
  nb::dict d;
  for (const auto& [name, member] : kMembers) d[name] = s.*member;
  return d;
}

// A copy of a C-contiguous numpy array: its bytes, already in `dtype`'s native format, or
// (`convert`) float64 values converted to `dtype`, rounding to nearest even: how bfloat16,
// which numpy lacks, arrives.
PyTensor from_array(PyContext& c, nb::ndarray<nb::c_contig, nb::device::cpu> data, Shape shape,
                    DType dtype, bool convert) {
  const void* bytes = data.data();
  const size_t size = data.nbytes();
  Tensor t = without_gil([&] {
    if (!convert) return c.ctx->from_host(bytes, size, std::move(shape), dtype);
    const auto* values = static_cast<const double*>(bytes);
    return c.ctx->from_vector(std::vector<double>(values, values + size / 8), std::move(shape),
                              dtype);
  });
  return {c.ctx, std::move(t)};
}

void bind_factories(nb::class_<PyContext>& cls) {
  cls.def(
         "full",
         [](PyContext& c, Shape shape, double value, DType dtype) {
           return PyTensor{c.ctx, c.ctx->full(std::move(shape), value, dtype)};
         },
         "shape"_a, "value"_a, "dtype"_a = DType::f32)
      .def(
          "zeros",
          [](PyContext& c, Shape shape, DType dtype) {
            return PyTensor{c.ctx, c.ctx->zeros(std::move(shape), dtype)};
          },
          "shape"_a, "dtype"_a = DType::f32)
      .def(
          "ones",
          [](PyContext& c, Shape shape, DType dtype) {
            return PyTensor{c.ctx, c.ctx->ones(std::move(shape), dtype)};
          },
          "shape"_a, "dtype"_a = DType::f32)
      .def(
          "scalar",
          [](PyContext& c, double value, DType dtype) {
            return PyTensor{c.ctx, c.ctx->scalar(value, dtype)};
          },
          "value"_a, "dtype"_a = DType::f32)
      .def(
          "arange",
          [](PyContext& c, double start, std::optional<double> stop, double step, DType dtype) {
            // arange(n) counts from 0, as Python's range
            const Tensor t = stop ? c.ctx->arange(start, *stop, step, dtype)
                                  : c.ctx->arange(0, start, step, dtype);
            return PyTensor{c.ctx, t};
          },
          "start"_a, "stop"_a = nb::none(), "step"_a = 1.0, "dtype"_a = DType::f32)
      .def(
          "rand",
          [](PyContext& c, Shape shape, uint64_t seed, uint64_t offset, DType dtype) {
            return PyTensor{c.ctx, c.ctx->rand(std::move(shape), seed, offset, dtype)};
          },
          "shape"_a, "seed"_a, "offset"_a = 0, "dtype"_a = DType::f32)
      .def(
          "randn",
          [](PyContext& c, Shape shape, uint64_t seed, uint64_t offset, DType dtype) {
            return PyTensor{c.ctx, c.ctx->randn(std::move(shape), seed, offset, dtype)};
          },
          "shape"_a, "seed"_a, "offset"_a = 0, "dtype"_a = DType::f32)
      // The same draws with {seed, offset} as data: an i64[2] tensor, read when the draw runs
      // (a replayed step advances it with update_slice).
      .def(
          "rand",
          [](PyContext& c, Shape shape, const PyTensor& key, DType dtype) {
            return PyTensor{c.ctx, c.ctx->rand(std::move(shape), key.t, dtype)};
          },
          "shape"_a, "key"_a, "dtype"_a = DType::f32)
      .def(
          "randn",
          [](PyContext& c, Shape shape, const PyTensor& key, DType dtype) {
            return PyTensor{c.ctx, c.ctx->randn(std::move(shape), key.t, dtype)};
          },
          "shape"_a, "key"_a, "dtype"_a = DType::f32)
      .def(
          "placeholder",
          [](PyContext& c, Shape shape, DType dtype) {
            return PyTensor{c.ctx, c.ctx->placeholder(std::move(shape), dtype)};
          },
          "shape"_a, "dtype"_a = DType::f32)
      .def("_from_array", &from_array, "data"_a, "shape"_a, "dtype"_a, "convert"_a);
}

}  // namespace

void bind_context(nb::module_& m) {
  nb::class_<PyContext> cls(m, "Context",
                            "Owns the options (FUSEJIT_* env vars), the trace, the device, "
                            "stream, memory and caches. Tensors keep their Context alive.");
  cls.def("__init__", &init_context, "device"_a = 0, "stream"_a = nb::none(),
          "options"_a = nb::none())
      .def_prop_ro("has_gpu", [](const PyContext& c) { return c.ctx->has_gpu(); })
      .def_prop_ro("device", [](const PyContext& c) { return c.ctx->device(); })
      .def_prop_ro("stream",
                   [](const PyContext& c) { return reinterpret_cast<uintptr_t>(c.ctx->stream()); })
      .def_prop_ro(
          "cache_dir",
          [](const PyContext& c) -> std::optional<std::string> {
            const Options& o = c.ctx->options();
            if (o.cache != CacheMode::on) return std::nullopt;
            return o.cache_dir;
          },
          "The disk cache's directory (FUSEJIT_CACHE_DIR), or None when FUSEJIT_CACHE keeps "
          "no disk cache (memory, off).")
      .def("synchronize", [](PyContext& c) { without_gil([&] { c.ctx->synchronize(); }); })
      .def("stats", [](const PyContext& c) { return stats_of(*c.ctx); })
      .def("eval_all", [](PyContext& c) { without_gil([&] { c.ctx->eval_all(); }); })
      .def(
          "trace_text",
          [](PyContext& c, const std::vector<PyTensor>& outputs) {
            return c.ctx->trace_text(handles(outputs));
          },
          "outputs"_a)
      .def(
          "mark_dynamic",
          [](PyContext& c, const PyTensor& t, int64_t axis, std::string name) {
            c.ctx->mark_dynamic(t.t, axis, std::move(name));
          },
          "tensor"_a, "axis"_a, "name"_a = "")
      .def_static(
          "gpu_available",
          [](int device) {
            std::string why;
            const bool ok = Context::gpu_available(device, &why);
            return std::make_pair(ok, why);
          },
          "device"_a = 0)
      .def("__eq__", [](const PyContext& a, const PyContext& b) { return a.ctx == b.ctx; })
      .def("__hash__", [](const PyContext& c) { return reinterpret_cast<uintptr_t>(c.ctx.get()); });
  bind_factories(cls);
}

}  // namespace fusejit::python
