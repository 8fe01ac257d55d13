// ir/interp: see interp.h.
#include "ir/interp.h"
