// bench/load: peak memory and time of loading a large sparse LIBSVM file
//
// Generates FILE_MB of LIBSVM text (default 1024) with 10^6 features at 0.1% density
// (1,000 non-zeros per example, seeded) in a temporary directory, loads it with
// loadData in a child process, and prints the file size, the non-zeros, the child's
// peak RSS (getrusage RUSAGE_CHILDREN) beside nnz x 8 bytes (a 4-byte index and a
// 4-byte value each), and the seconds. The file is deleted afterwards. Not part of CI:
// it writes a gigabyte. Usage: bench-load [FILE_MB] [--gzip]
#include "starling/data/load.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

constexpr std::size_t kFeatures = 1'000'000;
constexpr std::size_t kPerRow = 1'000;  // 0.1% of 10^6

// xorshift64*: a fast seeded stream for the generator.
uint64_t next(uint64_t& s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 2685821657736338717ull;
}

// Rows of kPerRow sorted distinct indices (one per stride of 1000) until `bytes`.
std::size_t generate(const std::string& path, std::size_t bytes, bool gzip) {
  gzFile out = gzopen(path.c_str(), gzip ? "wb1" : "wbT");
  uint64_t state = 0x5eed;
  std::size_t written = 0, rows = 0;
  std::string line;
  char field[32];
  while (written < bytes) {
    line.clear();
    line += (next(state) & 1) ? "+1" : "-1";
    const std::size_t stride = kFeatures / kPerRow;
    for (std::size_t k = 0; k < kPerRow; ++k) {
      const std::size_t index = k * stride + next(state) % stride + 1;
      const int n = std::snprintf(field, sizeof field, " %zu:%.3f", index, double(next(state) % 1000) / 1000.0);
      line.append(field, static_cast<std::size_t>(n));
    }
    line += '\n';
    gzwrite(out, line.data(), static_cast<unsigned>(line.size()));
    written += line.size();
    ++rows;
  }
  gzclose(out);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t megabytes = 1024;
  bool gzip = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gzip") {
      gzip = true;
    } else {
      megabytes = std::strtoull(argv[i], nullptr, 10);
    }
  }
  const auto dir = std::filesystem::temp_directory_path() / ("starling-bench-load-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (gzip ? "big.libsvm.gz" : "big.libsvm")).string();
  const auto g0 = std::chrono::steady_clock::now();
  const std::size_t rows = generate(path, megabytes << 20, gzip);
  const double genSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  const std::size_t fileBytes = std::filesystem::file_size(path);

  // The load in a child, so its peak RSS is the loader's alone.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    starling::data::DataOptions options;
    options.featureDim = kFeatures;
    auto d = starling::data::loadData(path, options);
    std::string report = d ? std::to_string(d->nnz()) + " " + std::to_string(d->size()) : d.status().message();
    (void)!write(fds[1], report.data(), report.size());
    _exit(d ? 0 : 1);
  }
  close(fds[1]);
  char buffer[512] = {};
  const ssize_t got = read(fds[0], buffer, sizeof buffer - 1);
  int status = 0;
  waitpid(child, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench-load: loading failed: %s\n", got > 0 ? buffer : "(no message)");
    return 1;
  }
  unsigned long long nnz = 0, examples = 0;
  std::sscanf(buffer, "%llu %llu", &nnz, &examples);
  const double mib = 1024.0 * 1024.0;
  std::printf("LIBSVM%s, 10^6 features, 0.1%% density (generated in %.1f s, %zu rows)\n", gzip ? " (gzip)" : "",
              genSeconds, rows);
  std::printf("%-14s %12s %12s %14s %14s %10s %8s\n", "file", "examples", "nnz", "peak RSS", "nnz x 8", "RSS/nnz8",
              "seconds");
  std::printf("%9.1f MiB %12llu %12llu %10.1f MiB %10.1f MiB %10.2f %8.1f\n", double(fileBytes) / mib, examples, nnz,
              double(usage.ru_maxrss) * 1024.0 / mib, double(nnz) * 8.0 / mib,
              double(usage.ru_maxrss) * 1024.0 / (double(nnz) * 8.0), seconds);
  return 0;
}
