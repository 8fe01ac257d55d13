#!/usr/bin/env python3
"""PyTorch and fusejit in one process, through DLPack (fusejit/dlpack.h).

Usage: dlpack_torch.py LIBRARY   (LIBRARY: the built libfusejit_dlpack_torch.so)

Torch tensors go to fusejit zero-copy (torch.utils.dlpack.to_dlpack, the capsule's
DLManagedTensor handed over through ctypes), fusejit computes on torch's own stream, and the
result comes back to torch (fusejit's to_dlpack, wrapped in a capsule for
torch.utils.dlpack.from_dlpack) or is written straight into a torch tensor's memory. Values are
checked against torch. On a GPU the tensors are CUDA tensors on a side stream of torch's; without
one (torch without CUDA, or fusejit sees no GPU), CPU tensors and fusejit's CPU reference.
Exit 0: passed; 1: failed; 77: skipped (no torch).
"""
import contextlib
import ctypes
import faulthandler
import sys

faulthandler.enable()  # a crash in the library prints where Python was

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    print("dlpack_torch: skipped (no torch)")
    sys.exit(77)

# Capsule names must outlive the capsules that point to them.
DLTENSOR = ctypes.create_string_buffer(b"dltensor")
USED = ctypes.create_string_buffer(b"used_dltensor")

api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def handed_over(tensor):
    """The tensor's DLManagedTensor*, owned by the callee from now on (the capsule is 'used')."""
    capsule = torch.utils.dlpack.to_dlpack(tensor)
    pointer = api.PyCapsule_GetPointer(capsule, DLTENSOR)
    api.PyCapsule_SetName(capsule, USED)
    return ctypes.c_void_p(pointer)


def taken_back(pointer):
    """A torch tensor over a DLManagedTensor* that fusejit exported (torch calls its deleter)."""
    return torch.utils.dlpack.from_dlpack(api.PyCapsule_New(pointer, DLTENSOR, None))


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.fjt_open.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.fjt_error.restype = ctypes.c_char_p
    lib.fjt_relu_axpy.restype = ctypes.c_void_p
    lib.fjt_relu_axpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double]
    lib.fjt_softmax_into.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    cuda = torch.cuda.is_available()
    stream = torch.cuda.Stream() if cuda else None
    if lib.fjt_open(0, ctypes.c_void_p(stream.cuda_stream if cuda else None)) != 0:
        print("dlpack_torch: FAIL: fjt_open:", lib.fjt_error().decode())
        return 1
    if cuda != bool(lib.fjt_has_gpu()):
        print("dlpack_torch: skipped (torch and fusejit disagree about the GPU)")
        return 77
    device = "cuda" if cuda else "cpu"
    failures = []

    def check(name, got, want, tol):
        # ||got - want|| / ||want||, as fusejit's correctness bounds (docs/design.md); NaN never passes.
        err = ((got.float() - want.float()).norm() / want.float().norm()).item()
        ok = got.shape == want.shape and got.device == want.device and err <= tol
        print(f"dlpack_torch: {name}: {'pass' if ok else 'FAIL'} (relative error {err:.2e}, {got.device})")
        if not ok:
            failures.append(name)

    context = torch.cuda.stream(stream) if cuda else contextlib.nullcontext()
    with context:
        torch.manual_seed(0)
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            x = torch.randn(257, 129, device=device, dtype=dtype)
            y = torch.randn(129, device=device, dtype=dtype).expand(257, 129)  # stride 0
            xt = x.t().contiguous().t()  # a transposed layout: strides (1, 257)
            out = lib.fjt_relu_axpy(handed_over(xt), handed_over(y), 2.0)
            if not out:
                print("dlpack_torch: FAIL: fjt_relu_axpy:", lib.fjt_error().decode())
                return 1
            check(f"relu(x*2+y) {dtype}", taken_back(out), torch.relu(x * 2 + y), tol)

            # Sliced layouts, read in place: a column block of a fused [257, 3*129] buffer (at a
            # byte offset) and every other row of a [514, 129] tensor.
            qkv = torch.randn(257, 3 * 129, device=device, dtype=dtype)
            rows = torch.randn(514, 129, device=device, dtype=dtype)
            k, every_other = qkv[:, 129:258], rows[::2]
            out = lib.fjt_relu_axpy(handed_over(k), handed_over(every_other), 2.0)
            if not out:
                print("dlpack_torch: FAIL: fjt_relu_axpy (sliced):", lib.fjt_error().decode())
                return 1
            check(f"relu(k*2+rows[::2]) {dtype}", taken_back(out), torch.relu(k * 2 + every_other), tol)

            dst = torch.full((257, 129), float("nan"), device=device, dtype=dtype)
            if lib.fjt_softmax_into(handed_over(x), handed_over(dst)) != 0:
                print("dlpack_torch: FAIL: fjt_softmax_into:", lib.fjt_error().decode())
                return 1
            check(f"softmax into a torch tensor {dtype}", dst, torch.softmax(x.float(), -1).to(dtype), tol)
    lib.fjt_close()
    if cuda:
        torch.cuda.synchronize()
    print(f"dlpack_torch: {'FAIL' if failures else 'pass'} ({device})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
