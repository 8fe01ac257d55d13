// ir/host_tensor: see host_tensor.h.
#include "ir/host_tensor.h"
