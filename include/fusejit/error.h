// fusejit's two kinds of error.
//
// `Error` is the user's mistake: a bad shape, a bad axis, a malformed trace, a bad environment
// value. Its message names the op, the shapes involved and how to fix it.
//
// `InternalError` is a broken invariant inside fusejit: a bug to report, not something the user
// can fix. Its message starts with "internal error:" and carries what is needed to reproduce it.
#pragma once

#include <stdexcept>
#include <string>

namespace fusejit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message)
      : std::logic_error("internal error: " + message) {}
};

}  // namespace fusejit
