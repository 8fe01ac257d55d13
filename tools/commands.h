// tools: the `fusejit` command-line tool's subcommands, one file each.
#pragma once

#include <string>
#include <vector>

#include "fusejit/options.h"

namespace fusejit::tools {

using Args = std::vector<std::string>;

// Options::from_env, with its warnings (unknown FUSEJIT_* variables) printed to stderr.
Options options_from_env();

int plan_command(const Args& args);
int run_command(const Args& args);
int warm_command(const Args& args);
int cache_command(const Args& args);

}  // namespace fusejit::tools
