// Weights in the safetensors format (github.com/huggingface/safetensors), for the examples: a
// reader that maps a file read-only and hands its tensors to a Context, and a writer.
//
// The format: 8 bytes, the header's length N as a little-endian u64; N bytes of JSON, an object
// mapping each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets
// into what follows the header) and optionally "__metadata__" to an object of strings; then the
// data, each tensor dense, row-major, little-endian. A checkpoint too large for one file is
// sharded, with an index `model.safetensors.index.json` whose "weight_map" names the shard file
// (relative to the index) that holds each tensor.
//
// This part of the examples, not of the library: the library takes bytes (Context::from_host);
// where they come from is the program's business. Every malformed input is a
// fusejit::UsageError naming the file, the tensor when there is one, and what to do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fusejit/fusejit.h>

namespace safetensors {

// One tensor's entry in a file's header, checked against the file.
struct TensorInfo {
  std::string dtype_name;  // as the file spells it: "BF16", "F32", "I8", ...
  // The fusejit dtype; none for a dtype the format has and fusejit does not (8-bit ones, F64,
  // unsigned ones): such a tensor may be in the file, but loading it is an error.
  std::optional<fusejit::DType> dtype;
  fusejit::Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

// One file, mapped read-only for the object's lifetime; the header is parsed and every entry
// checked when it is opened.
class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's bytes inside the mapping (valid while this File lives).
  const unsigned char* bytes(const TensorInfo& info) const;
  // A copy of the named tensor in the Context's memory (uploaded to its GPU, if it has one).
  fusejit::Tensor load(fusejit::Context& ctx, const std::string& name) const;

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;
  size_t size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model's weights: one .safetensors file, or the shards an index .json names.
class Weights {
 public:
  explicit Weights(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  // The entry of a tensor; UsageError naming `path()` when there is none.
  const TensorInfo& info(const std::string& name) const;
  fusejit::Tensor load(fusejit::Context& ctx, const std::string& name) const;

 private:
  const File& file_of(const std::string& name) const;

  std::string path_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// A tensor's values on the host, in its dtype's native format, for the writer.
struct HostTensor {
  fusejit::DType dtype = fusejit::DType::f32;
  fusejit::Shape shape;
  std::vector<unsigned char> bytes;  // numel * dtype_size
};

// A shape as messages print it: "[4096, 128256]".
std::string shape_text(const fusejit::Shape& shape);

// Computes `t` if needed and copies it to the host (Tensor::copy_to_host).
HostTensor download(const fusejit::Tensor& t);

// Writes `tensors` (by name) to `path` as a single safetensors file, data in name order, the
// header padded with spaces so that the data starts 8-byte aligned. UsageError when a tensor's
// byte count does not match its shape or the file cannot be written.
void write(const std::string& path, const std::map<std::string, HostTensor>& tensors,
           const std::map<std::string, std::string>& metadata = {});

}  // namespace safetensors
