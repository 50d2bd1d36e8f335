#include "starling/client/replay.hpp"

#include <fmt/format.h>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/precision.hpp"

namespace starling::client {

Status replayBroadcasts(Broadcasts broadcasts, uint32_t mantissaBits, std::optional<std::vector<uint32_t>>& reference,
                        std::span<float> model) {
  const auto d = static_cast<uint32_t>(model.size());
  // The indices the next tensor's relative ones are coded against, when `have`.
  bool have = reference.has_value();
  std::vector<uint32_t> previous;
  if (have) previous = std::move(*reference);
  reference.reset();
  compression::Compressed c;
  for (std::size_t j = 0; j < broadcasts.size(); ++j) {
    const compression::PayloadView& p = broadcasts[j];
    Status st = have ? compression::decode(p, d, previous, c) : compression::decode(p, d, c);
    if (st) st = compression::addScaled(c, -1.0f, model);
    if (st) st = compression::roundChanged(c, mantissaBits, model);  // as the coordinator did
    if (!st) return st.withContext(fmt::format("broadcast {} of {}", j + 1, broadcasts.size()));
    have = c.encoding == compression::Encoding::kTopK;
    if (have) previous.swap(c.indices);
  }
  if (have) reference = std::move(previous);
  return Status::ok();
}

}  // namespace starling::client
