// jit/dump: see dump.h.
#include "jit/runtime/dump.h"

#include <atomic>
#include <filesystem>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusion/plan_print.h"
#include "ir/hash.h"
#include "ir/prune.h"
#include "ir/text.h"

namespace fusejit::jit {

namespace {

namespace fs = std::filesystem;

// One warning per kind of file and process; a directory that cannot be written would
// otherwise warn at every eval.
std::atomic<bool> dump_warned{false};
std::atomic<bool> record_warned{false};

// Writes `text` to `path` atomically (creating its directory); false, after logging, when it
// cannot. `hint` names the variable that chose the directory.
bool write_file(const fs::path& path, const std::string& text, std::atomic<bool>& warned,
                std::string_view hint, spdlog::logger& log) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);  // a failure shows in the write below
  const cache::WriteResult written = cache::write_file_atomically(path, text);
  if (written.ok) return true;
  if (!warned.exchange(true)) {
    log.warn("{} (set {} to a writable directory); the run goes on without this file, and "
             "further failures are logged at debug level",
             written.why, hint);
  } else {
    log.debug("{}", written.why);
  }
  return false;
}

// "# schedules" and a line per generated region kernel: the scheduler that made it and its
// parameters (templates/schedulers/registry.h).
std::string schedules_text(const Executable& exe) {
  std::string text;
  for (size_t i = 0; i < exe.steps.size(); ++i) {
    const Step& step = exe.steps[i];
    if (!step.kernel || step.kernel->kernel.schedule.empty()) continue;
    text += fmt::format("region {}: {}\n", i, step.kernel->kernel.schedule);
  }
  return text.empty() ? text : "# schedules\n" + text;
}

}  // namespace

void dump_eval(const Options& options, const ir::Graph& trace, const Executable& exe,
               spdlog::logger& log) {
  if (!options.dump.ir && !options.dump.plan && !options.dump.decisions) return;
  const fs::path base = fs::path(options.dump_dir) /
                        fmt::format("eval_{:016x}", ir::structural_hash(trace));
  if (options.dump.ir) {
    write_file(base.string() + ".ir",
               "# as recorded\n" + ir::print(trace) + "# as optimized\n" + ir::print(exe.plan.graph),
               dump_warned, "FUSEJIT_DUMP_DIR", log);
  }
  if (options.dump.plan) {
    std::string text = fusion::plan_to_text(exe.plan);
    text += "# regions -> kernels\n";
    for (size_t i = 0; i < exe.steps.size(); ++i) {
      const Step& step = exe.steps[i];
      text += fmt::format("region {}: {}", i, step_label(exe, step));
      if (step.kernel) {  // the launch shape (the grid depends on the device's SM count)
        const templates::Kernel& k = step.kernel->kernel;
        text += fmt::format("  block {}", k.block);
        if (k.cluster > 1) text += fmt::format("  cluster {}", k.cluster);
      }
      text += "\n";
    }
    write_file(base.string() + ".plan", text, dump_warned, "FUSEJIT_DUMP_DIR", log);
  }
  if (options.dump.decisions) {
    write_file(base.string() + ".decisions",
               fusion::decisions_to_text(exe.plan) + schedules_text(exe), dump_warned,
               "FUSEJIT_DUMP_DIR", log);
  }
}

std::string record_trace(const Options& options, const ir::SymbolicGraph& trace,
                         spdlog::logger& log) {
  if (options.record_dir.empty()) return "";
  const ir::SymbolicGraph pruned{ir::prune(trace.graph, trace.graph.outputs()), trace.symbols};
  const fs::path path = fs::path(options.record_dir) /
                        fmt::format("{:016x}.trace", ir::structural_hash(pruned.graph));
  std::error_code ec;
  if (fs::exists(path, ec)) return "";
  if (!write_file(path, ir::print(pruned), record_warned, "FUSEJIT_RECORD_DIR", log)) return "";
  return path.string();
}

}  // namespace fusejit::jit
