#pragma once
// Feature scaling from federated statistics (docs/data.md, "Feature scaling").
//
// A client summarizes its training examples per feature (featureSums: count, sum and
// sum of squares, in double); the coordinator merges the clients' sums
// (coordinator/engine/statistics.hpp) into a FeatureScaling, and every party applies
// it to its data with scaleFeatures(): dense features become z-scores (x - mean) / std;
// sparse (CSR) features are only divided by std, so that zeros stay zeros and the data
// stays sparse. The daemon's clients, the C API and the simulator all use these two
// functions. Pure functions; thread-safe on distinct arguments.

#include <cstdint>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// One party's sums over its examples, one entry per feature: count[j] examples,
// sum[j] = sum of x_ij, sumSquares[j] = sum of x_ij^2 (a sparse data set's absent
// features count as zeros).
struct FeatureSums {
  std::vector<double> count;
  std::vector<double> sum;
  std::vector<double> sumSquares;
  uint64_t examples = 0;
  bool sparse = false;  // summed over CSR data: it is scaled, never centred

  std::size_t features() const { return sum.size(); }
  bool operator==(const FeatureSums&) const = default;
};

// What every party scales its features with: per feature the mean and the population
// standard deviation of the union of the clients' training examples (a feature whose
// std is 0 has std 1, so it is only centred). centre = false (sparse data): x / std.
struct FeatureScaling {
  std::vector<double> mean;
  std::vector<double> std;
  bool centre = true;

  bool empty() const { return mean.empty(); }
  bool operator==(const FeatureScaling&) const = default;
};

// The sums of every example of `d` (summed in example order, in double, over the
// values gather() yields), except that the one-hot features of categorical columns
// (data/categories.hpp) sum to 0: indicators are not scaled, whichever encoding the
// task agrees on, and the merged scaling leaves them as they are (mean 0, std 1).
FeatureSums featureSums(const Dataset& d);

// `d` with its features scaled: dense ones to float((x - mean) / std), sparse ones to
// float(x / std) (mean ignored); labels, targets, shape, groups and categorical values kept. Image bytes
// become floats. kInvalidArgument when the scaling's size is not d.featureDim(), or
// when it centres a sparse data set.
Result<Dataset> scaleFeatures(const Dataset& d, const FeatureScaling& scaling);

}  // namespace starling::data
