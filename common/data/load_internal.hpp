#pragma once
// The readers behind loadData and the loaders.hpp functions (private to data/).

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/data/load.hpp"
#include "starling/data/loaders.hpp"
#include "starling/util/status.hpp"

namespace starling::data::detail {

// How a CSV file is read; loadCsv and loadData both come down to this.
struct CsvSpec {
  char delimiter = ',';
  std::optional<bool> header;  // nullopt: detect
  // The label column: by header name when labelName is set, else labelIndex
  // (0-based, negative from the end).
  std::string labelName;
  long labelIndex = -1;
  // A column by header name that is not a feature but each example's group
  // (Dataset::groups()); "" = none.
  std::string groupName;
  // Categorical columns by header name, each one-hot over `buckets` hashed slots (the
  // Dataset keeps the values too: Dataset::categories()).
  std::vector<std::string> categorical;
  uint32_t buckets = 16;
  TaskKind task = TaskKind::kClassification;
  int numClasses = 0;
  MemoryLimit memoryLimit;
};

// The error of data at path that would take `bytes`, over the limit; `where` is the
// path, or "path:LINE" when the limit is passed while reading.
Status overMemoryLimit(const std::string& where, std::size_t bytes, const MemoryLimit& limit);

Result<Dataset> readCsv(const std::string& path, const CsvSpec& spec);

// LIBSVM with the task's label rules; for classification, options.labels applies.
Result<Dataset> readLibsvm(const std::string& path, const LibsvmOptions& options, TaskKind task,
                           const MemoryLimit& memoryLimit = {});

// A .npy file: one 2-D array, label column per options.label (default the last).
Result<Dataset> readNpy(const std::string& path, const DataOptions& options);
// A .npz archive: a features array and a labels array.
Result<Dataset> readNpz(const std::string& path, const DataOptions& options);

}  // namespace starling::data::detail
