// templates/arch: see arch.h.
#include "templates/arch.h"

#include <fmt/format.h>

#include "fusejit/error.h"

namespace fusejit::templates {

std::string Arch::name() const {
  return fmt::format("{}_{}{}", real ? "sm" : "compute", number, suffix);
}

std::string Arch::sm() const { return fmt::format("sm_{}", number); }

std::string Arch::compute() const { return fmt::format("compute_{}", number); }

Arch parse_arch(std::string_view text) {
  Arch arch;
  std::string_view rest = text;
  if (rest.starts_with("sm_")) {
    rest.remove_prefix(3);
  } else if (rest.starts_with("compute_")) {
    rest.remove_prefix(8);
    arch.real = false;
  } else {
    rest = {};
  }
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    arch.suffix = rest.back();
    rest.remove_suffix(1);
  }
  const bool digits = (rest.size() == 2 || rest.size() == 3) &&
                      rest.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits || rest.front() == '0') {
    throw UsageError(fmt::format("unknown GPU arch '{}'; name it sm_NN (such as sm_80, sm_90, "
                                 "sm_90a, sm_100), or compute_NN for PTX only",
                                 text));
  }
  arch.number = 0;
  for (char c : rest) arch.number = arch.number * 10 + (c - '0');
  return arch;
}

}  // namespace fusejit::templates
