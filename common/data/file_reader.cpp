#include "file_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace starling::data::detail {
namespace {

constexpr unsigned kChunk = 1u << 20;         // largest single gzread
constexpr unsigned kGzBuffer = 128u * 1024u;  // zlib's input and output buffers

}  // namespace

Result<FileReader> FileReader::open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const StatusCode code = err == ENOENT || err == ENOTDIR ? StatusCode::kNotFound : StatusCode::kIo;
    return Status(code, path + ": cannot open: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) return Status(StatusCode::kIo, path + ": cannot open: is a directory");
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    return Status(StatusCode::kIo, path + ": cannot open: " + (err != 0 ? std::strerror(err) : "out of memory"));
  }
  gzbuffer(file, kGzBuffer);
  return FileReader(file, path);
}

FileReader::FileReader(FileReader&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)), offset_(other.offset_) {}

FileReader& FileReader::operator=(FileReader&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) gzclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
    offset_ = other.offset_;
  }
  return *this;
}

FileReader::~FileReader() {
  if (file_ != nullptr) gzclose(file_);
}

Status FileReader::read(void* out, std::size_t n, std::size_t* got) {
  auto* dst = static_cast<unsigned char*>(out);
  *got = 0;
  while (*got < n) {
    const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - *got, kChunk));
    const int r = gzread(file_, dst + *got, want);
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    if (r > 0) {
      *got += static_cast<std::size_t>(r);
      offset_ += static_cast<std::size_t>(r);
    }
    if (r < 0 || err != Z_OK) {
      const std::string where = path_ + ": offset " + std::to_string(offset_) + ": ";
      if (err == Z_ERRNO) return {StatusCode::kIo, where + "read failed: " + std::strerror(errno)};
      if (err == Z_BUF_ERROR) return {StatusCode::kMalformed, where + "gzip stream ends early (file truncated?)"};
      return {StatusCode::kMalformed, where + "gzip stream is corrupt: " + (message != nullptr ? message : "")};
    }
    if (static_cast<unsigned>(r) < want) break;  // gzread returns short only at the end
  }
  return Status::ok();
}

Status FileReader::append(std::vector<uint8_t>& out, std::size_t n, std::size_t* got) {
  *got = 0;
  while (*got < n) {
    const std::size_t want = std::min<std::size_t>(n - *got, kChunk);
    const std::size_t before = out.size();
    out.resize(before + want);
    std::size_t chunkGot = 0;
    Status status = read(out.data() + before, want, &chunkGot);
    out.resize(before + chunkGot);
    *got += chunkGot;
    STARLING_RETURN_IF_ERROR(status);
    if (chunkGot < want) break;
  }
  return Status::ok();
}

bool BlockLines::next(std::string_view& line) {
  while (true) {
    const std::size_t end = buffer_.find('\n', pos_);
    if (end != std::string::npos) return take(line, end, end + 1);
    if (eof_) {
      if (pos_ >= buffer_.size()) return false;
      return take(line, buffer_.size(), buffer_.size());
    }
    // Keep the partial line and read another block after it.
    buffer_.erase(0, pos_);
    pos_ = 0;
    const std::size_t have = buffer_.size();
    buffer_.resize(have + kBlock);
    std::size_t got = 0;
    status_ = reader_.read(buffer_.data() + have, kBlock, &got);
    buffer_.resize(have + got);
    if (!status_) return false;
    eof_ = got < kBlock;
  }
}

bool BlockLines::take(std::string_view& line, std::size_t stop, std::size_t resume) {
  line = std::string_view(buffer_).substr(pos_, stop - pos_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  pos_ = resume;
  ++number_;
  return true;
}

Result<std::string> findPlainOrGz(const std::string& dir, const std::string& name) {
  auto isFile = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  const std::string plain = dir + "/" + name;
  if (isFile(plain)) return plain;
  if (isFile(plain + ".gz")) return plain + ".gz";
  return Status(StatusCode::kNotFound, "neither " + plain + " nor " + plain + ".gz exists");
}

}  // namespace starling::data::detail
