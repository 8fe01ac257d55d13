// cache/memory_cache: see memory_cache.h.
#include "cache/memory_cache.h"

namespace fusejit::cache {

std::shared_ptr<const Entry> MemoryCache::find(const KernelKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<const Entry> MemoryCache::insert(const KernelKey& key,
                                                 std::shared_ptr<const Entry> entry) {
  std::lock_guard lock(mutex_);
  return entries_.emplace(key, std::move(entry)).first->second;
}

size_t MemoryCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace fusejit::cache
