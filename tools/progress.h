// tools/progress: what `fusejit warm` shows while it works, on stderr, so that stdout keeps only
// the command's results. On a terminal, one bar line redrawn in place (at most every 0.1 s);
// otherwise (a log file, CI), a plain line each time another tenth of the work is done or 2 s
// have passed since the last line, and one at the end:
//
//   fusejit warm: 12/23 traces, 10/19 kernels (52%), 1.4 s
//
// Thread-safe: workers report as they finish.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace fusejit::tools {

class Progress {
 public:
  // bar: redraw one line in place (for a terminal). Totals of 0 count as done.
  Progress(std::FILE* out, bool bar, std::string label, int traces, int kernels);
  // The work done so far; shown when it is time to.
  void update(int traces_done, int kernels_done);
  // Shows the final state (once), and ends the bar's line.
  void finish();

  // Whether stderr is a terminal: what `bar` should be for Progress(stderr, ...).
  static bool stderr_is_terminal();

 private:
  std::string text() const;
  void show();

  std::FILE* out_;
  bool bar_;
  std::string label_;
  int traces_, kernels_;
  int traces_done_ = 0, kernels_done_ = 0;
  int tenths_shown_ = 0;  // plain lines: the last tenth of the work that was shown
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_shown_;
  std::mutex mutex_;
};

}  // namespace fusejit::tools
