// A C ABI over fusejit for dlpack_torch.py: PyTorch hands tensors in and takes results back
// through DLPack, in one process, with ctypes. One Context per process, on the GPU and stream
// PyTorch uses (or the CPU reference when there is no GPU).
#include <memory>
#include <string>

#include "fusejit/dlpack.h"
#include "fusejit/fusejit.h"

namespace {

std::unique_ptr<fusejit::Context> context;
std::string last_error;

template <class Fn>
auto guarded(Fn fn, decltype(fn()) on_error) -> decltype(fn()) {
  try {
    if (!context) throw fusejit::UsageError("fjt_open was not called");
    return fn();
  } catch (const std::exception& e) {
    last_error = e.what();
    return on_error;
  }
}

}  // namespace

extern "C" {

// Creates the Context on GPU `device` and `stream` (a cudaStream_t; null: fusejit's own).
// Returns 0, or -1 with the reason in fjt_error().
int fjt_open(int device, void* stream) {
  try {
    context = std::make_unique<fusejit::Context>(
        fusejit::Options::parse({{"FUSEJIT_LOG", "error"}}),
        fusejit::Placement{.device = device, .stream = static_cast<CUstream_st*>(stream)});
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// Whether the Context runs on a GPU (1) or the CPU reference (0).
int fjt_has_gpu() { return context && context->has_gpu() ? 1 : 0; }

const char* fjt_error() { return last_error.c_str(); }

void fjt_close() { context.reset(); }

// relu(x * scale + y), exported; consumes x and y (their deleters are called once fusejit is
// done with them). Null on an error (x and y are then left unconsumed).
DLManagedTensor* fjt_relu_axpy(DLManagedTensor* x, DLManagedTensor* y, double scale) {
  return guarded(
      [&] {
        const fusejit::Tensor xt = fusejit::from_dlpack(*context, x);
        const fusejit::Tensor yt = fusejit::from_dlpack(*context, y);
        return fusejit::relu(xt * scale + yt).to_dlpack();
      },
      static_cast<DLManagedTensor*>(nullptr));
}

// softmax(x) over the last axis, computed into `out`'s memory (a dense tensor of x's shape and
// dtype). Consumes both; 0, or -1 on an error.
int fjt_softmax_into(DLManagedTensor* x, DLManagedTensor* out) {
  return guarded(
      [&] {
        const fusejit::Tensor xt = fusejit::from_dlpack(*context, x);
        fusejit::Tensor result = fusejit::softmax(xt);
        const DLTensor& o = out->dl_tensor;
        const size_t bytes =
            static_cast<size_t>(result.numel()) * static_cast<size_t>(fusejit::dtype_size(result.dtype()));
        result.eval_into(static_cast<char*>(o.data) + o.byte_offset, bytes);
        result = fusejit::Tensor();  // it reads `out` no more
        context->synchronize();
        if (out->deleter) out->deleter(out);
        return 0;
      },
      -1);
}

}  // extern "C"
