// tools: the `fusejit` command-line tool's subcommands, one file each.
#pragma once

#include <string>
#include <vector>

namespace fusejit::tools {

using Args = std::vector<std::string>;

int plan_command(const Args& args);
int run_command(const Args& args);
int warm_command(const Args& args);
int cache_command(const Args& args);

}  // namespace fusejit::tools
