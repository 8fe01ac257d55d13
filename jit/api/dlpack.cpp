// jit/dlpack: DLPack import and export (fusejit/dlpack.h), over Context::wrap and
// Tensor::data_ptr. Written against DLPack 0.6 (Debian's libdlpack-dev): DLManagedTensor only;
// its newer DLManagedTensorVersioned is not there to support.
#include "fusejit/dlpack.h"

#include <mutex>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/api/context_impl.h"
#include "jit/runtime/cuda_check.h"
#include "jit/runtime/device.h"

namespace fusejit {

namespace {

// kDLBool, added in DLPack 0.8 (PyTorch exports bool tensors with it); 0.6 lacks the name.
constexpr uint8_t kDlBoolCode = 6;

struct DlTypeOf {
  DType dtype;
  uint8_t code;
  uint8_t bits;
};
constexpr DlTypeOf kDlTypes[] = {
    {DType::f32, kDLFloat, 32}, {DType::f16, kDLFloat, 16}, {DType::bf16, kDLBfloat, 16},
    {DType::i32, kDLInt, 32},   {DType::i64, kDLInt, 64},   {DType::boolean, kDlBoolCode, 8},
    {DType::i8, kDLInt, 8},
};
static_assert(std::size(kDlTypes) == kNumDTypes, "every DType has a DLPack type");

DType dtype_of(DLDataType t) {
  for (const DlTypeOf& d : kDlTypes) {
    if (t.code == d.code && t.bits == d.bits && t.lanes == 1) return d.dtype;
  }
  throw UsageError(
      fmt::format("from_dlpack: DLPack dtype (code {}, {} bits, {} lanes) has no "
                  "fusejit dtype; fusejit takes float32, float16, bfloat16, int8, "
                  "int32, int64 and bool (one lane): cast the tensor first",
                  t.code, t.bits, t.lanes));
}

DLDataType dl_type_of(DType dtype) {
  for (const DlTypeOf& d : kDlTypes) {
    if (d.dtype == dtype) return DLDataType{d.code, d.bits, 1};
  }
  throw InternalError(fmt::format("no DLPack type for {}", dtype_name(dtype)));
}

void check_device(const DLDevice& dev, const Context& ctx, std::string_view op = "from_dlpack") {
  const bool gpu = ctx.has_gpu();
  const bool on_gpu = dev.device_type == kDLCUDA || dev.device_type == kDLCUDAManaged;
  if (gpu && on_gpu && dev.device_id == ctx.device()) return;
  if (!gpu && dev.device_type == kDLCPU) return;
  throw UsageError(fmt::format(
      "{}: the tensor is on DLPack device type {} id {}, but this Context {}; move the "
      "tensor there first (torch: .to(...))",
      op, static_cast<int>(dev.device_type), dev.device_id,
      gpu ? fmt::format("runs on CUDA device {} (kDLCUDA, id {})", ctx.device(), ctx.device())
          : std::string("runs on the CPU reference (kDLCPU)")));
}

// What an exported DLManagedTensor owns: the values' storage and the shape it points to.
struct Export {
  DLManagedTensor managed{};
  std::shared_ptr<detail::Storage> storage;
  std::vector<int64_t> shape;
};

}  // namespace

Tensor from_dlpack(Context& ctx, DLManagedTensor* managed) {
  if (!managed) throw UsageError("from_dlpack: the DLManagedTensor is null");
  const DLTensor& t = managed->dl_tensor;
  check_device(t.device, ctx);
  const DType dtype = dtype_of(t.dtype);
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) {
    throw UsageError(fmt::format("from_dlpack: malformed DLTensor (ndim {}, shape {})", t.ndim,
                                 static_cast<const void*>(t.shape)));
  }
  Shape shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides;
  if (t.strides) strides.assign(t.strides, t.strides + t.ndim);
  const void* data = static_cast<const char*>(t.data) + t.byte_offset;
  auto release = [managed] {
    if (managed->deleter) managed->deleter(managed);
  };
  return ctx.wrap(data, std::move(shape), dtype, std::move(strides), std::move(release));
}

