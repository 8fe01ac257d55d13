// cache::LruMap: recency order, get() refreshing it, eviction of the least recently used beyond
// the capacity (counted), a key kept on a second insert, keys that share a hash, erase and clear.
#include <string>
#include <vector>

#include "cache/lru.h"
#include "fusejit/error.h"
#include "support.h"

using fusejit::cache::LruMap;

namespace {

using Ints = LruMap<int, std::string>;
using Keys = std::vector<int>;

// From the most to the least recently used.
Keys keys_of(const Ints& m) {
  Keys keys;
  m.for_each_key([&](int k) { keys.push_back(k); });
  return keys;
}

// Every key hashes to 7: entries must be told apart by comparing keys.
struct Colliding {
  size_t operator()(int) const { return 7; }
};

}  // namespace

TEST_CASE("LruMap: the least recently inserted goes first", "[cache][lru]") {
  Ints m(3);
  for (int k = 1; k <= 3; ++k) m.insert(k, std::to_string(k));
  CHECK(m.size() == 3);
  CHECK(keys_of(m) == Keys{3, 2, 1});
  CHECK(m.evictions() == 0);

  m.insert(4, "4");
  CHECK(m.size() == 3);
  CHECK(keys_of(m) == Keys{4, 3, 2});
  CHECK(m.get(1) == nullptr);
  CHECK(m.evictions() == 1);
}

TEST_CASE("LruMap: get refreshes recency, a miss does not", "[cache][lru]") {
  Ints m(3);
  for (int k = 1; k <= 3; ++k) m.insert(k, std::to_string(k));
  REQUIRE(m.get(1) != nullptr);
  CHECK(*m.get(1) == "1");
  CHECK(m.get(9) == nullptr);
  CHECK(keys_of(m) == Keys{1, 3, 2});

  m.insert(4, "4");  // 2 is now the least recently used
  CHECK(keys_of(m) == Keys{4, 1, 3});
  CHECK(m.get(2) == nullptr);
  CHECK(m.get(1) != nullptr);
  m.insert(5, "5");
  m.insert(6, "6");
  CHECK(keys_of(m) == Keys{6, 5, 1});
  CHECK(m.evictions() == 3);
}

TEST_CASE("LruMap: a second insert keeps the first value and refreshes it", "[cache][lru]") {
  Ints m(2);
  m.insert(1, "first");
  m.insert(2, "two");
  const std::string& kept = m.insert(1, "second");
  CHECK(kept == "first");
  CHECK(*m.get(1) == "first");
  CHECK(m.size() == 2);
  m.insert(3, "three");  // 2 goes, 1 was refreshed by the insert
  CHECK(keys_of(m) == Keys{3, 1});
  CHECK(m.evictions() == 1);
}

TEST_CASE("LruMap: capacity 1 keeps only the newest", "[cache][lru]") {
  Ints m(1);
  CHECK(m.capacity() == 1);
  m.insert(1, "1");
  CHECK(m.get(1) != nullptr);
  m.insert(2, "2");
  CHECK(m.get(1) == nullptr);
  CHECK(*m.get(2) == "2");
  m.insert(2, "again");  // present: nothing evicted
  CHECK(m.evictions() == 1);
  m.insert(3, "3");
  CHECK(keys_of(m) == Keys{3});
  CHECK(m.evictions() == 2);
}

TEST_CASE("LruMap: a capacity of 0 is an internal error", "[cache][lru]") {
  CHECK_THROWS_AS(Ints(0), fusejit::InternalError);
}

TEST_CASE("LruMap: keys that share a hash stay apart", "[cache][lru]") {
  LruMap<int, std::string, Colliding> m(3);
  for (int k = 1; k <= 3; ++k) m.insert(k, std::to_string(k));
  CHECK(*m.get(1) == "1");
  CHECK(*m.get(2) == "2");
  CHECK(*m.get(3) == "3");
  CHECK(m.get(4) == nullptr);
  m.insert(4, "4");  // evicts 1, the least recently used, not any other of hash 7
  CHECK(m.get(1) == nullptr);
  CHECK(*m.get(2) == "2");
  CHECK(*m.get(4) == "4");
  CHECK(m.erase(2));
  CHECK_FALSE(m.erase(2));
  CHECK(m.get(2) == nullptr);
  CHECK(*m.get(3) == "3");
  CHECK(m.size() == 2);
}

TEST_CASE("LruMap: a caller's hash, erase and clear", "[cache][lru]") {
  LruMap<std::string, int> m(4);
  const size_t h = std::hash<std::string>{}("a");
  m.insert("a", 1, h);
  REQUIRE(m.get(std::string("a"), h) != nullptr);
  CHECK(*m.get(std::string("a")) == 1);  // the same entry, hashed by the map
  m.insert("b", 2);
  CHECK(m.erase(std::string("a")));
  CHECK(m.size() == 1);
  CHECK(m.evictions() == 0);  // erasing is not evicting
  m.clear();
  CHECK(m.size() == 0);
  CHECK(m.get(std::string("b")) == nullptr);
  m.insert("c", 3);  // usable after clear
  CHECK(*m.get(std::string("c")) == 3);
}
