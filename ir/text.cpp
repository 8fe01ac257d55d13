// ir/text: see text.h.
#include "ir/text.h"
