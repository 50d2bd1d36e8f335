#include "starling/data/partition.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "random.hpp"

namespace starling::data {
namespace {

void checkCommon(std::size_t numExamples, std::size_t numClients) {
  if (numClients == 0) throw std::invalid_argument("partition: numClients must be >= 1");
  if (numExamples > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument("partition: more than 2^32 - 1 examples");
  }
}

// The examples of each class that occurs, classes ascending, examples ascending.
std::vector<std::vector<uint32_t>> groupByClass(std::span<const int32_t> labels) {
  std::vector<uint32_t> order(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) throw std::invalid_argument("partition: label " + std::to_string(labels[i]) + " is negative");
    order[i] = static_cast<uint32_t>(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return labels[a] < labels[b]; });
  std::vector<std::vector<uint32_t>> groups;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || labels[order[i]] != labels[order[i - 1]]) groups.emplace_back();
    groups.back().push_back(order[i]);
  }
  return groups;
}

// Cuts items into `parts` contiguous pieces whose sizes differ by at most one, the
// larger first, and hands piece s to owners[s].
void deal(const std::vector<uint32_t>& items, const std::vector<std::size_t>& owners, Partition& out) {
  const std::size_t parts = owners.size();
  const std::size_t base = items.size() / parts;
  const std::size_t extra = items.size() % parts;
  std::size_t next = 0;
  for (std::size_t s = 0; s < parts; ++s) {
    const std::size_t size = base + (s < extra ? 1 : 0);
    auto& dst = out[owners[s]];
    dst.insert(dst.end(), items.begin() + static_cast<std::ptrdiff_t>(next),
               items.begin() + static_cast<std::ptrdiff_t>(next + size));
    next += size;
  }
}

void sortEach(Partition& p) {
  for (auto& client : p)
    std::sort(client.begin(), client.end());
}

// Counts summing to total, proportional to weights (largest remainder; ties to the
// lower index).
std::vector<std::size_t> apportion(const std::vector<double>& weights, std::size_t total) {
  double sum = 0.0;
  for (double w : weights)
    sum += w;
  std::vector<std::size_t> counts(weights.size());
  std::vector<std::pair<double, std::size_t>> remainders(weights.size());
  std::size_t assigned = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double quota = weights[i] / sum * static_cast<double>(total);
    const double whole = std::floor(quota);
    counts[i] = std::min(static_cast<std::size_t>(whole), total - assigned);
    assigned += counts[i];
    remainders[i] = {quota - whole, i};
  }
  std::sort(remainders.begin(), remainders.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (std::size_t r = 0; assigned < total; r = (r + 1) % remainders.size()) {
    ++counts[remainders[r].second];
    ++assigned;
  }
  return counts;
}

}  // namespace

Partition partitionIid(std::size_t numExamples, std::size_t numClients, uint64_t seed) {
  checkCommon(numExamples, numClients);
  std::vector<uint32_t> order(numExamples);
  for (std::size_t i = 0; i < numExamples; ++i)
    order[i] = static_cast<uint32_t>(i);
  detail::Rng rng(seed);
  rng.shuffle(order);
  std::vector<std::size_t> owners(numClients);
  for (std::size_t c = 0; c < numClients; ++c)
    owners[c] = c;
  Partition p(numClients);
  deal(order, owners, p);
  sortEach(p);
  return p;
}

Partition partitionIid(std::span<const int32_t> labels, std::size_t numClients, uint64_t seed) {
  return partitionIid(labels.size(), numClients, seed);
}

Partition partitionDirichlet(std::span<const int32_t> labels, std::size_t numClients, double alpha, uint64_t seed) {
  checkCommon(labels.size(), numClients);
  if (!(alpha > 0.0) || !std::isfinite(alpha)) {
    throw std::invalid_argument("partitionDirichlet: alpha must be a finite number > 0");
  }
  auto groups = groupByClass(labels);
  detail::Rng rng(seed);
  Partition p(numClients);
  std::vector<double> weights(numClients);
  for (auto& group : groups) {
    rng.shuffle(group);
    // Dir(alpha) = normalised Gamma(alpha) draws; in logs, because small alphas underflow.
    double maxLog = -std::numeric_limits<double>::infinity();
    for (double& w : weights) {
      w = rng.logGamma(alpha);
      maxLog = std::max(maxLog, w);
    }
    for (double& w : weights)
      w = std::exp(w - maxLog);
    const auto counts = apportion(weights, group.size());
    std::size_t next = 0;
    for (std::size_t c = 0; c < numClients; ++c) {
      p[c].insert(p[c].end(), group.begin() + static_cast<std::ptrdiff_t>(next),
                  group.begin() + static_cast<std::ptrdiff_t>(next + counts[c]));
      next += counts[c];
    }
  }
  // Nobody empty when avoidable: the largest client (lowest index on a tie) gives one.
  if (labels.size() >= numClients) {
    for (std::size_t c = 0; c < numClients; ++c) {
      if (!p[c].empty()) continue;
      std::size_t donor = 0;
      for (std::size_t d = 1; d < numClients; ++d) {
        if (p[d].size() > p[donor].size()) donor = d;
      }
      p[c].push_back(p[donor].back());
      p[donor].pop_back();
    }
  }
  sortEach(p);
  return p;
}

