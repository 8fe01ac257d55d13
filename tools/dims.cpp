// tools/dims: `--dim NAME=VALUE`, the sizes `fusejit plan` and `fusejit run` give a trace's
// dynamic dims.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "tools/commands.h"

namespace fusejit::tools {

ir::Bindings dim_values(const ir::SymbolicGraph& trace, const std::vector<std::string>& dims) {
  ir::Bindings values = ir::examples(trace.symbols);
  for (const std::string& d : dims) {
    const size_t eq = d.find('=');
    const std::string name = d.substr(0, eq);
    const auto it = std::find_if(trace.symbols.begin(), trace.symbols.end(),
                                 [&](const ir::Symbol& s) { return s.name == name; });
    int64_t value = 0;
    const char* end = d.data() + d.size();
    const bool number = eq != std::string::npos &&
                        std::from_chars(d.data() + eq + 1, end, value).ptr == end && value >= 1;
    if (it == trace.symbols.end() || !number) {
      std::string known;
      for (const ir::Symbol& s : trace.symbols) known += (known.empty() ? "" : ", ") + s.name;
      throw BadArguments(fmt::format("--dim {}: expected NAME=VALUE with NAME a dynamic dim of the "
                                   "trace ({}) and VALUE a positive integer",
                                   d, known.empty() ? "it has none" : known));
    }
    values[static_cast<size_t>(it - trace.symbols.begin())] = value;
  }
  return values;
}

void add_dim_option(CLI::App& app, std::vector<std::string>& dims) {
  app.add_option("--dim", dims,
                 "the size of a dynamic dim of the trace (repeat for each; default: the "
                 "trace's example sizes)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
}

std::string dims_text(const ir::SymbolicGraph& trace, const ir::Bindings& values) {
  std::string s;
  for (size_t k = 0; k < trace.symbols.size(); ++k) {
    s += fmt::format("{}{}={}", k == 0 ? "" : ", ", trace.symbols[k].name, values[k]);
  }
  return s;
}

}  // namespace fusejit::tools
