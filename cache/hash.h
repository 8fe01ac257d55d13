// cache/hash: the hashes the cache relies on, written here so that their values never change
// with a standard library or a platform (std::hash promises neither).
//
//   Hash128  a 128-bit streaming hash for kernel keys: two independent 64-bit lanes, each a
//            multiply-rotate-multiply round per 8-byte little-endian word (seeds and constants
//            differ per lane), finished with the input length and a full 64-bit avalanche.
//            Not cryptographic: it guards against accidents (two kernels sharing a key), not
//            against someone forging an entry for a known key.
//   fnv1a64  FNV-1a, 64 bits: the payload checksum of a disk entry (docs/cache-format.md). It
//            is simple enough to re-implement from the format document alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fusejit::cache {

struct Digest128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Digest128&) const = default;
  // 32 lowercase hex digits, hi first.
  std::string hex() const;
};

class Hash128 {
 public:
  Hash128();
  Hash128& update(const void* data, size_t size);
  Hash128& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  // Eight little-endian bytes.
  Hash128& update_u64(uint64_t value);
  // The length, then the bytes: fields written this way cannot run into each other.
  Hash128& update_field(std::string_view bytes);
  // The digest of everything so far; the hasher may keep going afterwards.
  Digest128 digest() const;

 private:
  void absorb(uint64_t word);
  uint64_t a_, b_;
  uint64_t length_ = 0;
  uint64_t tail_ = 0;  // up to 7 bytes not yet absorbed, little-endian
  unsigned tail_size_ = 0;
};

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// FNV-1a over `size` bytes, continuing from `state` (pass the previous result to chain).
uint64_t fnv1a64(const void* data, size_t size, uint64_t state = kFnvOffset);

}  // namespace fusejit::cache
