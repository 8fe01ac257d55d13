// jit/trace_memo: the trace-level memo of a Runtime: ready Executables (planned, kernels loaded)
// by trace, so that a repeated eval costs a hash, a lookup and the launches. Keyed by the
// trace's structural hash, which the caller computes once; a hit compares the whole trace, so
// traces whose hashes collide are kept side by side and never confused. Holds at most
// `capacity` traces (FUSEJIT_MEMO_MAX) and forgets the least recently used beyond that.
//
// Forgetting a trace only drops the memo's reference: an Executable still in use (a run in
// progress, a profile) lives on, and each kernel it holds stays loaded until its last owner lets
// go (jit::LoadedKernel). Not thread-safe: the Runtime's owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cache/lru.h"
#include "ir/graph.h"
#include "jit/runtime/executor.h"

namespace fusejit::jit {

class TraceMemo {
 public:
  explicit TraceMemo(size_t capacity);

  // The executable kept for `g`, whose structural hash is `hash`, now the most recently used
  // trace; nullptr when there is none.
  std::shared_ptr<const Executable> lookup(const ir::Graph& g, uint64_t hash);
  // Keeps `exe` for `g` (a trace already kept keeps its executable); returns how many traces were
  // forgotten to make room.
  int64_t insert(const ir::Graph& g, uint64_t hash, std::shared_ptr<const Executable> exe);

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return entries_.capacity(); }
  // Traces forgotten to stay within the capacity, over the memo's life.
  int64_t evictions() const { return entries_.evictions(); }
  void clear() { entries_.clear(); }

 private:
  struct StructuralHash {  // what `hash` must be; the memo itself never needs to compute it
    size_t operator()(const ir::Graph& g) const;
  };
  cache::LruMap<ir::Graph, std::shared_ptr<const Executable>, StructuralHash> entries_;
};

}  // namespace fusejit::jit
