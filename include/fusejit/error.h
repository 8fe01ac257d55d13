// fusejit's errors. Everything a caller can act on derives from `Error`, so `catch (const
// fusejit::Error&)` catches them all; each kind can also be caught on its own:
//
//   UsageError        the caller's mistake: a bad shape or axis, a malformed trace, a bad
//                     environment value, a file that cannot be read. The message names the op,
//                     the shapes or the value involved and how to fix it.
//   CompileError      NVRTC could not compile a generated kernel: fusejit's fault or the
//                     toolkit's, not the caller's. source_path() is where the kernel's source
//                     was written (empty when it could not be), log() is NVRTC's log.
//   OutOfMemoryError  a device allocation failed; requested_bytes() is what was asked for.
//                     Freeing tensors, or a smaller problem, may help.
//   CudaError         a CUDA runtime, driver or cuBLASLt call failed: call() names it, code()
//                     is its status. The device or the driver is in trouble, not the input.
//
// `InternalError` is a broken invariant inside fusejit: a bug to report, not something the
// caller can fix. Its message starts with "internal error:" and carries what is needed to
// reproduce it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fusejit/export.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
};

class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string source_path, std::string log)
      : Error(message), source_path_(std::move(source_path)), log_(std::move(log)) {}
  const std::string& source_path() const { return source_path_; }
  const std::string& log() const { return log_; }

 private:
  std::string source_path_;
  std::string log_;
};

class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& message, int64_t requested_bytes)
      : Error(message), requested_bytes_(requested_bytes) {}
  int64_t requested_bytes() const { return requested_bytes_; }

 private:
  int64_t requested_bytes_;
};

class CudaError : public Error {
 public:
  CudaError(const std::string& message, std::string call, int code)
      : Error(message), call_(std::move(call)), code_(code) {}
  const std::string& call() const { return call_; }
  int code() const { return code_; }

 private:
  std::string call_;
  int code_;
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message)
      : std::logic_error("internal error: " + message) {}
};

}  // namespace fusejit
FUSEJIT_PUBLIC_END
