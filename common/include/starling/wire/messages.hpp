#pragma once
// The Starling messages as plain structs, each built (encode) and read (parse) here
// only: the client, the coordinator, the simulator and the tests all go through this
// module (common/wire/starling.fbs has the fields' meaning).
//
// Compressed tensors are compression::PayloadView: encode() reads the bytes they point
// to straight into the frame being built (the one copy a frame needs), and parse()
// returns views into the verified Message, valid while that Message is alive. Nothing
// model-sized is copied on the way.
//
// encode() returns a Frame (header + body, ready to write). parseX() reads a Message
// that Message::parse verified; kMalformed when it is of another type, or when a field
// the message cannot do without is absent (a tensor of an Update, a broadcast entry).
// Pure functions; thread-safe on distinct arguments.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "starling/compression/payload.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/frame.hpp"

namespace starling::wire {

// client -> coordinator: the first message of a connection.
struct HelloMsg {
  std::string clientId;  // informative; the coordinator trusts the certificate
  std::vector<std::string> capabilities;
  uint64_t numExamples = 0;
  std::string platform;        // e.g. "linux-x86_64"
  uint64_t lastRound = 0;      // the round whose model the client holds (0 = none)
  uint64_t modelChecksum = 0;  // its checksum (0 = none)
  // Sparse models: the buckets of rowBucket first-layer rows the client's data touches
  // (compression::encodeRowSet; empty: none sent, the client trains the whole model).
  std::vector<uint8_t> rowSet;
  uint32_t rowBucket = 0;
  std::string listen{};  // a relay: where its clients reach it ("" = not said)
};

// What this build of starling-client says in Hello: kClientCapabilities and the
// running system's platform (hostPlatform()).
HelloMsg clientHello(std::string clientId, uint64_t numExamples, uint64_t lastRound = 0, uint64_t modelChecksum = 0);

// "SYSNAME-MACHINE" of the running system as uname() reports them, lowercased
// ("linux-x86_64"); "unknown" when uname() fails.
std::string hostPlatform();

struct HyperParameters {
  float lr = 0;
  float momentum = 0;
  float weightDecay = 0;
  uint32_t batchSize = 0;
  uint32_t tau = 0;
  float clipNorm = 0;
  bool prioritySampling = false;
  uint64_t seed = 0;
  float proxMu = 0;
  float overlap = 0;          // Overlap Local-SGD's pull-back alpha (0 = off)
  float overlapMomentum = 0;  // its anchor momentum beta
};

struct CompressionSettings {
  std::string uplink;
  float uplinkDensity = 0;
  std::string downlink;
  float downlinkDensity = 0;
  bool errorFeedback = false;
  bool fp16Values = false;
  float errorCap = 0;
  bool uplinkTernary = false;
  uint8_t modelMantissaBits = 23;
  uint32_t qsgdLevels = 15;
  float memoryDecay = 1.0f;
  uint32_t memoryResetAfter = 0;
  float updateClipNorm = 0;  // differential privacy's clip of the message sent (0 = off)
  float updateNoiseStd = 0;  // distributed noise: the share added to the message sent (0 = off)
};

// One categorical column's values (wire CategoryValues): with their counts in
// FeatureStats, without (counts empty) in Welcome's vocabulary.
struct CategoryValuesMsg {
  std::string column;
  std::vector<std::string> values;
  std::vector<uint64_t> counts;
};

// coordinator -> client: the task.
struct WelcomeMsg {
  std::string clientId;
  std::string task;
  std::string modelSpec;
  std::optional<HyperParameters> hyper;            // absent: a walking-skeleton coordinator
  std::optional<CompressionSettings> compression;  // likewise
  uint64_t round = 0;
  std::optional<compression::PayloadView> model;
  uint64_t modelChecksum = 0;
  uint32_t heartbeatMs = 0;
  uint64_t lastAcceptedRound = 0;
  uint64_t rounds = 0;
  uint64_t initSeed = 0;
  // Settling a reconnecting client's pending updates (starling.fbs): the rounds the
  // coordinator still holds, and its last applied rounds (increasing). acceptedRounds
  // absent: a coordinator that names lastAcceptedRound only.
  std::vector<uint64_t> heldRounds;
  std::optional<std::vector<uint64_t>> acceptedRounds;
  // Feature scaling from the statistics round (empty: none); featureCentre false: divide only.
  std::vector<double> featureMean;
  std::vector<double> featureStd;
  bool featureCentre = true;
  // The categorical vocabulary of the statistics round (empty: none).
  std::vector<CategoryValuesMsg> categoricalVocabulary;
  // The coordinator took the client's row set: train the model of the covered rows.
  bool sparseRows = false;
};

// coordinator -> client, before Welcome: send your FeatureStats (task.standardize).
struct StatsRequestMsg {
  uint32_t deadlineMs = 0;
  bool categories = false;  // also the categorical columns' values (task.categorical-vocabulary)
};

// client -> coordinator: per feature over the training examples (data::FeatureSums).
struct FeatureStatsMsg {
  uint64_t examples = 0;
  std::vector<double> count;
  std::vector<double> sum;
  std::vector<double> sumSquares;
  bool sparse = false;  // the client's data is sparse (CSR)
  // Per categorical column, its values and their counts (empty: none sent).
  std::vector<CategoryValuesMsg> categories;
};

// A client placed on a relay (RoundAssign.placement).
struct PlacedClientMsg {
  std::string client;
  std::string relay;
  std::string address;
  friend bool operator==(const PlacedClientMsg&, const PlacedClientMsg&) = default;
};

// coordinator -> client: train this round.
struct RoundAssignMsg {
  uint64_t round = 0;
  uint64_t baseRound = 0;
  uint32_t tau = 0;
  float lr = 0;
  float density = 0;
  uint32_t deadlineMs = 0;
  std::vector<compression::PayloadView> broadcast;  // oldest first
  uint64_t baseChecksum = 0;
  std::optional<compression::PayloadView> model;   // a dense model replacing the client's
  std::optional<compression::PayloadView> values;  // catch-up by value
  bool evaluate = false;                           // send eval stats of the base model
  float batchScale = 1.0f;                         // minibatch = max(1, round(Welcome's x this))
  // To a relay: the placement of clients on relays (version 0 = none sent).
  std::vector<PlacedClientMsg> placement{};
  uint64_t placementVersion = 0;
};

// client -> coordinator: the result of a round.
// A relay's client and the rows it offered (Update.members).
struct MemberRowsMsg {
  std::string client;
  std::vector<uint8_t> rowSet;  // empty: none offered
  uint32_t rowBucket = 0;
  friend bool operator==(const MemberRowsMsg&, const MemberRowsMsg&) = default;
};

struct UpdateMsg {
  uint64_t round = 0;
  uint64_t baseRound = 0;
  uint64_t examples = 0;
  uint32_t steps = 0;
  float lossStart = 0;
  float lossEnd = 0;
  // Absent only in a malformed Update: the coordinator rejects it for its round.
  std::optional<compression::PayloadView> delta;
  uint32_t durationMs = 0;
  std::vector<double> evalStats;  // when the assignment asked (model::EvalStats::toVector)
  // A relay's clients and their row sets, when they changed since its last update.
  std::optional<std::vector<MemberRowsMsg>> members{};
};

struct RoundResultMsg {
  uint64_t round = 0;
  bool accepted = false;
  std::string reason;
};

struct HeartbeatMsg {
  uint64_t sentMs = 0;
};

struct ByeMsg {
  std::string reason;
  bool done = false;       // coordinator -> client: training is complete
  std::string redirect{};  // a relay -> client: train with this server (HOST:PORT) instead
};

struct ErrorMsg {
  fb::ErrorCode code = fb::ErrorCode::Unknown;
  std::string message;
};

// A dense fp32 tensor over `values` (not copied; valid while they are): what a
// coordinator sends as a whole model.
compression::PayloadView denseView(std::span<const float> values);

Frame encode(const HelloMsg& m);
Frame encode(const WelcomeMsg& m);
Frame encode(const RoundAssignMsg& m);
Frame encode(const UpdateMsg& m);
Frame encode(const RoundResultMsg& m);
Frame encode(const HeartbeatMsg& m);
Frame encode(const ByeMsg& m);
Frame encode(const ErrorMsg& m);
Frame encode(const StatsRequestMsg& m);
Frame encode(const FeatureStatsMsg& m);

Result<HelloMsg> parseHello(const Message& m);
Result<WelcomeMsg> parseWelcome(const Message& m);
Result<RoundAssignMsg> parseRoundAssign(const Message& m);
Result<UpdateMsg> parseUpdate(const Message& m);
Result<RoundResultMsg> parseRoundResult(const Message& m);
Result<HeartbeatMsg> parseHeartbeat(const Message& m);
Result<ByeMsg> parseBye(const Message& m);
Result<ErrorMsg> parseError(const Message& m);
Result<StatsRequestMsg> parseStatsRequest(const Message& m);
Result<FeatureStatsMsg> parseFeatureStats(const Message& m);

}  // namespace starling::wire
