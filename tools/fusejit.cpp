// fusejit: the command-line tool. See `fusejit help`.
#include <cstdio>
#include <cstring>
#include <exception>

#include "fusejit/error.h"
#include "fusejit/version.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: fusejit COMMAND [ARGS]

commands:
  plan [--json] TRACE     print the fusion plan: regions, ops, kernels, library calls, and why
                          each cut was made (no GPU needed)
  run [--check] [--check-rows R] [--iters N] TRACE
                          run a trace on the GPU on fresh random inputs; print each kernel's
                          time and achieved GB/s or TFLOP/s next to the device-to-device copy
                          bandwidth; --check compares every output with the CPU reference
                          (large traces on R sampled indices, default 64, of an output
                          axis they are separable along: rows, columns, a transpose's rows)
  warm [--arch sm_90,...] [--cache-dir D] [--jobs|-j N] [--ptx] PATH...
                          compile every kernel of the traces (files, or folders of *.trace)
                          into the disk cache, with or without a GPU, on N threads (default:
                          one per hardware thread), showing progress on stderr; --ptx keeps
                          the PTX next to each CUBIN (an arch compute_XX gives PTX only); ends
                          with `compiled: N  cached: M  failed: K`
  cache stats|verify|prune|clear [--cache-dir D]
                          inspect and maintain the disk kernel cache: counts per arch, check
                          every entry, remove unsound ones and evict to the cap, empty it
  version                 print the version

Environment: FUSEJIT_LOG, FUSEJIT_DUMP, FUSEJIT_DISABLE, ... (see README.md).
)";

}  // namespace

fusejit::Options fusejit::tools::options_from_env() {
  Options options = Options::from_env();
  for (const std::string& w : options.warnings) std::fprintf(stderr, "fusejit: warning: %s\n", w.c_str());
  return options;
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const fusejit::tools::Args args(argv + 2, argv + argc);
  try {
    if (command == "plan") return fusejit::tools::plan_command(args);
    if (command == "run") return fusejit::tools::run_command(args);
    if (command == "warm") return fusejit::tools::warm_command(args);
    if (command == "cache") return fusejit::tools::cache_command(args);
    if (command == "version") {
      std::printf("fusejit %s\n", FUSEJIT_VERSION_STRING);
      return 0;
    }
    std::fprintf(stderr, "fusejit: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const fusejit::Error& e) {
    std::fprintf(stderr, "fusejit %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusejit %s: %s\n", command.c_str(), e.what());
    return 3;
  }
}
