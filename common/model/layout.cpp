// Layout of the flat parameter vector, and the model checksum.
#include <cstring>

#include "starling/model/model.hpp"

namespace starling::model {

const TensorInfo* Layout::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t Layout::add(std::string name, std::vector<int> shape) {
  std::size_t n = 1;
  for (int s : shape)
    n *= static_cast<std::size_t>(s);
  TensorInfo info{std::move(name), size_, n, std::move(shape)};
  tensors_.push_back(std::move(info));
  size_ += n;
  return tensors_.back().offset;
}

uint64_t checksum(std::span<const float> values) {
  // FNV-1a, 64 bit, over the bytes in memory order (little-endian on every target
  // Starling builds for).
  constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = kOffsetBasis;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const std::size_t n = values.size() * sizeof(float);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= kPrime;
  }
  return h;
}

}  // namespace starling::model
