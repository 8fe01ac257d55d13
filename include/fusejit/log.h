// fusejit/log: where fusejit's log lines go. By default every Context writes its lines to
// stderr ("[fusejit warn] ..."), from the level FUSEJIT_LOG names (warn by default) up. A host
// application can take them instead: set_log_callback installs one function, for the whole
// process, that receives every line of every Context, existing and new, in place of stderr; an
// empty function gives stderr back.
//
// The callback runs on the thread that logs (any thread that uses a Context), one call at a
// time; it must not call back into fusejit. The message is the line without the "[fusejit
// level]" prefix.
#pragma once

#include <functional>
#include <string_view>

#include "fusejit/export.h"
#include "fusejit/options.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

using LogCallback = std::function<void(LogLevel level, std::string_view message)>;

void set_log_callback(LogCallback callback);

}  // namespace fusejit
FUSEJIT_PUBLIC_END
