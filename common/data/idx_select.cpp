// loadIdxLabels / loadIdxSubset: IDX files read in one pass, keeping selected rows.

#include "starling/data/idx_select.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "file_reader.hpp"

namespace starling::data {
namespace {

Status at(StatusCode code, const std::string& path, std::size_t offset, const std::string& what) {
  return {code, path + ": offset " + std::to_string(offset) + ": " + what};
}

// dims of an IDX file of unsigned bytes, read from its header.
Result<std::vector<uint32_t>> readDims(detail::FileReader& in) {
  uint8_t magic[4];
  std::size_t got = 0;
  STARLING_RETURN_IF_ERROR(in.read(magic, sizeof magic, &got));
  if (got < sizeof magic || magic[0] != 0 || magic[1] != 0)
    return at(StatusCode::kMalformed, in.path(), 0, "not an IDX file (bad magic number)");
  if (magic[2] != 0x08)
    return at(StatusCode::kUnsupported, in.path(), 2, "only IDX files of unsigned bytes are supported");
  if (magic[3] == 0 || magic[3] > 16)
    return at(StatusCode::kMalformed, in.path(), 3, std::to_string(magic[3]) + " dimensions (expected 1 to 16)");
  std::vector<uint32_t> dims(magic[3]);
  for (auto& d : dims) {
    uint8_t b[4];
    const std::size_t offset = in.offset();
    STARLING_RETURN_IF_ERROR(in.read(b, sizeof b, &got));
    if (got < sizeof b) return at(StatusCode::kMalformed, in.path(), offset + got, "file ends inside the header");
    d = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }
  return dims;
}

// Fails unless the file ends exactly here.
Status expectEnd(detail::FileReader& in) {
  uint8_t extra = 0;
  std::size_t got = 0;
  const std::size_t offset = in.offset();
  STARLING_RETURN_IF_ERROR(in.read(&extra, 1, &got));
  if (got != 0) return at(StatusCode::kMalformed, in.path(), offset, "unexpected data after the announced data");
  return Status::ok();
}

}  // namespace

Result<std::vector<int32_t>> loadIdxLabels(const std::string& labelsPath) {
  auto in = detail::FileReader::open(labelsPath);
  if (!in) return in.status();
  auto dims = readDims(*in);
  if (!dims) return dims.status();
  if (dims->size() != 1)
    return at(StatusCode::kMalformed, labelsPath, 3,
              "a labels file has 1 dimension, this one has " + std::to_string(dims->size()));
  std::vector<uint8_t> raw;
  std::size_t got = 0;
  STARLING_RETURN_IF_ERROR(in->append(raw, (*dims)[0], &got));
  if (got < (*dims)[0])
    return at(StatusCode::kMalformed, labelsPath, in->offset(),
              "file ends after " + std::to_string(got) + " of " + std::to_string((*dims)[0]) + " labels");
  STARLING_RETURN_IF_ERROR(expectEnd(*in));
  return std::vector<int32_t>(raw.begin(), raw.end());
}

Result<Dataset> loadIdxSubset(const std::string& imagesPath, const std::string& labelsPath,
                              std::span<const uint32_t> idx, int numClasses) {
  if (numClasses < 0) return Status(StatusCode::kInvalidArgument, "loadIdxSubset: numClasses must be >= 0");
  auto allLabels = loadIdxLabels(labelsPath);
  if (!allLabels) return allLabels.status();
  int maxLabel = 0;
  for (int32_t l : *allLabels)
    maxLabel = std::max(maxLabel, l);
  if (numClasses > 0 && maxLabel >= numClasses)
    return Status(StatusCode::kMalformed, labelsPath + ": label " + std::to_string(maxLabel) +
                                              " is not below numClasses " + std::to_string(numClasses));

  auto in = detail::FileReader::open(imagesPath);
  if (!in) return in.status();
  auto dims = readDims(*in);
  if (!dims) return dims.status();
  const std::size_t count = (*dims)[0];
  if (count != allLabels->size())
    return Status(StatusCode::kMalformed, labelsPath + ": " + std::to_string(allLabels->size()) + " labels for the " +
                                              std::to_string(count) + " images of " + imagesPath);
  std::size_t rowBytes = 1;
  std::vector<int> shape;
  if (dims->size() == 3) shape.push_back(1);  // one channel, as loadIdx
  for (std::size_t i = 1; i < dims->size(); ++i) {
    const uint32_t d = (*dims)[i];
    if (d == 0 || d > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
        uint64_t(rowBytes) > (uint64_t{1} << 32) / d)
      return at(StatusCode::kOutOfRange, imagesPath, 4 + 4 * i, "unusable dimension " + std::to_string(d));
    rowBytes *= d;
    shape.push_back(static_cast<int>(d));
  }

  // (row in the file, slot in the output), in file order: one pass keeps them all.
  std::vector<std::pair<uint32_t, uint32_t>> wanted(idx.size());
  for (std::size_t s = 0; s < idx.size(); ++s) {
    if (idx[s] >= count)
      return Status(StatusCode::kOutOfRange,
                    imagesPath + ": example " + std::to_string(idx[s]) + " of " + std::to_string(count) + " requested");
    wanted[s] = {idx[s], static_cast<uint32_t>(s)};
  }
  std::sort(wanted.begin(), wanted.end());

  std::vector<uint8_t> pixels(idx.size() * rowBytes);
  std::vector<int32_t> labels(idx.size());
  std::vector<uint8_t> row(rowBytes);
  std::size_t next = 0;
  for (std::size_t r = 0; r < count; ++r) {
    std::size_t got = 0;
    const std::size_t offset = in->offset();
    STARLING_RETURN_IF_ERROR(in->read(row.data(), rowBytes, &got));
    if (got < rowBytes)
      return at(StatusCode::kMalformed, imagesPath, offset + got,
                "file ends inside image " + std::to_string(r) + " of the " + std::to_string(count) + " announced");
    for (; next < wanted.size() && wanted[next].first == r; ++next) {
      std::copy(row.begin(), row.end(), pixels.begin() + static_cast<std::ptrdiff_t>(wanted[next].second * rowBytes));
      labels[wanted[next].second] = (*allLabels)[r];
    }
  }
  STARLING_RETURN_IF_ERROR(expectEnd(*in));
  auto dataset = Dataset::fromBytes(std::move(pixels), std::move(labels), rowBytes,
                                    numClasses > 0 ? numClasses : maxLabel + 1, 1.0f / 255.0f, std::move(shape));
  if (!dataset) return dataset.status().withContext(imagesPath);
  return dataset;
}

Result<std::vector<int32_t>> loadFashionMnistLabels(const std::string& dir, FashionMnistSplit split) {
  auto labels = detail::findPlainOrGz(
      dir, std::string(split == FashionMnistSplit::kTrain ? "train" : "t10k") + "-labels-idx1-ubyte");
  if (!labels) return labels.status();
  return loadIdxLabels(*labels);
}

Result<Dataset> loadFashionMnistSubset(const std::string& dir, FashionMnistSplit split, std::span<const uint32_t> idx) {
  const std::string prefix = split == FashionMnistSplit::kTrain ? "train" : "t10k";
  auto images = detail::findPlainOrGz(dir, prefix + "-images-idx3-ubyte");
  if (!images) return images.status();
  auto labels = detail::findPlainOrGz(dir, prefix + "-labels-idx1-ubyte");
  if (!labels) return labels.status();
  auto dataset = loadIdxSubset(*images, *labels, idx, 10);
  if (dataset && dataset->featureDim() != std::size_t{28} * 28)
    return Status(StatusCode::kMalformed, *images + ": Fashion-MNIST images are 28 x 28 bytes, found " +
                                              std::to_string(dataset->featureDim()) + " bytes per image");
  return dataset;
}

}  // namespace starling::data
