// ir/printable: see printable.h.
#include "ir/printable.h"

#include <iterator>

#include <fmt/format.h>

namespace fusejit::ir {

std::string printable(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if ((b < 0x20 || b >= 0x7f) && !(keep_lines && (b == '\n' || b == '\t'))) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", b);
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace fusejit::ir
