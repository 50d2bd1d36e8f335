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

}  // namespace starling::model
