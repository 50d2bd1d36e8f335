#include "engine/vocabulary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace starling::coordinator {

Status checkCategoryCounts(const CategoryCounts& counts, const std::vector<std::string>& columns, uint64_t examples) {
  auto bad = [](std::string why) { return Status(StatusCode::kMalformed, "category counts: " + std::move(why)); };
  for (const auto& name : columns)
    if (!counts.contains(name)) return bad(fmt::format("no counts for categorical column '{}'", name));
  for (const auto& [name, values] : counts) {
    if (std::find(columns.begin(), columns.end(), name) == columns.end())
      return bad(fmt::format("column '{}' is not a categorical column of the task", name));
    uint64_t total = 0;
    for (const auto& [value, n] : values) {
      if (value.empty()) return bad(fmt::format("column '{}': an empty value", name));
      if (n == 0) return bad(fmt::format("column '{}': value '{}' with count 0", name, value));
      if (n > examples || total > examples - n)
        return bad(fmt::format("column '{}': counts add up to more than the client's {} examples", name, examples));
      total += n;
    }
  }
  return Status::ok();
}

Result<CategoryCounts> categoryCountsOf(const std::vector<wire::CategoryValuesMsg>& columns) {
  CategoryCounts out;
  for (const auto& c : columns) {
    auto [column, fresh] = out.try_emplace(c.column);
    if (!fresh) return Status(StatusCode::kMalformed, fmt::format("category counts: column '{}' twice", c.column));
    for (std::size_t i = 0; i < c.values.size() && i < c.counts.size(); ++i)
      if (!column->second.emplace(c.values[i], c.counts[i]).second)
        return Status(StatusCode::kMalformed,
                      fmt::format("category counts: column '{}': value '{}' twice", c.column, c.values[i]));
  }
  return out;
}

std::vector<wire::CategoryValuesMsg> vocabularyMessage(const Vocabulary& vocabulary) {
  std::vector<wire::CategoryValuesMsg> out;
  for (const auto& [name, column] : vocabulary) {
    wire::CategoryValuesMsg m;
    m.column = name;
    m.values = column.values;
    out.push_back(std::move(m));
  }
  return out;
}

data::CategoryVocabulary vocabularyValues(const Vocabulary& vocabulary) {
  data::CategoryVocabulary out;
  for (const auto& [name, column] : vocabulary)
    out[name] = column.values;
  return out;
}

Result<Vocabulary> mergeCategoryCounts(const std::map<std::string, CategoryCounts>& byClient,
                                       const VocabularyOptions& options) {
  if (byClient.empty()) return Status(StatusCode::kInvalidArgument, "no client sent category counts");
  if (options.minCount == 0 || options.maxValues == 0)
    return Status(StatusCode::kInvalidArgument, "vocabulary-min-count and vocabulary-max must be at least 1");
  const auto& [firstId, first] = *byClient.begin();
  std::map<std::string, std::map<std::string, uint64_t>> totals;
  for (const auto& [id, counts] : byClient) {
    const bool sameColumns =
        counts.size() == first.size() && std::equal(counts.begin(), counts.end(), first.begin(),
                                                    [](const auto& a, const auto& b) { return a.first == b.first; });
    if (!sameColumns)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("client '{}' sent counts of {} categorical columns, '{}' of {} (or other names)", id,
                                counts.size(), firstId, first.size()));
    for (const auto& [name, values] : counts) {
      auto& column = totals[name];
      for (const auto& [value, n] : values) {
        uint64_t& t = column[value];
        t = n > std::numeric_limits<uint64_t>::max() - t ? std::numeric_limits<uint64_t>::max() : t + n;
      }
    }
  }
  Vocabulary vocabulary;
  for (const auto& [name, column] : totals) {
    std::vector<std::pair<std::string, uint64_t>> kept;
    ColumnVocabulary& out = vocabulary[name];
    for (const auto& [value, n] : column) {
      if (n >= options.minCount)
        kept.emplace_back(value, n);
      else
        out.dropped += n;
    }
    if (kept.size() > options.maxValues) {
      // Most frequent first, equal counts by value: a function of the totals alone.
      std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      for (std::size_t i = options.maxValues; i < kept.size(); ++i)
        out.dropped += kept[i].second;
      kept.resize(options.maxValues);
      std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    for (auto& [value, n] : kept) {
      out.values.push_back(std::move(value));
      out.counts.push_back(n);
    }
  }
  return vocabulary;
}

}  // namespace starling::coordinator
