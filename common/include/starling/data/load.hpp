#pragma once
// loadData: one entry point for a user's own data, whatever its format.
//
// A path names its format by its extension (detectFormat) unless DataOptions::format
// says otherwise; the labels are checked against the task the model learns
// (TaskKind): classes, a binary outcome or real values. The lower-level loaders of
// loaders.hpp stay available for callers that want their options directly.
//
// Errors follow loaders.hpp: a Result whose message starts with the path and names the
// place, "path:LINE: ..." for the text formats (lines count from 1, header included),
// "path: array 'y' element 7: ..." or "path: row 3 column 2: ..." for NPY and NPZ.
// Malformed input never yields a partly read Dataset.
//
// Stateless; any thread may call these.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "starling/data/dataset.hpp"
#include "starling/data/partition.hpp"
#include "starling/data/task_kind.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

enum class DataFormat { kAuto, kCsv, kLibsvm, kIdx, kNpy, kNpz };

// "auto", "csv", "libsvm", "idx", "npy" or "npz".
std::string_view formatName(DataFormat format);
// The names formatName returns, and "svm" for LIBSVM; nullopt for anything else.
std::optional<DataFormat> parseDataFormat(std::string_view name);

struct DataOptions {
  // kAuto takes the format from the path (detectFormat).
  DataFormat format = DataFormat::kAuto;
  // CSV: the label column, by header name or 0-based index ("" = the last column).
  // NPY: the 0-based column of the label ("" = the last column).
  // NPZ: the name of the labels array ("" = "y", else "labels").
  std::string label;
  TaskKind task = TaskKind::kClassification;
  // Classification: 0 infers the count as the largest class + 1; otherwise every class
  // must be below it. Binary: 0 or 2. Regression: ignored.
  int numClasses = 0;
  // LIBSVM: 0 infers the number of features from the largest index.
  std::size_t featureDim = 0;
  // CSV: whether the first row names the columns; nullopt detects it (a first row with
  // a field that is not a number is a header).
  std::optional<bool> header;
  // IDX directory: false reads the train split (train-*), true the test split (t10k-*).
  bool test = false;
  // CSV with a header: this column is not a feature but each example's group
  // (Dataset::groups(), for the partition "by-column:NAME"); LIBSVM: the token
  // "NAME:VALUE" after each label (LibsvmOptions::groupName); "" = none. Other formats
  // refuse it.
  std::string groupColumn;
  // CSV with a header: these columns hold categories (any text), each encoded as
  // categoricalBuckets features, one-hot at FNV-1a(value) mod buckets (the same slot on
  // every client and file, no vocabulary to agree on; distinct values may share a slot).
  // Any other non-numeric field is an error.
  std::vector<std::string> categorical;
  uint32_t categoricalBuckets = 16;
  // Vocabulary mode (task.categorical-vocabulary): when not empty, every categorical
  // column is one-hot over its values here instead of hashed buckets
  // (recodeCategories, data/categories.hpp: the same categoricalBuckets slots, value k
  // of the sorted list in slot k, any other value in the last slot). Its keys must be
  // exactly the categorical columns.
  std::map<std::string, std::vector<std::string>> categoricalVocabulary;
  // The most bytes the loaded data may take in memory; 0 = what this process may still
  // allocate (availableMemory()). A file whose estimated size (its decompressed bytes)
  // exceeds it is refused before it is read, and the text formats (streamed) stop with
  // an error at the line where the examples read so far pass it. Either way the error
  // names the limit and where it came from.
  std::size_t memoryLimitBytes = 0;
};

// What this process may still allocate, on Linux: the least of MemAvailable
// (/proc/meminfo), its memory cgroup's limit less its usage (a container's limit; v2
// memory.max and memory.current, or v1 memory.limit_in_bytes and usage_in_bytes), and
// the soft RLIMIT_AS; `source` says which. SIZE_MAX and "no limit found" when none
// can be read. Reads /proc and /sys on each call.
struct MemoryLimit {
  std::size_t bytes = SIZE_MAX;
  std::string source = "no limit found";
};
MemoryLimit availableMemory();

// The bytes a file's data takes once read, estimated before reading it: its size, or
// for a gzip file the uncompressed size its trailer records (at least the compressed
// size). Text becomes binary arrays of about its size (a LIBSVM "12:0.5 " is 8 bytes
// of index and value; a CSV "0.25," 4 bytes of float); NPY float64 halves. 0 for a
// directory or a file that cannot be read (the loader reports those).
std::size_t estimatedDataBytes(const std::string& path);

// "a,b , c" -> {"a", "b", "c"} (names given on a command line; empty items dropped).
std::vector<std::string> splitList(std::string_view list);

// The format a path names: a directory is IDX; *.csv CSV; *.libsvm, *.svm and
// *.svmlight LIBSVM (the text formats also with a trailing .gz); *.npy NPY; *.npz NPZ.
// kInvalidArgument for any other name, listing the known extensions.
Result<DataFormat> detectFormat(const std::string& path);

// Reads path in options.format (detected when kAuto) and checks its labels against
// options.task. See docs/data.md, "Formats and options".
Result<Dataset> loadData(const std::string& path, const DataOptions& options = {});

// Partition "files:DIR" (partition.hpp filesDirOf): one data file per client.
//
// The files of dir whose format loadData tells from the name (detectFormat; a
// subdirectory is skipped), as paths sorted by file name. kNotFound when dir is not a
// directory, kInvalidArgument when it holds no such file.
Result<std::vector<std::string>> dataFilesIn(const std::string& dir);

// The file of client `index` among `count` clients: file `index` of dataFilesIn(dir).
// kInvalidArgument, giving both numbers, unless dir holds exactly `count` files.
Result<std::string> clientFileOf(const std::string& dir, std::size_t index, std::size_t count);

// Every file of dir loaded with options, one after the other in `all`; parts[i] lists
// the examples of file i (files[i]), client i's. numClients must equal the number of
// files (the error gives both). Files must agree in features and task: a count that
// options leave to inference (LIBSVM featureDim, classification numClasses) becomes the
// largest over the files, each file re-read with it when it inferred less; any other
// difference (a dense file with another feature count, CSV next to LIBSVM) is
// kInvalidArgument naming the file that differs and the first file.
struct FilesPartition {
  Dataset all;
  Partition parts;
  std::vector<std::string> files;
};
Result<FilesPartition> loadFilesPartition(const std::string& dir, std::size_t numClients,
                                          const DataOptions& options = {});

// Shard `index` of `count` of a data file, cut as starling-client --shard I/N
// --partition SPEC cuts it (and the C API's set_data_file_ex): count 0 keeps all of
// path; "files:DIR" reads file `index` of DIR (clientFileOf; path must be empty);
// "by-column:NAME" loads NAME as the groups (options.groupColumn); any other spec goes
// to partitionDataset with seed. Errors name the path or the partition.
Result<Dataset> loadDataShard(const std::string& path, const DataOptions& options, std::size_t index, std::size_t count,
                              std::string_view partition, uint64_t seed);

}  // namespace starling::data
