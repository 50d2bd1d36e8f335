// Every message through encode() and back through Message::parse() and its parseX():
// the fields survive, compressed tensors come back as views of the same bytes.

#include "starling/wire/messages.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "starling/wire/capabilities.hpp"

using namespace starling;
using namespace starling::wire;

namespace {

// The frame's body as a verified message; the header names the body's length.
Message received(const Frame& frame) {
  REQUIRE(frame.size() > kFrameHeaderBytes);
  auto header = decodeFrameHeader(frame.bytes().first<kFrameHeaderBytes>(), kDefaultMaxFrameBytes);
  REQUIRE(header.isOk());
  CHECK(header->length == frame.size() - kFrameHeaderBytes);
  auto body = frame.bytes().subspan(kFrameHeaderBytes);
  auto msg = Message::parse({body.begin(), body.end()});
  REQUIRE(msg.isOk());
  return std::move(*msg);
}

// A top-k tensor's payload: indices, fp16 values, a seed.
compression::Payload topK() {
  compression::Payload p;
  p.encoding = compression::Encoding::kTopK;
  p.count = 1000;
  p.selected = 3;
  p.indexFormat = compression::IndexFormat::kDeltaVarint;
  p.indices = {4, 10, 200};
  p.valueFormat = compression::ValueFormat::kFp16;
  p.values = {1, 2, 3, 4, 5, 6};
  p.seed = 77;
  return p;
}

bool same(const compression::PayloadView& a, const compression::Payload& b) {
  return a.encoding == b.encoding && a.count == b.count && a.selected == b.selected && a.indexFormat == b.indexFormat &&
         std::equal(a.indices.begin(), a.indices.end(), b.indices.begin(), b.indices.end()) &&
         a.valueFormat == b.valueFormat &&
         std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end()) && a.levelBits == b.levelBits &&
         a.levels == b.levels && a.block == b.block &&
         std::equal(a.scales.begin(), a.scales.end(), b.scales.begin(), b.scales.end()) && a.seed == b.seed;
}

}  // namespace

TEST_CASE("Hello round-trips; a client's names its capabilities and the running platform", "[wire][messages]") {
  const HelloMsg sent = clientHello("client-3", 600, 4, 0xabcdef);
  CHECK(sent.capabilities.size() == kClientCapabilities.size());
  CHECK_FALSE(sent.platform.empty());
  CHECK(sent.platform != "linux");  // "SYSNAME-MACHINE", e.g. linux-x86_64
  const Message m = received(encode(sent));
  auto got = parseHello(m);
  REQUIRE(got.isOk());
  CHECK(got->clientId == "client-3");
  CHECK(got->capabilities == sent.capabilities);
  CHECK(got->numExamples == 600);
  CHECK(got->platform == sent.platform);
  CHECK(got->lastRound == 4);
  CHECK(got->modelChecksum == 0xabcdef);
  CHECK_FALSE(parseWelcome(m).isOk());  // another type: kMalformed, named
  CHECK_THAT(parseWelcome(m).status().message(), Catch::Contains("expected Welcome, got Hello"));
  CHECK(got->rowSet.empty());
  CHECK(got->rowBucket == 0);
}

TEST_CASE("Hello carries a row set with its bucket size; a row set without one is malformed", "[wire][messages]") {
  HelloMsg sent = clientHello("client-3", 600);
  sent.rowSet = {3, 5, 0x81, 0x7f};
  sent.rowBucket = 16;
  auto got = parseHello(received(encode(sent)));
  REQUIRE(got.isOk());
  CHECK(got->rowSet == sent.rowSet);
  CHECK(got->rowBucket == 16);
  sent.rowBucket = 0;
  auto bad = parseHello(received(encode(sent)));
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == StatusCode::kMalformed);
  CHECK_THAT(bad.status().message(), Catch::Contains("row_bucket"));
  WelcomeMsg w;
  w.task = "t";
  w.sparseRows = true;
  auto welcome = parseWelcome(received(encode(w)));
  REQUIRE(welcome.isOk());
  CHECK(welcome->sparseRows);
  w.sparseRows = false;
  CHECK_FALSE(parseWelcome(received(encode(w)))->sparseRows);
}

