// templates/target: what code generation needs to know about the GPU a kernel is for: the
// per-SM limits that decide block sizes and residency. The runtime reads them from the device
// it runs on; offline warming (no GPU) takes them from the table of known archs, which holds the
// same values the devices report, so that both produce the same source.
//
// The SM count is not here on purpose: it varies between parts of one arch (an H100 PCIe has
// 114 SMs, an SXM 132), so a kernel's source never depends on it; grids are sized at launch.
#pragma once

#include <string>
#include <string_view>

namespace fusejit::templates {

struct Target {
  int cc = 90;                       // compute capability, major * 10 + minor
  int threads_per_sm = 2048;         // resident threads per SM
  int registers_per_sm = 64 * 1024;  // 32-bit registers per SM
  int shared_per_sm = 228 * 1024;    // bytes of shared memory per SM
  // Blocks per thread-block cluster that every launch may use: the portable cluster size (8)
  // where the device launches clusters (sm_90 on), 1 where it does not.
  int cluster_blocks = 8;
  // The arch's nominal L2 per SM (its flagship part's L2 over its SM count), from the table of
  // archs even at run time, since parts of one arch differ: what a row a block re-reads may
  // occupy before the re-read goes to DRAM (see row_schedule.cpp's cluster_config).
  int l2_bytes_per_sm = 384 * 1024;

  // Blocks of `block` threads that fit on one SM by thread count alone.
  int blocks_per_sm(int block) const { return block > 0 ? threads_per_sm / block : 1; }
  // The most registers a thread of a `block`-thread kernel may use so that `blocks` blocks stay
  // resident (registers are handed out per warp in units of 8 per thread).
  int registers_for(int block, int blocks) const;
};

// The table entry of an arch ("sm_90", "sm_90a", "compute_90"): the nearest known arch at or
// below it. Throws fusejit::Error for a name that is not an arch.
Target target_for_arch(std::string_view arch);

// "sm_90" for a Target of cc 90.
std::string arch_name(const Target& t);

}  // namespace fusejit::templates
