// See gpu.h.
#include "support/gpu.h"

#include <fmt/format.h>

#include "ir/interp.h"
#include "ir/text.h"
#include "jit/check.h"
#include "jit/log.h"

namespace fusejit::testing {

jit::Runtime* gpu_runtime(std::string* why) {
  struct Holder {
    Options options = Options::parse({{"FUSEJIT_LOG", "warn"}, {"FUSEJIT_CACHE", "memory"}});
    std::shared_ptr<spdlog::logger> log = jit::make_logger(options.log_level);
    Context::Stats stats;
    std::unique_ptr<jit::Runtime> runtime;
    std::string why;
    Holder() {
      if (auto info = jit::probe_device(&why)) {
        runtime = std::make_unique<jit::Runtime>(*info, options, *log, stats);
      }
    }
  };
  static Holder holder;
  if (why) *why = holder.why;
  return holder.runtime.get();
}

GpuCheck check_on_gpu(const ir::Graph& g, uint64_t seed) {
  return check_on_gpu(g, jit::random_inputs(g, seed), fmt::format("seed {}", seed));
}

GpuCheck check_on_gpu(const ir::Graph& g, const std::vector<ir::HostTensor>& host,
                      const std::string& what) {
  jit::Runtime& rt = *gpu_runtime();
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
  result.detail += fmt::format("bound {:.0e}, {}\n{}", result.bound, what, ir::print(g));
  return result;
}

}  // namespace fusejit::testing
