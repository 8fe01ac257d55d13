// jit/log: the Context's spdlog logger. Each Context owns one, at the level FUSEJIT_LOG names;
// layers below jit receive it by reference.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

#include "fusejit/options.h"

namespace fusejit::jit {

std::shared_ptr<spdlog::logger> make_logger(LogLevel level);

}  // namespace fusejit::jit
