// ir/printable: text from a user or a file as a message shows it.
#pragma once

#include <string>
#include <string_view>

namespace fusejit::ir {

// `text` with every byte outside printable ASCII (control bytes, a terminal's escape sequences,
// invalid UTF-8) written as \xNN, so that nothing read from a trace, an environment variable,
// a path or a cache entry reaches a terminal raw. keep_lines: newlines and tabs stay (a
// multi-line message, NVRTC's log). Every message that quotes such text goes through this.
std::string printable(std::string_view text, bool keep_lines = false);

}  // namespace fusejit::ir
