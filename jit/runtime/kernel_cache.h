// jit/kernel_cache: how fusejit obtains a compiled kernel, for the runtime and `fusejit warm`
// alike:
//
//   memory (this process) -> disk store (FUSEJIT_CACHE_DIR) -> lock the key across processes
//   -> look on disk again -> NVRTC compile -> store on disk and in memory -> unlock
//
// FUSEJIT_CACHE=memory skips the disk, =off caches nothing (every get compiles). The memory
// level keeps the FUSEJIT_KERNELS_MAX most recently used kernels.
// FUSEJIT_REQUIRE_WARM=1 turns a would-be compile into a fusejit::Error that names the kernel
// and says how to warm the cache. FUSEJIT_DUMP=cuda,ptx writes <dump_dir>/<kernel name>.cu and
// <dump_dir>/<kernel name>.ptx whenever a kernel is compiled or loaded from disk (the .ptx is
// that of the last arch obtained; its .target line says which).
//
// Entries for a real arch keep the CUBIN and, only when PTX is wanted (FUSEJIT_DUMP=ptx, or
// keep_ptx: `fusejit warm --ptx`), the PTX too; an entry for a virtual arch (compute_XX) is PTX.
// When PTX is wanted and a cached entry has none, the kernel is compiled again and the entry
// replaced (the key is the same: keeping the PTX is no NVRTC option).
//
// The key's ingredients are listed in cache/key.h; this file supplies the NVRTC-specific ones
// (compiler_identity(), compile_flags()). Thread-safe: threads may get() concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

#include "cache/disk_store.h"
#include "cache/key.h"
#include "cache/memory_cache.h"
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "jit/runtime/nvrtc.h"
#include "templates/kernel.h"

namespace fusejit::jit {

// The NVRTC in use, as the cache key names it: "nvrtc 13.0 build-id 65be0db3...". The build id
// is the GNU build id of the loaded libnvrtc (read from memory, no file access); with a static
// NVRTC it is "build-id unknown", and then only the version tells two NVRTCs apart.
const std::string& compiler_identity();

class KernelCache {
 public:
  enum class Outcome { memory_hit, disk_hit, compiled };
  // What compiles a kernel; jit::compile unless a test substitutes one.
  using Compiler = std::function<CompiledKernel(const templates::Kernel&, std::string_view arch,
                                                const CompileOptions&)>;

  // Opens the disk store when options.cache is `on` (an unusable directory degrades to memory
  // only, with one warning). keep_ptx: entries keep the PTX of real archs too.
  KernelCache(const Options& options, spdlog::logger& log, Compiler compiler = {},
              bool keep_ptx = false);

  // The compiled kernel for `arch` ("sm_90"); `outcome` says where it came from. Throws
  // fusejit::Error when NVRTC fails, or when a compile is needed under FUSEJIT_REQUIRE_WARM.
  CompiledKernel get(const templates::Kernel& k, std::string_view arch, Outcome* outcome = nullptr);
  // As get(), but nullopt instead of waiting when another process is compiling the kernel
  // right now (`fusejit warm` does other kernels meanwhile, then comes back with get()).
  std::optional<CompiledKernel> try_get(const templates::Kernel& k, std::string_view arch,
                                        Outcome* outcome = nullptr);

  cache::KernelKey key(const templates::Kernel& k, std::string_view arch) const;
  // The disk store, or nullptr under FUSEJIT_CACHE=memory|off.
  const cache::DiskStore* disk() const { return disk_.get(); }

  struct Counts {
    int64_t memory_hits = 0, disk_hits = 0, compiled = 0;
    int64_t memory_evictions = 0;  // kernels the memory level forgot (FUSEJIT_KERNELS_MAX)
  };
  Counts counts() const {
    return {memory_hits_.load(), disk_hits_.load(), compiled_.load(), memory_.evictions()};
  }

 private:
  std::optional<CompiledKernel> obtain(const templates::Kernel& k, std::string_view arch, bool wait,
                                       Outcome* outcome);
  Error not_warm(const templates::Kernel& k, std::string_view arch) const;
  CompiledKernel compile_now(const templates::Kernel& k, std::string_view arch);
  CompiledKernel from_disk(const templates::Kernel& k, const cache::KernelKey& key,
                           cache::Entry entry, Outcome* outcome);
  void dump(const templates::Kernel& k, const CompiledKernel& c);
  // Whether a cached entry holds everything wanted (the PTX, when keep_ptx_).
  bool complete(const cache::Entry& e) const { return !keep_ptx_ || !e.ptx.empty(); }

  Options options_;
  spdlog::logger& log_;
  Compiler compiler_;
  bool keep_ptx_;
  std::unique_ptr<cache::DiskStore> disk_;
  cache::MemoryCache memory_;
  std::atomic<int64_t> memory_hits_{0}, disk_hits_{0}, compiled_{0};
  std::once_flag dump_warning_;
};

std::string_view outcome_name(KernelCache::Outcome outcome);

}  // namespace fusejit::jit
