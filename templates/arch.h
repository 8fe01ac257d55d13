// templates/arch: the one parser of GPU arch names, "sm_90" (real: SASS for that arch),
// "compute_90" (virtual: PTX that the driver compiles for it), with an optional "a" or "f"
// suffix for arch- or family-specific features (sm_90a, sm_100f). Code generation, NVRTC's
// flags, FUSEJIT_ARCH and `fusejit warm --arch` all read a name through it. Which archs this
// NVRTC can target, and the per-arch limits (templates/target.h), are not its business.
#pragma once

#include <string>
#include <string_view>

namespace fusejit::templates {

struct Arch {
  int number = 90;     // compute capability, major * 10 + minor: 90 for sm_90a and compute_90
  bool real = true;    // sm_ rather than compute_
  std::string suffix;  // "", "a" or "f", as written

  std::string name() const;     // as written: "sm_90a", "compute_90"
  std::string sm() const;       // the real arch of that number, no suffix: "sm_90"
  std::string compute() const;  // the virtual arch of that number, no suffix: "compute_90"
};

// Parses sm_NN or compute_NN (NN two or three digits, then an optional a or f). Throws
// UsageError naming the text and the accepted forms.
Arch parse_arch(std::string_view text);

}  // namespace fusejit::templates
