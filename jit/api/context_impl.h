// jit/context_impl: what a Context and a Tensor handle hold, and how recording works.
//
// A Tensor is either pending (a node of its Context's current trace, or of an earlier one it
// was carried from) or materialized (a Storage holding its values). Recording an op appends a
// node to the trace; a materialized operand enters the trace as an `input` node bound to its
// storage (once per trace). eval() computes, in one trace, exactly the tensors asked for: the
// temporaries of a C++ expression are held while it is evaluated, and writing them too would
// cost a full-size write each. Then a new, empty trace begins. A pending tensor the program
// still holds but did not ask for keeps the old trace (a CarriedTrace) and its node there; when
// it is next used, that node and what it needs are copied into the current trace, reading the
// same storages again (a wrapped buffer as it is then, never a copy taken at an earlier eval).
//
// Caller memory (Context::wrap, eval_into) is a Storage too: a borrowed DeviceBuffer on the GPU,
// a HostBorrow on the CPU path; its release runs when the last Storage holding it is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <spdlog/logger.h>

#include "fusejit/context.h"
#include "fusejit/options.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/api/context_mutex.h"
#include "jit/runtime/dynamic.h"
#include "jit/runtime/runtime.h"

namespace fusejit::detail {

// Caller host memory read in place on the CPU path (Context::wrap): each read copies from it,
// since the caller may change it between evals.
struct HostBorrow {
  const void* data = nullptr;
  size_t bytes = 0;
  std::function<void()> release;
  HostBorrow(const void* d, size_t n, std::function<void()> r)
      : data(d), bytes(n), release(std::move(r)) {}
  ~HostBorrow() {
    if (release) release();
  }
  HostBorrow(const HostBorrow&) = delete;
  HostBorrow& operator=(const HostBorrow&) = delete;
};

// A materialized value: in host memory, on the device, or both. `host` always carries the
// dtype and shape; its bytes are valid when host_valid. A borrowed device buffer or host
// memory is never cached in `host` (host_valid stays false): each read sees the caller's bytes.
struct Storage {
  ir::HostTensor host;
  bool host_valid = false;
  std::shared_ptr<jit::DeviceBuffer> device;
  std::unique_ptr<HostBorrow> borrowed_host;
  // Its input node in its Context's trace of epoch `bound_epoch` (bound once per trace).
  uint64_t bound_epoch = 0;
  ir::NodeId bound_node = -1;
};

struct ContextImpl;
struct TensorImpl;

// A fusejit::Replay: the trace taken out of its Context, and what each run reads and writes.
struct ReplayState {
  ContextImpl* ctx = nullptr;
  std::vector<Tensor> outputs;  // as asked for
  // Per output of `graph` (the ones asked for, then the writes): its storage, which every run
  // writes (an update's is its destination's).
  std::vector<std::shared_ptr<Storage>> results;
  std::vector<std::shared_ptr<Storage>> bound;  // graph's input k reads bound[k]
  ir::Graph graph;                              // the CPU path's
  std::unique_ptr<jit::ReplayRun> gpu;          // the GPU's
  int64_t runs = 0;
  // Runs once more: on the GPU queued, on the CPU path now.
  void run();
};

// The trace of an eval, kept for the pending tensors it did not compute (CarriedTrace::tensors,
// held by the program but not asked for). Read and changed only under the Context's lock.
struct CarriedTrace {
  ir::Graph graph;
  // bound[k] feeds graph's input node k; null where no carried tensor needs it (or a
  // placeholder's)
  std::vector<std::shared_ptr<Storage>> bound;
  std::vector<ir::DynamicAxis> marks;
  std::vector<std::weak_ptr<TensorImpl>> tensors;  // for Context::eval_all
  // Node id in `graph` -> its copy in the Context's trace of epoch `copied_epoch` (-1: none yet),
  // so that tensors sharing nodes share their copies.
  uint64_t copied_epoch = 0;
  std::vector<ir::NodeId> copied;
};

// `value` becomes dst's host values (the CPU path), or is copied into the caller's memory when
// dst is wrapped host memory.
void store_host(Storage& dst, ir::HostTensor value);
// Throws fusejit::UsageError, naming `what`, unless every dimension of `shape` is at least 1.
void check_dims(const Shape& shape, std::string_view what);
// Bytes of a dense tensor.
size_t byte_size(const Shape& shape, DType dtype);

struct TensorImpl {
  ContextImpl* ctx = nullptr;
  DType dtype = DType::f32;
  // Read through ContextImpl::shape_of. While shape_in_trace, the shape is its node's and this
  // copy is still empty: most recorded tensors are dropped before anyone asks, and copying it at
  // every op was a tenth of what recording costs. shape_of and eval make the copy.
  Shape shape;
  bool shape_in_trace = false;
  ir::NodeId node = -1;  // pending: its node in ctx->trace, recorded in epoch `epoch`
  uint64_t epoch = 0;
  // Pending from an earlier trace, which an eval did not compute it in: `node` is its node in
  // carried->graph (the shape has been copied out).
  std::shared_ptr<CarriedTrace> carried;
  std::shared_ptr<Storage> storage;  // materialized: its values
  // Context::mark_dynamic: axes of this input that are dynamic, with their names.
  std::vector<std::pair<int64_t, std::string>> dynamic_axes;
};

struct ContextImpl {
  // Held by every entry point that reads or changes what follows (recording an op, eval, host
  // copies, the Context's own methods): one Context may be used from many threads, and their
  // ops and evals are serialized. Recursive: composites record through the primitives.
  mutable ContextMutex mutex;
  Context* owner = nullptr;
  Options options;
  std::shared_ptr<spdlog::logger> log;
  // Null: no GPU, the CPU reference evaluates. Declared before everything that can hold device
  // buffers (the trace's bound inputs), so that it is destroyed after them.
  std::unique_ptr<jit::Runtime> runtime;

