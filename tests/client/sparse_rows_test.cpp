// Sparse models on the client (issue 22): a Learner training the compact model of its
// rows on its renamed data makes the dense Learner's update, restricted to the rows.
// Checked against the dense Learner itself on the same data and seeds: the update the
// coordinator places at full positions equals the dense one bit for bit, and the dense
// one is zero off the rows.
#include "starling/client/sparse_rows.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "starling/client/learner.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/coordinator/sparse_rows.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/model.hpp"
#include "starling/util/checksum.hpp"

#include "support/sparse_data.hpp"

using namespace starling;
using namespace starling::client;

namespace {

wire::WelcomeMsg welcome(const std::string& spec) {
  wire::WelcomeMsg w;
  w.clientId = "client-1";
  w.task = "sparse";
  w.modelSpec = spec;
  w.hyper = wire::HyperParameters{0.1f, 0.9f, 0.0f, 8, 6, 0.0f, true, 7, 0.0f};
  w.compression = wire::CompressionSettings{"identity", 1.0f, "identity", 1.0f, true, false, 0.0f, false, 23};
  w.initSeed = 3;
  return w;
}

wire::RoundAssignMsg assign(uint64_t round, std::span<const float> base) {
  wire::RoundAssignMsg a{round, 0, 6, 0.1f, 1.0f, 1000, {}, 0, wire::denseView(base), std::nullopt};
  a.baseChecksum = checksum64(base);
  return a;
}

}  // namespace

TEST_CASE("the compact Learner's update is the dense Learner's on the rows, bit for bit", "[client][sparse-rows]") {
  const std::string spec =
      GENERATE(std::string("linear:300-3"), std::string("mlp:tanh:300-6-3"), std::string("embedbag:300-4-3"));
  INFO(spec);
  const data::Dataset shard = test::sparseData(48, 300, 40, 5, 3, 5);
  const std::vector<const data::Dataset*> parts{&shard};
  auto offer = offerRows(parts, 1);
  REQUIRE(offer.isOk());
  CHECK(offer->covered == data::featuresTouched(shard));
  auto compactW = compactWelcome(welcome(spec), *offer, shard.featureDim());
  REQUIRE(compactW.isOk());
  auto compactShard = data::restrictFeatures(shard, offer->covered);
  REQUIRE(compactShard.isOk());

  auto full = model::Model::fromSpec(spec);
  REQUIRE(full.isOk());
  full->initialize(3);
  std::vector<float> base(full->params().begin(), full->params().end());
  wire::HelloMsg hello;
  hello.rowSet = offer->bytes;
  hello.rowBucket = offer->bucket;
  auto rows = coordinator::offeredRows(hello, std::make_shared<const model::Model>(*full));
  REQUIRE(rows.isOk());
  REQUIRE(*rows);
  const auto view = (*rows)->view();
  REQUIRE(view);
  const model::RowView& v = *view;
  CHECK(std::vector<uint32_t>(v.rows().begin(), v.rows().end()) == offer->covered);

  const uint64_t seed = clientSeed(0, "client-1");
  Learner dense(LearnerOptions{seed}, nullptr);
  REQUIRE(dense.welcome(welcome(spec), shard).isOk());
  Learner sparse(LearnerOptions{seed}, nullptr);
  REQUIRE(sparse.welcome(*compactW, *compactShard).isOk());
  CHECK(sparse.model().size() == v.size());
  for (uint64_t round = 1; round <= 3; ++round) {
    const std::vector<float> compactBase = v.gather(base);
    const auto aDense = assign(round, base);
    const auto aSparse = assign(round, compactBase);
    REQUIRE(dense.catchUp(aDense).isOk());
    REQUIRE(sparse.catchUp(aSparse).isOk());
    auto ud = dense.train(aDense);
    auto us = sparse.train(aSparse);
    REQUIRE(ud.isOk());
    REQUIRE(us.isOk());
    CHECK(ud->stats.lossStart == us->stats.lossStart);
    CHECK(ud->stats.lossEnd == us->stats.lossEnd);
    compression::Compressed cd, cs;
    REQUIRE(compression::decode(ud->payload, static_cast<uint32_t>(base.size()), cd).isOk());
    REQUIRE(
        coordinator::decodeUpdate(compression::viewOf(us->payload), &v, static_cast<uint32_t>(base.size()), cs).isOk());
    std::vector<float> denseDelta(base.size()), placed(base.size(), 0.0f);
    REQUIRE(compression::expand(cd, denseDelta).isOk());
    REQUIRE(compression::addScaled(cs, 1.0f, placed).isOk());
    CHECK(placed == denseDelta);  // zero off the rows on both sides, equal on them
    for (std::size_t i = 0; i < base.size(); ++i)
      base[i] -= denseDelta[i];
    dense.settle(round, true);
    sparse.settle(round, true);
  }
}

TEST_CASE("coarser buckets cover more rows in fewer bytes; a model of other inputs is refused",
          "[client][sparse-rows]") {
  const data::Dataset shard = test::sparseData(48, 300, 40, 5, 3, 6);
  const std::vector<const data::Dataset*> parts{&shard};
  auto fine = offerRows(parts, 1);
  auto coarse = offerRows(parts, 16);
  REQUIRE(fine.isOk());
  REQUIRE(coarse.isOk());
  CHECK(coarse->touched == fine->touched);
  CHECK(coarse->covered.size() > fine->covered.size());
  CHECK(std::includes(coarse->covered.begin(), coarse->covered.end(), fine->covered.begin(), fine->covered.end()));
  CHECK(coarse->bytes.size() < fine->bytes.size());
  auto buckets = compression::decodeRowSet(coarse->bytes, (300 + 15) / 16);
  REQUIRE(buckets.isOk());
  for (uint32_t b : buckets->rows())  // each bucket holds a row the data touches
    CHECK(std::any_of(fine->covered.begin(), fine->covered.end(), [&](uint32_t r) { return r / 16 == b; }));
  auto bad = compactWelcome(welcome("linear:301-3"), *fine, shard.featureDim());
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("300 features") != std::string::npos);
  CHECK(compactWelcome(welcome("cnn:1x8x8-c2k3-p2-3"), *fine, 64).status().code() == StatusCode::kInvalidArgument);
  CHECK(offerRows(parts, 0).status().code() == StatusCode::kInvalidArgument);
}
