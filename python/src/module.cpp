// python/module: the extension's entry point, and the dtype enum every other file uses.
#include <nanobind/stl/string.h>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

void bind_dtypes(nb::module_& m) {
  nb::enum_<DType>(m, "DType", "fusejit's element types")
      .value("float32", DType::f32)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("bool", DType::boolean)
      .value("int8", DType::i8)
      .def_prop_ro("itemsize", [](DType d) { return dtype_size(d); })
      .def_prop_ro("is_floating_point", [](DType d) { return is_floating(d); })
      .def("__str__", [](DType d) { return std::string(dtype_name(d)); });
}

}  // namespace

}  // namespace fusejit::python

NB_MODULE(_fusejit, m) {
  using namespace fusejit::python;
  m.doc() = "fusejit's C++ API (use the fusejit package, which wraps it)";
  m.attr("__version__") = FUSEJIT_VERSION_STRING;
  bind_dtypes(m);
  bind_errors(m);
  bind_context(m);
  nb::class_<PyTensor> tensor = bind_tensor(m);
  bind_ops(m);
  bind_dlpack(m, tensor);
  bind_replay(m);
}
