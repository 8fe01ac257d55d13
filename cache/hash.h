// cache/hash: the hashes the cache relies on. Both are xxHash's XXH3 (libxxhash), whose values
// are specified and fixed across versions, platforms and byte orders (std::hash promises
// neither). Not cryptographic: they guard against accidents (two kernels sharing a key, a
// damaged file), not against someone forging an entry for a known key.
//
//   Hash128   streaming XXH3-128 (seed 0): the kernel key (key.h).
//   Hash64    streaming XXH3-64 (seed 0): the checksum of a disk entry (entry.h,
//             docs/cache-format.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

namespace detail {
// Owns one XXH3 streaming state (xxhash.h stays out of this header).
struct Xxh3State;
struct Xxh3StateDelete {
  void operator()(Xxh3State* state) const;
};
using Xxh3Ptr = std::unique_ptr<Xxh3State, Xxh3StateDelete>;
}  // namespace detail

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
  detail::Xxh3Ptr state_;
};

class Hash64 {
 public:
  Hash64();
  Hash64& update(const void* data, size_t size);
  Hash64& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  uint64_t digest() const;

 private:
  detail::Xxh3Ptr state_;
};

}  // namespace fusejit::cache
