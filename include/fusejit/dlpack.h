// DLPack exchange (https://dmlc.github.io/dlpack): tensors to and from PyTorch, CuPy, JAX and
// any other DLPack producer or consumer, without copies. Needs <dlpack/dlpack.h> (Debian's
// libdlpack-dev); fusejit.h does not include this header, so that programs without DLPack are
// unaffected.
//
//   DLManagedTensor* in = ...;                           // e.g. from torch.utils.dlpack
//   fusejit::Tensor x = fusejit::from_dlpack(ctx, in);   // reads in->dl_tensor.data in place
//   DLManagedTensor* out = fusejit::relu(x).to_dlpack(); // hand it to the consumer
#pragma once

#if defined(__has_include)
#if !__has_include(<dlpack/dlpack.h>)
#error "fusejit/dlpack.h needs DLPack's header <dlpack/dlpack.h>: install it (Debian/Ubuntu: libdlpack-dev) where find_package(fusejit) or your include path finds it"
#endif
#endif
#include <dlpack/dlpack.h>

#include "fusejit/context.h"
#include "fusejit/export.h"
#include "fusejit/tensor.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

// A tensor reading `managed`'s memory in place, as Context::wrap does (permuted and sliced
// strides, e.g. torch's t[:, :, h0:h1] or t[::2], and broadcasts included, byte_offset
// applied); `managed`'s deleter is called once when fusejit no longer needs the memory. The
// memory must be the Context's: kDLCUDA (or kDLCUDAManaged) of the Context's GPU, or kDLCPU on
// the CPU path. Dtypes: float32/16, bfloat16, int32/64, bool (kDLBool, code 6), one lane.
// Anything else throws fusejit::UsageError naming it; on an error `managed` is not consumed (its
// deleter is not called: it is still the caller's).
Tensor from_dlpack(Context& ctx, DLManagedTensor* managed);

// Tensor::eval_into with `dst`'s memory as the destination: of the tensor's dtype, contiguous
// (null strides, or row-major ones with no gaps), on the Context's device as from_dlpack says,
// holding at least the result's bytes (its shape may differ). `dst` is consumed in every case:
// its deleter is called once fusejit no longer writes or reads the memory (eval_into's
// release), at once when this throws before writing.
void eval_into(const Tensor& tensor, DLManagedTensor* dst);
// Tensor::to_dlpack, as a free function.
inline DLManagedTensor* to_dlpack(const Tensor& tensor) { return tensor.to_dlpack(); }

}  // namespace fusejit
FUSEJIT_PUBLIC_END
