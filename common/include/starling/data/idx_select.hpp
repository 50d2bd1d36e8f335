#pragma once
// Selective IDX loading: labels alone, or only some examples, for a client that
// trains on one shard of a large file and should not hold the rest in memory even
// briefly (a Fashion-MNIST client on shard 0/10 needs 4.7 MB of pixels, not 47 MB).
//
// Same file handling and error style as loaders.hpp (plain or gzip, messages that
// start with the path and name the byte offset); the whole file is still read and
// checked, but only the selected rows are kept. Stateless; any thread may call them.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/data/loaders.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// The labels of an IDX labels file (one dimension of unsigned bytes).
Result<std::vector<int32_t>> loadIdxLabels(const std::string& labelsPath);

// The examples idx[0..n) of an IDX pair, in that order (repeats allowed), as loadIdx
// would give them followed by Dataset::subset(idx): same shape, scale 1/255 and
// numClasses rule (0 infers the largest label of the whole file + 1). An index
// beyond the file is kOutOfRange.
Result<Dataset> loadIdxSubset(const std::string& imagesPath, const std::string& labelsPath,
                              std::span<const uint32_t> idx, int numClasses = 0);

// The same for a split of Fashion-MNIST in dir (files as loadFashionMnistSplit finds them).
Result<std::vector<int32_t>> loadFashionMnistLabels(const std::string& dir, FashionMnistSplit split);
Result<Dataset> loadFashionMnistSubset(const std::string& dir, FashionMnistSplit split, std::span<const uint32_t> idx);

}  // namespace starling::data
