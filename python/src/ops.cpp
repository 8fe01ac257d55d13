// python/ops: the op set as module functions, with Python scalars and the C++ defaults.
#include <cstdint>
#include <limits>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

using namespace nb::literals;

// A Tensor (of `like`'s Context) from a Tensor or a Python scalar.
Tensor operand(const PyTensor& like, nb::handle x) {
  if (nb::isinstance<PyTensor>(x)) return nb::cast<const PyTensor&>(x).t;
  return scalar_like(like, nb::cast<double>(x));
}

void bind_table_ops(nb::module_& m) {
  for (const UnaryOp& op : unary_ops()) {
    m.def(
        op.name, [fn = op.fn](const PyTensor& x) { return result(x, fn(x.t)); }, "x"_a);
  }
  for (const BinaryOp& op : binary_ops()) {
    // One operand may be a Python scalar, as in PyTorch.
    m.def(
        op.name,
        [fn = op.fn](const PyTensor& a, nb::handle b) { return result(a, fn(a.t, operand(a, b))); },
        "a"_a, "b"_a);
    m.def(
        op.name,
        [fn = op.fn](double a, const PyTensor& b) { return result(b, fn(scalar_like(b, a), b.t)); },
        "a"_a, "b"_a);
  }
}

void bind_reductions(nb::module_& m) {
  for (const ReduceOp& op : reduce_ops()) {
    m.def(op.name, reducer(op), "x"_a, "axis"_a = nb::none(), "keepdim"_a = false);
  }
  m.def(
      "var",
      [](const PyTensor& x, nb::handle axis, double correction, bool keepdim) {
        return result(x, fusejit::var(x.t, axes_of(axis), correction, keepdim));
      },
      "x"_a, "axis"_a = nb::none(), "correction"_a = 1.0, "keepdim"_a = false);
  m.def(
      "argmax",
      [](const PyTensor& x, int64_t axis, bool keepdim) {
        return result(x, fusejit::argmax(x.t, axis, keepdim));
      },
      "x"_a, "axis"_a = -1, "keepdim"_a = false);
}

void bind_views(nb::module_& m) {
  m.def(
      "reshape", [](const PyTensor& x, Shape s) { return result(x, reshape(x.t, s)); }, "x"_a,
      "shape"_a);
  m.def(
      "permute",
      [](const PyTensor& x, std::vector<int64_t> p) { return result(x, permute(x.t, p)); }, "x"_a,
      "dims"_a);
  m.def(
      "transpose",
      [](const PyTensor& x, int64_t a, int64_t b) { return result(x, transpose(x.t, a, b)); },
      "x"_a, "axis0"_a, "axis1"_a);
  m.def(
      "expand", [](const PyTensor& x, Shape s) { return result(x, expand(x.t, s)); }, "x"_a,
      "shape"_a);
  m.def(
      "squeeze", [](const PyTensor& x, int64_t a) { return result(x, squeeze(x.t, a)); }, "x"_a,
      "axis"_a);
  m.def(
      "unsqueeze", [](const PyTensor& x, int64_t a) { return result(x, unsqueeze(x.t, a)); }, "x"_a,
      "axis"_a);
  m.def(
      "slice",
      [](const PyTensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
        return result(x, slice(x.t, axis, start, stop, step));
      },
      "x"_a, "axis"_a, "start"_a, "stop"_a, "step"_a = 1);
  m.def(
      "narrow",
      [](const PyTensor& x, int64_t axis, int64_t start, int64_t length) {
        return result(x, narrow(x.t, axis, start, length));
      },
      "x"_a, "axis"_a, "start"_a, "length"_a);
  m.def(
      "chunk",
      [](const PyTensor& x, int64_t chunks, int64_t axis) {
        std::vector<PyTensor> out;
        for (Tensor& t : chunk(x.t, chunks, axis)) out.push_back(result(x, std::move(t)));
        return out;
      },
      "x"_a, "chunks"_a, "axis"_a = 0);
  m.def(
      "concat",
      [](const std::vector<PyTensor>& xs, int64_t axis) {
        if (xs.empty()) throw UsageError("concat: no tensors given; pass at least one");
        return result(xs.front(), concat(handles(xs), axis));
      },
      "tensors"_a, "axis"_a = 0);
}

// An optional tensor argument: None is the C++ API's empty handle.
Tensor optional_tensor(const std::optional<PyTensor>& t) { return t ? t->t : Tensor(); }

