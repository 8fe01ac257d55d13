// templates/target: the table of known archs; see target.h.
#include "templates/target.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/arch.h"

namespace fusejit::templates {

namespace {

// Per-SM limits by compute capability, from NVIDIA's tables of technical specifications;
// clusters of up to 8 blocks (the portable size) from sm_90 on; L2 per SM of each arch's
// flagship (V100 6 MB / 80, T4 4 MB / 40, A100 40 MB / 108, GA102 6 MB / 84, Orin 4 MB / 16,
// AD102 72 MB / 128, H100 50 MB / 132, B200 126 MB / 148, GB202 96 MB / 170; sm_110 as sm_100).
constexpr std::array<Target, 11> kKnownTargets{{
    {70, 2048, 64 * 1024, 96 * 1024, 1, 76 * 1024},
    {75, 1024, 64 * 1024, 64 * 1024, 1, 102 * 1024},
    {80, 2048, 64 * 1024, 164 * 1024, 1, 379 * 1024},
    {86, 1536, 64 * 1024, 100 * 1024, 1, 73 * 1024},
    {87, 1536, 64 * 1024, 164 * 1024, 1, 256 * 1024},
    {89, 1536, 64 * 1024, 100 * 1024, 1, 576 * 1024},
    {90, 2048, 64 * 1024, 228 * 1024, 8, 388 * 1024},
    {100, 2048, 64 * 1024, 228 * 1024, 8, 871 * 1024},
    {103, 2048, 64 * 1024, 228 * 1024, 8, 871 * 1024},
    {110, 2048, 64 * 1024, 228 * 1024, 8, 871 * 1024},
    {120, 1536, 64 * 1024, 100 * 1024, 8, 578 * 1024},
}};

}  // namespace

int Target::registers_for(int block, int blocks) const {
  const int threads = std::max(1, block * std::max(1, blocks));
  int regs = registers_per_sm / threads;
  regs -= regs % 8;
  return std::clamp(regs, 16, 255);
}

Target target_for_arch(std::string_view arch) {
  const int cc = parse_arch(arch).number;
  if (cc < kKnownTargets.front().cc) {
    throw UsageError(fmt::format("{} is older than the oldest arch fusejit generates code for (sm_{})",
                            arch, kKnownTargets.front().cc));
  }
  Target t = kKnownTargets.front();
  for (const Target& known : kKnownTargets) {
    if (known.cc <= cc) t = known;
  }
  t.cc = cc;
  return t;
}

std::string arch_name(const Target& t) { return fmt::format("sm_{}", t.cc); }

}  // namespace fusejit::templates