  // The current trace and what its inputs are bound to (bound[k] feeds input node k).
  ir::Graph trace;
  uint64_t epoch = 1;
  std::vector<std::shared_ptr<Storage>> bound;
  std::vector<ir::DynamicAxis> marks;  // the bound inputs' dynamic axes (mark_dynamic)
  jit::DynamicDims dynamic;            // symbolic traces found so far (jit/runtime/dynamic.h)
  // Every tensor recorded into the current trace, held: one the program no longer holds has a
  // use count of 1, is left out of eval, and is freed when the list is cleared. A weak
  // reference per tensor cost an op four atomic operations (taking it; the strong and the weak
  // count's decrements when the program dropped the tensor; letting it go at eval); a strong
  // one costs two (taking it; the program's drop), since the last reference needs none.
  std::vector<std::shared_ptr<TensorImpl>> pending;
  // The earlier traces still carried by a pending tensor (see CarriedTrace), for eval_all.
  std::vector<std::weak_ptr<CarriedTrace>> carried;
  Context::Stats stats;
  std::unordered_set<uint64_t> recorded;  // hashes of traces saved to FUSEJIT_RECORD_DIR

  explicit ContextImpl(Options opts);

  // The node of `t` in the current trace, binding it as an input if it is materialized and
  // copying its node in if it was carried from an earlier trace.
  ir::NodeId node_of(const std::shared_ptr<TensorImpl>& t);
  // The shape of `t`, copied out of the trace the first time it is asked for.
  const Shape& shape_of(TensorImpl& t);
  // Appends a node (taking over the spec's operand list) and returns a pending tensor for it.
  std::shared_ptr<TensorImpl> record(ir::NodeSpec&& spec);
  // The same for a node of `op` that states nothing but its operands (an elementwise op): they
  // go through a spec kept here, so that recording one allocates nothing once the trace has
  // been recorded before (Graph::clear keeps the nodes' memory too).
  std::shared_ptr<TensorImpl> record(ir::Op op, std::initializer_list<ir::NodeId> operands);
  // Materializes `wanted` (the pending ones among them), and nothing else. A tensor in `into`
  // is computed into that caller memory (the Context's memory, of its size); `hold` is the
  // release of the buffer borrowed for it on the GPU (Destination::release's holder).
  struct IntoBuffer {
    void* data = nullptr;
    std::function<void()> hold;
  };
  using Into = std::unordered_map<const TensorImpl*, IntoBuffer>;
  void eval(const std::vector<std::shared_ptr<TensorImpl>>& wanted, const Into& into = {});
  // What eval(wanted) computes: the pending tensors among `wanted`, then every update_slice of
  // the trace; each one's node in the current trace (copied in if carried) and its shape known.
  // Throws when the trace reads a placeholder.
  std::vector<std::shared_ptr<TensorImpl>> outputs_of(
      const std::vector<std::shared_ptr<TensorImpl>>& wanted);
  // outs[i] takes results[i] as its storage; the trace is over (the tensors it did not compute
  // are carried) and a new one begins.
  void materialize(const std::vector<std::shared_ptr<TensorImpl>>& outs,
                   std::vector<std::shared_ptr<Storage>>& results);
  // Takes the trace computing `wanted` out of the Context, as eval would, and builds it to be
  // run again and again (fusejit::Replay).
  std::unique_ptr<ReplayState> replay(const std::vector<std::shared_ptr<TensorImpl>>& wanted);
  // Every pending tensor still held by the program: of the current trace and carried ones.
  std::vector<std::shared_ptr<TensorImpl>> held_pending();
  // `t`, materialized, becomes the pending tensor of node `id` of the current trace, of the same
  // dtype and shape (an in-place write, update_slice: every handle to `t` sees the write).
  void rebind_pending(const std::shared_ptr<TensorImpl>& t, ir::NodeId id);
  // The host copy of a materialized tensor, downloading (or, borrowed, copying) it if needed.
  const ir::HostTensor& host_of(Storage& s);
  // host_of each of `storages`, copied: the CPU reference's inputs.
  std::vector<ir::HostTensor> host_inputs(const std::vector<std::shared_ptr<Storage>>& storages);
  // Where a materialized tensor's values are in the Context's memory (uploading if needed).
  void* data_of(Storage& s);

