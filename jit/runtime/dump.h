// jit/dump: what FUSEJIT_DUMP=ir,plan,decisions and FUSEJIT_RECORD_DIR write.
//
// Per planned trace (a trace-memo miss), into FUSEJIT_DUMP_DIR:
//   eval_<hash>.ir         the trace as recorded, then as optimized (ir)
//   eval_<hash>.plan       the plan, each region followed by the kernel it became (plan)
//   eval_<hash>.decisions  one line per fusion decision, then "# schedules": per generated region
//                          kernel, its scheduler and parameters (decisions)
// <hash> is the trace's structural hash; kernel names (fj_<kind>_<hash>) are also the names
// of the .cu/.ptx dumps, which ties each kernel file to its region.
//
// FUSEJIT_RECORD_DIR: each evaluated trace once, as <hash>.trace (deduplicated by the hash), for
// `fusejit warm`.
//
// Files are written atomically through cache/file_io.h (a temporary file of a name unique to
// the process and thread, then a rename), so processes recording the same trace at once each
// write a whole file and one of them wins. Dumps and recordings are diagnostics: a file that
// cannot be written never fails the eval. The first failure of each kind is a warning on `log`,
// later ones are debug messages.
#pragma once

#include <string>

#include <spdlog/logger.h>

#include "fusejit/options.h"
#include "ir/graph.h"
#include "ir/symbolic.h"
#include "jit/runtime/executor.h"

namespace fusejit::jit {

// Writes the dumps `options.dump` asks for. Never throws for a file that cannot be written.
void dump_eval(const Options& options, const ir::Graph& trace, const Executable& exe,
               spdlog::logger& log);

// Saves `trace` (pruned to what its outputs need; with its dynamic dims, if any) under
// options.record_dir unless a file of the same hash is there; returns the path written, or ""
// when it was already recorded or could not be written (never throws for that).
std::string record_trace(const Options& options, const ir::SymbolicGraph& trace,
                         spdlog::logger& log);

}  // namespace fusejit::jit
