// jit/nvrtc: the NVRTC wrapper. Compiles a generated kernel to a CUBIN for one real arch, or to
// PTX for a virtual one (the PTX is what newer GPUs JIT-compile), with no GPU and no driver.
//
// NVRTC targeting a real arch (-arch=sm_XX) generates PTX on the way (.target sm_XX) and can
// hand it back next to the CUBIN at no extra compile cost; compile() does so only when asked
// (CompileOptions::ptx: FUSEJIT_DUMP=ptx, `fusejit warm --ptx`), since nothing runs it: a GPU
// newer than this NVRTC knows gets kernels compiled for compute_XX, PTX only.
//
// Options: -std=c++17, no fast math (precise division, square root, denormals: the results
// must match the CPU reference), FMA contraction left on (as nvcc's default; it only makes
// results more accurate), -default-device, no include path: generated sources are
// self-contained. -minimal: NVRTC leaves out of its implicit builtin header what our sources
// never use (textures, surfaces, the device runtime's cudaDevice* calls, dynamic parallelism);
// the CUBINs are byte for byte the same without it (checked on every kernel of examples/traces
// and bench/traces for sm_90), and parsing that header is part of every compile's fixed cost.
// What else was tried, and why it is not here: bench/RESULTS.md, "Compile latency".
//
// Every NVRTC call goes through check_nvrtc, which names the call and NVRTC's error string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nvrtc.h>

#include "templates/kernel.h"

namespace fusejit::jit {

struct CompileOptions {
  bool line_info = false;          // -lineinfo, for profilers (not in the CUBIN otherwise)
  bool ptx = false;                // hand back the PTX of a real arch too (not an NVRTC option)
  std::vector<std::string> extra;  // appended verbatim, after fusejit's own options
};

struct CompiledKernel {
  std::string name;   // the kernel's name: extern "C", so also its symbol in the CUBIN/PTX
  std::string cubin;  // empty for a virtual arch (compute_XX)
  std::string ptx;    // for a virtual arch, or when CompileOptions::ptx asked for it; else empty
  std::string log;  // NVRTC's log (warnings), possibly empty
  // Compiled asking for one of Kernel::relaxed_min_blocks, as ptxas spilled with the kernel's
  // own launch bounds (and with those before it); relaxed_to is the one.
  bool relaxed = false;
  int relaxed_to = 0;
};

// Compiles k for `arch` ("sm_90", or "compute_90" for PTX only). Throws fusejit::Error when the
// source does not compile: the message holds the kernel name, NVRTC's log, and the path where
// the failing source was written (temp_directory_path()/fusejit-failed-<name>.cu). A kernel
// with Kernel::relaxed_min_blocks is compiled with ptxas's report, and again with each of the
// relaxed launch bounds in turn while it spills (spills(); a real arch only: for PTX, the
// driver's compile keeps the kernel's own bounds).
CompiledKernel compile(const templates::Kernel& k, std::string_view arch,
                       const CompileOptions& options = {});

// The bytes ptxas says a kernel spills (stores to local memory), from a log of a compile with
// "--ptxas-options=-v" among CompileOptions::extra; -1 when the log holds no such report.
// NVRTC 12.9 and later, where a driver is installed, serve a compile they have seen before from
// the CUDA compute cache (~/.nv/ComputeCache) without running ptxas: such a log has no report,
// even when asked for. spills() does not depend on it.
int64_t spill_stores(const std::string& log);

// The largest stack frame ptxas gave a function of `cubin`, in bytes, read from the ELF's
// .nv.info records (cuobjdump -res-usage's "STACK"); -1 when `cubin` is not a CUBIN this can
// read. A generated kernel has a frame only when it spilled or kept an array in local memory.
int64_t stack_frame_bytes(std::string_view cubin);

// Whether `c` spills: ptxas's report when its log has one, else whether its CUBIN has a stack
// frame (a compile served from the compute cache). What compile() relaxes launch bounds on.
bool spills(const CompiledKernel& c);

// The options compile() passes for `arch` (they are part of the kernel cache key).
std::vector<std::string> compile_flags(std::string_view arch, const CompileOptions& options = {});

// NVRTC's version: major * 1000 + minor * 10 (13.0 -> 13000), and as text ("13.0").
int nvrtc_version();
std::string nvrtc_version_string();

// The real archs this NVRTC can target: "sm_75", "sm_80", ...
std::vector<std::string> supported_archs();

// Throws fusejit::Error naming `call` and NVRTC's error string unless result is success.
void check_nvrtc(nvrtcResult result, std::string_view call);

}  // namespace fusejit::jit
