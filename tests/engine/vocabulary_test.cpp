// The vocabulary merge of a statistics round (coordinator::mergeCategoryCounts): counts
// summed over clients, rare values dropped, the cap by frequency with ties by value,
// the result sorted and independent of the order the clients are given in.
#include "engine/vocabulary.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

using namespace starling;
using namespace starling::coordinator;

namespace {

VocabularyOptions options(uint64_t minCount, std::size_t maxValues) {
  VocabularyOptions o;
  o.minCount = minCount;
  o.maxValues = maxValues;
  return o;
}

}  // namespace

TEST_CASE("the vocabulary keeps values seen on at least min-count examples over all clients, sorted") {
  std::map<std::string, CategoryCounts> byClient;
  byClient["a"]["city"] = {{"Oslo", 3}, {"Bergen", 4}, {"Tromso", 1}};
  byClient["b"]["city"] = {{"Oslo", 3}, {"Bergen", 1}, {"Alta", 2}};
  byClient["c"]["city"] = {{"Alta", 2}, {"Tromso", 2}};
  auto v = mergeCategoryCounts(byClient, options(5, 256));
  REQUIRE(v.isOk());
  const auto& city = v.value().at("city");
  // Oslo 6 and Bergen 5 pass; Tromso 3 and Alta 4 do not, though each client alone saw less.
  CHECK(city.values == std::vector<std::string>{"Bergen", "Oslo"});
  CHECK(city.counts == std::vector<uint64_t>{5, 6});
  CHECK(city.dropped == 7);
}

TEST_CASE("the cap keeps the most frequent values, equal counts by value, then sorts them") {
  std::map<std::string, CategoryCounts> byClient;
  byClient["a"]["c"] = {{"z", 9}, {"y", 5}, {"x", 5}, {"w", 5}, {"v", 1}};
  auto v = mergeCategoryCounts(byClient, options(2, 3));
  REQUIRE(v.isOk());
  const auto& c = v.value().at("c");
  CHECK(c.values == std::vector<std::string>{"w", "x", "z"});  // z (9), then w and x before y (ties)
  CHECK(c.counts == std::vector<uint64_t>{5, 5, 9});
  CHECK(c.dropped == 6);
}

TEST_CASE("the vocabulary does not depend on the order or the split of the clients' counts") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(0, 40), count(1, 6);
  std::map<std::string, uint64_t> truth;
  std::vector<std::pair<std::string, uint64_t>> observations;
  for (int i = 0; i < 300; ++i) {
    auto v = "v" + std::to_string(value(rng));
    uint64_t n = uint64_t(count(rng));
    observations.emplace_back(v, n);
    truth[v] += n;
  }
  auto split = [&](std::size_t clients, unsigned seed) {
    auto shuffled = observations;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
    std::map<std::string, CategoryCounts> byClient;
    for (std::size_t i = 0; i < shuffled.size(); ++i) {
      auto& column = byClient["client-" + std::to_string(i % clients)]["col"];
      column[shuffled[i].first] += shuffled[i].second;
    }
    return mergeCategoryCounts(byClient, options(20, 10)).value();
  };
  const Vocabulary one = split(1, 1);
  for (unsigned seed = 2; seed < 6; ++seed) {
    const Vocabulary many = split(seed, seed);
    CHECK(many.at("col").values == one.at("col").values);
    CHECK(many.at("col").counts == one.at("col").counts);
  }
  // Independent reference: rank the totals directly.
  std::vector<std::pair<std::string, uint64_t>> ranked(truth.begin(), truth.end());
  std::erase_if(ranked, [](const auto& p) { return p.second < 20; });
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (ranked.size() > 10) ranked.resize(10);
  std::vector<std::string> expected;
  for (const auto& p : ranked)
    expected.push_back(p.first);
  std::sort(expected.begin(), expected.end());
  CHECK(one.at("col").values == expected);
}

TEST_CASE("clients that disagree on the columns, and bad options, are refused") {
  std::map<std::string, CategoryCounts> byClient;
  byClient["a"]["city"] = {{"Oslo", 3}};
  byClient["b"]["town"] = {{"Oslo", 3}};
  auto v = mergeCategoryCounts(byClient, options(1, 5));
  REQUIRE_FALSE(v.isOk());
  CHECK(v.status().code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(mergeCategoryCounts({}, options(1, 5)).isOk());
  byClient.erase("b");
  CHECK_FALSE(mergeCategoryCounts(byClient, options(0, 5)).isOk());
  CHECK_FALSE(mergeCategoryCounts(byClient, options(1, 0)).isOk());
}

TEST_CASE("a client's counts are checked against the task's columns and its examples") {
  const std::vector<std::string> columns{"city"};
  CategoryCounts good;
  good["city"] = {{"Oslo", 3}, {"Bergen", 2}};
  CHECK(checkCategoryCounts(good, columns, 5).isOk());
  SECTION("more counts than examples") {
    auto s = checkCategoryCounts(good, columns, 4);
    CHECK(s.code() == StatusCode::kMalformed);
    CHECK_THAT(s.message(), Catch::Contains("more than the client's 4 examples"));
  }
  SECTION("an unknown column") {
    CategoryCounts c = good;
    c["town"] = {{"x", 1}};
    CHECK_THAT(checkCategoryCounts(c, columns, 5).message(), Catch::Contains("'town'"));
  }
  SECTION("a missing column") {
    CHECK_FALSE(checkCategoryCounts({}, columns, 5).isOk());
  }
  SECTION("an empty value or a zero count") {
    CategoryCounts c;
    c["city"] = {{"", 1}};
    CHECK_THAT(checkCategoryCounts(c, columns, 5).message(), Catch::Contains("empty value"));
    c["city"] = {{"Oslo", 0}};
    CHECK_THAT(checkCategoryCounts(c, columns, 5).message(), Catch::Contains("count 0"));
  }
}

TEST_CASE("category counts are read from FeatureStats and the vocabulary written for Welcome") {
  std::vector<wire::CategoryValuesMsg> sent = {{"city", {"Oslo", "Bergen"}, {4, 6}}};
  auto counts = categoryCountsOf(sent);
  REQUIRE(counts.isOk());
  CHECK(counts->at("city") == ValueCounts{{"Bergen", 6}, {"Oslo", 4}});
  std::map<std::string, CategoryCounts> byClient{{"a", *counts}};
  auto message = vocabularyMessage(mergeCategoryCounts(byClient, options(5, 256)).value());
  REQUIRE(message.size() == 1);
  CHECK(message[0].column == "city");
  CHECK(message[0].values == std::vector<std::string>{"Bergen"});
  CHECK(message[0].counts.empty());

  sent.push_back(sent[0]);
  CHECK_THAT(categoryCountsOf(sent).status().message(), Catch::Contains("column 'city' twice"));
  sent = {{"city", {"Oslo", "Oslo"}, {1, 2}}};
  CHECK_THAT(categoryCountsOf(sent).status().message(), Catch::Contains("value 'Oslo' twice"));
}
