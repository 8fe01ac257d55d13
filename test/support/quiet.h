// Options for a test's Context that log errors alone: the tests that check what is logged set
// their own level.
#pragma once

#include "fusejit/fusejit.h"

namespace fusejit::testing {

inline Options quiet() { return Options::parse({{"FUSEJIT_LOG", "error"}}); }

}  // namespace fusejit::testing
