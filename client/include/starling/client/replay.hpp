#pragma once
// Replaying a RoundAssign's broadcasts (the coordinator's log, oldest first) onto the
// client's copy of the global model, the way the coordinator applied them.
//
// A tensor with relative indices (compression::IndexFormat::kRelative) is decoded
// against the indices of the tensor before it in the same replay; the first against
// `reference`: the indices of the last tensor of the last replay, which the caller
// keeps (docs/compression.md, "Relative indices").
// Thread-safe on distinct arguments.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "starling/compression/payload.hpp"
#include "starling/util/status.hpp"

namespace starling::client {

// A RoundAssign's broadcasts (wire::RoundAssignMsg::broadcast).
using Broadcasts = std::span<const compression::PayloadView>;

// Subtracts each broadcast from model in order and rounds the coordinates it changed
// to mantissaBits. On success, reference holds the last tensor's indices (nullopt when
// it is not top-k or there is none); on failure it is nullopt and model is partly
// updated. A relative first tensor without a reference is kMalformed ("relative
// indices without a reference").
Status replayBroadcasts(Broadcasts broadcasts, uint32_t mantissaBits, std::optional<std::vector<uint32_t>>& reference,
                        std::span<float> model);

}  // namespace starling::client
