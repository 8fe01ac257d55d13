// cache/memory_cache: see memory_cache.h.
#include "cache/memory_cache.h"

namespace fusejit::cache {

MemoryCache::MemoryCache(size_t capacity) : entries_(capacity) {}

std::shared_ptr<const Entry> MemoryCache::find(const KernelKey& key) {
  std::lock_guard lock(mutex_);
  const std::shared_ptr<const Entry>* entry = entries_.get(key);
  return entry ? *entry : nullptr;
}

std::shared_ptr<const Entry> MemoryCache::insert(const KernelKey& key,
                                                 std::shared_ptr<const Entry> entry) {
  std::lock_guard lock(mutex_);
  return entries_.insert(key, std::move(entry));
}

size_t MemoryCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

int64_t MemoryCache::evictions() const {
  std::lock_guard lock(mutex_);
  return entries_.evictions();
}

}  // namespace fusejit::cache
