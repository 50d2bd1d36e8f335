// Layout of the flat parameter vector, and the model checksum.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "starling/model/model.hpp"

namespace starling::model {

const TensorInfo* Layout::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t Layout::add(std::string name, std::vector<int> shape) {
  // Counted in 64 bits and saturated at the largest size_t: on a 32-bit target the
  // product wraps (65536 x 65536 is 0 there), and a wrapped count slipped past the
  // spec's parameter limit. A saturated layout is refused by that limit.
  constexpr uint64_t kMost = std::numeric_limits<std::size_t>::max();
  uint64_t n = 1;
  for (int s : shape) {
    const auto d = static_cast<uint64_t>(std::max(s, 0));
    n = (d != 0 && n > kMost / d) ? kMost : n * d;
  }
  const auto count = static_cast<std::size_t>(std::min(n, kMost));
  TensorInfo info{std::move(name), size_, count, std::move(shape)};
  tensors_.push_back(std::move(info));
  size_ = (kMost - size_ < count) ? static_cast<std::size_t>(kMost) : size_ + count;
  return tensors_.back().offset;
}

}  // namespace starling::model
