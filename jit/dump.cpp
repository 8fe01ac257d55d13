// jit/dump: see dump.h.
#include "jit/dump.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "fusion/plan_print.h"
#include "ir/hash.h"
#include "ir/prune.h"
#include "ir/text.h"

namespace fusejit::jit {

namespace {

namespace fs = std::filesystem;

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half.
void write_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) {
      throw UsageError(fmt::format("cannot write {}: check that the directory is writable (set "
                              "FUSEJIT_DUMP_DIR or FUSEJIT_RECORD_DIR elsewhere)",
                              tmp.string()));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) throw UsageError(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

}  // namespace

void dump_eval(const Options& options, const ir::Graph& trace, const Executable& exe) {
  if (!options.dump.ir && !options.dump.plan && !options.dump.decisions) return;
  const fs::path base = fs::path(options.dump_dir) /
                        fmt::format("eval_{:016x}", ir::structural_hash(trace));
  if (options.dump.ir) {
    write_file(base.string() + ".ir", "# as recorded\n" + ir::print(trace) + "# as optimized\n" +
                                          ir::print(exe.plan.graph));
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
    write_file(base.string() + ".plan", text);
  }
  if (options.dump.decisions) {
    write_file(base.string() + ".decisions", fusion::decisions_to_text(exe.plan));
  }
}

std::string record_trace(const Options& options, const ir::SymbolicGraph& trace) {
  if (options.record_dir.empty()) return "";
  const ir::SymbolicGraph pruned{ir::prune(trace.graph, trace.graph.outputs()), trace.symbols};
  const fs::path path = fs::path(options.record_dir) /
                        fmt::format("{:016x}.trace", ir::structural_hash(pruned.graph));
  std::error_code ec;
  if (fs::exists(path, ec)) return "";
  write_file(path, ir::print(pruned));
  return path.string();
}

}  // namespace fusejit::jit
