// cuDNN test support: the process's cuDNN as a Context would find it (FUSEJIT_CUDNN_PATH
// honoured). Tests that need it begin with FUSEJIT_REQUIRE_CUDNN(), which skips them
// (FUSEJIT_SKIP: reported as skipped, not passed), saying why, when no usable cuDNN 9 is found.
#pragma once

#include "fusejit/options.h"
#include "jit/libs/cudnn_api.h"
#include "support/catch.h"

namespace fusejit::testing {

inline const jit::cudnn::CudnnLibrary& test_cudnn() {
  static const jit::cudnn::CudnnLibrary lib =
      jit::cudnn::load_cudnn(Options::from_env().cudnn_path);
  return lib;
}

}  // namespace fusejit::testing

#define FUSEJIT_REQUIRE_CUDNN()                                          \
  do {                                                                   \
    if (!::fusejit::testing::test_cudnn()) {                             \
      FUSEJIT_SKIP(::fusejit::testing::test_cudnn().unavailable);        \
    }                                                                    \
  } while (0)