TEST_CASE("Welcome round-trips, held and accepted rounds included", "[wire][messages]") {
  WelcomeMsg sent;
  sent.clientId = "client-1";
  sent.task = "fmnist";
  sent.modelSpec = "mlp:4-10";
  sent.hyper = HyperParameters{0.05f, 0.9f, 1e-4f, 32, 5, 10.0f, true, 99, 0.01f, 0.2f, 0.5f};
  sent.compression = CompressionSettings{"topk", 0.1f, "topk", 0.2f, true, true, 2.0f, true, 12};
  sent.compression->updateClipNorm = 0.75f;
  sent.compression->updateNoiseStd = 0.125f;
  sent.round = 7;
  sent.modelChecksum = 1234;
  sent.heartbeatMs = 1500;
  sent.lastAcceptedRound = 6;
  sent.rounds = 20;
  sent.initSeed = 5;
  sent.heldRounds = {7};
  sent.acceptedRounds = std::vector<uint64_t>{3, 5, 6};
  const std::vector<float> model = {1.0f, -2.0f, 3.5f};
  sent.model = denseView(model);

  const Message m = received(encode(sent));
  auto got = parseWelcome(m);
  REQUIRE(got.isOk());
  CHECK(got->clientId == sent.clientId);
  CHECK(got->task == sent.task);
  CHECK(got->modelSpec == sent.modelSpec);
  REQUIRE(got->hyper.has_value());
  CHECK(got->hyper->lr == 0.05f);
  CHECK(got->hyper->momentum == 0.9f);
  CHECK(got->hyper->weightDecay == 1e-4f);
  CHECK(got->hyper->batchSize == 32);
  CHECK(got->hyper->tau == 5);
  CHECK(got->hyper->clipNorm == 10.0f);
  CHECK(got->hyper->prioritySampling);
  CHECK(got->hyper->seed == 99);
  CHECK(got->hyper->proxMu == 0.01f);
  CHECK(got->hyper->overlap == 0.2f);
  CHECK(got->hyper->overlapMomentum == 0.5f);
  REQUIRE(got->compression.has_value());
  CHECK(got->compression->uplink == "topk");
  CHECK(got->compression->uplinkDensity == 0.1f);
  CHECK(got->compression->downlink == "topk");
  CHECK(got->compression->downlinkDensity == 0.2f);
  CHECK(got->compression->errorFeedback);
  CHECK(got->compression->fp16Values);
  CHECK(got->compression->errorCap == 2.0f);
  CHECK(got->compression->uplinkTernary);
  CHECK(got->compression->modelMantissaBits == 12);
  CHECK(got->compression->updateClipNorm == 0.75f);
  CHECK(got->compression->updateNoiseStd == 0.125f);
  CHECK(got->round == 7);
  CHECK(got->modelChecksum == 1234);
  CHECK(got->heartbeatMs == 1500);
  CHECK(got->lastAcceptedRound == 6);
  CHECK(got->rounds == 20);
  CHECK(got->initSeed == 5);
  CHECK(got->heldRounds == std::vector<uint64_t>{7});
  REQUIRE(got->acceptedRounds.has_value());
  CHECK(*got->acceptedRounds == std::vector<uint64_t>{3, 5, 6});
  REQUIRE(got->model.has_value());
  CHECK(got->model->encoding == compression::Encoding::kDense32);
  CHECK(got->model->count == 3);
  REQUIRE(got->model->values.size() == 3 * sizeof(float));
  CHECK(std::memcmp(got->model->values.data(), model.data(), sizeof(float) * 3) == 0);

  SECTION("a skeleton's Welcome: no compression, no accepted rounds, no model") {
    WelcomeMsg bare;
    bare.clientId = "c";
    bare.hyper = HyperParameters{};
    const Message m2 = received(encode(bare));
    auto g2 = parseWelcome(m2);
    REQUIRE(g2.isOk());
    CHECK(g2->hyper.has_value());
    CHECK_FALSE(g2->compression.has_value());
    CHECK_FALSE(g2->acceptedRounds.has_value());
    CHECK(g2->heldRounds.empty());
    CHECK_FALSE(g2->model.has_value());
  }
}