namespace {

// The export of `tensor` (computed by the caller), owning a reference to its storage.
DLManagedTensor* export_tensor(const Tensor& tensor, const void* data) {
  detail::ContextImpl& ctx = *tensor.impl()->ctx;
  auto out = std::make_unique<Export>();
  out->storage = tensor.impl()->storage;
  out->shape = tensor.shape();
  DLTensor& t = out->managed.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = ctx.runtime ? DLDevice{kDLCUDA, tensor.context().device()} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(out->shape.size());
  t.dtype = dl_type_of(tensor.dtype());
  t.shape = out->shape.data();
  t.strides = nullptr;  // dense row-major
  t.byte_offset = 0;
  out->managed.manager_ctx = out.get();
  out->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<Export*>(self->manager_ctx);
  };
  return &out.release()->managed;
}

// `consumer` waits on the device for the work queued so far on the Context's stream.
void order_after(detail::ContextImpl& ctx, int device, CUstream_st* consumer) {
  cudaStream_t own = ctx.runtime->device().stream();
  if (consumer == own) return;
  const jit::DeviceGuard guard(device);
  cudaEvent_t done = nullptr;
  FUSEJIT_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(done, own);
  const cudaError_t waited =
      recorded == cudaSuccess ? cudaStreamWaitEvent(consumer, done, 0) : recorded;
  cudaEventDestroy(done);  // released once the wait is done; the wait stays queued
  FUSEJIT_CUDA(recorded);
  FUSEJIT_CUDA(waited);
}

// Refuses a destination that `tensor` cannot be computed into, saying why (its size is
// Tensor::eval_into's to check).
void check_destination(const Tensor& tensor, const DLTensor& d) {
  check_device(d.device, tensor.context(), "eval_into");
  const DLDataType want = dl_type_of(tensor.dtype());
  if (d.dtype.code != want.code || d.dtype.bits != want.bits || d.dtype.lanes != want.lanes) {
    throw UsageError(fmt::format(
        "eval_into: the destination's DLPack dtype (code {}, {} bits, {} lanes) is not the "
        "tensor's {}; pass a buffer of that dtype, or cast the tensor first",
        d.dtype.code, d.dtype.bits, d.dtype.lanes, dtype_name(tensor.dtype())));
  }
  if (d.ndim < 0 || (d.ndim > 0 && !d.shape)) {
    throw UsageError(fmt::format("eval_into: malformed DLTensor (ndim {}, shape {})", d.ndim,
                                 static_cast<const void*>(d.shape)));
  }
  if (!d.strides) return;  // dense row-major
  int64_t step = 1;
  for (int32_t i = d.ndim; i-- > 0;) {
    if (d.shape[i] != 1 && d.strides[i] != step) {
      throw UsageError(
          "eval_into: the destination is not contiguous (row-major, no gaps), and the result "
          "is written densely at its start; pass a contiguous buffer (numpy: "
          "np.ascontiguousarray, torch: .contiguous()) and copy from it");
    }
    step *= d.shape[i];
  }
}

}  // namespace

void eval_into(const Tensor& tensor, DLManagedTensor* dst) {
  if (!dst) throw UsageError("eval_into: the DLManagedTensor is null");
  auto release = [dst] {
    if (dst->deleter) dst->deleter(dst);
  };
  void* data = nullptr;
  size_t bytes = 0;
  try {
    if (!tensor.defined()) throw UsageError("eval_into: the Tensor handle is empty");
    const DLTensor& d = dst->dl_tensor;
    check_destination(tensor, d);
    data = static_cast<char*>(d.data) + d.byte_offset;
    bytes = detail::byte_size(Shape(d.shape, d.shape + d.ndim), tensor.dtype());
  } catch (...) {
    release();
    throw;
  }
  tensor.eval_into(data, bytes, std::move(release));
}

DLManagedTensor* Tensor::to_dlpack() const {
  const void* data = data_ptr();  // evaluates; throws on an empty handle
  detail::ContextImpl& ctx = *impl()->ctx;
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  DLManagedTensor* out = export_tensor(*this, data);
  // A consumer may read on any stream, or the host: the values must be there already.
  if (ctx.runtime) ctx.runtime->device().synchronize();
  return out;
}

DLManagedTensor* Tensor::to_dlpack(CUstream_st* stream) const {
  const void* data = data_ptr();
  detail::ContextImpl& ctx = *impl()->ctx;
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  DLManagedTensor* out = export_tensor(*this, data);
  if (ctx.runtime && stream != kNoStreamOrder) {
    try {
      order_after(ctx, context().device(), stream ? stream : cudaStreamLegacy);
    } catch (...) {
      out->deleter(out);
      throw;
    }
  }
  return out;
}

}  // namespace fusejit
