// cache/hash: see hash.h.
#include "cache/hash.h"

#include <cstring>

#include <fmt/format.h>

namespace fusejit::cache {

namespace {

// Odd 64-bit constants with well-mixed bits (the primes xxHash publishes).
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

constexpr uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// MurmurHash3's finalizer: every input bit flips each output bit with probability ~1/2.
constexpr uint64_t avalanche(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

std::string Digest128::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

Hash128::Hash128() : a_(kP1 ^ kP5), b_(kP3 + kP4) {}

void Hash128::absorb(uint64_t w) {
  // Lane a sees the word, lane b a rotated copy with other constants: a collision must hold in
  // both lanes at once.
  a_ = rotl(a_ + w * kP2, 31) * kP1;
  b_ = rotl(b_ ^ (rotl(w, 27) * kP4), 29) * kP3 + kP5;
}

Hash128& Hash128::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += size;
  // Fill the tail first, byte by byte; then whole words; then the new tail.
  while (size > 0 && tail_size_ != 0) {
    tail_ |= static_cast<uint64_t>(*p++) << (8 * tail_size_);
    --size;
    if (++tail_size_ == 8) {
      absorb(tail_);
      tail_ = 0;
      tail_size_ = 0;
    }
  }
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; --i) w = (w << 8) | p[i];  // little-endian on every host
    absorb(w);
  }
  for (; size > 0; --size) tail_ |= static_cast<uint64_t>(*p++) << (8 * tail_size_++);
  return *this;
}

Hash128& Hash128::update_u64(uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  return update(bytes, sizeof bytes);
}

Hash128& Hash128::update_field(std::string_view bytes) {
  update_u64(bytes.size());
  return update(bytes);
}

Digest128 Hash128::digest() const {
  uint64_t a = a_, b = b_;
  // The tail is absorbed tagged with its size, so "ab" and "ab\0" differ even before the length.
  if (tail_size_ != 0) {
    const uint64_t w = tail_ ^ (static_cast<uint64_t>(tail_size_) << 59);
    a = rotl(a + w * kP2, 31) * kP1;
    b = rotl(b ^ (rotl(w, 27) * kP4), 29) * kP3 + kP5;
  }
  Digest128 d;
  d.hi = avalanche(a ^ (length_ * kP3));
  d.lo = avalanche(b ^ rotl(length_ * kP1, 17));
  return d;
}

uint64_t fnv1a64(const void* data, size_t size, uint64_t state) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state ^= p[i];
    state *= kFnvPrime;
  }
  return state;
}

}  // namespace fusejit::cache
