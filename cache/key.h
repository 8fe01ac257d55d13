// cache/key: the kernel-level cache key, the address of a compiled kernel in memory and on disk.
//
// THE INGREDIENTS (the one place they are written down; make_key in key.cpp hashes exactly
// these, in this order, each framed by its length):
//
//   1. kKeyScheme        the version of this list itself; bump it when the list changes
//   2. source            the complete CUDA C source of the kernel (templates::Kernel::source);
//                        it already holds the kernel's name, its shapes and dtypes (baked in
//                        as constants) and the pasted device helpers
//   3. arch              the target, as NVRTC is given it: "sm_90", "sm_80", "compute_90"
//   4. compiler          the NVRTC that compiles: its version AND its build, e.g.
//                        "nvrtc 13.0 build-id 65be0db3..." (jit::compiler_identity(): two builds
//                        of one version may generate different code)
//   5. codegen_version   templates::kCodegenVersion: bumped when generated code changes in a
//                        way the source would not show
//   6. compile_flags     every option passed to NVRTC (jit::compile_flags(arch)), in order
//
// The cache layer sits below jit and never calls NVRTC: whoever builds a key passes the
// compiler identity and the flags in. Anything else that changes the CUBIN must join this list.
//
// The key is the XXH3-128 digest (ir::Hash128, ir/digest.h) of the framed ingredients, written
// as 32 lowercase hex digits; the disk store names entries by it
// (<dir>/<first 2 hex>/<32 hex>.fjk) and repeats it inside each entry. Scheme 1 used a
// home-made hash: its entries are never looked up again, and LRU eviction removes them in time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/digest.h"

namespace fusejit::cache {

inline constexpr std::string_view kKeyScheme = "fusejit-kernel-key 2";

struct KeyIngredients {
  std::string_view source;
  std::string_view arch;
  std::string_view compiler;
  int codegen_version = 0;
  std::vector<std::string> compile_flags;
};

struct KernelKey {
  ir::Digest128 digest;
  bool operator==(const KernelKey&) const = default;
  std::string hex() const { return digest.hex(); }          // 32 hex digits
  std::string shard() const { return hex().substr(0, 2); }  // the directory it lives in
  // The key a 32-hex-digit name stands for; nullopt when the text is not one.
  static std::optional<KernelKey> from_hex(std::string_view hex);
};

KernelKey make_key(const KeyIngredients& ingredients);

}  // namespace fusejit::cache