Partition partitionKClasses(std::span<const int32_t> labels, std::size_t numClients, int k, uint64_t seed) {
  checkCommon(labels.size(), numClients);
  if (k < 1) throw std::invalid_argument("partitionKClasses: k must be >= 1");
  auto groups = groupByClass(labels);
  Partition p(numClients);
  const std::size_t numClasses = groups.size();
  if (numClasses == 0) return p;
  const std::size_t kk = std::min(static_cast<std::size_t>(k), numClasses);

  detail::Rng rng(seed);
  std::vector<std::size_t> classOrder(numClasses);
  for (std::size_t i = 0; i < numClasses; ++i)
    classOrder[i] = i;
  rng.shuffle(classOrder);

  // holders[pos]: the clients sharing the class at position pos of the cyclic order.
  std::vector<std::vector<std::size_t>> holders(numClasses);
  for (std::size_t c = 0; c < numClients; ++c) {
    for (std::size_t j = 0; j < kk; ++j)
      holders[(c * kk + j) % numClasses].push_back(c);
  }
  for (std::size_t pos = numClients * kk; pos < numClasses; ++pos) {
    holders[pos].push_back((pos - numClients * kk) % numClients);
  }
  for (std::size_t pos = 0; pos < numClasses; ++pos) {
    auto& group = groups[classOrder[pos]];
    rng.shuffle(group);
    deal(group, holders[pos], p);
  }
  sortEach(p);
  return p;
}

Result<Partition> partitionBySpec(std::span<const int32_t> labels, std::size_t numClients, std::string_view spec,
                                  uint64_t seed) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (numClients == 0) return bad("a partition needs at least one client");
  auto number = [&](std::string_view prefix, double& out) {
    if (spec.substr(0, prefix.size()) != prefix) return false;
    const std::string rest(spec.substr(prefix.size()));
    char* end = nullptr;
    out = std::strtod(rest.c_str(), &end);
    return !rest.empty() && end == rest.c_str() + rest.size();
  };
  double v = 0;
  if (spec == "iid") return partitionIid(labels, numClients, seed);
  if (number("dirichlet:", v)) {
    if (!(v > 0) || !std::isfinite(v)) return bad("dirichlet:ALPHA needs ALPHA > 0");
    return partitionDirichlet(labels, numClients, v, seed);
  }
  if (number("classes:", v)) {
    if (!(v >= 1) || v != std::floor(v) || v > 1e6) return bad("classes:K needs a whole K >= 1");
    return partitionKClasses(labels, numClients, static_cast<int>(v), seed);
  }
  return bad("the partition must be iid, dirichlet:ALPHA, classes:K, by-column:NAME or files:DIR, not '" +
             std::string(spec) + "'");
}

Partition partitionByGroup(std::span<const uint32_t> groups, std::size_t numClients) {
  Partition parts(numClients);
  if (numClients == 0) return parts;
  uint32_t numGroups = 0;
  for (uint32_t g : groups)
    numGroups = std::max(numGroups, g + 1);
  std::vector<std::vector<uint32_t>> members(numGroups);
  for (uint32_t i = 0; i < groups.size(); ++i)
    members[groups[i]].push_back(i);
  std::vector<uint32_t> order(numGroups);
  for (uint32_t g = 0; g < numGroups; ++g)
    order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return members[a].size() > members[b].size(); });
  for (uint32_t g : order) {
    std::size_t least = 0;
    for (std::size_t c = 1; c < numClients; ++c)
      if (parts[c].size() < parts[least].size()) least = c;
    parts[least].insert(parts[least].end(), members[g].begin(), members[g].end());
  }
  for (auto& p : parts)
    std::sort(p.begin(), p.end());
  return parts;
}

std::string groupColumnOf(std::string_view spec) {
  constexpr std::string_view kPrefix = "by-column:";
  return spec.starts_with(kPrefix) ? std::string(spec.substr(kPrefix.size())) : std::string();
}

std::string filesDirOf(std::string_view spec) {
  constexpr std::string_view kPrefix = "files:";
  return spec.starts_with(kPrefix) ? std::string(spec.substr(kPrefix.size())) : std::string();
}

