// python/dlpack: the DLPack protocol both ways, zero-copy (fusejit/dlpack.h).
//
// Export: Tensor.__dlpack__(stream=...) hands out a "dltensor" capsule whose deleter keeps the
// values alive; on a GPU the consumer's stream waits for fusejit's work (an event), and the
// host never does. Import: fusejit.from_dlpack asks the producer for a capsule (on the
// Context's stream) and reads its memory in place; the producer's deleter is called once
// fusejit no longer needs it. DLPack 0.6's DLManagedTensor (Debian's libdlpack-dev), not the
// versioned struct of DLPack 1.0: a producer asked without max_version gives the 0.6 capsule.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "fusejit/dlpack.h"
#include "python/src/bindings.h"

namespace fusejit::python {

namespace {

using namespace nb::literals;

constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

// A capsule the consumer never took still owns its tensor.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsule)) return;  // consumed (renamed) or not ours
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (managed && managed->deleter) managed->deleter(managed);
}

// The consumer's stream, as the protocol passes it for CUDA: None is the legacy default
// stream, 1 too, 2 the per-thread default stream, -1 no ordering, other values a cudaStream_t.
CUstream_st* consumer_stream(nb::handle stream) {
  if (stream.is_none()) return nullptr;
  const int64_t s = nb::cast<int64_t>(stream);
  if (s == -1) return kNoStreamOrder;
  if (s == 0) {
    throw nb::value_error(
        "__dlpack__: stream=0 is ambiguous for CUDA and DLPack forbids it; "
        "pass 1 for the legacy default stream or 2 for the per-thread one");
  }
  if (s == 1) return nullptr;
  return reinterpret_cast<CUstream_st*>(static_cast<uintptr_t>(s));
}

// A producer's tensor whose deleter runs with the GIL (with_gil): numpy's takes the GIL, and
// fusejit may let go of the memory on a thread that released it while holding a Context's lock.
struct GilDeleted {
  DLManagedTensor managed{};
  DLManagedTensor* producer = nullptr;
};

DLManagedTensor* with_gil_deleter(DLManagedTensor* producer) {
  auto* w = new GilDeleted{};
  w->managed.dl_tensor = producer->dl_tensor;  // shape and strides stay the producer's
  w->managed.manager_ctx = w;
  w->managed.deleter = [](DLManagedTensor* self) {
    auto* w = static_cast<GilDeleted*>(self->manager_ctx);
    DLManagedTensor* p = w->producer;
    delete w;
    with_gil([p] {
      if (p->deleter) p->deleter(p);
    });
  };
  w->producer = producer;
  return &w->managed;
}

// Frees with_gil_deleter's wrapper of a tensor that fusejit did not take.
void unwrap(DLManagedTensor* wrapped) { delete static_cast<GilDeleted*>(wrapped->manager_ctx); }

std::pair<int, int> device_of(const PyTensor& x) {
  return x.ctx->has_gpu() ? std::pair(static_cast<int>(kDLCUDA), x.ctx->device())
                          : std::pair(static_cast<int>(kDLCPU), 0);
}

nb::object to_capsule(const PyTensor& x, nb::handle stream, nb::handle /*max_version*/,
                      nb::handle dl_device, nb::handle copy) {
  const std::pair<int, int> device = device_of(x);
  if (!dl_device.is_none() && nb::cast<std::pair<int, int>>(dl_device) != device) {
    throw nb::buffer_error(
        "__dlpack__: fusejit exports on its Context's device only (see "
        "__dlpack_device__); copy the result there with the consumer");
  }
  if (!copy.is_none() && nb::cast<bool>(copy)) {
    throw nb::buffer_error(
        "__dlpack__(copy=True): fusejit exports its own memory, zero-copy; "
        "copy the result with the consumer (e.g. torch's .clone())");
  }
  DLManagedTensor* managed = nullptr;
  if (!x.ctx->has_gpu()) {
    if (!stream.is_none() && nb::cast<int64_t>(stream) != -1) {
      throw nb::value_error("__dlpack__: stream must be None for a CPU tensor (kDLCPU)");
    }
    // ready when computed: nothing to order
    managed = without_gil([&] { return x.t.to_dlpack(kNoStreamOrder); });
  } else {
    CUstream_st* s = consumer_stream(stream);
    managed = without_gil([&] { return x.t.to_dlpack(s); });
  }
  PyObject* capsule = PyCapsule_New(managed, kCapsule, &capsule_destructor);
  if (!capsule) {
    managed->deleter(managed);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

// A Tensor reading the capsule's tensor in place; the capsule is consumed (renamed) once
// fusejit owns it, and left as it was on an error (its producer's deleter then runs with it).
PyTensor from_capsule(PyContext& c, nb::handle capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsule)) {
    throw nb::type_error(
        "from_dlpack: expected an unused 'dltensor' capsule (DLPack 0.6), or an "
        "object with __dlpack__; a capsule can be consumed once");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsule));
  DLManagedTensor* deferred = with_gil_deleter(managed);
  Tensor t;
  try {
    t = without_gil([&] { return from_dlpack(*c.ctx, deferred); });
  } catch (...) {
    unwrap(deferred);  // not consumed: the capsule still owns `managed`
    throw;
  }
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsule) != 0) throw nb::python_error();
  return PyTensor{c.ctx, std::move(t)};
}

// x computed into the capsule's memory (fusejit::eval_into): the capsule is consumed, and its
// producer's deleter runs, with the GIL, once fusejit no longer writes or reads the memory.
void eval_into_capsule(const PyTensor& x, nb::handle capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsule)) {
    throw nb::type_error(
        "eval_into: expected an unused 'dltensor' capsule (DLPack 0.6), or an object with "
        "__dlpack__ such as a numpy array or a torch tensor");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsule));
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsule) != 0) throw nb::python_error();
  DLManagedTensor* deferred = with_gil_deleter(managed);
  without_gil([&] { eval_into(x.t, deferred); });
}

}  // namespace

void bind_dlpack(nb::module_& m, nb::class_<PyTensor>& cls) {
  // max_version is accepted and the 0.6 capsule returned, as the protocol allows a producer
  // without DLPack 1.0.
  cls.def("__dlpack__", &to_capsule, nb::kw_only(), "stream"_a = nb::none(),
          "max_version"_a = nb::none(), "dl_device"_a = nb::none(), "copy"_a = nb::none())
      .def("__dlpack_device__", &device_of);
  m.def("_from_capsule", &from_capsule, "context"_a, "capsule"_a);
  cls.def("_eval_into_capsule", &eval_into_capsule, "capsule"_a);
}

}  // namespace fusejit::python
