// cache/disk_layout: how the disk store names its files and how it lists them, shared by the
// store and its maintenance commands (private to the cache layer).
//
// The store owns exactly these names, and maintenance touches nothing else:
//   <dir>/evict.lock                          exists while a process evicts
//   <dir>/<2 hex>/                            a shard directory (a real one: never a symlink)
//   <dir>/<2 hex>/<32 hex>.fjk                an entry
//   <dir>/<2 hex>/<32 hex>.lock               a kernel's compile lock
//   <dir>/<2 hex>/<32 hex>.fjk.tmp-<suffix>   an entry being written (file_io.h)
// Hex digits are lowercase.
//
// Nothing outside the directory is ever created, changed or deleted, whatever its shards or
// entries point to: every entry, lock and temporary file is reached through its shard opened
// with O_NOFOLLOW (ShardDir), so a shard that is a symlink is never entered; an entry or lock
// that is a symlink is replaced or removed itself, never followed. Whatever stands at one of
// these names is the store's: a directory tree at an entry's name is removed (without
// following a link or leaving the file system) when the entry is written or pruned.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fusejit::cache::layout {

inline constexpr std::string_view kLockExtension = ".lock";
inline constexpr std::string_view kTempMarker = ".fjk.tmp-";
inline constexpr std::string_view kEvictLock = "evict.lock";

enum class FileKind { entry, temp, lock, other };

inline bool is_lower_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Shard directories are named by two lowercase hex digits.
inline bool is_shard_name(std::string_view name) { return name.size() == 2 && is_lower_hex(name); }

// What a file in a shard directory is, by its name alone (the patterns above, exactly).
FileKind classify(std::string_view file_name);

// One file of a shard directory as lstat saw it (a symlink is a symlink, never its target).
struct ShardFile {
  std::string shard;  // "3f"
  std::string name;   // "3f...c2.fjk"
  FileKind kind = FileKind::other;
  unsigned mode = 0;  // st_mode
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::filesystem::path path(const std::string& dir) const {
    return std::filesystem::path(dir) / shard / name;
  }
  bool regular() const;
};

struct Listing {
  std::vector<std::string> shards;  // the real shard directories
  std::vector<ShardFile> files;     // what they hold, in no particular order
};

// Lists the store under `dir` without leaving it: `dir` itself may be a symlink (the user
// named it), but a shard that is a symlink or not a directory is skipped, and shards are
// opened with O_NOFOLLOW. A missing `dir` lists empty. Throws UsageError, naming the directory
// and the OS error, when `dir` or a shard cannot be listed.
Listing list_store(const std::string& dir);

// A shard directory opened with O_NOFOLLOW, closed when it goes. A shard that is a symlink,
// or not a directory, does not open: is_open() is false and why() says what stands there.
class ShardDir {
 public:
  // Opens <dir>/<shard>; with `create`, makes it first when it is missing.
  ShardDir(const std::string& dir, const std::string& shard, bool create);
  ~ShardDir();
  ShardDir(const ShardDir&) = delete;
  ShardDir& operator=(const ShardDir&) = delete;

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int error() const { return error_; }  // errno of opening it; ENOENT: there is none
  const std::filesystem::path& path() const { return path_; }  // for messages
  std::string why() const;  // "cannot open <path>: <what stands there, or the OS error>"

 private:
  int fd_ = -1;
  int error_ = 0;
  std::filesystem::path path_;
};

// Removes <dir>/<shard>/<name>, reaching it through the shard opened with O_NOFOLLOW, so a
// shard swapped for a symlink meanwhile is never followed. A directory there is removed with
// all it holds (links in it are removed, never followed; another file system mounted in it
// is left alone and makes this fail). A file already gone counts as removed; otherwise false
// with `why`.
bool remove_store_file(const std::string& dir, const std::string& shard, const std::string& name,
                       std::string* why);

}  // namespace fusejit::cache::layout
