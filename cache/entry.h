// cache/entry: one compiled kernel as the disk store keeps it, and its binary encoding. The
// encoding is a public contract (docs/cache-format.md): change it only together with
// kFormatVersion and the document.
//
// Layout (all integers little-endian; header 64 bytes; no padding anywhere):
//   offset  size  field
//        0     4  magic "FJKC"
//        4     4  u32 format version (kFormatVersion)
//        8    16  the key: Digest128 hi then lo, each u64
//       24     4  u32 name size     (bytes of the kernel name)
//       28     4  u32 arch size     (bytes of the arch, "sm_90")
//       32     8  u64 cubin size
//       40     8  u64 ptx size
//       48     8  u64 source size   (0 when the source is not kept)
//       56     8  u64 checksum: XXH3-64 over every byte of the file but these 8, in order
//                  (bytes 0..55, then 64..end): the header's sizes and key are covered too
//       64        name, arch, cubin, ptx, source, back to back
// The file is exactly 64 + the five sizes long. Version 1 (a checksum over the payload only,
// keys from an older hash) is read as stale: a miss, replaced when the kernel is stored again.
//
// This file owns the bytes only; files, locking and eviction are disk_store's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cache/key.h"

namespace fusejit::cache {

inline constexpr std::string_view kEntryMagic = "FJKC";
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr size_t kEntryHeaderSize = 64;
inline constexpr std::string_view kEntryExtension = ".fjk";
// No entry is larger: a kernel's CUBIN, PTX and source take kilobytes to a few megabytes. A
// file above it is unsound without being read (a huge or sparse file costs no memory), and a
// kernel above it is not stored.
inline constexpr uint64_t kMaxEntryBytes = uint64_t{64} << 20;

struct Entry {
  std::string name;   // the kernel's name (its symbol in the CUBIN and PTX)
  std::string arch;   // "sm_90"
  std::string cubin;  // empty for a virtual arch
  std::string ptx;
  std::string source;  // optional: empty when not kept
};

std::string encode_entry(const KernelKey& key, const Entry& entry);

// The checksum of an encoded entry's bytes (the field at offset 56 is skipped).
uint64_t entry_checksum(std::string_view bytes);

// Decodes the complete bytes of an entry file whose name says `expected`. On any problem (bad
// magic, another format version, another key, sizes that disagree with the file's length or
// add up to more than kMaxEntryBytes, a checksum mismatch) returns nullopt and says what is
// wrong in `*problem`.
std::optional<Entry> decode_entry(std::string_view bytes, const KernelKey& expected,
                                  std::string* problem);

// What the header and the two short strings say, from the first bytes of a file (at least
// kEntryHeaderSize + name and arch); no checksum is computed. For stats, which should not read
// every CUBIN.
struct EntrySummary {
  std::string name;
  std::string arch;
  uint64_t file_size = 0;  // what the header says the whole file measures
};
std::optional<EntrySummary> peek_entry(std::string_view prefix, std::string* problem);

}  // namespace fusejit::cache
