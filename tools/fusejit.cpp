// fusejit: the command-line tool. See `fusejit --help`, and `fusejit COMMAND --help`.
//
// main() parses with CLI11 and maps every outcome to an exit status (tools/commands.h):
// CLI11's parse errors and tools::BadArguments are usage errors (2); any exception from the
// library is a failure (1), printed as "fusejit COMMAND: error: ...".
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusejit/version.h"
#include "tools/commands.h"

namespace {

constexpr const char* kFooter = R"(
Exit status: 0 done; 1 a failure (an error from fusejit, a kernel that did not warm, an unsound
cache entry, a --check that failed); 2 a usage error (an unknown command or option, a bad or
missing value).

Environment (read by every command; a bad value is an error that names the variable and the
values it takes):
  FUSEJIT_CACHE_DIR     the kernel cache (default $XDG_CACHE_HOME/fusejit or ~/.cache/fusejit)
  FUSEJIT_CACHE         on (memory and disk), memory, off
  FUSEJIT_CACHE_MAX_MB  the disk cache's cap in MB (default 1024); least recently used go first
  FUSEJIT_ARCH          the arch to compile for (sm_90, ...); default the GPU's
  FUSEJIT_LOG           off, error, warn (default), info, debug, trace
  FUSEJIT_DUMP          ir, plan, decisions, cuda, ptx, kir, all (into FUSEJIT_DUMP_DIR)
  FUSEJIT_DISABLE       fusion, epilogue, vectorize, passes, memo, dynamic, graphs, sweeps
  FUSEJIT_NVRTC_OPTIONS more NVRTC options, from a list that cannot change results
  FUSEJIT_REQUIRE_WARM  1: a kernel missing from the cache is an error, not a compile
and FUSEJIT_DUMP_DIR, FUSEJIT_RECORD_DIR, FUSEJIT_MEMO_MAX, FUSEJIT_KERNELS_MAX, FUSEJIT_TF32,
FUSEJIT_ROUNDING, FUSEJIT_ATTENTION, FUSEJIT_CUDNN_PATH, FUSEJIT_GEMV_PROLOGUE,
FUSEJIT_GEMV_EPILOGUE, FUSEJIT_GEMV_RING.
`fusejit COMMAND --help` describes a command.)";

constexpr int kUsageStatus = 2;

std::string version_text() { return fmt::format("fusejit {}", FUSEJIT_VERSION_STRING); }

// CLI11's own words, where they are unclear, in ours: "--iters: 1 required N in 1..1000000
// missing" names the option and what it accepts, "--iters: At Most 1 required but received 2"
// says it was given twice; "The following argument was not expected"
// says whether it is an unknown option or one argument too many.
std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::vector<std::string> extras = app.remaining();
    if (!extras.empty() && extras.front().size() > 1 && extras.front()[0] == '-') {
      return fmt::format("unknown option {}", extras.front());
    }
    if (!extras.empty()) return fmt::format("unexpected argument '{}'", extras.front());
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    const size_t colon = what.find(": ");
    if (colon != std::string::npos && what.find(": At Most 1 required") == colon) {
      return fmt::format("{} given more than once; it takes one value", what.substr(0, colon));
    }
    if (colon != std::string::npos && what.ends_with(" missing")) {
      const std::string name = what.substr(0, colon);
      if (const CLI::Option* opt = app.get_option_no_throw(name)) {
        return fmt::format("{} needs a value: {}", name, opt->get_type_name());
      }
    }
  }
  return what;
}

int usage_error(const CLI::App& app, const std::string& message) {
  const std::string path = app.get_parent() ? "fusejit " + app.get_name() : "fusejit";
  std::fprintf(stderr, "%s: error: %s\nRun `%s --help` for the options.\n", path.c_str(),
               fusejit::cache::printable(message, /*keep_lines=*/true).c_str(), path.c_str());
  return kUsageStatus;
}

}  // namespace

fusejit::Options fusejit::tools::options_from_env() {
  Options options = Options::from_env();
  for (const std::string& w : options.warnings) {
    std::fprintf(stderr, "fusejit: warning: %s\n",
                 cache::printable(w, /*keep_lines=*/true).c_str());
  }
  return options;
}

int main(int argc, char** argv) {
  namespace tools = fusejit::tools;
  CLI::App app("fusejit: a just-in-time kernel-fusion engine for NVIDIA GPUs; this tool plans, "
               "runs and warms traces and looks after the kernel cache.",
               "fusejit");
  app.set_version_flag("--version", version_text(), "print the version and exit");
  app.footer(kFooter);
  app.require_subcommand(1);
  std::vector<tools::Command> commands = {tools::add_plan_command(app), tools::add_run_command(app),
                                          tools::add_warm_command(app),
                                          tools::add_cache_command(app)};
  CLI::App* version = app.add_subcommand("version", "Print the version.");
  commands.push_back({version, [] {
                        std::printf("%s\n", version_text().c_str());
                        return 0;
                      }});
  // `fusejit help [COMMAND]` is `fusejit [COMMAND] --help`; `fusejit` alone is a usage error
  // that shows the help.
  if (argc >= 2 && !std::strcmp(argv[1], "help")) {
    for (const tools::Command& c : commands) {
      if (argc == 3 && c.app->get_name() == argv[2]) {
        std::fputs(c.app->help("fusejit").c_str(), stdout);
        return 0;
      }
    }
    if (argc > 2) return usage_error(app, fmt::format("help: no command '{}'", argv[2]));
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  if (argc < 2) {
    std::fputs(app.help().c_str(), stderr);
    return kUsageStatus;
  }
  // Before the command: its name, or the tool's own --help and --version.
  const std::string first = argv[1];
  std::string known;
  bool found = first == "-h" || first == "--help" || first == "--version";
  for (const tools::Command& c : commands) {
    known += (known.empty() ? "" : ", ") + c.app->get_name();
    found = found || c.app->get_name() == first;
  }
  if (!found && first[0] == '-') {
    return usage_error(app, fmt::format("unknown option {}; the options before a command are "
                                        "--help and --version",
                                        first));
  }
  if (!found) {
    return usage_error(app, fmt::format("unknown command '{}'; the commands are {}", first, known));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // The subcommand being parsed, when there is one, names the error.
    const CLI::App* where = &app;
    for (const tools::Command& c : commands) {
      if (c.app->parsed()) where = c.app;
    }
    return usage_error(*where, parse_error_text(*where, e));
  }

  for (const tools::Command& c : commands) {
    if (!c.app->parsed()) continue;
    const std::string name = c.app->get_name();
    try {
      return c.run();
    } catch (const tools::BadArguments& e) {
      return usage_error(*c.app, e.what());
    } catch (const std::exception& e) {  // fusejit::Error, and anything else from the library
      std::fflush(stdout);
      // Whatever the message quotes (a path, a variable's value, a file's bytes) reaches the
      // terminal escaped.
      std::fprintf(stderr, "fusejit %s: error: %s\n", name.c_str(),
                   fusejit::cache::printable(e.what(), /*keep_lines=*/true).c_str());
      return 1;
    }
  }
  return usage_error(app, "no command given");  // require_subcommand makes this unreachable
}
