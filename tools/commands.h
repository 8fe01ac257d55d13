// tools: the `fusejit` command-line tool's subcommands, one file each.
#pragma once

#include <string>
#include <vector>

#include "fusejit/options.h"
#include "ir/symbolic.h"

namespace fusejit::tools {

using Args = std::vector<std::string>;

// Options::from_env, with its warnings (unknown FUSEJIT_* variables) printed to stderr.
Options options_from_env();

// The sizes of a trace's dynamic dims: their examples, overridden by each `NAME=VALUE` of
// `dims` (the --dim options); throws fusejit::UsageError naming a bad one.
ir::Bindings dim_values(const ir::SymbolicGraph& trace, const std::vector<std::string>& dims);
// "B=8, S=128".
std::string dims_text(const ir::SymbolicGraph& trace, const ir::Bindings& values);

int plan_command(const Args& args);
int run_command(const Args& args);
int warm_command(const Args& args);
int cache_command(const Args& args);

}  // namespace fusejit::tools
