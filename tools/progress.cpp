// tools/progress: see progress.h.
#include "tools/progress.h"

#include <unistd.h>

#include <fmt/format.h>

namespace fusejit::tools {

namespace {

constexpr auto kBarInterval = std::chrono::milliseconds(100);
constexpr auto kLineInterval = std::chrono::seconds(2);
constexpr int kBarWidth = 24;

}  // namespace

Progress::Progress(std::FILE* out, bool bar, std::string label, int traces, int kernels)
    : out_(out),
      bar_(bar),
      label_(std::move(label)),
      traces_(traces),
      kernels_(kernels),
      start_(std::chrono::steady_clock::now()),
      last_shown_(start_) {}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::text() const {
  const double fraction = kernels_ > 0 ? static_cast<double>(kernels_done_) / kernels_ : 1.0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string counts =
      fmt::format("{}/{} traces, {}/{} kernels ({:.0f}%), {:.1f} s", traces_done_, traces_,
                  kernels_done_, kernels_, fraction * 100, seconds);
  if (!bar_) return fmt::format("{}: {}\n", label_, counts);
  const int filled = static_cast<int>(fraction * kBarWidth);
  // \r and the erase-to-end-of-line escape redraw the line in place.
  return fmt::format("\r{} [{}{}] {}\x1b[K", label_, std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kBarWidth - filled), '.'), counts);
}

void Progress::show() {
  std::fputs(text().c_str(), out_);
  std::fflush(out_);
  last_shown_ = std::chrono::steady_clock::now();
}

void Progress::update(int traces_done, int kernels_done) {
  std::lock_guard lock(mutex_);
  traces_done_ = traces_done;
  kernels_done_ = kernels_done;
  if (finished_) return;
  const auto since = std::chrono::steady_clock::now() - last_shown_;
  if (bar_) {
    if (since >= kBarInterval) show();
    return;
  }
  const int tenths = kernels_ > 0 ? kernels_done_ * 10 / kernels_ : 10;
  if ((tenths > tenths_shown_ && tenths < 10) || since >= kLineInterval) {
    tenths_shown_ = tenths;
    show();
  }
}

void Progress::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  show();
  if (bar_) std::fputs("\n", out_);
  std::fflush(out_);
}

}  // namespace fusejit::tools
