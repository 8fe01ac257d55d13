// templates/printer: the stream that code generation writes to: lines with an indent level.
// Pieces of a kernel can be printed into separate Printers (a loop body before the loads it
// needs are known) and spliced into an enclosing one, which indents them to its own level.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace fusejit::templates {

class Printer {
 public:
  template <class... Args>
  void line(fmt::format_string<Args...> f, Args&&... args) {
    lines_.emplace_back(indent_, fmt::format(f, std::forward<Args>(args)...));
  }
  void raw(std::string_view text) { lines_.emplace_back(indent_, std::string(text)); }
  void blank() { lines_.emplace_back(0, std::string()); }

  // `head {` ... `}`
  template <class... Args>
  void open(fmt::format_string<Args...> f, Args&&... args) {
    lines_.emplace_back(indent_, fmt::format(f, std::forward<Args>(args)...) + " {");
    ++indent_;
  }
  void close(std::string_view tail = "}") {
    --indent_;
    lines_.emplace_back(indent_, std::string(tail));
  }

  // One level deeper without a `{` line (after a signature that ends in `{`).
  void indent() { ++indent_; }

  // Appends another printer's lines, indented by this printer's current level.
  void splice(const Printer& other) {
    for (const auto& [level, text] : other.lines_) lines_.emplace_back(indent_ + level, text);
  }
  bool empty() const { return lines_.empty(); }

  std::string str() const {
    std::string out;
    for (const auto& [level, text] : lines_) {
      if (!text.empty()) out.append(static_cast<size_t>(2 * level), ' ').append(text);
      out.push_back('\n');
    }
    return out;
  }

 private:
  std::vector<std::pair<int, std::string>> lines_;
  int indent_ = 0;
};

}  // namespace fusejit::templates
