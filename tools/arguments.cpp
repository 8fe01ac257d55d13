// tools/arguments: checks of option values shared by the subcommands.
#include <charconv>

#include <fmt/format.h>

#include "tools/commands.h"

namespace fusejit::tools {

CLI::Validator whole_number(int64_t lo, int64_t hi) {
  // The description stays empty: number_type() already puts the range in the type name.
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ptr != end || ec == std::errc::invalid_argument) {
          return fmt::format("'{}' is not a whole number; expected one from {} to {}", text, lo,
                             hi);
        }
        if (ec == std::errc::result_out_of_range || value < lo || value > hi) {
          return fmt::format("{} is out of range; expected a whole number from {} to {}", text,
                             lo, hi);
        }
        return "";
      },
      "");
}

std::string number_type(const std::string& name, int64_t lo, int64_t hi) {
  return fmt::format("{} in {}..{}", name, lo, hi);
}

}  // namespace fusejit::tools
