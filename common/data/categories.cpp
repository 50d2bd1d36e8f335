#include "starling/data/categories.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace starling::data {

CategoryCounts categoryCounts(const Dataset& d) {
  const CategoryColumns& c = d.categories();
  CategoryCounts out;
  for (std::size_t k = 0; k < c.names.size(); ++k) {
    std::vector<uint64_t> byCode(c.values[k].size(), 0);
    for (std::size_t i = 0; i < d.size(); ++i)
      ++byCode[c.code(i, k)];
    auto& column = out[c.names[k]];
    for (std::size_t v = 0; v < byCode.size(); ++v)
      if (byCode[v] > 0) column[c.values[k][v]] = byCode[v];  // a subset may not hold every value
  }
  return out;
}

Result<Dataset> recodeCategories(const Dataset& d, const CategoryVocabulary& vocabulary) {
  const CategoryColumns& c = d.categories();
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  for (const auto& [name, values] : vocabulary)
    if (std::find(c.names.begin(), c.names.end(), name) == c.names.end())
      return bad(fmt::format("the vocabulary names column '{}', not a categorical column", name));
  // Per column, the slot of each of its value codes.
  std::vector<std::vector<uint32_t>> slotOf(c.names.size());
  for (std::size_t k = 0; k < c.names.size(); ++k) {
    const auto it = vocabulary.find(c.names[k]);
    if (it == vocabulary.end()) return bad(fmt::format("categorical column '{}' has no vocabulary", c.names[k]));
    const std::vector<std::string>& values = it->second;
    if (std::adjacent_find(values.begin(), values.end(), std::greater_equal<>()) != values.end())
      return bad(fmt::format("the vocabulary of column '{}' is not sorted and distinct", c.names[k]));
    if (values.size() + 1 > c.width)
      return bad(fmt::format("the vocabulary of column '{}' has {} values; {} slots hold at most {} and the other slot",
                             c.names[k], values.size(), c.width, c.width - 1));
    const auto other = static_cast<uint32_t>(c.width - 1);
    for (const std::string& v : c.values[k]) {
      const auto found = std::lower_bound(values.begin(), values.end(), v);
      slotOf[k].push_back(found != values.end() && *found == v ? static_cast<uint32_t>(found - values.begin()) : other);
    }
  }
  const std::size_t dim = d.featureDim();
  std::vector<float> x(d.size() * dim);
  std::vector<uint32_t> all(d.size());
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = i;
  d.gather(all, x);
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t k = 0; k < c.names.size(); ++k) {
      float* block = x.data() + i * dim + c.offsets[k];
      std::fill(block, block + c.width, 0.0f);
      block[slotOf[k][c.code(i, k)]] = 1.0f;
    }
  Result<Dataset> out =
      d.isRegression()
          ? Dataset::fromFloatTargets(std::move(x), {d.targets().begin(), d.targets().end()}, dim, d.shape())
          : Dataset::fromFloats(std::move(x), {d.labels().begin(), d.labels().end()}, dim, d.numClasses(), d.shape());
  if (!out) return out.status().withContext("re-encoding the categorical columns");
  STARLING_RETURN_IF_ERROR(out->withGroups({d.groups().begin(), d.groups().end()}));
  STARLING_RETURN_IF_ERROR(out->withCategories(c));
  return out;
}

std::vector<std::size_t> oneHotFeatures(const Dataset& d) {
  const CategoryColumns& c = d.categories();
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < c.names.size(); ++k)
    for (std::size_t j = 0; j < c.width; ++j)
      out.push_back(c.offsets[k] + j);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace starling::data
