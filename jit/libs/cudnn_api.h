// jit/cudnn_api: the part of cuDNN 9's C API that fusejit uses, declared here and loaded at run
// time. cuDNN is never linked, and its headers are not needed to build: a binary starts, and
// falls back to generated kernels, on a machine without cuDNN. The values below are the C
// enums' (ABI: cuDNN only appends); test/jit/cudnn_header_test.cpp checks each against the real
// cudnn_graph.h wherever the build finds one. docs/attention/research.md §1.3-1.4 and §2 list
// where they come from.
//
// Owns: finding and loading libcudnn.so.9, the version gate, the status text of a failed call,
// descriptors' and handles' lifetimes. Not here: what is built with it
// (jit/libs/cudnn_attention.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

namespace fusejit::jit::cudnn {

using Handle = void*;      // cudnnHandle_t
using Descriptor = void*;  // cudnnBackendDescriptor_t
using Status = int32_t;    // cudnnStatus_t

// cudnnStatus_t values we test for. The category is value / 1000 * 1000.
enum class StatusCode : int32_t {
  success = 0,
  not_initialized = 1001,
  bad_param = 2000,
  not_supported = 3000,
  internal_error = 4000,
  execution_failed = 5000,
};

// cudnnBackendDescriptorType_t.
enum class DescriptorType : int32_t {
  pointwise = 0,
  engine_config = 3,
  engine_heuristics = 4,
  execution_plan = 5,
  operation_pointwise = 13,
  operation_graph = 15,
  variant_pack = 16,
  tensor = 17,
  matmul = 18,
  operation_matmul = 19,
  reduction = 21,
  operation_reduction = 22,
  device_properties = 38,  // 9.8 and later
};

// cudnnBackendAttributeType_t: the C type of an attribute's elements.
enum class AttributeType : int32_t {
  handle = 0,     // Handle
  data_type = 1,  // DataType (int32)
  boolean = 2,    // bool (one byte)
  int64 = 3,      // int64_t
  float32 = 4,    // float
  void_ptr = 6,   // void*
  heur_mode = 8,  // HeurMode (int32)
  pointwise_mode = 14,
  descriptor = 15,  // Descriptor
  reduction_operator = 18,
};

// cudnnBackendAttributeName_t, the ones set or read, grouped by descriptor.
enum class Attribute : int32_t {
  pointwise_mode = 0,
  pointwise_math_precision = 1,
  pointwise_axis = 9,  // the axis GEN_INDEX counts along
  engine_heuristics_mode = 200,
  engine_heuristics_operation_graph = 201,
  engine_heuristics_results = 202,
  engine_heuristics_device_properties = 204,  // 9.8 and later
  execution_plan_handle = 400,
  execution_plan_engine_config = 401,
  execution_plan_workspace_size = 402,
  operation_pointwise_descriptor = 750,
  operation_pointwise_x = 751,
  operation_pointwise_b = 752,
  operation_pointwise_y = 753,
  operation_pointwise_t = 758,  // BINARY_SELECT's predicate
  operation_graph_handle = 800,
  operation_graph_ops = 801,
  tensor_byte_alignment = 900,
  tensor_data_type = 901,
  tensor_dimensions = 902,
  tensor_strides = 903,
  tensor_unique_id = 906,
  tensor_is_virtual = 907,
  tensor_is_by_value = 908,
  variant_pack_unique_ids = 1000,
  variant_pack_data_pointers = 1001,
  variant_pack_workspace = 1003,
  matmul_compute_type = 1500,
  operation_matmul_a = 1520,
  operation_matmul_b = 1521,
  operation_matmul_c = 1522,
  operation_matmul_descriptor = 1523,
  reduction_operator = 1600,
  reduction_compute_type = 1601,
  operation_reduction_x = 1610,
  operation_reduction_y = 1611,
  operation_reduction_descriptor = 1612,
  device_properties_handle = 2701,  // 9.8 and later
};

// cudnnDataType_t.
enum class DataType : int32_t {
  float32 = 0,
  float16 = 2,
  int32 = 4,
  bfloat16 = 9,
  boolean = 11,
};

// cudnnPointwiseMode_t.
enum class PointwiseMode : int32_t {
  add = 0,
  mul = 1,
  div = 6,
  sub = 9,
  exp = 13,
  log = 15,
  cmp_ge = 303,
  gen_index = 501,
  binary_select = 601,  // y = t ? x : b
};

// cudnnReduceTensorOp_t.
enum class ReductionOperator : int32_t { add = 0, max = 3 };

// cudnnBackendHeurMode_t.
enum class HeurMode : int32_t { a = 3 };

// The entry points, with the C signatures (enum arguments are int-sized).
struct Api {
  size_t (*get_version)() = nullptr;
  const char* (*get_error_string)(Status) = nullptr;
  void (*get_last_error_string)(char* message, size_t max_size) = nullptr;
  Status (*create)(Handle*) = nullptr;
  Status (*destroy)(Handle) = nullptr;
  Status (*set_stream)(Handle, cudaStream_t) = nullptr;
  Status (*create_descriptor)(DescriptorType, Descriptor*) = nullptr;
  Status (*destroy_descriptor)(Descriptor) = nullptr;
  Status (*finalize)(Descriptor) = nullptr;
  Status (*set_attribute)(Descriptor, Attribute, AttributeType, int64_t count,
                          const void* elements) = nullptr;
  Status (*get_attribute)(Descriptor, Attribute, AttributeType, int64_t requested, int64_t* count,
                          void* elements) = nullptr;
  Status (*execute)(Handle, Descriptor plan, Descriptor variant_pack) = nullptr;

