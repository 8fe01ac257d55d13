// ir/digest: the project's one hash of bytes, xxHash's XXH3 (libxxhash), whose values are
// specified and fixed across versions, platforms and byte orders (std::hash promises neither).
// Everything that hashes goes through here: the structural hash of a graph (ir/hash.h), the
// names of generated kernels, the kernel cache's key (cache/key.h) and the checksum of a disk
// entry (cache/entry.h). Not cryptographic: it guards against accidents (two kernels sharing a
// name or key, a damaged file), not against someone forging an entry for a known key.
//
//   hash64    one-shot XXH3-64 (seed 0) of bytes
//   Hash64    streaming XXH3-64 (seed 0)
//   Hash128   streaming XXH3-128 (seed 0)
//
// A streaming hasher keeps its state inline, so it allocates nothing; xxhash.h stays out of
// this header. Where a few words are hashed very often (a node, on every recorded op), one
// hash64 over a buffer of them is much cheaper than streaming them (ir/hash.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fusejit::ir {

uint64_t hash64(const void* data, size_t size);
inline uint64_t hash64(std::string_view bytes) { return hash64(bytes.data(), bytes.size()); }

struct Digest128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Digest128&) const = default;
  // 32 lowercase hex digits, hi first.
  std::string hex() const;
};

namespace detail {

// Room for one XXH3_state_t (digest.cpp checks that it fits).
struct alignas(64) Xxh3State {
  unsigned char bytes[640];
};
enum class Width { bits64, bits128 };
void reset(Xxh3State& state, Width width);
void absorb(Xxh3State& state, Width width, const void* data, size_t size);

// What Hash64 and Hash128 share: the state, and updates that return the hasher itself so that
// they chain.
template <class Self, Width kWidth>
class Xxh3Stream {
 public:
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  Self& update(const void* data, size_t size) {
    absorb(state_, kWidth, data, size);
    return static_cast<Self&>(*this);
  }
  Self& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  // Eight little-endian bytes.
  Self& update_u64(uint64_t value) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
    return update(bytes, sizeof bytes);
  }
  // The length, then the bytes: fields written this way cannot run into each other.
  Self& update_field(std::string_view bytes) {
    update_u64(bytes.size());
    return update(bytes);
  }

 protected:
  Xxh3Stream() { reset(state_, kWidth); }
  ~Xxh3Stream() = default;
  Xxh3State state_;
};

}  // namespace detail

class Hash64 : public detail::Xxh3Stream<Hash64, detail::Width::bits64> {
 public:
  // The digest of everything so far; the hasher may keep going afterwards.
  uint64_t digest() const;
};

class Hash128 : public detail::Xxh3Stream<Hash128, detail::Width::bits128> {
 public:
  // The digest of everything so far; the hasher may keep going afterwards.
  Digest128 digest() const;
};

}  // namespace fusejit::ir
