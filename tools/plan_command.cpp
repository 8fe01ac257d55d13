// fusejit plan [--json] TRACE: the fusion plan of a trace, with no GPU.
#include <cstdio>

#include "fusejit/error.h"
#include "fusejit/options.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/text.h"
#include "jit/runtime.h"
#include "tools/commands.h"

namespace fusejit::tools {

int plan_command(const Args& args) {
  bool json = false;
  std::string path;
  for (const std::string& a : args) {
    if (a == "--json") json = true;
    else if (!a.empty() && a[0] == '-') throw Error("plan: unknown option " + a + "; usage: fusejit plan [--json] TRACE");
    else if (path.empty()) path = a;
    else throw Error("plan: one trace at a time; usage: fusejit plan [--json] TRACE");
  }
  if (path.empty()) throw Error("plan: no trace given; usage: fusejit plan [--json] TRACE");
  const Options options = Options::from_env();
  const fusion::Plan plan = fusion::make_plan(ir::parse_file(path), jit::plan_options(options));
  const std::string text = json ? fusion::plan_to_json(plan) : fusion::plan_to_text(plan);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  return 0;
}

}  // namespace fusejit::tools
