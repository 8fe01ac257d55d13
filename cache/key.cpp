// cache/key: builds the kernel key from the ingredients listed in key.h.
#include "cache/key.h"

#include <string>

namespace fusejit::cache {

KernelKey make_key(const KeyIngredients& in) {
  ir::Hash128 h;
  h.update_field(kKeyScheme);
  h.update_field(in.source);
  h.update_field(in.arch);
  h.update_field(in.compiler);
  h.update_field(std::to_string(in.codegen_version));
  h.update_u64(in.compile_flags.size());
  for (const std::string& flag : in.compile_flags) h.update_field(flag);
  return KernelKey{h.digest()};
}

std::optional<KernelKey> KernelKey::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t v = 0;
    if (c >= '0' && c <= '9')
      v = static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = static_cast<uint64_t>(c - 'a' + 10);
    else
      return std::nullopt;  // lowercase only: one key, one spelling, one file name
    words[i / 16] = (words[i / 16] << 4) | v;
  }
  return KernelKey{ir::Digest128{words[0], words[1]}};
}

}  // namespace fusejit::cache
