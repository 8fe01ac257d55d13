// The one hash (ir/digest.h): XXH3's published values, streaming equal to one shot, and the
// framing of words and fields.
#include <set>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "ir/digest.h"
#include "support/catch.h"

using namespace fusejit;

TEST_CASE("digest: streaming equals one shot; values are pinned", "[ir][digest]") {
  const std::string text = "The quick brown fox jumps over the lazy dog, 0123456789 times.";
  const ir::Digest128 whole = ir::Hash128().update(text).digest();
  for (size_t split = 0; split <= text.size(); ++split) {
    ir::Hash128 h;
    h.update(std::string_view(text).substr(0, split));
    h.update(std::string_view(text).substr(split));
    CHECK(h.digest() == whole);
  }
  // Lengths and trailing zeros matter; both halves move.
  const ir::Digest128 a = ir::Hash128().update("ab").digest();
  const ir::Digest128 b = ir::Hash128().update(std::string_view("ab\0", 3)).digest();
  CHECK(a.hi != b.hi);
  CHECK(a.lo != b.lo);
  CHECK_FALSE(ir::Hash128().digest() == a);

  // Pinned values: keys name files other fusejit builds read, so the hash must never drift
  // (cache/key.h: change kKeyScheme if it has to). They are XXH3's own: the empty input's
  // published digests, and what `xxh128sum` prints for the text.
  CHECK(ir::Hash128().digest().hex() == "99aa06d3014798d86001c324468d497f");
  CHECK(ir::Hash64().digest() == 0x2d06800538d394c2ull);
  CHECK(ir::Hash128().update(text).digest().hex() == "4f9820e88ab2c2297079770a90844543");
  ir::Hash64 streamed;
  streamed.update(std::string_view(text).substr(0, 10)).update(std::string_view(text).substr(10));
  CHECK(streamed.digest() == ir::Hash64().update(text).digest());
  CHECK(ir::hash64("") == 0x2d06800538d394c2ull);
  CHECK(ir::hash64(text) == ir::Hash64().update(text).digest());
}

TEST_CASE("digest: words are little-endian bytes; fields carry their length", "[ir][digest]") {
  const std::string_view bytes("\x08\x07\x06\x05\x04\x03\x02\x01", 8);
  CHECK(ir::Hash64().update_u64(0x0102030405060708ull).digest() == ir::hash64(bytes));
  CHECK(ir::Hash64().update_field("ab").update_field("c").digest() !=
        ir::Hash64().update_field("a").update_field("bc").digest());
  CHECK(ir::Hash64().update_field("abc").digest() ==
        ir::Hash64().update_u64(3).update("abc").digest());
}

TEST_CASE("digest: no collisions among many similar inputs", "[ir][digest]") {
  std::set<std::string> his, los;
  for (int i = 0; i < 20000; ++i) {
    const ir::Digest128 d = ir::Hash128().update(std::to_string(i)).digest();
    his.insert(fmt::format("{:016x}", d.hi));
    los.insert(fmt::format("{:016x}", d.lo));
  }
  CHECK(his.size() == 20000);
  CHECK(los.size() == 20000);
}