void bind_composites(nb::module_& m) {
  m.def(
      "matmul", [](const PyTensor& a, const PyTensor& b) { return result(a, matmul(a.t, b.t)); },
      "a"_a, "b"_a);
  m.def(
      "where",
      [](const PyTensor& c, nb::handle a, nb::handle b) {
        return result(c, where(c.t, operand(c, a), operand(c, b)));
      },
      "cond"_a, "a"_a, "b"_a);
  m.def(
      "cast", [](const PyTensor& x, DType d) { return result(x, cast(x.t, d)); }, "x"_a, "dtype"_a);
  m.def(
      "gelu",
      [](const PyTensor& x, const std::string& approximate) {
        if (approximate != "none" && approximate != "tanh") {
          throw UsageError("gelu: approximate='" + approximate + "'; use 'none' or 'tanh'");
        }
        return result(x, gelu(x.t, approximate == "tanh" ? GeluApprox::tanh : GeluApprox::none));
      },
      "x"_a, "approximate"_a = "none");
  m.def(
      "softmax", [](const PyTensor& x, int64_t axis) { return result(x, softmax(x.t, axis)); },
      "x"_a, "axis"_a = -1);
  m.def(
      "log_softmax",
      [](const PyTensor& x, int64_t axis) { return result(x, log_softmax(x.t, axis)); }, "x"_a,
      "axis"_a = -1);
  m.def(
      "layer_norm",
      [](const PyTensor& x, std::optional<PyTensor> w, std::optional<PyTensor> b, double eps,
         int64_t rank) {
        return result(x, layer_norm(x.t, optional_tensor(w), optional_tensor(b), eps, rank));
      },
      "x"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5,
      "normalized_rank"_a = 1);
  m.def(
      "rms_norm",
      [](const PyTensor& x, std::optional<PyTensor> w, double eps, int64_t rank) {
        return result(x, rms_norm(x.t, optional_tensor(w), eps, rank));
      },
      "x"_a, "weight"_a = nb::none(), "eps"_a = 1e-6, "normalized_rank"_a = 1);
  m.def(
      "linear",
      [](const PyTensor& x, const PyTensor& w, std::optional<PyTensor> b) {
        return result(x, linear(x.t, w.t, optional_tensor(b)));
      },
      "x"_a, "weight"_a, "bias"_a = nb::none());
  m.def(
      "clamp",
      [](const PyTensor& x, std::optional<double> lo, std::optional<double> hi) {
        return result(x, clamp(x.t, lo, hi));
      },
      "x"_a, "min"_a = nb::none(), "max"_a = nb::none());
  m.def(
      "addcmul",
      [](const PyTensor& x, const PyTensor& a, const PyTensor& b, double value) {
        return result(x, addcmul(x.t, a.t, b.t, value));
      },
      "x"_a, "a"_a, "b"_a, "value"_a = 1.0);
}

// update_slice's position: a Tensor (one i32 or i64, read when the trace runs) or a Python int,
// made a scalar on dst's Context: i32, or i64 when it does not fit in 32 bits. An int is a
// constant of the recorded trace; a position that moves from step to step belongs in a buffer
// that the step advances (docs/python.md, "Writing into a buffer and replaying a step").
Tensor start_of(const PyTensor& dst, nb::handle start) {
  if (nb::isinstance<PyTensor>(start)) return nb::cast<const PyTensor&>(start).t;
  if (!PyIndex_Check(start.ptr())) {
    throw nb::type_error(("update_slice: start is a " + std::string(nb::inst_name(start).c_str()) +
                          "; pass an int or a fusejit.Tensor holding one i32 or i64")
                             .c_str());
  }
  const int64_t p = nb::cast<int64_t>(start);
  const bool fits =
      p >= std::numeric_limits<int32_t>::min() && p <= std::numeric_limits<int32_t>::max();
  return dst.ctx->scalar(static_cast<double>(p), fits ? DType::i32 : DType::i64);
}

// The in-place write and the sampling ops of a decode step (docs/api.md, "Writing into a
// buffer"); argmax is with the reductions.
void bind_decoding(nb::module_& m) {
  // dst itself comes back (the same Python object): the write rebinds every handle to it.
  m.def(
      "update_slice",
      [](PyTensor& dst, int64_t axis, nb::handle start, const PyTensor& value) -> PyTensor& {
        update_slice(dst.t, axis, start_of(dst, start), value.t);
        return dst;
      },
      "dst"_a, "axis"_a, "start"_a, "value"_a, nb::rv_policy::reference);
  // sample(logits, t, seed, offset) and sample(logits, t, key): {seed, offset} as arguments,
  // or as data (an i64[2] tensor) that a replayed step advances.
  m.def(
      "sample",
      [](const PyTensor& logits, double temperature, uint64_t seed, uint64_t offset, int64_t axis) {
        return result(logits, sample(logits.t, temperature, seed, offset, axis));
      },
      "logits"_a, "temperature"_a, "seed"_a = 0, "offset"_a = 0, "axis"_a = -1);
  m.def(
      "sample",
      [](const PyTensor& logits, double temperature, const PyTensor& key, int64_t axis) {
        return result(logits, sample(logits.t, temperature, key.t, axis));
      },
      "logits"_a, "temperature"_a, "key"_a, "axis"_a = -1);
  m.def(
      "top_k_filter",
      [](const PyTensor& logits, int64_t k) { return result(logits, top_k_filter(logits.t, k)); },
      "logits"_a, "k"_a);
  m.def(
      "top_p_filter",
      [](const PyTensor& logits, double p) { return result(logits, top_p_filter(logits.t, p)); },
      "logits"_a, "p"_a);
}

