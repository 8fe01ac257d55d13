// jit/trace_memo: see trace_memo.h.
#include "jit/runtime/trace_memo.h"

#include "ir/hash.h"

namespace fusejit::jit {

size_t TraceMemo::StructuralHash::operator()(const ir::Graph& g) const {
  return static_cast<size_t>(ir::structural_hash(g));
}

TraceMemo::TraceMemo(size_t capacity) : entries_(capacity) {}

std::shared_ptr<const Executable> TraceMemo::lookup(const ir::Graph& g, uint64_t hash) {
  const std::shared_ptr<const Executable>* exe = entries_.get(g, static_cast<size_t>(hash));
  return exe ? *exe : nullptr;
}

int64_t TraceMemo::insert(const ir::Graph& g, uint64_t hash,
                          std::shared_ptr<const Executable> exe) {
  const int64_t before = entries_.evictions();
  entries_.insert(g, std::move(exe), static_cast<size_t>(hash));
  return entries_.evictions() - before;
}

}  // namespace fusejit::jit
