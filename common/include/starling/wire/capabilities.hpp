#pragma once
// Capabilities: what a client implements beyond protocol version 1's first messages.
//
// A client lists them in Hello.capabilities. The coordinator works out which ones its
// task needs (coordinator::requiredCapabilities) and refuses a client that lacks any
// with an Error of code Unsupported naming them, instead of sending payloads the
// client would reject as malformed one round later. A client that lists nothing is
// taken to implement none of them. Names are never reused for something else; a new
// wire format or client-side feature gets a new name here.

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace starling::wire {

// Top-k indices as Golomb-Rice coded gaps (IndexFormat Rice).
inline constexpr std::string_view kCapRiceIndices = "rice-indices";
// Top-k values as sign bits with one scale per block (ValueFormat SignBits on a top-k).
inline constexpr std::string_view kCapTernaryValues = "ternary-values";
// Catch-up by value: RoundAssign.values, the current values of the changed coordinates.
inline constexpr std::string_view kCapCatchUpValues = "catch-up-values";
// Priority sampling of minibatches (HyperParameters.priority_sampling).
inline constexpr std::string_view kCapPrioritySampling = "priority-sampling";
// FedProx's proximal term (HyperParameters.prox_mu).
inline constexpr std::string_view kCapProx = "fedprox";
// A cap on the uplink error-feedback memory (CompressionSettings.error_cap).
inline constexpr std::string_view kCapErrorCap = "error-cap";
// Building the round-0 model from the spec and Welcome.init_seed.
inline constexpr std::string_view kCapInitialize = "initialize";
// Catch-up values as XORs with the receiver's model (ValueFormat Xor32).
inline constexpr std::string_view kCapXorValues = "xor-values";
// Rounding the coordinates a broadcast changed (CompressionSettings.model_mantissa_bits).
inline constexpr std::string_view kCapModelPrecision = "model-precision";
// Log replays whose top-k indices are coded against the previous broadcast's
// (IndexFormat Relative): the client keeps the indices of the last broadcast it applied.
inline constexpr std::string_view kCapRelativeIndices = "relative-indices";
// Evaluates the model it is sent on its held-out examples when asked (RoundAssign.evaluate).
inline constexpr std::string_view kCapFederatedEval = "federated-eval";

// Answers a StatsRequest with FeatureStats and scales its features with Welcome's
// feature_mean / feature_std (task.standardize).
inline constexpr std::string_view kCapFeatureStats = "feature-stats";

// Sends its categorical columns' values with their counts when a StatsRequest asks, and
// re-encodes them over Welcome's categorical_vocabulary (task.categorical-vocabulary).
inline constexpr std::string_view kCapCategoricalVocabulary = "categorical-vocabulary";

// Trains each round with RoundAssign.batch_scale x Welcome's batch size (train.dynamic-batch).
inline constexpr std::string_view kCapDynamicBatch = "dynamic-batch";
// Overlap Local-SGD: trains between rounds and pulls back towards the anchor
// (HyperParameters.overlap, overlap_momentum; train.overlap).
inline constexpr std::string_view kCapOverlap = "overlap";
// Differential privacy: clips the update it sends to CompressionSettings.update_clip_norm
// (privacy.update-clip-norm). A client without it would send unclipped updates.
inline constexpr std::string_view kCapDpClip = "dp-clip";
// Distributed noise: adds N(0, CompressionSettings.update_noise_std^2) to every coordinate
// of its clipped update, from a cryptographic generator (privacy.noise = distributed).
inline constexpr std::string_view kCapDpNoise = "dp-noise";

// Everything starling-client of this build implements.
inline constexpr std::array<std::string_view, 17> kClientCapabilities = {kCapRiceIndices,
                                                                         kCapTernaryValues,
                                                                         kCapCatchUpValues,
                                                                         kCapPrioritySampling,
                                                                         kCapProx,
                                                                         kCapErrorCap,
                                                                         kCapInitialize,
                                                                         kCapXorValues,
                                                                         kCapModelPrecision,
                                                                         kCapRelativeIndices,
                                                                         kCapFederatedEval,
                                                                         kCapFeatureStats,
                                                                         kCapCategoricalVocabulary,
                                                                         kCapDynamicBatch,
                                                                         kCapOverlap,
                                                                         kCapDpClip,
                                                                         kCapDpNoise};

// The names in `required` that `offered` lacks, in the order of `required`.
inline std::vector<std::string> missingCapabilities(const std::vector<std::string>& required,
                                                    const std::vector<std::string>& offered) {
  std::vector<std::string> missing;
  for (const std::string& r : required) {
    bool found = false;
    for (const std::string& o : offered)
      found = found || o == r;
    if (!found) missing.push_back(r);
  }
  return missing;
}

}  // namespace starling::wire
