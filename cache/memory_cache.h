// cache/memory_cache: the in-process level of the kernel cache: entries by key, shared by every
// thread of a process (one mutex; lookups are rare next to what they save). It keeps at most
// `capacity` entries and forgets the least recently used beyond that (FUSEJIT_KERNELS_MAX): a
// forgotten kernel comes back from the disk store, or is compiled again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "cache/entry.h"
#include "cache/key.h"
#include "cache/lru.h"

namespace fusejit::cache {

class MemoryCache {
 public:
  explicit MemoryCache(size_t capacity);

  // The entry for `key`, now the most recently used; nullptr when there is none.
  std::shared_ptr<const Entry> find(const KernelKey& key);
  // Keeps the first entry stored for a key (two threads that raced both compiled the same thing).
  std::shared_ptr<const Entry> insert(const KernelKey& key, std::shared_ptr<const Entry> entry);
  size_t size() const;
  // Entries forgotten to stay within the capacity.
  int64_t evictions() const;

 private:
  struct KeyHash {
    size_t operator()(const KernelKey& k) const { return static_cast<size_t>(k.digest.lo); }
  };
  mutable std::mutex mutex_;
  LruMap<KernelKey, std::shared_ptr<const Entry>, KeyHash> entries_;
};

}  // namespace fusejit::cache
