// A generated skinny-GEMM kernel (templates/gemv) emulated on the CPU (emulate/gemv_shim.h)
// against the reference interpreter, for the tests of the regions merged into it (prologues,
// epilogue regions).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ir/interp.h"
#include "templates/kernel.h"
#include "test/templates/emulate/host_build.h"
#include "test/templates/support.h"

namespace fusejit::test {

struct GemvEmulation {
  // ||out - reference|| / ||reference||; infinite where an element was left unwritten.
  double error = INFINITY;
  // L2 prefetches the kernel issued inside the weights' buffer and outside it.
  long prefetches_inside = 0, prefetches_outside = 0;
  long misaligned = 0;  // vector accesses off their alignment
};

// Runs `kernel` (its params nodes of `graph`, the last the one it writes; `weights` among them)
// once over its work, on inputs drawn from `seed` (int8 ones over their whole range), its output
// poisoned with NaN first, and compares the output with the reference interpreter's.
inline GemvEmulation emulate_gemv(const templates::Kernel& kernel, const ir::Graph& graph,
                                  ir::NodeId weights, const std::string& tag, uint32_t seed) {
  GemvEmulation result;
  std::string src = fmt::format("#include \"{}/gemv_shim.h\"\n", FUSEJIT_EMULATE_DIR);
  src += emulated_kernel(kernel, src);
  void* so = open_shared_object(src, tag);
  ir::Graph all = graph;
  all.set_outputs(kernel.params);
  std::vector<ir::HostTensor> inputs = random_inputs(all, seed, 1.0);
  for (ir::HostTensor& t : inputs) {
    if (t.dtype != DType::i8) continue;
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set(i, static_cast<double>((i * 37 + 11) % 255 - 127));
  }
  std::vector<ir::HostTensor> values = ir::interpret(all, inputs);
  const ir::Node& written = graph.node(kernel.params.back());
  ir::HostTensor out(written.dtype, written.shape);
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, NAN);
  std::vector<void*> args;
  for (size_t i = 0; i + 1 < values.size(); ++i) args.push_back(values[i].bytes.data());
  args.push_back(out.bytes.data());
  using Entry = void (*)(void* const*, int);
  auto entry = reinterpret_cast<Entry>(dlsym(so, ("run_" + kernel.name).c_str()));
  auto prefetch_range =
      reinterpret_cast<void (*)(const void*, size_t)>(dlsym(so, "fj_emu_prefetch_range"));
  auto prefetches = reinterpret_cast<long (*)(int)>(dlsym(so, "fj_emu_prefetches"));
  auto misaligned = reinterpret_cast<long (*)()>(dlsym(so, "fj_emu_misaligned"));
  const size_t w =
      std::find(kernel.params.begin(), kernel.params.end(), weights) - kernel.params.begin();
  if (!entry || !prefetch_range || !prefetches || !misaligned || w + 1 >= values.size()) {
    dlclose(so);
    throw std::runtime_error("emulate_gemv: the emulated kernel or its weights not found");
  }
  prefetch_range(values[w].bytes.data(), values[w].bytes.size());
  entry(args.data(), static_cast<int>(kernel.work_blocks));
  result.prefetches_inside = prefetches(0);
  result.prefetches_outside = prefetches(1);
  result.misaligned = misaligned();
  dlclose(so);
  const ir::HostTensor& ref = values.back();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (std::isnan(out.get(i))) return result;  // unwritten: the error stays infinite
    diff += std::pow(out.get(i) - ref.get(i), 2);
    norm += std::pow(ref.get(i), 2);
  }
  result.error = std::sqrt(diff / norm);
  return result;
}

}  // namespace fusejit::test
