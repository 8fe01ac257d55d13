// jit/nvrtc: the NVRTC wrapper. Compiles a generated kernel to a CUBIN for one real arch plus
// its PTX (the PTX is what newer GPUs JIT-compile), with no GPU and no driver needed.
//
// One compilation gives both: NVRTC targeting a real arch (-arch=sm_XX) still hands back the
// PTX it generated on the way (.target sm_XX, which the driver can JIT for any later GPU), so
// there is no second compile. With a virtual arch (compute_XX) only the PTX is produced.
//
// Options: -std=c++17, no fast math (precise division, square root, denormals: the results
// must match the CPU reference), FMA contraction left on (as nvcc's default; it only makes
// results more accurate), -default-device, no include path: generated sources are
// self-contained.
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
  std::vector<std::string> extra;  // appended verbatim, after fusejit's own options
};

struct CompiledKernel {
  std::string name;   // the kernel's name: extern "C", so also its symbol in the CUBIN/PTX
  std::string cubin;  // empty for a virtual arch (compute_XX)
  std::string ptx;
  std::string log;  // NVRTC's log (warnings), possibly empty
};

// Compiles k for `arch` ("sm_90", or "compute_90" for PTX only). Throws fusejit::Error when the
// source does not compile: the message holds the kernel name, NVRTC's log, and the path where
// the failing source was written (temp_directory_path()/fusejit-failed-<name>.cu).
CompiledKernel compile(const templates::Kernel& k, std::string_view arch,
                       const CompileOptions& options = {});

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
