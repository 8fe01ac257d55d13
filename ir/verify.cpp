// ir/verify: see verify.h.
#include "ir/verify.h"
