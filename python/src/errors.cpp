// python/errors: fusejit's C++ errors as Python exceptions, each with the C++ message.
//
//   fusejit.Error             base of all below (a RuntimeError)
//   fusejit.UsageError        the caller's mistake: also a ValueError (a bad shape, axis,
//                             broadcast, dtype or env value), as numpy's broadcasting errors are
//   fusejit.CompileError      NVRTC rejected a generated kernel; .source_path, .log
//   fusejit.OutOfMemoryError  also a MemoryError; .requested_bytes
//   fusejit.CudaError         a CUDA or cuBLASLt call failed; .call, .code
//   fusejit.InternalError     a broken invariant inside fusejit (a bug to report)
// Python argument types nanobind cannot convert are TypeErrors, as anywhere in Python.
#include <exception>

#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* usage = nullptr;
  PyObject* compile = nullptr;
  PyObject* oom = nullptr;
  PyObject* cuda = nullptr;
  PyObject* internal = nullptr;
};
ErrorTypes types;  // created once, when the module is imported; never freed (as the module)

PyObject* new_type(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("fusejit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

// Raises `type` with `message` and the attributes given as (name, value) pairs.
template <class... Attrs>
void raise(PyObject* type, const char* message, Attrs... attrs) {
  nb::object exc = nb::steal(PyObject_CallFunction(type, "s", message));
  if (!exc.is_valid()) return;  // the call raised already
  (nb::setattr(exc, attrs.first, attrs.second), ...);
  PyErr_SetObject(type, exc.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const UsageError& e) {
    raise(types.usage, e.what());
  } catch (const CompileError& e) {
    raise(types.compile, e.what(), std::pair("source_path", nb::str(e.source_path().c_str())),
          std::pair("log", nb::str(e.log().c_str())));
  } catch (const OutOfMemoryError& e) {
    raise(types.oom, e.what(), std::pair("requested_bytes", nb::int_(e.requested_bytes())));
  } catch (const CudaError& e) {
    raise(types.cuda, e.what(), std::pair("call", nb::str(e.call().c_str())),
          std::pair("code", nb::int_(e.code())));
  } catch (const Error& e) {
    raise(types.error, e.what());
  } catch (const InternalError& e) {
    raise(types.internal, e.what());
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  types.error = new_type(m, "Error", PyExc_RuntimeError, "Base of fusejit's errors.");
  nb::object usage_bases = nb::make_tuple(nb::handle(types.error), nb::handle(PyExc_ValueError));
  types.usage = new_type(m, "UsageError", usage_bases.ptr(),
                         "The caller's mistake: the message names what and how to fix it.");
  types.compile = new_type(m, "CompileError", types.error,
                           "NVRTC could not compile a generated kernel (.source_path, .log).");
  nb::object oom_bases = nb::make_tuple(nb::handle(types.error), nb::handle(PyExc_MemoryError));
  types.oom = new_type(m, "OutOfMemoryError", oom_bases.ptr(),
                       "A device allocation failed (.requested_bytes).");
  types.cuda =
      new_type(m, "CudaError", types.error, "A CUDA or cuBLASLt call failed (.call, .code).");
  types.internal = new_type(m, "InternalError", PyExc_RuntimeError,
                            "A broken invariant inside fusejit: a bug to report.");
  nb::register_exception_translator(translate);
}

}  // namespace fusejit::python
