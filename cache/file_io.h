// cache/file_io: the file operations that the disk store and the dumps (jit/dump) share: one
// atomic writer, one careful reader, and how a path appears in a message. Everything here
// reports failures as values; nothing throws std::filesystem_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>

#include "ir/printable.h"

namespace fusejit::cache {

// Text from a user or a file as a message shows it (ir/printable.h): every message of the cache,
// the runtime and the CLI that quotes such text goes through it (or display_path).
using ir::printable;

// A path as messages show it: printable(), and whole when it is short, else its head and its
// tail around "..." with the full length, so that a 100,000-character path still gives a
// readable line.
std::string display_path(const std::filesystem::path& path);

// "<what> <path>: <strerror(error)>", the path shown by display_path.
std::string os_error(std::string_view what, const std::filesystem::path& path, int error);

struct WriteResult {
  bool ok = true;
  // The bytes were written but `path` refused them: a non-empty directory (or another thing
  // a file cannot be renamed over) stands there. Only that one file failed.
  bool target_in_the_way = false;
  std::string why;  // what failed, naming the path; empty when ok
};

// Writes `bytes` to `path` atomically: a new temporary file in the same directory, named
// "<path>.tmp-<pid>-<thread>-<n>" (so that processes and threads never share one), written,
// fsynced and renamed over `path`. A reader sees the old file, the new one or none, never half
// of one. Whatever non-directory stands at `path` (a FIFO, a symlink) is replaced, never
// followed; an empty directory there is removed first. The temporary file never outlives a
// failure. The parent directory must exist.
WriteResult write_file_atomically(const std::filesystem::path& path, std::string_view bytes);
// The same for `name` in the directory open as `dir_fd` (the temporary file too), so that a
// directory swapped for a symlink meanwhile is never followed; `shown` is the path messages
// name.
WriteResult write_file_atomically_at(int dir_fd, const std::string& name,
                                     const std::filesystem::path& shown, std::string_view bytes);

enum class ReadStatus { ok, missing, not_regular, too_large, failed };
struct ReadResult {
  ReadStatus status = ReadStatus::ok;
  uint64_t file_size = 0;  // the whole file's size, even when fewer bytes were read
  std::string why;         // for not_regular and failed: what is wrong (no path)
};

// Reads `path` (at most `max_bytes` of it) when it is a regular file. It is opened with
// O_NOFOLLOW | O_NONBLOCK and checked with fstat before any read, so a symlink is not followed
// and a FIFO or a device never blocks: both are not_regular. A file larger than `refuse_over`
// is too_large and nothing of it is read (a huge or sparse file costs no memory).
ReadResult read_regular_file(const std::filesystem::path& path, std::string& bytes,
                             size_t max_bytes = std::numeric_limits<size_t>::max(),
                             uint64_t refuse_over = std::numeric_limits<uint64_t>::max());
// The same for `name` in the directory open as `dir_fd` (AT_FDCWD: `name` is a path).
ReadResult read_regular_file_at(int dir_fd, const std::string& name, std::string& bytes,
                                size_t max_bytes = std::numeric_limits<size_t>::max(),
                                uint64_t refuse_over = std::numeric_limits<uint64_t>::max());

// What kind of file a stat mode describes, for messages: "a directory", "a FIFO", ...
const char* file_type_name(unsigned mode);

}  // namespace fusejit::cache
