// cache/lru: a map with a capacity that forgets its least recently used entry to make room, the
// policy of every in-memory table fusejit keeps (the trace memo, the loaded kernels, the memory
// level of the kernel cache), so that a process that keeps meeting new shapes stays bounded.
//
// Recency: insert() and a get() that finds its key make the entry the most recently used.
// Entries are indexed by a hash the caller may compute once and pass (a trace's structural hash
// is worth not computing twice); keys with equal hashes are told apart by `Equal`, so a
// collision costs a comparison, never a wrong answer. Lookup keys may be of another type than
// the stored ones when `Hash` and `Equal` accept both (std::equal_to<> is transparent).
//
// Not thread-safe: its owner locks. Values handed out by get() and insert() stay valid until
// their entry is evicted, erased or cleared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>

#include "fusejit/error.h"

namespace fusejit::cache {

template <class Key, class Value, class Hash = std::hash<Key>, class Equal = std::equal_to<>>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {
    if (capacity == 0)
      throw InternalError("internal error: an LruMap needs a capacity of at least 1");
  }
  // The index points into the list: a copy would point into the original.
  LruMap(const LruMap&) = delete;
  LruMap& operator=(const LruMap&) = delete;

  // The value stored under `key`, made the most recently used; nullptr when there is none.
  template <class K>
  Value* get(const K& key) {
    return get(key, Hash{}(key));
  }
  // The same with `hash` == Hash{}(key) computed by the caller.
  template <class K>
  Value* get(const K& key, size_t hash) {
    const auto node = find(key, hash);
    if (node == order_.end()) return nullptr;
    order_.splice(order_.begin(), order_, node);
    return &node->value;
  }

  // Stores `value` under `key` as the most recently used entry, then evicts the least recently
  // used ones beyond the capacity. A key already present keeps its value (two threads that raced
  // to build the same thing keep the first); the kept value is returned either way.
  Value& insert(Key key, Value value) {
    const size_t hash = Hash{}(key);
    return insert(std::move(key), std::move(value), hash);
  }
  Value& insert(Key key, Value value, size_t hash) {
    if (Value* present = get(key, hash)) return *present;
    order_.push_front(Node{std::move(key), std::move(value), hash});
    index_.emplace(hash, order_.begin());
    while (order_.size() > capacity_) {
      unlink(std::prev(order_.end()));
      ++evictions_;
    }
    return order_.front().value;
  }

  // Removes `key`'s entry; false when there was none. Not an eviction.
  template <class K>
  bool erase(const K& key) {
    const auto node = find(key, Hash{}(key));
    if (node == order_.end()) return false;
    unlink(node);
    return true;
  }

  void clear() {
    index_.clear();
    order_.clear();
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }
  // How many entries insert() has dropped to stay within the capacity, over the map's life.
  int64_t evictions() const { return evictions_; }

  // Keys from the most to the least recently used, for tests and dumps.
  template <class F>
  void for_each_key(F&& f) const {
    for (const Node& n : order_) f(n.key);
  }

 private:
  struct Node {
    Key key;
    Value value;
    size_t hash;
  };
  using Order = std::list<Node>;  // front: the most recently used

  template <class K>
  typename Order::iterator find(const K& key, size_t hash) {
    auto [lo, hi] = index_.equal_range(hash);
    for (auto it = lo; it != hi; ++it) {
      if (Equal{}(it->second->key, key)) return it->second;
    }
    return order_.end();
  }

  void unlink(typename Order::iterator node) {
    auto [lo, hi] = index_.equal_range(node->hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == node) {
        index_.erase(it);
        break;
      }
    }
    order_.erase(node);
  }

  size_t capacity_;
  Order order_;
  // hash -> entries with that hash; std::hash<size_t> of a hash is the hash itself.
  std::unordered_multimap<size_t, typename Order::iterator> index_;
  int64_t evictions_ = 0;
};

}  // namespace fusejit::cache
