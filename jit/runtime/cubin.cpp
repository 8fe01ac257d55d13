// jit/cubin: what a CUBIN says of its functions' local memory, read from its ELF.
//
// ptxas records each function's resources in the ELF's ".nv.info" section as a list of
// attributes: a format byte, an attribute byte, then for format 4 (EIFMT_SVAL) a 16-bit size and
// that many bytes of payload, for the other formats a 16-bit value (format 1 has none). The
// frame size attribute (EIATTR_FRAME_SIZE, 0x11) carries {symbol index, bytes}: the stack
// frame ptxas gave the function, which a generated kernel has only when it spilled registers or
// kept an array in local memory. cuobjdump's `-res-usage` prints the same as "STACK".
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "jit/runtime/nvrtc.h"

namespace fusejit::jit {

namespace {

constexpr uint8_t kFormatSized = 4;       // EIFMT_SVAL: 16-bit size, then the payload
constexpr uint8_t kAttrFrameSize = 0x11;  // EIATTR_FRAME_SIZE: {u32 symbol, u32 bytes}

// Bounds-checked little-endian reads of an ELF that may be anything (a cache file).
class Bytes {
 public:
  explicit Bytes(std::string_view data) : data_(data) {}

  template <class T>
  std::optional<T> at(uint64_t offset) const {
    if (offset > data_.size() || data_.size() - offset < sizeof(T)) return std::nullopt;
    T value;
    std::memcpy(&value, data_.data() + offset, sizeof(T));
    return value;
  }
  std::string_view name_at(uint64_t offset) const {
    if (offset >= data_.size()) return {};
    const std::string_view rest = data_.substr(offset);
    return rest.substr(0, rest.find('\0'));
  }
  size_t size() const { return data_.size(); }

 private:
  std::string_view data_;
};

struct Section {
  uint32_t name = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Section header `i`; nullopt when the header lies past the end. Its data may (a section without
// data in the file, as .nv.shared's, has a size and no bytes): holds() says.
std::optional<Section> section(const Bytes& elf, uint64_t table, uint16_t entry_size, uint16_t i) {
  const uint64_t at = table + uint64_t{i} * entry_size;
  const auto name = elf.at<uint32_t>(at);
  const auto offset = elf.at<uint64_t>(at + 24);
  const auto size = elf.at<uint64_t>(at + 32);
  if (!name || !offset || !size) return std::nullopt;
  return Section{*name, *offset, *size};
}

bool holds(const Bytes& elf, const Section& s) {
  return s.offset <= elf.size() && elf.size() - s.offset >= s.size;
}

// The largest frame among the EIATTR_FRAME_SIZE records of one .nv.info section; nullopt when
// the records run past the section.
std::optional<int64_t> largest_frame(const Bytes& elf, const Section& info) {
  int64_t largest = 0;
  uint64_t at = info.offset;
  const uint64_t end = info.offset + info.size;
  while (at + 4 <= end) {
    const uint8_t format = *elf.at<uint8_t>(at);
    const uint8_t attr = *elf.at<uint8_t>(at + 1);
    const uint16_t value = *elf.at<uint16_t>(at + 2);
    if (format != kFormatSized) {
      at += 4;  // the value, if any, is in those 4 bytes
      continue;
    }
    if (end - (at + 4) < value) return std::nullopt;
    if (attr == kAttrFrameSize && value >= 8) {
      largest = std::max<int64_t>(largest, *elf.at<uint32_t>(at + 8));
    }
    at += 4 + value;
  }
  return largest;
}

}  // namespace

int64_t stack_frame_bytes(std::string_view cubin) {
  const Bytes elf(cubin);
  // ELF64, little-endian: "\x7f" "ELF", class 2, data 1.
  if (cubin.size() < 64 ||
      cubin.substr(0, 4) !=
          "\x7f"
          "ELF" ||
      cubin[4] != 2 || cubin[5] != 1) {
    return -1;
  }
  const uint64_t table = *elf.at<uint64_t>(0x28);
  const uint16_t entry_size = *elf.at<uint16_t>(0x3a);
  const uint16_t count = *elf.at<uint16_t>(0x3c);
  const uint16_t names_index = *elf.at<uint16_t>(0x3e);
  if (entry_size < 40 || names_index >= count) return -1;
  const std::optional<Section> names = section(elf, table, entry_size, names_index);
  if (!names || !holds(elf, *names)) return -1;
  int64_t largest = 0;
  bool found = false;
  for (uint16_t i = 0; i < count; ++i) {
    const std::optional<Section> s = section(elf, table, entry_size, i);
    if (!s || s->name >= names->size) return -1;
    if (elf.name_at(names->offset + s->name) != ".nv.info") continue;
    if (!holds(elf, *s)) return -1;
    const std::optional<int64_t> frame = largest_frame(elf, *s);
    if (!frame) return -1;
    largest = std::max(largest, *frame);
    found = true;
  }
  return found ? largest : -1;
}

bool spills(const CompiledKernel& c) {
  const int64_t reported = spill_stores(c.log);
  if (reported >= 0) return reported > 0;
  return stack_frame_bytes(c.cubin) > 0;
}

}  // namespace fusejit::jit
