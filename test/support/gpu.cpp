// See gpu.h.
#include "support/gpu.h"

#include <fmt/format.h>

#include "ir/interp.h"
#include "fusejit/error.h"
#include "ir/text.h"
#include "jit/runtime/check.h"
#include "jit/api/log.h"

namespace fusejit::testing {

jit::Runtime* gpu_runtime(std::string* why, Rounding rounding) {
  struct Holder {
    Options options;
    std::shared_ptr<spdlog::logger> log = jit::make_logger(options.log_level);
    Context::Stats stats;
    std::unique_ptr<jit::Runtime> runtime;
    std::string why;
    explicit Holder(const char* mode)
        : options(Options::parse({{"FUSEJIT_LOG", "warn"}, {"FUSEJIT_CACHE", "memory"},
                                  {"FUSEJIT_ROUNDING", mode}})) {
      if (auto info = jit::probe_device(&why)) {
        runtime = std::make_unique<jit::Runtime>(*info, options, *log, stats);
      }
    }
  };
  static Holder store("store");
  if (rounding == Rounding::store) {
    if (why) *why = store.why;
    return store.runtime.get();
  }
  static Holder node("node");
  if (why) *why = node.why;
  return node.runtime.get();
}

GpuCheck check_on_gpu(const ir::Graph& g, uint64_t seed, Rounding rounding) {
  return check_on_gpu(g, jit::random_inputs(g, seed), fmt::format("seed {}", seed), rounding);
}

GpuCheck check_on_gpu(const ir::Graph& g, const std::vector<ir::HostTensor>& host,
                      const std::string& what, Rounding rounding) {
  jit::Runtime& rt = *gpu_runtime(nullptr, rounding);
  std::vector<std::shared_ptr<jit::DeviceBuffer>> inputs;
  for (const auto& t : host) inputs.push_back(rt.upload(t));
  const auto exe = rt.executable_for(g);
  const std::vector<ir::HostTensor> got = jit::run_poisoned(rt, *exe, g, inputs);
  const std::vector<ir::HostTensor> ref = ir::interpret(g, host);

  GpuCheck result;
  result.bound = jit::error_bound(g);
  result.pass = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = jit::relative_error(got[i], ref[i]);
    result.errors.push_back(err);
    result.worst_error = std::max(result.worst_error, err);
    if (!(err <= result.bound)) result.pass = false;
    result.detail += fmt::format("output {}: rel_err {:.3e}\n", i, err);
  }
  result.detail += fmt::format("bound {:.0e}, {}, FUSEJIT_ROUNDING={}\n{}", result.bound, what,
                               rounding == Rounding::node ? "node" : "store", ir::print(g));
  return result;
}

bool rounding_sensitive(const ir::Graph& g, const std::vector<ir::HostTensor>& inputs) {
  if (jit::error_bound(g) < 1e-2) return false;  // no f16/bf16 anywhere
  // The same trace with every f16/bf16 value in f32 (the inputs hold the same values: f16 and
  // bf16 are exact in f32), interpreted, against the reference.
  std::string text = ir::print(g);
  for (const char* low : {"bf16[", "f16["}) {
    for (size_t at = text.find(low); at != std::string::npos; at = text.find(low, at)) {
      text.replace(at, std::string_view(low).size(), "f32[");
    }
  }
  ir::Graph wide;
  try {
    wide = ir::parse(text);
  } catch (const Error&) {
    return false;  // not expressible in f32 (never seen): judged as it is
  }
  std::vector<ir::HostTensor> wide_inputs;
  for (const ir::HostTensor& t : inputs) {
    ir::HostTensor w(is_floating(t.dtype) ? DType::f32 : t.dtype, t.shape);
    for (int64_t i = 0; i < t.numel(); ++i) w.set(i, t.get(i));
    wide_inputs.push_back(std::move(w));
  }
  const std::vector<ir::HostTensor> ref = ir::interpret(g, inputs);
  const std::vector<ir::HostTensor> kept = ir::interpret(wide, wide_inputs);
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!is_floating(ref[i].dtype)) continue;
    ir::HostTensor rounded(ref[i].dtype, ref[i].shape);  // kept's values at the output's dtype
    for (int64_t k = 0; k < rounded.numel(); ++k) rounded.set(k, kept[i].get(k));
    if (!(jit::relative_error(rounded, ref[i]) <= jit::error_bound(g) / 2)) return true;
  }
  return false;
}

}  // namespace fusejit::testing