TEST_CASE("RoundAssign round-trips its broadcasts, model and values as views", "[wire][messages]") {
  const compression::Payload a = topK();
  compression::Payload b = topK();
  b.indexFormat = compression::IndexFormat::kRelative;
  b.scales = {0.5f, 0.25f};
  b.block = 256;
  RoundAssignMsg sent{9,
                      7,
                      5,
                      0.05f,
                      0.1f,
                      60'000,
                      {compression::viewOf(a), compression::viewOf(b)},
                      42,
                      std::nullopt,
                      compression::viewOf(a),
                      true};
  const Message m = received(encode(sent));
  auto got = parseRoundAssign(m);
  REQUIRE(got.isOk());
  CHECK(got->round == 9);
  CHECK(got->baseRound == 7);
  CHECK(got->tau == 5);
  CHECK(got->lr == 0.05f);
  CHECK(got->density == 0.1f);
  CHECK(got->deadlineMs == 60'000);
  REQUIRE(got->broadcast.size() == 2);
  CHECK(same(got->broadcast[0], a));
  CHECK(same(got->broadcast[1], b));
  CHECK(got->baseChecksum == 42);
  CHECK(got->evaluate);
  CHECK_FALSE(got->model.has_value());
  REQUIRE(got->values.has_value());
  CHECK(same(*got->values, a));
  CHECK(got->batchScale == 1.0f);  // absent: the Welcome's batch

  sent.batchScale = 0.375f;
  auto scaled = parseRoundAssign(received(encode(sent)));
  REQUIRE(scaled.isOk());
  CHECK(scaled->batchScale == 0.375f);
  sent.batchScale = -1.0f;
  auto negative = parseRoundAssign(received(encode(sent)));
  REQUIRE_FALSE(negative.isOk());
  CHECK_THAT(negative.status().message(), Catch::Contains("batch_scale -1 is not a positive number"));
}

TEST_CASE("Update round-trips; its delta is a view into the received message", "[wire][messages]") {
  const compression::Payload delta = topK();
  const UpdateMsg sent{4, 3, 600, 5, 2.5f, 1.5f, compression::viewOf(delta), 1200, {1.0, 0.5, 1e300, -2.25}};
  const Message m = received(encode(sent));
  auto got = parseUpdate(m);
  REQUIRE(got.isOk());
  CHECK(got->evalStats == sent.evalStats);
  CHECK(got->round == 4);
  CHECK(got->baseRound == 3);
  CHECK(got->examples == 600);
  CHECK(got->steps == 5);
  CHECK(got->lossStart == 2.5f);
  CHECK(got->lossEnd == 1.5f);
  CHECK(got->durationMs == 1200);
  REQUIRE(got->delta.has_value());
  CHECK(same(*got->delta, delta));
  CHECK(got->delta->values.data() != delta.values.data());  // points into the message
  CHECK_FALSE(got->members.has_value());  // absent: a relay's clients unchanged (or a client's update)
}

TEST_CASE("a relay's Update carries its clients and their row sets", "[wire][messages]") {
  const compression::Payload delta = topK();
  UpdateMsg sent{4, 3, 600, 5, 2.5f, 1.5f, compression::viewOf(delta), 1200, {}};
  sent.members = std::vector<MemberRowsMsg>{{"client-1", {0x03, 0x10, 0x22}, 4}, {"client-2", {}, 0}};
  auto got = parseUpdate(received(encode(sent)));
  REQUIRE(got.isOk());
  REQUIRE(got->members.has_value());
  CHECK(*got->members == *sent.members);
  // No clients at all is not the same as unchanged.
  sent.members = std::vector<MemberRowsMsg>{};
  auto none = parseUpdate(received(encode(sent)));
  REQUIRE(none.isOk());
  REQUIRE(none->members.has_value());
  CHECK(none->members->empty());
}

TEST_CASE("RoundResult, Heartbeat, Bye and Error round-trip", "[wire][messages]") {
  {
    const Message m = received(encode(RoundResultMsg{4, false, "too late"}));
    auto got = parseRoundResult(m);
    REQUIRE(got.isOk());
    CHECK(got->round == 4);
    CHECK_FALSE(got->accepted);
    CHECK(got->reason == "too late");
  }
  {
    const Message m = received(encode(HeartbeatMsg{123456}));
    auto got = parseHeartbeat(m);
    REQUIRE(got.isOk());
    CHECK(got->sentMs == 123456);
  }
  {
    const Message m = received(encode(ByeMsg{"training complete", true, {}}));
    auto got = parseBye(m);
    REQUIRE(got.isOk());
    CHECK(got->reason == "training complete");
    CHECK(got->done);
  }
  {
    const Message m = received(encode(ErrorMsg{fb::ErrorCode::Unsupported, "needs fedprox"}));
    auto got = parseError(m);
    REQUIRE(got.isOk());
    CHECK(got->code == fb::ErrorCode::Unsupported);
    CHECK(got->message == "needs fedprox");
  }
}

TEST_CASE("the statistics round's messages and Welcome's feature scaling round-trip", "[wire][messages]") {
  const StatsRequestMsg request{15'000, false};
  auto gotRequest = parseStatsRequest(received(encode(request)));
  REQUIRE(gotRequest.isOk());
  CHECK(gotRequest->deadlineMs == 15'000);
  CHECK_FALSE(gotRequest->categories);
  auto withCategories = parseStatsRequest(received(encode(StatsRequestMsg{9'000, true})));
  REQUIRE(withCategories.isOk());
  CHECK(withCategories->categories);

  FeatureStatsMsg stats;
  stats.examples = 400;
  stats.count = {400, 400, 400};
  stats.sum = {19.5, 2'190'659.25, -0.0232};
  stats.sumSquares = {187.75, 1.2e10, 1.3e-2};
  stats.sparse = true;
  const Message m = received(encode(stats));
  auto got = parseFeatureStats(m);
  REQUIRE(got.isOk());
  CHECK(got->examples == 400);
  CHECK(got->count == stats.count);
  CHECK(got->sum == stats.sum);  // doubles, bit for bit
  CHECK(got->sumSquares == stats.sumSquares);
  CHECK(got->sparse);
  CHECK_THAT(parseStatsRequest(m).status().message(), Catch::Contains("expected StatsRequest, got FeatureStats"));

  WelcomeMsg welcome;
  welcome.task = "scaled";
  CHECK(parseWelcome(received(encode(welcome)))->featureMean.empty());  // absent: no scaling
  CHECK(parseWelcome(received(encode(welcome)))->featureCentre);
  welcome.featureMean = {0.048, 5476.6};
  welcome.featureStd = {0.685, 1435.8};
  welcome.featureCentre = false;
  auto w = parseWelcome(received(encode(welcome)));
  REQUIRE(w.isOk());
  CHECK(w->featureMean == welcome.featureMean);
  CHECK(w->featureStd == welcome.featureStd);
  CHECK_FALSE(w->featureCentre);
  welcome.featureStd.pop_back();
  auto bad = parseWelcome(received(encode(welcome)));
  CHECK(bad.status().code() == StatusCode::kMalformed);
  CHECK_THAT(bad.status().message(), Catch::Contains("2 feature means and 1 standard deviations"));
}

TEST_CASE("category counts in FeatureStats and the vocabulary in Welcome round-trip", "[wire][messages]") {
  FeatureStatsMsg stats;
  stats.examples = 12;
  stats.count = {12};
  stats.sum = {3};
  stats.sumSquares = {5};
  CHECK(parseFeatureStats(received(encode(stats)))->categories.empty());  // absent: an older client
  stats.categories = {{"city", {"Bergen", "Oslo"}, {5, 7}}, {"browser", {}, {}}};
  auto got = parseFeatureStats(received(encode(stats)));
  REQUIRE(got.isOk());
  REQUIRE(got->categories.size() == 2);
  CHECK(got->categories[0].column == "city");
  CHECK(got->categories[0].values == std::vector<std::string>{"Bergen", "Oslo"});
  CHECK(got->categories[0].counts == std::vector<uint64_t>{5, 7});
  CHECK(got->categories[1].column == "browser");
  CHECK(got->categories[1].values.empty());
  stats.categories[0].counts.pop_back();
  CHECK_THAT(parseFeatureStats(received(encode(stats))).status().message(),
             Catch::Contains("FeatureStats: column 'city' has 2 values and 1 counts"));
  stats.categories = {{"", {"x"}, {1}}};
  CHECK_THAT(parseFeatureStats(received(encode(stats))).status().message(),
             Catch::Contains("a categorical column without a name"));

  WelcomeMsg welcome;
  welcome.task = "cities";
  CHECK(parseWelcome(received(encode(welcome)))->categoricalVocabulary.empty());
  welcome.categoricalVocabulary = {{"city", {"Bergen", "Oslo"}, {}}};
  auto w = parseWelcome(received(encode(welcome)));
  REQUIRE(w.isOk());
  REQUIRE(w->categoricalVocabulary.size() == 1);
  CHECK(w->categoricalVocabulary[0].column == "city");
  CHECK(w->categoricalVocabulary[0].values == std::vector<std::string>{"Bergen", "Oslo"});
}
