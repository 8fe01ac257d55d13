#include "support/catch.h"
