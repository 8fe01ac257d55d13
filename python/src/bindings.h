// python/src: the nanobind extension fusejit._fusejit, over the public C++ API alone.
//
// Lifetime: a C++ Tensor must not outlive its Context, while Python frees objects in any order.
// So every Python Tensor holds its Context (a shared_ptr) next to its handle, declared first so
// that it is destroyed last: a Context lives while any Python Tensor of it does.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "fusejit/fusejit.h"

namespace fusejit::python {

namespace nb = nanobind;

// The GIL. Work that can run long or wait on the GPU (evals, copies out, DLPack, plans) runs
// without it, so that other Python threads go on meanwhile; such a region touches no Python
// object. Python code that fusejit calls back (a DLPack producer's deleter, an eval_into
// destination's release) can then run on a thread that holds a Context's lock but not the GIL,
// while another thread holds the GIL and waits for that lock: there it must not wait for the
// GIL, so with_gil queues it, to run on the next return through without_gil (or on the main
// thread, as one of the interpreter's pending calls).
void with_gil(std::function<void()> fn);
// Runs what with_gil queued (with the GIL held).
void run_queued() noexcept;

// f(), with the GIL released; then what was queued meanwhile, with the GIL back.
template <class F>
decltype(auto) without_gil(F&& f) {
  struct RunQueued {
    ~RunQueued() { run_queued(); }
  } after;  // destroyed after `released`, with the GIL held again
  nb::gil_scoped_release released;
  return std::forward<F>(f)();
}

// fusejit.Context.
struct PyContext {
  std::shared_ptr<Context> ctx;
};

// fusejit.Tensor: a handle and the Context it belongs to.
struct PyTensor {
  std::shared_ptr<Context> ctx;
  Tensor t;
};

// A result of an op on `like`'s Context.
inline PyTensor result(const PyTensor& like, Tensor t) { return PyTensor{like.ctx, std::move(t)}; }

// A rank-0 constant on x's Context for a Python scalar: of x's dtype when that holds the value
// (any value for float dtypes, whole numbers for integer ones), else f32, as PyTorch promotes
// an integer tensor compared with a float.
Tensor scalar_like(const PyTensor& x, double value);

// Axes from None (every axis), an int or a sequence of ints.
std::vector<int64_t> axes_of(nb::handle axes);
// A shape from a sequence of ints, or from the ints themselves (x.reshape(2, 3)).
Shape shape_of(nb::handle shape_or_first, const nb::args& rest);

// The handles of several Python Tensors of one Context (the Context of the first).
std::vector<Tensor> handles(const std::vector<PyTensor>& tensors);

void bind_errors(nb::module_& m);
void bind_context(nb::module_& m);
nb::class_<PyTensor> bind_tensor(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_dlpack(nb::module_& m, nb::class_<PyTensor>& tensor);
void bind_replay(nb::module_& m);

}  // namespace fusejit::python

namespace fusejit::python {

// The ops bound by table, as module functions (fusejit.exp(x)) and Tensor methods (x.exp()).
struct UnaryOp {
  const char* name;
  Tensor (*fn)(const Tensor&);
};
struct BinaryOp {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  const char* dunder;     // "__add__", or null: no Python operator
  const char* reflected;  // "__radd__", or null
};
struct ReduceOp {
  const char* name;
  Tensor (*fn)(const Tensor&, std::vector<int64_t>, bool);
};
const std::vector<UnaryOp>& unary_ops();
const std::vector<ReduceOp>& reduce_ops();  // sum, mean, max, min: (x, axis=None, keepdim=False)
// The binding of a reduction (a module function, or a method with x as self).
inline auto reducer(const ReduceOp& op) {
  return [fn = op.fn](const PyTensor& x, nb::handle axis, bool keepdim) {
    return result(x, fn(x.t, axes_of(axis), keepdim));
  };
}
const std::vector<BinaryOp>& binary_ops();

}  // namespace fusejit::python
