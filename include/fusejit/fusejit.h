// fusejit: the public API. Include this one header.
#pragma once

#include "fusejit/context.h"
#include "fusejit/dtype.h"
#include "fusejit/error.h"
#include "fusejit/log.h"
#include "fusejit/options.h"
#include "fusejit/profile.h"
#include "fusejit/replay.h"
#include "fusejit/tensor.h"
#include "fusejit/version.h"
