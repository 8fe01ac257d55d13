// ir/digest: see digest.h. A thin layer over libxxhash's XXH3, its streaming state kept in the
// hasher's own storage.
#include "ir/digest.h"

#include <new>

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's definition, to keep one in place
#include <xxhash.h>

namespace fusejit::ir {

uint64_t hash64(const void* data, size_t size) { return XXH3_64bits(data, size); }

std::string Digest128::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

namespace detail {

namespace {

static_assert(sizeof(XXH3_state_t) <= sizeof(Xxh3State) &&
              alignof(XXH3_state_t) <= alignof(Xxh3State));

XXH3_state_t* xxh3(Xxh3State& state) {
  return std::launder(reinterpret_cast<XXH3_state_t*>(&state));
}

const XXH3_state_t* xxh3(const Xxh3State& state) {
  return std::launder(reinterpret_cast<const XXH3_state_t*>(&state));
}

}  // namespace

void reset(Xxh3State& state, Width width) {
  // XXH3's streaming state is plain data, its reset the whole of its set-up.
  XXH3_state_t* s = new (&state) XXH3_state_t;
  if (width == Width::bits64) {
    XXH3_64bits_reset(s);
  } else {
    XXH3_128bits_reset(s);
  }
}

void absorb(Xxh3State& state, Width width, const void* data, size_t size) {
  if (width == Width::bits64) {
    XXH3_64bits_update(xxh3(state), data, size);
  } else {
    XXH3_128bits_update(xxh3(state), data, size);
  }
}

}  // namespace detail

uint64_t Hash64::digest() const { return XXH3_64bits_digest(detail::xxh3(state_)); }

Digest128 Hash128::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(detail::xxh3(state_));
  return Digest128{h.high64, h.low64};
}

}  // namespace fusejit::ir
