#pragma once
// FileReader: sequential reads of a plain or gzip-compressed file (private to data/).
//
// zlib's gz* functions recognise the gzip magic bytes and read other files as they
// are, so callers see the decompressed bytes either way and count offsets in them.
// Owns the open file; move-only; one thread at a time.

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::data::detail {

class FileReader {
 public:
  // kNotFound when the file does not exist, kIo when it cannot be opened.
  static Result<FileReader> open(const std::string& path);

  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&& other) noexcept;
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  ~FileReader();

  // Reads up to n bytes into out, fewer only at the end of the file; *got says how many.
  // A read or decompression failure (including a gzip stream cut short) is an error
  // naming the path and the offset reached.
  Status read(void* out, std::size_t n, std::size_t* got);

  // Appends up to n bytes to out, growing it only as data arrives, so a header that
  // lies about a huge size costs no more memory than the file holds.
  Status append(std::vector<uint8_t>& out, std::size_t n, std::size_t* got);

  // Bytes of decompressed contents consumed so far.
  std::size_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  FileReader(gzFile file, std::string path) : file_(file), path_(std::move(path)) {}

  gzFile file_ = nullptr;
  std::string path_;
  std::size_t offset_ = 0;
};

// The lines of a file read in blocks of 1 MiB (memory: the block and the longest
// line, never the whole text), numbered from 1, a trailing '\r' stripped; a final line
// without '\n' still counts. A line stays valid until the next call of next().
class BlockLines {
 public:
  explicit BlockLines(FileReader& reader) : reader_(reader) {}

  // False at the end of the file; a read error leaves it in status().
  bool next(std::string_view& line);
  // Number of the line next() returned last.
  std::size_t number() const { return number_; }
  const Status& status() const { return status_; }

 private:
  static constexpr std::size_t kBlock = std::size_t(1) << 20;

  bool take(std::string_view& line, std::size_t stop, std::size_t resume);

  FileReader& reader_;
  std::string buffer_;
  std::size_t pos_ = 0;
  std::size_t number_ = 0;
  bool eof_ = false;
  Status status_ = Status::ok();
};

// dir/name, or dir/name.gz when only that exists; kNotFound naming both otherwise.
Result<std::string> findPlainOrGz(const std::string& dir, const std::string& name);

}  // namespace starling::data::detail
