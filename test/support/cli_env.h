// The environment the tests run the fusejit binary in: `env` with every FUSEJIT_* variable of
// the test process's own environment unset, and HOME and XDG_CACHE_HOME inside a directory of
// this process's own, so that no default cache directory (nor anything else under HOME) is
// shared with another test process running at the same time.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

extern char** environ;

namespace fusejit::testing {

// "env -u FUSEJIT_... HOME='...' XDG_CACHE_HOME='...'": put it before the binary; assignments
// after it override these.
inline const std::string& isolated_cli_env() {
  static const std::string prefix = [] {
    const std::filesystem::path home = std::filesystem::temp_directory_path() /
                                       ("fusejit-test-home-" + std::to_string(::getpid()));
    std::filesystem::create_directories(home);
    std::string s = "env";
    for (char** e = environ; e && *e; ++e) {
      const std::string_view var(*e);
      if (var.starts_with("FUSEJIT_")) s += " -u " + std::string(var.substr(0, var.find('=')));
    }
    return s + " HOME='" + home.string() + "' XDG_CACHE_HOME='" + (home / "cache").string() + "'";
  }();
  return prefix;
}

}  // namespace fusejit::testing
