// loadData: the format from the path or the options, then the matching reader.

#include "starling/data/load.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "starling/data/categories.hpp"

#include "load_internal.hpp"
#include "text_parse.hpp"

namespace starling::data {

namespace {

constexpr std::array<std::pair<DataFormat, std::string_view>, 6> kNames = {{
    {DataFormat::kAuto, "auto"},
    {DataFormat::kCsv, "csv"},
    {DataFormat::kLibsvm, "libsvm"},
    {DataFormat::kIdx, "idx"},
    {DataFormat::kNpy, "npy"},
    {DataFormat::kNpz, "npz"},
}};

bool endsWith(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i) {
    char c = s[s.size() - suffix.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

Result<Dataset> loadIdxDirectory(const std::string& path, const DataOptions& options) {
  if (options.task != TaskKind::kClassification) {
    return Status(StatusCode::kInvalidArgument,
                  path + ": an IDX directory (Fashion-MNIST layout) holds 10 classes; it cannot be read for a " +
                      std::string(taskKindName(options.task)) + " task");
  }
  if (options.numClasses != 0 && options.numClasses != 10) {
    return Status(
        StatusCode::kInvalidArgument,
        path + ": an IDX directory (Fashion-MNIST layout) holds 10 classes, not " + std::to_string(options.numClasses));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    return Status(std::filesystem::exists(path, ec) ? StatusCode::kInvalidArgument : StatusCode::kNotFound,
                  path +
                      ": IDX data is read from a directory holding train-images-idx3-ubyte, "
                      "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each "
                      "optionally .gz); this is not a directory");
  }
  return loadFashionMnistSplit(path, options.test ? FashionMnistSplit::kTest : FashionMnistSplit::kTrain);
}

// The first line of a /proc or /sys file, or "" when it cannot be read.
std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Bytes for a person: "123456 bytes" below 10 MiB, else "12.3 MiB".
std::string mib(std::size_t bytes) {
  if (bytes < std::size_t(10) << 20) return std::to_string(bytes) + " bytes";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(1 << 20));
  return text;
}

}  // namespace

MemoryLimit availableMemory() {
  MemoryLimit limit;
  auto consider = [&](std::size_t bytes, std::string source) {
    if (bytes < limit.bytes) limit = {bytes, std::move(source)};
  };
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::size_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") consider(kib * 1024, "MemAvailable in /proc/meminfo");
  }
  // The process's memory cgroup: v2 ("0::/PATH" in /proc/self/cgroup, files memory.max
  // and memory.current) or v1 ("N:memory:/PATH", memory.limit_in_bytes and
  // memory.usage_in_bytes). In a container the group's directory may be the mount's
  // root rather than PATH. "max" or a v1 limit of 2^62 or more means none.
  auto cgroup = [&](const std::string& root, const std::string& path, const char* maxFile, const char* usedFile) {
    for (const std::string& dir : {root + path, root}) {
      const std::string max = firstLine(dir + "/" + maxFile);
      if (max.empty()) continue;
      if (max == "max") return;
      const std::size_t cap = std::strtoull(max.c_str(), nullptr, 10);
      if (uint64_t(cap) >= uint64_t(1) << 62) return;
      const std::size_t used = std::strtoull(firstLine(dir + "/" + usedFile).c_str(), nullptr, 10);
      consider(cap > used ? cap - used : 0, "the memory cgroup's limit less its usage (" + dir + ")");
      return;
    }
  };
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    if (line.starts_with("0::")) {
      cgroup("/sys/fs/cgroup", line.substr(3), "memory.max", "memory.current");
    } else if (const auto at = line.find(":memory:"); at != std::string::npos) {
      cgroup("/sys/fs/cgroup/memory", line.substr(at + 8), "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    consider(static_cast<std::size_t>(as.rlim_cur), "RLIMIT_AS (ulimit -v)");
  return limit;
}

std::size_t estimatedDataBytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return 0;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return 0;
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  if (!in || magic[0] != 0x1f || magic[1] != 0x8b || size < 18) return size;
  // gzip's trailer: the uncompressed size mod 2^32, little-endian, in the last 4 bytes.
  unsigned char tail[4] = {0, 0, 0, 0};
  in.seekg(static_cast<std::streamoff>(size - 4));
  in.read(reinterpret_cast<char*>(tail), 4);
  const std::size_t isize =
      std::size_t(tail[0]) | std::size_t(tail[1]) << 8 | std::size_t(tail[2]) << 16 | std::size_t(tail[3]) << 24;
  return std::max<std::size_t>(isize, size);
}

namespace detail {

Status overMemoryLimit(const std::string& where, std::size_t bytes, const MemoryLimit& limit) {
  return Status(StatusCode::kOutOfRange, where + ": the data would take " + mib(bytes) +
                                             " of memory, over the limit of " + mib(limit.bytes) + " (" + limit.source +
                                             "; DataOptions::memoryLimitBytes or --data-memory-limit sets it)");
}

}  // namespace detail

std::string_view formatName(DataFormat format) {
  for (const auto& [f, name] : kNames)
    if (f == format) return name;
  return "auto";
}

std::optional<DataFormat> parseDataFormat(std::string_view name) {
  if (name == "svm") return DataFormat::kLibsvm;
  for (const auto& [f, n] : kNames)
    if (n == name) return f;
  return std::nullopt;
}

Result<DataFormat> detectFormat(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return DataFormat::kIdx;
  std::string_view name = path;
  if (endsWith(name, ".npy")) return DataFormat::kNpy;
  if (endsWith(name, ".npz")) return DataFormat::kNpz;
  if (endsWith(name, ".gz")) name.remove_suffix(3);
  if (endsWith(name, ".csv")) return DataFormat::kCsv;
  if (endsWith(name, ".libsvm") || endsWith(name, ".svm") || endsWith(name, ".svmlight")) return DataFormat::kLibsvm;
  return Status(StatusCode::kInvalidArgument,
                path +
                    ": cannot tell the data format from the name; known: a directory (IDX, Fashion-MNIST layout), "
                    ".csv, .libsvm, .svm, .svmlight (each also .gz), .npy, .npz; --data-format "
                    "csv|libsvm|idx|npy|npz overrides");
}

std::vector<std::string> splitList(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const std::size_t comma = std::min(list.find(','), list.size());
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t'))
      item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t'))
      item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    list.remove_prefix(std::min(comma + 1, list.size()));
  }
  return out;
}

Result<Dataset> loadData(const std::string& path, const DataOptions& options) {
  DataFormat format = options.format;
  if (format == DataFormat::kAuto) {
    auto detected = detectFormat(path);
    if (!detected) return detected.status();
    format = *detected;
  }
  MemoryLimit limit;
  if (options.memoryLimitBytes != 0) {
    limit = {options.memoryLimitBytes, "the limit set"};
  } else {
    limit = availableMemory();
  }
  if (const std::size_t estimate = estimatedDataBytes(path); estimate > limit.bytes)
    return detail::overMemoryLimit(path, estimate, limit);
  if (!options.categorical.empty() && format != DataFormat::kCsv)
    return Status(StatusCode::kInvalidArgument, path + ": categorical columns need a CSV file");
  if (!options.groupColumn.empty() && format != DataFormat::kCsv && format != DataFormat::kLibsvm)
    return Status(StatusCode::kInvalidArgument, path + ": a group column ('" + options.groupColumn +
                                                    "', partition by-column) needs a CSV or LIBSVM file");
  switch (format) {
    case DataFormat::kCsv: {
      detail::CsvSpec spec;
      spec.groupName = options.groupColumn;
      spec.categorical = options.categorical;
      spec.buckets = options.categoricalBuckets;
      spec.header = options.header;
      spec.labelName = options.label;
      spec.labelIndex = -1;
      spec.task = options.task;
      spec.numClasses = options.numClasses;
      spec.memoryLimit = limit;
      auto read = detail::readCsv(path, spec);
      if (!read || options.categoricalVocabulary.empty()) return read;
      auto recoded = recodeCategories(*read, options.categoricalVocabulary);
      if (!recoded) return recoded.status().withContext(path);
      return recoded;
    }
    case DataFormat::kLibsvm: {
      LibsvmOptions o;
      o.featureDim = options.featureDim;
      o.numClasses = options.numClasses;
      o.groupName = options.groupColumn;
      return detail::readLibsvm(path, o, options.task, limit);
    }
    case DataFormat::kIdx:
      return loadIdxDirectory(path, options);
    case DataFormat::kNpy:
      return detail::readNpy(path, options);
    case DataFormat::kNpz:
      return detail::readNpz(path, options);
    case DataFormat::kAuto:
      break;
  }
  return Status(StatusCode::kInternal, path + ": no data format");
}

}  // namespace starling::data
