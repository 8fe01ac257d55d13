// python/tensor: fusejit.Tensor: its properties, Python operators, methods and indexing.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

using namespace nb::literals;

nb::tuple shape_tuple(const Shape& shape) {
  nb::list l;
  for (int64_t d : shape) l.append(d);
  return nb::tuple(l);
}

// x[index]: ints (the axis dropped), slices with a positive step, None (a new axis of 1) and
// one Ellipsis, as numpy and torch index; other indices (tensors, lists) are TypeErrors.
PyTensor get_item(const PyTensor& x, nb::handle index) {
  nb::tuple items =
      nb::isinstance<nb::tuple>(index) ? nb::borrow<nb::tuple>(index) : nb::make_tuple(index);
  size_t taking = 0;  // items that consume an axis
  for (nb::handle item : items) taking += !item.is_none() && !item.is(nb::ellipsis());
  if (taking > static_cast<size_t>(x.t.rank())) {
    throw UsageError("index: " + std::to_string(taking) + " indices for a tensor of rank " +
                     std::to_string(x.t.rank()));
  }
  Tensor t = x.t;
  int64_t axis = 0;
  for (nb::handle item : items) {
    if (item.is(nb::ellipsis())) {
      axis = t.rank() - static_cast<int64_t>(taking);  // the items after it take the last axes
    } else if (item.is_none()) {
      t = unsqueeze(t, axis++);
    } else if (nb::isinstance<nb::slice>(item)) {
      const auto [start, stop, step, length] =
          nb::borrow<nb::slice>(item).compute(static_cast<size_t>(t.shape()[axis]));
      if (static_cast<int64_t>(step) < 1) {
        throw UsageError("index: a slice step must be at least 1 (got " +
                         std::to_string(static_cast<int64_t>(step)) + ")");
      }
      if (!(start == 0 && length == static_cast<size_t>(t.shape()[axis]) && step == 1)) {
        t = slice(t, axis, static_cast<int64_t>(start), static_cast<int64_t>(stop),
                  static_cast<int64_t>(step));
      }
      ++axis;
      --taking;
    } else if (PyIndex_Check(item.ptr())) {
      const int64_t extent = t.shape()[axis];
      int64_t i = nb::cast<int64_t>(item);
      if (i < -extent || i >= extent) {
        throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for axis " +
                               std::to_string(axis) + " of extent " + std::to_string(extent))
                                  .c_str());
      }
      if (i < 0) i += extent;
      t = squeeze(narrow(t, axis, i, 1), axis);
      --taking;
    } else {
      throw nb::type_error(
          "fusejit.Tensor indices are ints, slices, None and ...; for a tensor "
          "of indices use fusejit.index_select or fusejit.gather");
    }
  }
  return result(x, t);
}

void bind_operators(nb::class_<PyTensor>& cls) {
  for (const BinaryOp& op : binary_ops()) {
    if (!op.dunder) continue;
    cls.def(
        op.dunder,
        [fn = op.fn](const PyTensor& a, const PyTensor& b) { return result(a, fn(a.t, b.t)); },
        nb::is_operator());
    cls.def(
        op.dunder,
        [fn = op.fn](const PyTensor& a, double b) { return result(a, fn(a.t, scalar_like(a, b))); },
        nb::is_operator());
    if (!op.reflected) continue;
    cls.def(
        op.reflected,
        [fn = op.fn](const PyTensor& b, double a) { return result(b, fn(scalar_like(b, a), b.t)); },
        nb::is_operator());
  }
  cls.def(
         "__matmul__",
         [](const PyTensor& a, const PyTensor& b) { return result(a, matmul(a.t, b.t)); },
         nb::is_operator())
      .def("__neg__", [](const PyTensor& x) { return result(x, neg(x.t)); })
      .def("__abs__", [](const PyTensor& x) { return result(x, fusejit::abs(x.t)); })
      .def("__getitem__", &get_item)
      .def("__bool__",
           [](const PyTensor& x) -> bool {
             if (x.t.numel() != 1) {
               throw nb::value_error(
                   "the truth value of a fusejit.Tensor of more than one element "
                   "is ambiguous; reduce it first (fusejit.max, fusejit.min)");
             }
             return without_gil([&] { return x.t.to_host()[0] != 0; });
           })
      .def("__hash__",
           [](const PyTensor& x) { return reinterpret_cast<uintptr_t>(x.t.impl().get()); });
}