Result<Partition> partitionDataset(const Dataset& dataset, std::size_t numClients, std::string_view spec,
                                   uint64_t seed) {
  if (spec.starts_with("files:"))
    return Status(StatusCode::kInvalidArgument, "partition '" + std::string(spec) +
                                                    "' takes one file per client from the directory, not one data set");
  if (spec.starts_with("by-column:")) {
    if (groupColumnOf(spec).empty())
      return Status(StatusCode::kInvalidArgument, "partition 'by-column:' needs a column name");
    if (numClients == 0) return Status(StatusCode::kInvalidArgument, "a partition needs at least one client");
    if (dataset.groups().size() != dataset.size())
      return Status(StatusCode::kInvalidArgument,
                    "partition '" + std::string(spec) + "': the data was loaded without that group column");
    return partitionByGroup(dataset.groups(), numClients);
  }
  if (dataset.isRegression() && spec != "iid")
    return Status(StatusCode::kInvalidArgument,
                  "partition '" + std::string(spec) + "' cuts by class; a regression takes iid or by-column:NAME");
  return partitionBySpec(dataset.labels(), numClients, spec, seed);
}

Result<IndexViews> partitionWithReplacement(const Dataset& dataset, std::size_t numClients, std::size_t perClient,
                                            std::string_view spec, uint64_t seed) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "partition '" + std::string(spec) + "' with replacement: " + why);
  };
  if (numClients == 0) return bad("needs at least one client");
  if (perClient == 0) return bad("needs at least one example per client");
  if (dataset.size() == 0) return bad("the data set is empty");
  if (dataset.size() > std::numeric_limits<uint32_t>::max()) return bad("more than 2^32 - 1 examples");
  if (perClient > std::numeric_limits<uint32_t>::max() / 2) return bad("too many examples per client");
  enum class Kind { kIid, kDirichlet, kClasses } kind = Kind::kIid;
  double value = 0;
  const auto number = [&](std::string_view prefix) {
    if (!spec.starts_with(prefix)) return false;
    const std::string rest(spec.substr(prefix.size()));
    char* end = nullptr;
    value = std::strtod(rest.c_str(), &end);
    return !rest.empty() && end == rest.c_str() + rest.size();
  };
  if (spec == "iid") {
    kind = Kind::kIid;
  } else if (number("dirichlet:")) {
    if (!(value > 0) || !std::isfinite(value)) return bad("dirichlet:ALPHA needs ALPHA > 0");
    kind = Kind::kDirichlet;
  } else if (number("classes:")) {
    if (!(value >= 1) || value != std::floor(value) || value > 1e6) return bad("classes:K needs a whole K >= 1");
    kind = Kind::kClasses;
  } else {
    return bad("iid, dirichlet:ALPHA or classes:K draw with replacement (by-column and files keep their groups)");
  }
  if (kind != Kind::kIid && dataset.isRegression()) return bad("cuts by class; a regression takes iid");
  const auto groups = kind == Kind::kIid ? std::vector<std::vector<uint32_t>>() : groupByClass(dataset.labels());
  const std::size_t n = dataset.size(), classes = groups.size();
  const auto k = std::min<std::size_t>(classes, static_cast<std::size_t>(value));

  IndexViews views;
  views.offsets.resize(numClients + 1);
  views.indices.resize(numClients * perClient);
  std::vector<double> cumulative(classes);
  std::vector<uint32_t> chosen(classes);
  for (std::size_t c = 0; c < numClients; ++c) {
    uint64_t mixed = seed ^ (0x5eedc1e7ull + c * 0x9E3779B97F4A7C15ULL);
    detail::Rng rng(detail::splitMix64(mixed));
    const auto out = views.indices.begin() + static_cast<std::ptrdiff_t>(c * perClient);
    if (kind == Kind::kIid) {
      for (std::size_t j = 0; j < perClient; ++j)
        out[static_cast<std::ptrdiff_t>(j)] = static_cast<uint32_t>(rng.below(n));
    } else if (kind == Kind::kDirichlet) {
      double maxLog = -std::numeric_limits<double>::infinity();
      for (double& w : cumulative) {
        w = rng.logGamma(value);
        maxLog = std::max(maxLog, w);
      }
      double sum = 0;
      for (double& w : cumulative) {
        sum += std::exp(w - maxLog);
        w = sum;
      }
      for (std::size_t j = 0; j < perClient; ++j) {
        const double u = rng.openUnit() * sum;
        const auto cls = std::min<std::size_t>(
            classes - 1,
            static_cast<std::size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin()));
        out[static_cast<std::ptrdiff_t>(j)] = groups[cls][rng.below(groups[cls].size())];
      }
    } else {
      // The first k of a partial Fisher-Yates shuffle of the classes.
      for (std::size_t i = 0; i < classes; ++i)
        chosen[i] = static_cast<uint32_t>(i);
      for (std::size_t i = 0; i < k; ++i)
        std::swap(chosen[i], chosen[i + rng.below(classes - i)]);
      for (std::size_t j = 0; j < perClient; ++j) {
        const auto& group = groups[chosen[rng.below(k)]];
        out[static_cast<std::ptrdiff_t>(j)] = group[rng.below(group.size())];
      }
    }
    std::sort(out, out + static_cast<std::ptrdiff_t>(perClient));
    views.offsets[c + 1] = views.offsets[c] + perClient;
  }
  return views;
}

}  // namespace starling::data