  std::string path;    // the file it was loaded from (or "already loaded")
  size_t version = 0;  // cudnnGetVersion(): major * 10000 + minor * 100 + patch

  // "9.19.0"
  std::string version_text() const;
  // Whether an operation graph needs a handle (a GPU) to finalize: before cuDNN 9.8.
  bool graph_needs_handle() const { return version < 90800; }

  // Throws CudaError naming `call`, the status and cuDNN's text of the last failure
  // (cudnnGetLastErrorString), unless `status` is success.
  void check(Status status, std::string_view call) const;
  // The text of a failed call without throwing: "CUDNN_STATUS_... (code): <last error>".
  std::string describe(Status status) const;
};

// A backend descriptor that destroys itself (cudnnBackendDestroyDescriptor).
struct DescriptorDeleter {
  const Api* api = nullptr;
  void operator()(Descriptor d) const;
};
using OwnedDescriptor = std::unique_ptr<void, DescriptorDeleter>;
// cudnnBackendCreateDescriptor, checked.
OwnedDescriptor make_descriptor(const Api& api, DescriptorType type);

// A cuDNN handle. Creating one needs a GPU (a CUDA context on the current device).
class CudnnHandle {
 public:
  explicit CudnnHandle(std::shared_ptr<const Api> api);  // throws CudaError without a GPU
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  Handle get() const { return handle_; }

 private:
  std::shared_ptr<const Api> api_;
  Handle handle_ = nullptr;
};

// The outcome of looking for cuDNN. Not finding it is not an error: `api` is null and
// `unavailable` says why (every place tried, and what each said), for the caller to log once.
struct CudnnLibrary {
  std::shared_ptr<const Api> api;
  std::string unavailable;
  explicit operator bool() const { return api != nullptr; }
};

// Finds and loads libcudnn.so.9, in this order:
//   1. `explicit_path` (FUSEJIT_CUDNN_PATH) when not empty: that file only;
//   2. a copy already loaded in the process (PyTorch's, when embedded in it);
//   3. the dynamic linker's search (LD_LIBRARY_PATH, ldconfig's cache);
//   4. the CUDA toolkit's library directory (where the linked libnvrtc was loaded from, then
//      /usr/local/cuda/lib64);
//   5. Python wheels: site-packages/nvidia/cudnn/lib of $VIRTUAL_ENV, /opt/*/.venv, ~/.local,
//      /usr/local/lib/python3*/dist-packages.
// It is accepted when every entry point resolves and 9.0.0 <= version < 10.0.0, except 9.10.0
// and 9.10.1 (their fp16/bf16 attention has known bugs). The library is never unloaded.
CudnnLibrary load_cudnn(std::string_view explicit_path);

// Whether a cuDNN of this version is accepted, and why not (empty when it is).
std::string refuse_version(size_t version);

}  // namespace fusejit::jit::cudnn
