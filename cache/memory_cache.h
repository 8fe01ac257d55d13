// cache/memory_cache: the in-process level of the kernel cache: entries by key, shared by every
// thread of a process (one mutex; lookups are rare next to what they save). It never evicts: a
// process holds the kernels it uses.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/entry.h"
#include "cache/key.h"

namespace fusejit::cache {

class MemoryCache {
 public:
  std::shared_ptr<const Entry> find(const KernelKey& key) const;
  // Keeps the first entry stored for a key (two threads that raced both compiled the same thing).
  std::shared_ptr<const Entry> insert(const KernelKey& key, std::shared_ptr<const Entry> entry);
  size_t size() const;

 private:
  struct KeyHash {
    size_t operator()(const KernelKey& k) const { return static_cast<size_t>(k.digest.lo); }
  };
  mutable std::mutex mutex_;
  std::unordered_map<KernelKey, std::shared_ptr<const Entry>, KeyHash> entries_;
};

}  // namespace fusejit::cache
