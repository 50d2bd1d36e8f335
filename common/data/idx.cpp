// loadIdx and the Fashion-MNIST helpers: IDX files (plain or gzipped) -> byte Dataset.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "starling/data/loaders.hpp"

#include "file_reader.hpp"

namespace starling::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr std::size_t kMaxDims = 16;
// Reserve at most this much up front; beyond it the buffer grows as data arrives, so a
// header claiming a huge size costs only what the file really holds.
constexpr std::size_t kMaxReserve = std::size_t{256} << 20;

Status offsetError(StatusCode code, const std::string& path, std::size_t offset, const std::string& what) {
  return {code, path + ": offset " + std::to_string(offset) + ": " + what};
}

// A parsed IDX header: dims[0] items of product(dims[1..]) bytes each.
struct IdxHeader {
  std::vector<uint32_t> dims;
  std::size_t itemBytes = 1;
  std::size_t payloadBytes = 0;
};

const char* typeName(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return nullptr;
  }
}

std::string describeDims(const std::vector<uint32_t>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i)
    s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

Result<IdxHeader> readHeader(detail::FileReader& in) {
  const std::string& path = in.path();
  uint8_t magic[4];
  std::size_t got = 0;
  STARLING_RETURN_IF_ERROR(in.read(magic, sizeof magic, &got));
  if (got < sizeof magic) {
    return offsetError(StatusCode::kMalformed, path, got, "file ends inside the 4-byte IDX magic number");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return offsetError(StatusCode::kMalformed, path, 0,
                       "not an IDX file (the magic number must start with two zero bytes)");
  }
  const char* name = typeName(magic[2]);
  if (name == nullptr) {
    return offsetError(StatusCode::kMalformed, path, 2, "unknown IDX element type " + std::to_string(magic[2]));
  }
  if (magic[2] != kTypeUnsignedByte) {
    return offsetError(StatusCode::kUnsupported, path, 2,
                       std::string("IDX element type ") + name + " is not supported (only unsigned byte)");
  }
  const std::size_t ndims = magic[3];
  if (ndims == 0 || ndims > kMaxDims) {
    return offsetError(StatusCode::kMalformed, path, 3,
                       std::to_string(ndims) + " dimensions (expected 1 to " + std::to_string(kMaxDims) + ")");
  }

  IdxHeader header;
  header.dims.resize(ndims);
  for (std::size_t i = 0; i < ndims; ++i) {
    uint8_t b[4];
    const std::size_t at = in.offset();
    STARLING_RETURN_IF_ERROR(in.read(b, sizeof b, &got));
    if (got < sizeof b) {
      return offsetError(
          StatusCode::kMalformed, path, at + got,
          "file ends inside the header (dimension " + std::to_string(i + 1) + " of " + std::to_string(ndims) + ")");
    }
    header.dims[i] = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
    if (i > 0 && header.dims[i] == 0) {
      return offsetError(StatusCode::kMalformed, path, at, "dimension " + std::to_string(i + 1) + " is 0");
    }
  }
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 1; i < ndims; ++i) {
    if (header.itemBytes > kMax / header.dims[i]) {
      return offsetError(StatusCode::kOutOfRange, path, 4,
                         "dimensions " + describeDims(header.dims) + " overflow a size");
    }
    header.itemBytes *= header.dims[i];
  }
  if (header.dims[0] != 0 && header.itemBytes > kMax / header.dims[0]) {
    return offsetError(StatusCode::kOutOfRange, path, 4,
                       "dimensions " + describeDims(header.dims) + " overflow a size");
  }
  header.payloadBytes = header.itemBytes * header.dims[0];
  return header;
}

// Reads exactly the payload the header announces, and nothing may follow it.
Status readPayload(detail::FileReader& in, const IdxHeader& header, std::vector<uint8_t>& out) {
  const std::size_t start = in.offset();
  out.reserve(std::min(header.payloadBytes, kMaxReserve));
  std::size_t got = 0;
  STARLING_RETURN_IF_ERROR(in.append(out, header.payloadBytes, &got));
  if (got < header.payloadBytes) {
    return offsetError(StatusCode::kMalformed, in.path(), start + got,
                       "file ends after " + std::to_string(got) + " of the " + std::to_string(header.payloadBytes) +
                           " data bytes its header announces (" + describeDims(header.dims) + ")");
  }
  uint8_t extra = 0;
  STARLING_RETURN_IF_ERROR(in.read(&extra, 1, &got));
  if (got != 0) {
    return offsetError(StatusCode::kMalformed, in.path(), start + header.payloadBytes,
                       "unexpected data after the " + std::to_string(header.payloadBytes) +
                           " data bytes its header announces (" + describeDims(header.dims) + ")");
  }
  return Status::ok();
}

}  // namespace

