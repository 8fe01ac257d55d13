// jit/log: see log.h.
#include "jit/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace fusejit::jit {

std::shared_ptr<spdlog::logger> make_logger(LogLevel level) {
  // Not registered in spdlog's global registry: two Contexts have two independent loggers.
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("fusejit", std::move(sink));
  logger->set_pattern("[fusejit %l] %v");
  constexpr spdlog::level::level_enum kLevels[] = {
      spdlog::level::off,  spdlog::level::err,   spdlog::level::warn,
      spdlog::level::info, spdlog::level::debug, spdlog::level::trace};
  logger->set_level(kLevels[static_cast<int>(level)]);
  return logger;
}

}  // namespace fusejit::jit
