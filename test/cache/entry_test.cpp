// The entry format (docs/cache-format.md): the bytes round-trip, the header sits where the
// document says, and every kind of damage is named.
#include "cache/entry.h"
#include "ir/digest.h"
#include "support.h"

using namespace fusejit;

namespace {

cache::KernelKey some_key(int i) {
  cache::KeyIngredients in;
  const std::string source = "kernel " + std::to_string(i);
  in.source = source;
  in.arch = "sm_90";
  return cache::make_key(in);
}

cache::Entry some_entry() {
  cache::Entry e;
  e.name = "fj_pointwise_0123";
  e.arch = "sm_90";
  e.cubin = std::string(
      "\x7f"
      "ELF\0\0\x01binary",
      13);
  e.ptx = ".version 9.0\n.target sm_90\n";
  e.source = "extern \"C\" __global__ void fj_pointwise_0123() {}\n";
  return e;
}

uint64_t le(const std::string& b, size_t at, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

std::string problem_of(const std::string& bytes, const cache::KernelKey& key) {
  std::string problem;
  CHECK_FALSE(cache::decode_entry(bytes, key, &problem));
  CHECK_FALSE(problem.empty());
  return problem;
}

}  // namespace

TEST_CASE("entry: round trip, and the layout of the document", "[cache][entry]") {
  const cache::KernelKey key = some_key(1);
  const cache::Entry e = some_entry();
  const std::string bytes = cache::encode_entry(key, e);

  REQUIRE(bytes.size() ==
          64 + e.name.size() + e.arch.size() + e.cubin.size() + e.ptx.size() + e.source.size());
  CHECK(bytes.substr(0, 4) == "FJKC");
  CHECK(le(bytes, 4, 4) == cache::kFormatVersion);
  CHECK(le(bytes, 8, 8) == key.digest.hi);
  CHECK(le(bytes, 16, 8) == key.digest.lo);
  CHECK(le(bytes, 24, 4) == e.name.size());
  CHECK(le(bytes, 28, 4) == e.arch.size());
  CHECK(le(bytes, 32, 8) == e.cubin.size());
  CHECK(le(bytes, 40, 8) == e.ptx.size());
  CHECK(le(bytes, 48, 8) == e.source.size());
  CHECK(le(bytes, 56, 8) == cache::entry_checksum(bytes));
  // XXH3-64 over all but the checksum field itself, as the document says.
  CHECK(le(bytes, 56, 8) == ir::Hash64()
                                .update(std::string_view(bytes).substr(0, 56))
                                .update(std::string_view(bytes).substr(64))
                                .digest());
  CHECK(bytes.substr(64, e.name.size()) == e.name);

  std::string problem;
  const auto back = cache::decode_entry(bytes, key, &problem);
  REQUIRE(back);
  CHECK(back->name == e.name);
  CHECK(back->arch == e.arch);
  CHECK(back->cubin == e.cubin);
  CHECK(back->ptx == e.ptx);
  CHECK(back->source == e.source);

  std::string why;
  const auto summary = cache::peek_entry(bytes.substr(0, 64 + e.name.size() + e.arch.size()), &why);
  REQUIRE(summary);
  CHECK(summary->arch == "sm_90");
  CHECK(summary->name == e.name);
  CHECK(summary->file_size == bytes.size());

  cache::Entry no_source = e;
  no_source.source.clear();
  const auto back2 = cache::decode_entry(cache::encode_entry(key, no_source), key, &problem);
  REQUIRE(back2);
  CHECK(back2->source.empty());
  CHECK(back2->cubin == e.cubin);
}

TEST_CASE("entry: every kind of damage is a named problem", "[cache][entry]") {
  const cache::KernelKey key = some_key(1);
  const std::string good = cache::encode_entry(key, some_entry());

  CHECK_THAT(problem_of(good.substr(0, good.size() - 1), key), ContainsSubstring("truncated"));
  CHECK_THAT(problem_of(good.substr(0, 40), key), ContainsSubstring("truncated"));
  CHECK_THAT(problem_of("", key), ContainsSubstring("truncated"));
  CHECK_THAT(problem_of(good + "x", key), ContainsSubstring("size mismatch"));

  std::string bad = good;
  bad[0] = 'X';
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("magic"));
  bad = good;
  bad[4] = 3;
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("format version 3"));
  CHECK_THAT(problem_of(good, some_key(2)), ContainsSubstring("key mismatch"));
  bad = good;
  bad[9] ^= 1;  // the key inside the header
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("key mismatch"));
  bad = good;
  bad[60] ^= 1;  // the stored checksum
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("checksum"));
  bad = good;
  bad[35] ^= 1;  // a payload size
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("bytes, the header says"));
  bad = good;
  bad[25] = 0x7f;  // an absurd name size
  CHECK_THAT(problem_of(bad, key), ContainsSubstring("name size"));
  // One flipped bit anywhere in the payload.
  for (size_t at = 64; at < good.size(); at += 7) {
    bad = good;
    bad[at] ^= 0x10;
    CHECK_THAT(problem_of(bad, key), ContainsSubstring("checksum"));
  }
}

TEST_CASE("entry: the checksum covers the header, so sizes cannot trade bytes", "[cache][entry]") {
  // Moving one byte from the CUBIN's size to the PTX's keeps the file's length: only a checksum
  // over the header notices (version 1's, over the payload alone, did not).
  const cache::KernelKey key = some_key(1);
  const std::string good = cache::encode_entry(key, some_entry());
  auto put = [](std::string& b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  };
  std::string shifted = good;
  put(shifted, 32, le(good, 32, 8) - 1);  // cubin size
  put(shifted, 40, le(good, 40, 8) + 1);  // ptx size
  CHECK_THAT(problem_of(shifted, key), ContainsSubstring("checksum"));
  std::string renamed = good;  // a byte from the arch to the name (both sizes are < 256)
  renamed[24] = static_cast<char>(renamed[24] + 1);
  renamed[28] = static_cast<char>(renamed[28] - 1);
  CHECK_THAT(problem_of(renamed, key), ContainsSubstring("checksum"));
}

TEST_CASE("entry: a version 1 entry is stale, never misread", "[cache][entry]") {
  const cache::KernelKey key = some_key(1);
  std::string old = cache::encode_entry(key, some_entry());
  old[4] = 1;  // what fusejit wrote before the format took XXH3 over header and payload
  CHECK_THAT(problem_of(old, key), ContainsSubstring("stale: format version 1"));
}