Result<Dataset> loadIdx(const std::string& imagesPath, const std::string& labelsPath, int numClasses) {
  if (numClasses < 0) return Status(StatusCode::kInvalidArgument, "loadIdx: numClasses must be >= 0");

  auto images = detail::FileReader::open(imagesPath);
  if (!images) return images.status();
  auto imageHeader = readHeader(*images);
  if (!imageHeader) return imageHeader.status();
  const std::size_t count = imageHeader->dims[0];

  auto labelsIn = detail::FileReader::open(labelsPath);
  if (!labelsIn) return labelsIn.status();
  auto labelHeader = readHeader(*labelsIn);
  if (!labelHeader) return labelHeader.status();
  if (labelHeader->dims.size() != 1) {
    return offsetError(StatusCode::kMalformed, labelsPath, 3,
                       "a labels file has 1 dimension, this one has " + std::to_string(labelHeader->dims.size()));
  }
  if (labelHeader->dims[0] != count) {
    return offsetError(
        StatusCode::kMalformed, labelsPath, 4,
        std::to_string(labelHeader->dims[0]) + " labels for the " + std::to_string(count) + " images of " + imagesPath);
  }

  std::vector<uint8_t> pixels;
  STARLING_RETURN_IF_ERROR(readPayload(*images, *imageHeader, pixels));
  std::vector<uint8_t> rawLabels;
  STARLING_RETURN_IF_ERROR(readPayload(*labelsIn, *labelHeader, rawLabels));

  const std::size_t labelStart = 4 + 4 * labelHeader->dims.size();
  std::vector<int32_t> labels(count);
  int maxLabel = 0;
  for (std::size_t i = 0; i < count; ++i) {
    labels[i] = rawLabels[i];
    if (numClasses > 0 && labels[i] >= numClasses) {
      return offsetError(
          StatusCode::kMalformed, labelsPath, labelStart + i,
          "label " + std::to_string(labels[i]) + " is not below numClasses " + std::to_string(numClasses));
    }
    maxLabel = std::max(maxLabel, labels[i]);
  }
  rawLabels = {};

  const std::vector<uint32_t>& dims = imageHeader->dims;
  std::vector<int> shape;
  if (dims.size() == 3) shape.push_back(1);  // one channel
  for (std::size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
      return offsetError(StatusCode::kOutOfRange, imagesPath, 4 + 4 * i, "dimension does not fit an int");
    }
    shape.push_back(static_cast<int>(dims[i]));
  }
  auto dataset = Dataset::fromBytes(std::move(pixels), std::move(labels), imageHeader->itemBytes,
                                    numClasses > 0 ? numClasses : maxLabel + 1, 1.0f / 255.0f, std::move(shape));
  if (!dataset) return dataset.status().withContext(imagesPath);
  return dataset;
}

std::string defaultFashionMnistDir() {
  return "/usr/share/datasets/fashion-mnist";
}

Result<Dataset> loadFashionMnistSplit(const std::string& dir, FashionMnistSplit split) {
  const std::string prefix = split == FashionMnistSplit::kTrain ? "train" : "t10k";
  auto images = detail::findPlainOrGz(dir, prefix + "-images-idx3-ubyte");
  if (!images) return images.status();
  auto labels = detail::findPlainOrGz(dir, prefix + "-labels-idx1-ubyte");
  if (!labels) return labels.status();
  auto dataset = loadIdx(*images, *labels, 10);
  if (!dataset) return dataset;
  if (dataset->featureDim() != std::size_t{28} * 28 || dataset->shape().size() != 3) {
    return Status(StatusCode::kMalformed, *images + ": Fashion-MNIST images are 28 x 28 bytes, found " +
                                              std::to_string(dataset->featureDim()) + " bytes per image");
  }
  return dataset;
}

Result<FashionMnist> loadFashionMnist(const std::string& dir) {
  auto train = loadFashionMnistSplit(dir, FashionMnistSplit::kTrain);
  if (!train) return train.status();
  auto test = loadFashionMnistSplit(dir, FashionMnistSplit::kTest);
  if (!test) return test.status();
  return FashionMnist{std::move(*train), std::move(*test)};
}

}  // namespace starling::data
