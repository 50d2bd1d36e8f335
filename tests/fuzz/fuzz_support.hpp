#pragma once
// Shared by the fuzz targets: the libFuzzer entry point every target defines, a
// check that stops the run (so the fuzzer and the replay test both see it), and a
// temporary file for the parsers that read paths.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace starling::fuzz {

// An invariant of the code under test does not hold: report and abort.
#define STARLING_FUZZ_CHECK(cond)                                                            \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// A file holding the input, removed when this goes out of scope. `suffix` lets the
// loaders see the extension they may look at (".gz" is read either way).
class TempFile {
 public:
  TempFile(const uint8_t* data, size_t size, const char* suffix = "") {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/starling-fuzz-XXXXXX" + suffix;
    int fd = ::mkstemps(path_.data(), static_cast<int>(std::char_traits<char>::length(suffix)));
    STARLING_FUZZ_CHECK(fd >= 0);
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd, data + done, size - done);
      STARLING_FUZZ_CHECK(n > 0);
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace starling::fuzz
