// ir/hash: see hash.h.
#include "ir/hash.h"
