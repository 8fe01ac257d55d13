// test/fuzz/trace_fuzzer: a libFuzzer target over everything that reads a trace without a GPU:
// parse -> verify -> print round trip -> plan -> code generation of every kernel of the plan.
// It does not compile the kernels (NVRTC would cost ~0.1 s per input) and runs nothing.
//
// What counts as a finding (the process aborts, so libFuzzer keeps the input):
//   - any exception that is not a fusejit::Error (InternalError, std::out_of_range, ...);
//   - the print round trip not being a fixed point: t1 = print(parse(input)) must parse again
//     and print as exactly t1, for concrete traces and for traces with dynamic dims;
//   - anything a sanitizer reports (the target is built with ASan and UBSan), and timeouts.
// A fusejit::Error is the expected answer to a malformed or unsupported trace: the input is
// rejected and the run goes on. FUSEJIT_FUZZ_STATS=1 prints, at exit, how many inputs reached
// each stage.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "fusejit/error.h"
#include "fusion/pipeline.h"
#include "fusion/plan.h"
#include "fusion/plan_print.h"
#include "ir/symbolic.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "templates/kernel.h"
#include "templates/target.h"

namespace {

using namespace fusejit;

struct Stats {
  long inputs = 0, parsed = 0, planned = 0, kernels = 0, rejected = 0;
  ~Stats() {
    if (std::getenv("FUSEJIT_FUZZ_STATS"))
      std::fprintf(stderr,
                   "trace_fuzzer: %ld inputs, %ld parsed, %ld planned, %ld kernels generated, "
                   "%ld rejected with fusejit::Error\n",
                   inputs, parsed, planned, kernels, rejected);
  }
} stats;

[[noreturn]] void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "trace_fuzzer: %.*s\n%.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// print(parse(text)) is a fixed point of print . parse.
std::string check_round_trip(const ir::SymbolicGraph& parsed) {
  const std::string first = ir::print(parsed);
  ir::SymbolicGraph again;
  try {
    again = ir::parse_symbolic(first, "<printed>");
  } catch (const Error& e) {
    finding("a printed trace does not parse again", first + "\n-- error: " + e.what());
  }
  const std::string second = ir::print(again);
  if (second != first)
    finding("print(parse(print(g))) != print(g)", "-- first:\n" + first + "-- second:\n" + second);
  return first;
}

void generate_all(const fusion::Plan& plan, const templates::CodegenOptions& options) {
  for (const fusion::Region& region : plan.regions) {
    if (region.kind == fusion::RegionKind::gemm) continue;  // a cuBLASLt call, no source
    const templates::Kernel k = templates::generate(plan.graph, region, options);
    if (k.source.empty() || k.name.empty()) finding("a kernel with no source or name", k.name);
    ++stats.kernels;
  }
}

void run_one(std::string_view text) {
  ++stats.inputs;
  const ir::SymbolicGraph sym = ir::parse_symbolic(text, "<fuzz>");
  ir::verify(sym.graph);
  const std::string printed = check_round_trip(sym);
  // The concrete trace: the symbols at their examples (what `fusejit plan` plans).
  const ir::Graph concrete = ir::parse(printed, "<printed>");
  ir::verify(concrete);
  ++stats.parsed;

  templates::CodegenOptions codegen;
  codegen.target = templates::target_for_arch("sm_90");
  const fusion::Plan plan = fusion::make_plan(concrete);
  (void)fusion::plan_to_json(plan);
  (void)fusion::decisions_to_text(plan);
  generate_all(plan, codegen);
  if (!sym.symbols.empty()) {
    // Planned once on the symbols, then instantiated at their examples (the dynamic path).
    const fusion::Plan symbolic = fusion::make_plan(sym.graph);
    generate_all(fusion::instantiate_plan(symbolic, sym.symbols, ir::examples(sym.symbols)),
                 codegen);
  }
  ++stats.planned;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    run_one(text);
  } catch (const Error&) {
    ++stats.rejected;  // a malformed or unsupported trace, reported as such
  } catch (const std::exception& e) {
    finding("an exception that is not a fusejit::Error", e.what());
  }
  return 0;
}
