// Partition "files:DIR": one data file per client, loaded and checked to agree.

#include <algorithm>
#include <filesystem>

#include "starling/data/load.hpp"

namespace starling::data {

Result<std::vector<std::string>> dataFilesIn(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return Status(StatusCode::kNotFound, dir + ": partition files:DIR needs a directory of data files");
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) continue;
    const std::string path = entry.path().string();
    if (detectFormat(path)) files.push_back(path);
  }
  if (ec) return Status(StatusCode::kIo, dir + ": cannot list the directory: " + ec.message());
  if (files.empty())
    return Status(StatusCode::kInvalidArgument,
                  dir + ": no data file (.csv, .libsvm, .svm, .svmlight, each also .gz, .npy, .npz) in the directory");
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

Status countMismatch(const std::string& dir, std::size_t files, std::size_t clients) {
  return Status(StatusCode::kInvalidArgument, dir +
                                                  ": partition files:DIR gives one file per client, but the directory "
                                                  "holds " +
                                                  std::to_string(files) + " data files for " + std::to_string(clients) +
                                                  " clients");
}

}  // namespace

Result<std::string> clientFileOf(const std::string& dir, std::size_t index, std::size_t count) {
  auto files = dataFilesIn(dir);
  if (!files) return files.status();
  if (files->size() != count) return countMismatch(dir, files->size(), count);
  if (index >= count)
    return Status(StatusCode::kInvalidArgument,
                  "client " + std::to_string(index) + " of " + std::to_string(count) + " does not exist");
  return (*files)[index];
}

Result<FilesPartition> loadFilesPartition(const std::string& dir, std::size_t numClients, const DataOptions& options) {
  auto files = dataFilesIn(dir);
  if (!files) return files.status();
  if (files->size() != numClients) return countMismatch(dir, files->size(), numClients);
  std::vector<Dataset> sets;
  sets.reserve(files->size());
  std::size_t widest = 0;
  int mostClasses = 0;
  for (const std::string& path : *files) {
    auto d = loadData(path, options);
    if (!d) return d.status();
    widest = std::max(widest, d->featureDim());
    mostClasses = std::max(mostClasses, d->numClasses());
    sets.push_back(std::move(*d));
  }
  // Counts left to inference become the largest: re-read the files that inferred less.
  const bool inferClasses = options.task == TaskKind::kClassification && options.numClasses == 0;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const bool widen = options.featureDim == 0 && sets[i].isSparse() && sets[i].featureDim() < widest;
    const bool moreClasses = inferClasses && sets[i].numClasses() < mostClasses;
    if (!widen && !moreClasses) continue;
    DataOptions again = options;
    if (widen) again.featureDim = widest;
    if (moreClasses) again.numClasses = mostClasses;
    auto d = loadData((*files)[i], again);
    if (!d) return d.status();
    sets[i] = std::move(*d);
  }
  const Dataset& first = sets[0];
  for (std::size_t i = 1; i < sets.size(); ++i) {
    const Dataset& d = sets[i];
    const std::string differs = (*files)[i] + " differs from " + (*files)[0] + " (the first file) in ";
    if (d.isSparse() != first.isSparse())
      return Status(StatusCode::kInvalidArgument, differs + "its format: " + (d.isSparse() ? "sparse" : "dense") +
                                                      " features, not " + (first.isSparse() ? "sparse" : "dense"));
    if (d.featureDim() != first.featureDim())
      return Status(StatusCode::kInvalidArgument, differs + "its features: " + std::to_string(d.featureDim()) +
                                                      ", not " + std::to_string(first.featureDim()));
    if (d.numClasses() != first.numClasses())
      return Status(StatusCode::kInvalidArgument, differs + "its classes: " + std::to_string(d.numClasses()) +
                                                      ", not " + std::to_string(first.numClasses()));
  }
  auto all = Dataset::concat(sets);
  if (!all) return all.status().withContext(dir);
  FilesPartition out;
  out.all = std::move(*all);
  out.files = std::move(*files);
  uint32_t at = 0;
  for (const Dataset& d : sets) {
    std::vector<uint32_t> rows(d.size());
    for (uint32_t& r : rows)
      r = at++;
    out.parts.push_back(std::move(rows));
  }
  return out;
}

Result<Dataset> loadDataShard(const std::string& path, const DataOptions& options, std::size_t index, std::size_t count,
                              std::string_view partition, uint64_t seed) {
  if (const std::string dir = filesDirOf(partition); !dir.empty()) {
    if (!path.empty())
      return Status(StatusCode::kInvalidArgument,
                    "partition files:DIR takes shard I from the I-th file of DIR; no data path is used");
    if (count == 0) return Status(StatusCode::kInvalidArgument, "partition files:DIR needs a shard I of N");
    auto file = clientFileOf(dir, index, count);
    if (!file) return file.status().withContext("partition");
    return loadData(*file, options);
  }
  if (count == 0) return loadData(path, options);
  if (index >= count)
    return Status(StatusCode::kInvalidArgument,
                  "shard " + std::to_string(index) + " of " + std::to_string(count) + " does not exist");
  DataOptions withGroups = options;
  withGroups.groupColumn = groupColumnOf(partition);
  auto all = loadData(path, withGroups);
  if (!all) return all.status();
  auto parts = partitionDataset(*all, count, partition, seed);
  if (!parts) return parts.status().withContext("partition");
  return all->subset((*parts)[index]);
}

}  // namespace starling::data
