// jit/log: see log.h and fusejit/log.h.
#include "jit/api/log.h"

#include <memory>
#include <mutex>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "fusejit/log.h"

namespace fusejit {

namespace {

// The process's log callback (fusejit/log.h): null while lines go to stderr.
std::mutex& callback_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<const LogCallback>& installed_callback() {
  static std::shared_ptr<const LogCallback> callback;
  return callback;
}

LogLevel from_spdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return LogLevel::trace;
    case spdlog::level::debug: return LogLevel::debug;
    case spdlog::level::info: return LogLevel::info;
    case spdlog::level::warn: return LogLevel::warn;
    default: return LogLevel::error;
  }
}

// Every Context's logger writes through this sink: to the installed callback when there is
// one, else to stderr. Lines are serialized by the callback's mutex (one call at a time).
class DispatchSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lock(callback_mutex());
    if (const std::shared_ptr<const LogCallback>& cb = installed_callback()) {
      (*cb)(from_spdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
    } else {
      stderr_->log(msg);
    }
  }
  void flush_() override { stderr_->flush(); }
  void set_pattern_(const std::string& pattern) override { stderr_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> f) override {
    stderr_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_st> stderr_ =
      std::make_shared<spdlog::sinks::stderr_color_sink_st>();
};

}  // namespace

void set_log_callback(LogCallback callback) {
  std::lock_guard<std::mutex> lock(callback_mutex());
  installed_callback() =
      callback ? std::make_shared<const LogCallback>(std::move(callback)) : nullptr;
}

namespace jit {

std::shared_ptr<spdlog::logger> make_logger(LogLevel level) {
  // Not registered in spdlog's global registry: two Contexts have two independent loggers.
  auto logger = std::make_shared<spdlog::logger>("fusejit", std::make_shared<DispatchSink>());
  logger->set_pattern("[fusejit %l] %v");
  constexpr spdlog::level::level_enum kLevels[] = {
      spdlog::level::off,  spdlog::level::err,   spdlog::level::warn,
      spdlog::level::info, spdlog::level::debug, spdlog::level::trace};
  logger->set_level(kLevels[static_cast<int>(level)]);
  return logger;
}

}  // namespace jit

}  // namespace fusejit
