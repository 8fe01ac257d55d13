// cache/hash: see hash.h. A thin layer over libxxhash's streaming XXH3.
#include "cache/hash.h"

#include <new>

#include <fmt/format.h>
#include <xxhash.h>

namespace fusejit::cache {

namespace detail {

struct Xxh3State {
  XXH3_state_t* state;
};

void Xxh3StateDelete::operator()(Xxh3State* s) const {
  XXH3_freeState(s->state);
  delete s;
}

namespace {

Xxh3Ptr make_state() {
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  return Xxh3Ptr(new Xxh3State{state});
}

}  // namespace

}  // namespace detail

std::string Digest128::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

Hash128::Hash128() : state_(detail::make_state()) { XXH3_128bits_reset(state_->state); }

Hash128& Hash128::update(const void* data, size_t size) {
  XXH3_128bits_update(state_->state, data, size);
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
  const XXH128_hash_t h = XXH3_128bits_digest(state_->state);
  return Digest128{h.high64, h.low64};
}

Hash64::Hash64() : state_(detail::make_state()) { XXH3_64bits_reset(state_->state); }

Hash64& Hash64::update(const void* data, size_t size) {
  XXH3_64bits_update(state_->state, data, size);
  return *this;
}

uint64_t Hash64::digest() const { return XXH3_64bits_digest(state_->state); }

}  // namespace fusejit::cache