void bind_methods(nb::class_<PyTensor>& cls) {
  for (const UnaryOp& op : unary_ops()) {
    cls.def(op.name, [fn = op.fn](const PyTensor& x) { return result(x, fn(x.t)); });
  }
  for (const ReduceOp& op : reduce_ops()) {
    cls.def(op.name, reducer(op), "axis"_a = nb::none(), "keepdim"_a = false);
  }
  // x.reshape(2, 3) or x.reshape((2, 3)); expand and permute alike.
  using View = Tensor (*)(const Tensor&, Shape);
  const std::pair<const char*, View> views[] = {
      {"reshape", &reshape}, {"expand", &expand}, {"permute", &permute}};
  for (const auto& [name, fn] : views) {
    cls.def(
        name,
        [fn = fn](const PyTensor& x, nb::handle first, const nb::args& rest) {
          return result(x, fn(x.t, shape_of(first, rest)));
        },
        "shape"_a, "rest"_a);
  }
  cls.def(
         "transpose",
         [](const PyTensor& x, int64_t a, int64_t b) { return result(x, transpose(x.t, a, b)); },
         "axis0"_a, "axis1"_a)
      .def(
          "squeeze", [](const PyTensor& x, int64_t a) { return result(x, squeeze(x.t, a)); },
          "axis"_a)
      .def(
          "unsqueeze", [](const PyTensor& x, int64_t a) { return result(x, unsqueeze(x.t, a)); },
          "axis"_a)
      .def(
          "softmax", [](const PyTensor& x, int64_t a) { return result(x, softmax(x.t, a)); },
          "axis"_a = -1)
      .def(
          "astype", [](const PyTensor& x, DType d) { return result(x, cast(x.t, d)); }, "dtype"_a)
      .def_prop_ro("T", [](const PyTensor& x) {
        std::vector<int64_t> perm;
        for (int64_t i = x.t.rank() - 1; i >= 0; --i) perm.push_back(i);
        return result(x, permute(x.t, perm));
      });
}

}  // namespace

std::vector<int64_t> axes_of(nb::handle axes) {
  if (axes.is_none()) return {};
  if (PyIndex_Check(axes.ptr())) return {nb::cast<int64_t>(axes)};
  return nb::cast<std::vector<int64_t>>(axes);
}

Shape shape_of(nb::handle first, const nb::args& rest) {
  if (rest.size() == 0 && !PyIndex_Check(first.ptr())) return nb::cast<Shape>(first);
  Shape shape{nb::cast<int64_t>(first)};
  for (nb::handle d : rest) shape.push_back(nb::cast<int64_t>(d));
  return shape;
}

nb::class_<PyTensor> bind_tensor(nb::module_& m) {
  nb::class_<PyTensor> cls(m, "Tensor",
                           "A lazy tensor: ops record into its Context's trace; eval, to_numpy "
                           "and DLPack export compute it.");
  cls.def_prop_ro("shape", [](const PyTensor& x) { return shape_tuple(x.t.shape()); })
      .def_prop_ro("dtype", [](const PyTensor& x) { return x.t.dtype(); })
      .def_prop_ro("ndim", [](const PyTensor& x) { return x.t.rank(); })
      .def_prop_ro("size", [](const PyTensor& x) { return x.t.numel(); })
      .def_prop_ro("context", [](const PyTensor& x) { return PyContext{x.ctx}; })
      .def("__len__",
           [](const PyTensor& x) {
             if (x.t.rank() == 0) throw nb::type_error("len() of a rank-0 fusejit.Tensor");
             return x.t.shape()[0];
           })
      .def(
          "eval",
          [](PyTensor& x) -> PyTensor& {
            without_gil([&] { x.t.eval(); });
            return x;
          },
          nb::rv_policy::reference)
      .def("data_ptr",
           [](const PyTensor& x) {
             return reinterpret_cast<uintptr_t>(without_gil([&] { return x.t.data_ptr(); }));
           })
      .def("plan", [](const PyTensor& x) { return without_gil([&] { return plan_text({x.t}); }); })
      .def(
          "_copy_to",
          [](const PyTensor& x, nb::ndarray<nb::c_contig, nb::device::cpu> out) {
            void* data = out.data();
            const size_t bytes = out.nbytes();
            without_gil([&] { x.t.copy_to_host(data, bytes); });
          },
          "out"_a);
  bind_operators(cls);
  bind_methods(cls);
  return cls;
}

}  // namespace fusejit::python
