// Memory of a Context's kind (fusejit/context.h, "the Context's memory"): device memory of its
// GPU, or host memory on the CPU path, so that an embedding test runs the same on both.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "fusejit/context.h"

namespace fusejit::testing {

class ContextMemory {
 public:
  ContextMemory(Context& ctx, size_t bytes);
  ~ContextMemory();
  ContextMemory(const ContextMemory&) = delete;
  ContextMemory& operator=(const ContextMemory&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

  // Copies in or out, synchronously; a read waits for the Context's work first.
  void write(const void* src, size_t bytes, size_t offset = 0);
  void read(void* dst, size_t bytes, size_t offset = 0) const;

  template <class T>
  void put(const std::vector<T>& values, size_t offset = 0) {
    write(values.data(), values.size() * sizeof(T), offset);
  }
  template <class T>
  std::vector<T> get(size_t count, size_t offset = 0) const {
    std::vector<T> out(count);
    read(out.data(), count * sizeof(T), offset);
    return out;
  }

 private:
  Context& ctx_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Reads `bytes` at `ptr`, memory of `ctx`'s kind, into host memory (waiting for ctx's work).
void read_context_memory(Context& ctx, const void* ptr, void* dst, size_t bytes);

}  // namespace fusejit::testing