 private:
  ir::NodeSpec operands_only;  // record(op, operands)'s spec: only op and inputs ever change

  // A pending tensor for node `id` of the trace, just added.
  std::shared_ptr<TensorImpl> pending_tensor(ir::NodeId id);
  // Input node of the current trace for storage `s` (null: a placeholder's), bound once per
  // trace; `marks` are its dynamic axes.
  ir::NodeId bind(const std::shared_ptr<Storage>& s, DType dtype, const Shape& shape,
                  const std::vector<ir::DynamicAxis>& marks);
  // Copies node `id` of `c` (and what it needs) into the current trace.
  ir::NodeId copy_in(CarriedTrace& c, ir::NodeId id);
  // Hands the trace just evaluated to the held pending tensors it did not compute.
  void carry_uncomputed();
  // Empties c's storage slots that no tensor it still carries reads (the temporaries of the
  // expression just evaluated were carried too, and are gone by the next eval), so that their
  // memory is let go while a held tensor keeps the trace.
  void trim(CarriedTrace& c);
  // trim of every carried trace still alive; forgets the others.
  void trim_carried();
  // Saves `g` to FUSEJIT_RECORD_DIR, in its symbolic form when it has dynamic dims.
  void record(const ir::Graph& g);
  // The values of g's outputs, `outs` in order, computed on the GPU or by the CPU reference.
  std::vector<std::shared_ptr<Storage>> run_on_gpu(
      const ir::Graph& g, const std::vector<std::shared_ptr<TensorImpl>>& outs, const Into& into);
  std::vector<std::shared_ptr<Storage>> run_on_cpu(
      const ir::Graph& g, const std::vector<std::shared_ptr<TensorImpl>>& outs, const Into& into);
  // Frees what the last eval left to free: storages only dropped tensors read, and the
  // wrapped memory let go since (its work permitting).
  void let_go();
  // The bound inputs as device buffers (uploading those that are host data), and where the
  // Runtime looks for dynamic dims.
  std::vector<std::shared_ptr<jit::DeviceBuffer>> device_inputs();
  jit::DynamicSource dynamic_source();
  // An update_slice's result is its destination's storage, written in place: on the GPU the
  // kernel wrote the device buffer (the host copy is stale now); on the CPU path the reference's
  // result is copied into the destination's memory. results[i] becomes that storage.
  void share_written(const ir::Graph& g, std::vector<std::shared_ptr<Storage>>& results);
};

}  // namespace fusejit::detail