void bind_indexing(nb::module_& m) {
  m.def(
      "gather",
      [](const PyTensor& x, int64_t axis, const PyTensor& index) {
        return result(x, gather(x.t, axis, index.t));
      },
      "x"_a, "axis"_a, "index"_a);
  m.def(
      "index_select",
      [](const PyTensor& x, int64_t axis, const PyTensor& index) {
        return result(x, index_select(x.t, axis, index.t));
      },
      "x"_a, "axis"_a, "index"_a);
  m.def(
      "embedding",
      [](const PyTensor& table, const PyTensor& ids) {
        return result(table, embedding(table.t, ids.t));
      },
      "table"_a, "ids"_a);
  m.def(
      "eval",
      [](const std::vector<PyTensor>& xs) {
        std::vector<Tensor> ts = handles(xs);
        without_gil([&] { fusejit::eval(ts); });
      },
      "tensors"_a);
  m.def(
      "plan_text",
      [](const std::vector<PyTensor>& xs) {
        std::vector<Tensor> ts = handles(xs);
        return without_gil([&] { return plan_text(ts); });
      },
      "tensors"_a);
  m.def(
      "plan_summary",
      [](const std::vector<PyTensor>& xs) {
        std::vector<Tensor> ts = handles(xs);
        const PlanSummary s = without_gil([&] { return plan_summary(ts); });
        nb::dict d;
        d["kernels"] = s.kernels;
        d["library_calls"] = s.library_calls;
        d["regions"] = s.regions;
        return d;
      },
      "tensors"_a);
}

}  // namespace

const std::vector<UnaryOp>& unary_ops() {
  static const std::vector<UnaryOp> ops = {{"neg", &neg},
                                           {"abs", &fusejit::abs},
                                           {"exp", &fusejit::exp},
                                           {"log", &fusejit::log},
                                           {"sqrt", &fusejit::sqrt},
                                           {"rsqrt", &rsqrt},
                                           {"sin", &fusejit::sin},
                                           {"cos", &fusejit::cos},
                                           {"tanh", &fusejit::tanh},
                                           {"sigmoid", &sigmoid},
                                           {"relu", &relu},
                                           {"silu", &silu},
                                           {"reciprocal", &reciprocal}};
  return ops;
}

const std::vector<ReduceOp>& reduce_ops() {
  static const std::vector<ReduceOp> ops = {{"sum", &fusejit::sum},
                                            {"mean", &fusejit::mean},
                                            {"max", &fusejit::max},
                                            {"min", &fusejit::min}};
  return ops;
}

const std::vector<BinaryOp>& binary_ops() {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  static const std::vector<BinaryOp> ops = {
      {"add", &add, "__add__", "__radd__"},
      {"sub", &sub, "__sub__", "__rsub__"},
      {"mul", &mul, "__mul__", "__rmul__"},
      {"div", &div, "__truediv__", "__rtruediv__"},
      {"pow", static_cast<Fn>(&fusejit::pow), "__pow__", "__rpow__"},
      {"maximum", &maximum, nullptr, nullptr},
      {"minimum", &minimum, nullptr, nullptr},
      {"eq", &eq, "__eq__", nullptr},
      {"ne", &ne, "__ne__", nullptr},
      {"lt", &lt, "__lt__", nullptr},
      {"le", &le, "__le__", nullptr},
      {"gt", &gt, "__gt__", nullptr},
      {"ge", &ge, "__ge__", nullptr}};
  return ops;
}

Tensor scalar_like(const PyTensor& x, double value) {
  const DType d = x.t.dtype();
  const bool fits = is_floating(d) ||
                    (is_integral(d) && value == static_cast<double>(static_cast<int64_t>(value)));
  return x.ctx->scalar(value, fits ? d : DType::f32);
}

std::vector<Tensor> handles(const std::vector<PyTensor>& tensors) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const PyTensor& t : tensors) out.push_back(t.t);
  return out;
}

void bind_ops(nb::module_& m) {
  bind_table_ops(m);
  bind_reductions(m);
  bind_views(m);
  bind_composites(m);
  bind_indexing(m);
  bind_decoding(m);
}

}  // namespace fusejit::python
