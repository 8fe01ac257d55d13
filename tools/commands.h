// tools: the `fusejit` command-line tool's subcommands, one file each, parsed by CLI11.
//
// Each subcommand file adds its CLI::App to the tool's (options bound to a value of its own) and
// returns what runs it once parsed. Exit statuses (`fusejit --help`, docs/cli.md): 0 done, 1 a
// failure (the library's errors, a kernel that did not warm, an unsound cache entry, a check
// that failed), 2 a usage error (an unknown command or option, a bad or missing value).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fusejit/options.h"
#include "ir/symbolic.h"

namespace fusejit::tools {

// A subcommand: its parser, and what runs it once its arguments are parsed (returns the exit
// status).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_plan_command(CLI::App& tool);
Command add_run_command(CLI::App& tool);
Command add_warm_command(CLI::App& tool);
Command add_cache_command(CLI::App& tool);

// A bad command line found after parsing (a --dim naming no dim of the trace, an arch NVRTC
// cannot target): exit status 2, like CLI11's own parse errors. The library's own
// fusejit::UsageError (a malformed trace, a bad FUSEJIT_* value) is a failure, status 1.
class BadArguments : public std::runtime_error {
 public:
  explicit BadArguments(const std::string& message) : std::runtime_error(message) {}
};

// Accepts a whole number from lo to hi; CLI11 prefixes its message with the option's name.
CLI::Validator whole_number(int64_t lo, int64_t hi);
// The type name shown in --help and in "needs a value" messages: "N in 1..1024".
std::string number_type(const std::string& name, int64_t lo, int64_t hi);

// Options::from_env, with its warnings (unknown FUSEJIT_* variables) printed to stderr.
Options options_from_env();

// The sizes of a trace's dynamic dims: their examples, overridden by each `NAME=VALUE` of
// `dims` (the --dim options); throws BadArguments naming a bad one.
ir::Bindings dim_values(const ir::SymbolicGraph& trace, const std::vector<std::string>& dims);
// "B=8, S=128".
std::string dims_text(const ir::SymbolicGraph& trace, const ir::Bindings& values);
// Adds the repeatable `--dim NAME=VALUE` option of plan and run to `app`.
void add_dim_option(CLI::App& app, std::vector<std::string>& dims);

}  // namespace fusejit::tools
