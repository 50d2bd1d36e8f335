// runStrategy: the event loop of the simulated federation (see sim.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <list>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <unordered_map>

#include "starling/client/learner.hpp"
#include "starling/client/sparse_rows.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/coordinator/local_rounds.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/coordinator/sparse_rows.hpp"
#include "starling/coordinator/task.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/model.hpp"
#include "starling/model/row_view.hpp"
#include "starling/util/mix.hpp"
#include "starling/wire/messages.hpp"

#include "engine/statistics.hpp"
#include "engine/vocabulary.hpp"
#include "export.hpp"
#include "placement.hpp"  // sim.relay-placement
#include "ranks.hpp"
#include "sim.hpp"
#include "task.hpp"  // relay::downstreamTask

namespace starling::sim {
namespace {

using coordinator::Action;

std::string clientId(std::size_t i) {
  return fmt::format("sim-{:06d}", i);
}

std::size_t clientIndex(const std::string& id) {
  return static_cast<std::size_t>(std::stoull(id.substr(4)));
}

// Relays, as the coordinator knows them (their certificates' names).
std::string relayId(std::size_t r) {
  return fmt::format("relay-{:03d}", r);
}

std::size_t relayIndex(const std::string& id) {
  return static_cast<std::size_t>(std::stoull(id.substr(6)));
}

// The simulator's own randomness (dropouts) from its seed. (The clients' seeds are
// derived by client::Learner, from their identities, as a device's are.)
uint64_t mixSeed(uint64_t a, uint64_t b) {
  return mixSeeds(a, b);
}

struct Event {
  enum class Kind {
    kUpdateArrives,
    kDropOut,
    kRejoin,
    kWake,
    kOnline,
    kOffline,
    kUpdateLeaves,   // through a server link with a capacity: its place in the queue is taken now
    kRelayAssigned,  // a relay received the coordinator's assignment
    kRelayGivesUp,   // 90% of the coordinator's deadline passed
  };
  int64_t atUs = 0;
  uint64_t seq = 0;  // ties broken by insertion order: deterministic
  Kind kind = Kind::kWake;
  std::size_t client = 0;   // a client, or for kRelay* and a relay's updates, a relay
  uint64_t assignment = 0;  // kUpdate*, kDropOut, kRelay*: of the client's (relay's) assignment this many
  uint32_t node = 0;        // kWake: whose engine (0 = the coordinator, r + 1 = relay r)
  bool relay = false;       // kUpdate*: the update is relay `client`'s, to the coordinator
  bool operator>(const Event& o) const { return atUs != o.atUs ? atUs > o.atUs : seq > o.seq; }
};

// A relay: starling-relay's parts (its RoundEngine over its clients, its Learner towards
// the coordinator, the tally of its local rounds) and its links.
struct RelayState {
  std::unique_ptr<coordinator::RoundEngine> engine;
  std::unique_ptr<client::Learner> learner;  // holding mode, trains nothing: Learner::submit
  coordinator::LocalRoundsTally tally;
  // The coordinator's assignment as the relay reads it: the verified frame and the
  // message, whose payloads are views into it.
  struct Received {
    wire::Message frame;
    wire::RoundAssignMsg assign;
  };
  std::unique_ptr<Received> incoming;  // on its way
  std::unique_ptr<Received> working;   // the assignment its local rounds are for
  int64_t workingSinceUs = 0;
  uint64_t assignments = 0;
  std::optional<coordinator::IncomingUpdate> inFlight;
  uint64_t inFlightFrameBytes = 0;
  ServerLink in, out;  // its own link, towards it and from it
  // TierSettings::sparseRows: the union of its clients' rows as the coordinator keeps
  // it, its view, and the relay's whole model (the rows outside the view are its own).
  std::shared_ptr<const coordinator::ClientRowSet> rows;
  std::shared_ptr<const model::RowView> view;
  std::vector<float> full;
};

// What a run keeps of every client, idle or not (rank 0's event loop; tens of bytes
// each: docs/simulation.md, "A million clients").
struct Seat {
  uint64_t heldRound = 0;  // the model this client holds (as it would say in Hello)
  uint64_t heldChecksum = 0;
  uint64_t assignments = 0;  // events of an earlier assignment are stale
  int64_t backAtUs = 0;      // after a dropout: not back before this
  uint32_t windowCycle = 0;  // the availability trace's cursor: period and window
  uint32_t windowIndex = 0;
  uint16_t unsettled = 0;  // updates it trained whose verdict has not come (its Learner is kept)
  bool working = false;    // assigned, and neither arrived nor dropped yet
  bool away = false;       // not connected to the engine (dropped out or offline)
  bool online = true;      // inside an availability window (always, without a trace)
};
static_assert(sizeof(Seat) <= 48, "a seat per client: keep it small (docs/simulation.md, \"A million clients\")");

// A client's Learner and what goes with it, on the rank that trains it, for at most
// SimSettings::learnerClients clients (Run::useLearner).
struct Held {
  // Its local rounds, in the Learner's borrowed-base mode: the sampler's estimate, the
  // updates awaiting verdicts (a late one waits for the round that applies it while the
  // client trains the next) and its uplink memory (dropped, least recently used first,
  // past SimSettings::efClients).
  std::unique_ptr<client::Learner> learner;
  // Its held-out examples, copied out of the training set at its first evaluation and
  // kept (Model::evaluate reads a whole Dataset, not rows of one).
  std::optional<data::Dataset> heldOut;
  std::list<std::size_t>::iterator lru;  // while its Learner holds a memory or overlap state
  // Overlap Local-SGD: when the background steps after its last boundary end (virtual
  // microseconds; they ran at once, their time is charged here).
  int64_t backgroundDoneUs = 0;
};

// Sparse models (SimSettings::rowBucket): the rows a client offered, when the strategy
// took them (kept coded, as the coordinator keeps them), its compact model's task and its
// examples over those rows (made when it first joins; one process only).
struct Offer {
  std::shared_ptr<const coordinator::ClientRowSet> rows;
  std::shared_ptr<client::LearnerTask> compactTask;
  std::optional<data::Dataset> compactShard, compactHeldOut;
};

// An update on its way to the coordinator (rank 0).
struct InFlight {
  coordinator::IncomingUpdate update;
  uint64_t frameBytes = 0;
};

// Client i's side of one round: its Learner trained it (Run::trainClient).
struct ClientRound {
  data::Dataset shard;                         // its examples (empty when it trains a compact model)
  std::shared_ptr<const model::RowView> view;  // its rows, for a compact model
  std::shared_ptr<client::LearnerTask> task;
  const data::Dataset* heldOut = nullptr;  // evaluated on, when asked
  std::optional<client::LocalUpdate> update;
  uint64_t probe = 0;  // the loss probe's examples
  int64_t computeUs = 0;
};

// Under MPI: an assignment whose training waits for the end of its batch of actions
// (Run::flush), with what its event needs to be queued as if trained at once.
struct TrainJob {
  std::size_t client = 0;
  uint64_t seq = 0;  // the event's place, taken when it was assigned
  uint64_t assignment = 0;
  int64_t atUs = 0, downUs = 0;
  wire::Frame frame;  // the RoundAssign frame the client reads
};

// The kinds of rank 0's messages to the others (Run::flush, Run::serve).
enum class RankMessage : uint8_t { kTrain = 1, kDone = 2 };
// A kTrain batch's verdict records (client, round, accepted 0 or 1) and evictions (client,
// 0, kEvict: Run::useLearner), in the order rank 0 made them.
constexpr uint8_t kEvict = 2;

class Run {
 public:
  // ranks: null or one rank: every client trains here, as assigned. More: rank 0 runs
  // the engine and trains its share, the others only train theirs (Run::serve).
  Run(const Fleet& fleet, const Strategy& strategy, Ranks* ranks)
      : fleet_(fleet), strategy_(strategy), ranks_(ranks && ranks->size() > 1 ? ranks : nullptr) {}

  Result<StrategyResult> go(const std::function<void(const RoundRow&)>& onRound);

 private:
  // The actions of node `node`'s engine (0 = the coordinator, r + 1 = relay r).
  Status perform(std::vector<Action> actions, uint32_t node = 0);
  Status performActions(std::vector<Action> actions, uint32_t node);
  Status assign(std::size_t i, const coordinator::Assignment& a, uint32_t node);
  // Relays: the coordinator's assignment goes down to relay r; it arrives (adopt, local
  // rounds); the local rounds are done (the update up) or given up.
  Status assignRelay(std::size_t r, const coordinator::Assignment& a);
  Status relayAssigned(std::size_t r);
  // The relays' engines and Learners, from the coordinator's Welcome as starling-relay
  // makes them; `initial` is the round-0 model.
  Status setUpRelays(std::span<const float> initial);
  Status relayCheckHeld(std::size_t r);
  // Relay r sends nothing for its assignment: like starling-relay it says goodbye and
  // joins again, ready for the next.
  Status relayQuiet(std::size_t r, const std::string& reason);
  // Client i's one-way latency to its server: its own, or under a relay
  // TierSettings::clientLatencyMs when set (a relay near its clients).
  double latencyMs(std::size_t client) const {
    return !relays_.empty() && tiers_.clientLatencyMs > 0 ? tiers_.clientLatencyMs : fleet_.clients()[client].latencyMs;
  }
  uint32_t nodeOf(std::size_t client) const { return relays_.empty() ? 0 : 1 + relayOfClient_[client]; }
  coordinator::RoundEngine& engineOf(uint32_t node) { return node == 0 ? *engine_ : *relays_[node - 1].engine; }
  const std::shared_ptr<client::LearnerTask>& taskOf(uint32_t node) const { return node == 0 ? task_ : relayTask_; }
  ServerLink& linkIn(uint32_t node) { return node == 0 ? coordinatorIn_ : relays_[node - 1].in; }
  ServerLink& linkOut(uint32_t node) { return node == 0 ? coordinatorOut_ : relays_[node - 1].out; }
  // When a message of `bytes` that leaves at startUs arrives: its own link (mbps,
  // latency) and the server links it passes, which it occupies in turn (ServerLink).
  int64_t transfer(uint64_t bytes, int64_t startUs, double mbps, double latencyMs, ServerLink* a,
                   ServerLink* b = nullptr);
  // The coordinator's (or a relay's) view of an update, as it reads it from the frame.
  Status incoming(const client::LocalUpdate& update, uint32_t durationMs, const model::RowView* view,
                  coordinator::IncomingUpdate& in) const;
  // Sparse models: client i's offer of its rows (SimSettings::rowBucket) and, when the
  // strategy takes it, the view, task and data of its compact model (once).
  Status offerRows(std::size_t i);
  void countBytes(uint32_t node, bool up, uint64_t bytes) {
    (node == 0 ? (up ? roundUp_ : roundDown_) : (up ? edgeUp_ : edgeDown_)) += bytes;
    totalBytes_ += bytes;
  }
  // Client i trains the round `a` assigns (the message a device would read) from the
  // engine's model, which it holds once caught up.
  Status train(std::size_t i, const wire::RoundAssignMsg& a, int64_t downUs);
  // Client i's Learner trains the round `a` assigns from `engineModel` (the model of
  // its server's engine), on whichever rank owns it.
  Result<ClientRound> trainClient(std::size_t i, const wire::RoundAssignMsg& a, std::span<const float> engineModel);
  // Everything up to the event loop, alike on every rank.
  Status setUp();
  // Under MPI: trains the batch's jobs_ on their ranks, all at once, then queues their
  // updates in the order they were assigned.
  Status flush();
  // A rank other than 0: trains what rank 0 sends until it says the run is done.
  Status serve();
  // The update a client sent, as rank 0 reads it from the frame.
  Status received(const TrainJob& job, int64_t computeUs, std::span<const uint8_t> frame);
  // Its client's Update frame, and the compute time of its round.
  Result<std::pair<int64_t, wire::Frame>> trainJob(std::size_t i, std::span<const uint8_t> assignFrame,
                                                   std::span<const float> engineModel);
  // Client i is about to train with error feedback or overlap: its model-sized state
  // (uplink memory, overlap's local model and anchor) becomes the most recently used; a
  // client without it gets room, the least recently used state with nothing pending
  // dropped when efClients hold one.
  void useMemory(std::size_t i);
  // Rank 0: client i is about to train; its Learner becomes the most recently trained,
  // and past SimSettings::learnerClients the least recently trained with nothing
  // unsettled is evicted (on its rank: Run::evict, or with the next batch to it).
  void useLearner(std::size_t i);
  // Client i's Learner and what goes with it are dropped, here.
  void evict(std::size_t i);
  void settle(std::size_t i, uint64_t round, bool accepted);
  // The rows client i offered and the strategy took (sim.row-bucket), or null.
  std::shared_ptr<const coordinator::ClientRowSet> rowsOf(std::size_t i) const {
    auto it = offers_.find(i);
    return it == offers_.end() ? nullptr : it->second.rows;
  }
  // Rank 0: a verdict (or an update lost before it was sent) for client i.
  void verdict(std::size_t i, uint64_t round, bool accepted) {
    if (i < seats_.size() && seats_[i].unsettled > 0) --seats_[i].unsettled;
    settle(i, round, accepted);
  }
  void push(int64_t atUs, Event::Kind kind, std::size_t client, uint64_t assignment = 0, uint32_t node = 0,
            bool relay = false, std::optional<uint64_t> seq = std::nullopt) {
    Event e;
    e.atUs = atUs;
    e.seq = seq ? *seq : seq_++;
    e.kind = kind;
    e.client = client;
    e.assignment = assignment;
    e.node = node;
    e.relay = relay;
    queue_.push(e);
  }
  // The availability trace: schedules client i's next window (none when the trace has
  // no more), and its microseconds from the start.
  void scheduleWindow(std::size_t i);
  int64_t windowMicros(const Seat& c, double seconds) const {
    return static_cast<int64_t>(std::llround((double(c.windowCycle) * s().availabilityPeriodS + seconds) * 1e6));
  }
  Status join(std::size_t i);
  int64_t nowMs() const { return nowUs_ / 1000; }
  // task.standardize, task.categorical-vocabulary: the statistics round over the
  // clients' training examples (the daemon's parts: client::shardStatistics,
  // coordinator::mergeFeatureSums, mergeCategoryCounts), then the training and test sets
  // re-encoded and scaled with its result. It takes no virtual time.
  Status statisticsRound();
  // The data the clients train on and the coordinator evaluates on: the fleet's, or
  // their scaled copies (statisticsRound).
  const data::Dataset& train() const { return scaledTrain_ ? *scaledTrain_ : fleet_.train(); }
  const data::Dataset& test() const { return scaledTest_ ? *scaledTest_ : fleet_.test(); }

  const Fleet& fleet_;
  Strategy strategy_;       // a copy: an imported round-0 model turns clientsInitialize off
  Ranks* ranks_ = nullptr;  // set only with more than one rank
  std::vector<TrainJob> jobs_;
  std::vector<ByteWriter> settles_;  // per rank: verdicts not yet sent with a batch
  const SimSettings& s() const { return fleet_.settings(); }
  std::unique_ptr<coordinator::RoundEngine> engine_;
  std::optional<model::Model> evalModel_;
  std::shared_ptr<const model::Model> rowsModel_;  // sparse models: the clients' views are of it
  // The task every client's Welcome describes (coordinator::taskWelcome), shared by
  // their Learners: the model each round's Trainer copies, the uplink compressor.
  std::shared_ptr<client::LearnerTask> task_;
  wire::WelcomeMsg welcome_, relayWelcome_;  // the Welcome of the coordinator's clients and of the relays'
  // Rank 0 (or the one process): every client's seat, made when the event loop starts.
  std::vector<Seat> seats_;
  std::unordered_map<std::size_t, Held> held_;        // this rank's clients holding a Learner
  std::unordered_map<std::size_t, Offer> offers_;     // clients that offered rows (sim.row-bucket)
  std::unordered_map<std::size_t, InFlight> flying_;  // rank 0: updates on their way
  std::list<std::size_t> lru_;                        // clients holding memory, most recent first
  // Rank 0: the clients holding a Learner, on whichever rank, most recently trained first.
  std::list<std::size_t> learnerLru_;
  std::unordered_map<std::size_t, std::list<std::size_t>::iterator> learnerAt_;
  std::size_t withMemory_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  int64_t nowUs_ = 0;
  std::mt19937_64 rng_;
  uint64_t roundUp_ = 0, roundDown_ = 0, totalBytes_ = 0;
  uint64_t edgeUp_ = 0, edgeDown_ = 0;  // between relays and their clients, this round
  // Tiers: the relays, their clients' task (relay::downstreamTask's), the coordinator's link.
  TierSettings tiers_;
  std::vector<RelayState> relays_;
  std::vector<uint32_t> relayOfClient_;  // TierSettings::placement
  // Relays: which relay each client is under; with sparse rows, each relay's rows.
  Status placeClients();
  Status sparseRelay(std::size_t r);
  std::shared_ptr<client::LearnerTask> relayTask_;
  const data::Dataset noData_;  // a relay's: its clients hold the data
  ServerLink coordinatorIn_, coordinatorOut_;
  uint32_t roundDropped_ = 0;
  bool finished_ = false;
  StrategyResult result_;
  std::function<void(const RoundRow&)> onRound_;
  std::unique_ptr<RunExport> export_;  // SimSettings::exportDir
  client::Attack attack_;              // SimSettings::attack
  std::optional<data::Dataset> scaledTrain_, scaledTest_;
};

Status Run::statisticsRound() {
  const coordinator::TaskConfig& t = strategy_.task;
  std::map<std::string, data::FeatureSums> sums;  // by id, as the daemon merges them
  std::map<std::string, data::CategoryCounts> categories;
  for (std::size_t i = 0; i < fleet_.clients().size(); ++i) {
    const auto& c = fleet_.clients()[i];
    if (c.examples.empty()) continue;  // never joins
    if (t.statsClients > 0 && sums.size() >= t.statsClients) break;
    const wire::FeatureStatsMsg m = client::shardStatistics(fleet_.train().subset(c.examples), t.categoricalVocabulary);
    data::FeatureSums s = coordinator::featureSumsOf(m);
    STARLING_RETURN_IF_ERROR(coordinator::checkFeatureSums(s, evalModel_->inputDim()).withContext(clientId(i)));
    if (t.categoricalVocabulary) {
      auto counts = coordinator::categoryCountsOf(m.categories);
      if (!counts) return counts.status().withContext(clientId(i));
      STARLING_RETURN_IF_ERROR(coordinator::checkCategoryCounts(*counts, data::splitList(t.categorical), m.examples)
                                   .withContext(clientId(i)));
      categories.emplace(clientId(i), std::move(*counts));
    }
    sums.emplace(clientId(i), std::move(s));
  }
  // The daemon's order: the vocabulary first, then the scaling.
  data::Dataset train = fleet_.train(), test = fleet_.test();
  if (t.categoricalVocabulary) {
    auto merged = coordinator::mergeCategoryCounts(
        categories, coordinator::VocabularyOptions{t.vocabularyMinCount, t.categoricalBuckets - std::size_t{1}});
    if (!merged) return merged.status().withContext("statistics round");
    result_.vocabulary = coordinator::vocabularyValues(*merged);
    auto recodedTrain = data::recodeCategories(train, result_.vocabulary);
    if (!recodedTrain) return recodedTrain.status().withContext("training data");
    auto recodedTest = data::recodeCategories(test, result_.vocabulary);
    if (!recodedTest) return recodedTest.status().withContext("test data");
    train = std::move(*recodedTrain);
    test = std::move(*recodedTest);
  }
  if (t.standardize) {
    auto merged = coordinator::mergeFeatureSums(sums);
    if (!merged) return merged.status().withContext("statistics round");
    auto scaledTrain = data::scaleFeatures(train, merged->scaling);
    if (!scaledTrain) return scaledTrain.status().withContext("training data");
    auto scaledTest = data::scaleFeatures(test, merged->scaling);
    if (!scaledTest) return scaledTest.status().withContext("test data");
    train = std::move(*scaledTrain);
    test = std::move(*scaledTest);
    result_.scaling = merged->scaling;
  }
  result_.statsClients = static_cast<uint32_t>(sums.size());
  result_.statsExamples = 0;
  for (const auto& [id, s] : sums)
    result_.statsExamples += s.examples;
  scaledTrain_.emplace(std::move(train));
  scaledTest_.emplace(std::move(test));
  return Status::ok();
}

void Run::useMemory(std::size_t i) {
  Held& c = held_[i];
  if (c.learner->holdsMemory() || c.learner->holdsOverlap()) {
    lru_.erase(c.lru);
  } else {
    if (withMemory_ >= s().efClients) {
      for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
        client::Learner& old = *held_[*it].learner;
        if ((old.holdsMemory() && !old.memoryDroppable()) || (old.holdsOverlap() && !old.overlapDroppable())) continue;
        old.dropMemory();
        old.dropOverlap();  // its next round restarts from the model
        lru_.erase(std::next(it).base());
        --withMemory_;
        break;
      }
    }
    ++withMemory_;
  }
  lru_.push_front(i);
  c.lru = lru_.begin();
}

void Run::settle(std::size_t i, uint64_t round, bool accepted) {
  if (ranks_ && ranks_->rank() == 0 && ranks_->ownerOf(i) != 0) {  // it reaches the owner before its next round
    ByteWriter& w = settles_[static_cast<std::size_t>(ranks_->ownerOf(i))];
    w.put<uint64_t>(i);
    w.put<uint64_t>(round);
    w.put<uint8_t>(accepted ? 1 : 0);
    return;
  }
  auto it = held_.find(i);
  if (it == held_.end() || round == 0 || !it->second.learner) return;
  it->second.learner->settle(round, accepted);
}

void Run::useLearner(std::size_t i) {
  if (auto at = learnerAt_.find(i); at != learnerAt_.end()) {
    learnerLru_.erase(at->second);
  } else if (learnerAt_.size() >= s().learnerClients) {
    for (auto it = learnerLru_.rbegin(); it != learnerLru_.rend(); ++it) {
      const std::size_t j = *it;
      const Seat& seat = seats_[j];
      if (seat.unsettled > 0 || seat.working || flying_.count(j) > 0) continue;
      learnerLru_.erase(std::next(it).base());
      learnerAt_.erase(j);
      if (ranks_ && ranks_->ownerOf(j) != 0) {  // dropped on its rank before its next batch trains
        ByteWriter& w = settles_[static_cast<std::size_t>(ranks_->ownerOf(j))];
        w.put<uint64_t>(j);
        w.put<uint64_t>(0);
        w.put<uint8_t>(kEvict);
      } else {
        evict(j);
      }
      break;
    }
  }
  learnerLru_.push_front(i);
  learnerAt_[i] = learnerLru_.begin();
}

void Run::evict(std::size_t i) {
  auto it = held_.find(i);
  if (it == held_.end()) return;
  Held& h = it->second;
  if (h.learner && (h.learner->holdsMemory() || h.learner->holdsOverlap())) {
    lru_.erase(h.lru);
    --withMemory_;
  }
  held_.erase(it);
}

Result<ClientRound> Run::trainClient(std::size_t i, const wire::RoundAssignMsg& a, std::span<const float> engineModel) {
  const Fleet::Client& fc = fleet_.clients()[i];
  Held& c = held_[i];
  const auto offered = offers_.find(i);
  const Offer* offer = offered == offers_.end() ? nullptr : &offered->second;
  ClientRound r;
  // A client with rows trains its compact model over its examples' rows, from the view
  // of the engine's model.
  r.view = offer && offer->rows ? offer->rows->view() : nullptr;
  const std::shared_ptr<const model::RowView>& view = r.view;
  // Hostile clients (SimSettings::attack): the attack of this client in this round.
  const bool hostile =
      attack_.kind != client::Attack::Kind::kNone && s().attackers > 0 &&
      double(mix64(mixSeeds(s().seed ^ 0xa77ac3e5ull, s().attackVarying ? mixSeeds(i, a.round) : i)) >> 11) *
              0x1.0p-53 <
          s().attackers;
  if (!view) {
    r.shard = train().subset(fc.examples);
    if (hostile && attack_.kind == client::Attack::Kind::kLabelFlip) r.shard.flipLabels();
  } else if (hostile && attack_.kind == client::Attack::Kind::kLabelFlip) {
    return Status(StatusCode::kInvalidArgument, "sim.attack label-flip does not combine with sim.row-bucket");
  }
  const data::Dataset& shard = r.shard;
  const uint32_t node = nodeOf(i);
  r.task = view ? offer->compactTask : taskOf(node);
  const std::shared_ptr<client::LearnerTask>& task = r.task;
  if (!c.learner) {
    client::LearnerOptions lo{client::clientSeed(0, clientId(i))};
    lo.batchLog = export_ ? export_->batchLog() : nullptr;
    // Distributed noise from a seeded source: the simulator's runs are reproducible.
    lo.noiseSeed = mixSeeds(s().seed ^ 0x6e6f697365ull, i);  // "noise"
    c.learner = std::make_unique<client::Learner>(task, lo);
  }
  c.learner->setAttack(hostile ? attack_ : client::Attack{});
  const bool overlap = task->overlap() > 0;
  if (task->errorFeedback() || overlap) useMemory(i);
  const data::Dataset* heldOut = nullptr;
  if (view) {
    heldOut = a.evaluate && offer->compactHeldOut ? &*offer->compactHeldOut : nullptr;
  } else if (a.evaluate && !fc.heldOut.empty()) {
    if (!c.heldOut) c.heldOut.emplace(train().subset(fc.heldOut));
    heldOut = &*c.heldOut;
  }
  const std::vector<float> viewBase = view ? view->gather(engineModel) : std::vector<float>();
  auto update = view ? c.learner->train(a, viewBase, *offer->compactShard, heldOut)
                     : c.learner->train(a, engineModel, shard, heldOut);
  if (!update) return update.status().withContext(fmt::format("client {} training round {}", i, a.round));
  const client::TrainStats& stats = update->stats;
  if (export_)
    STARLING_RETURN_IF_ERROR(
        export_->recordUpdate(a.round, i, static_cast<uint32_t>(stats.steps),
                              static_cast<uint32_t>(stats.steps > 0 ? stats.examples / uint64_t(stats.steps)
                                                                    : uint64_t(task->trainerOptions().batchSize)),
                              stats.examples, a.lr, update->compressionSeed, update->payload.byteSize()));

  // Cost model: minibatches forward and backward, the sampler's and the loss probe's
  // forward passes.
  const uint64_t probe = std::min<uint64_t>(uint64_t(task->trainerOptions().lossProbe), fc.examples.size());
  const double seconds =
      computeSeconds(fleet_.flopsPerExample(), stats.examples,
                     stats.scoredExamples + 2 * probe + (heldOut ? heldOut->size() : 0), fc.flopsPerSecond);
  r.computeUs = static_cast<int64_t>(std::llround(seconds * 1e6));
  r.heldOut = heldOut;
  r.probe = probe;
  r.update.emplace(std::move(*update));
  return r;
}

Status Run::train(std::size_t i, const wire::RoundAssignMsg& a, int64_t downUs) {
  auto r = trainClient(i, a, engineOf(nodeOf(i)).model());
  if (!r) return r.status();
  const Fleet::Client& fc = fleet_.clients()[i];
  Held& c = held_[i];
  const Seat& seat = seats_[i];
  const uint32_t node = nodeOf(i);
  const std::shared_ptr<const model::RowView>& view = r->view;
  const data::Dataset& shard = r->shard;
  const data::Dataset* heldOut = r->heldOut;
  const uint64_t probe = r->probe;
  const int64_t computeUs = r->computeUs;
  const client::LocalUpdate* update = &*r->update;
  const bool overlap = r->task->overlap() > 0;
  // When the update leaves: after the assignment arrived and the steps ran. With overlap
  // (docs/simulation.md) the steps of a continuing client ran in the background since its
  // last update left, so it leaves at max(assignment arrived, background done) (plus the
  // evaluation, if asked), and the next tau steps start then.
  int64_t leavesUs = nowUs_ + downUs + computeUs;
  if (update->overlapped) {
    const double evalSeconds =
        heldOut ? computeSeconds(fleet_.flopsPerExample(), 0, heldOut->size(), fc.flopsPerSecond) : 0.0;
    leavesUs = std::max(nowUs_ + downUs, c.backgroundDoneUs) + static_cast<int64_t>(std::llround(evalSeconds * 1e6));
  }
  if (overlap) {
    auto next = c.learner->advance(view ? *offers_.at(i).compactShard : shard);
    if (!next) return next.status().withContext(fmt::format("client {} training after round {}", i, a.round));
    const double nextSeconds =
        computeSeconds(fleet_.flopsPerExample(), next->examples, next->scoredExamples + 2 * probe, fc.flopsPerSecond);
    c.backgroundDoneUs = leavesUs + static_cast<int64_t>(std::llround(nextSeconds * 1e6));
  }

  wire::UpdateMsg message = update->message();
  message.durationMs = static_cast<uint32_t>(computeUs / 1000);
  const uint64_t frameBytes = wire::encode(message).size();
  coordinator::IncomingUpdate in;
  STARLING_RETURN_IF_ERROR(incoming(*update, static_cast<uint32_t>(computeUs / 1000), view.get(), in));
  flying_[i] = InFlight{std::move(in), frameBytes};
  if (linkIn(node).mbps > 0)  // its place in the server link's queue is taken when it leaves
    push(leavesUs, Event::Kind::kUpdateLeaves, i, seat.assignments);
  else
    push(leavesUs + linkMicros(frameBytes, fc.uplinkMbps, latencyMs(i)), Event::Kind::kUpdateArrives, i,
         seat.assignments);
  return Status::ok();
}

Status Run::incoming(const client::LocalUpdate& update, uint32_t durationMs, const model::RowView* view,
                     coordinator::IncomingUpdate& in) const {
  const client::TrainStats& stats = update.stats;
  in.round = update.round;
  in.baseRound = update.baseRound;
  in.examples = stats.examples;
  in.steps = static_cast<uint32_t>(stats.steps);
  in.lossStart = static_cast<float>(stats.lossStart);
  in.lossEnd = static_cast<float>(stats.lossEnd);
  in.durationMs = std::max<uint32_t>(1, durationMs);
  // As the coordinator reads it from the frame.
  STARLING_RETURN_IF_ERROR(coordinator::decodeUpdate(compression::viewOf(update.payload), view,
                                                     static_cast<uint32_t>(engine_->model().size()), in.delta));
  in.bytesWire = update.payload.byteSize();
  in.evalStats = update.evalStats;
  return Status::ok();
}

int64_t Run::transfer(uint64_t bytes, int64_t startUs, double mbps, double latencyMs, ServerLink* a, ServerLink* b) {
  return transferMicros(bytes, startUs, mbps, latencyMs, a, b);
}

Status Run::assign(std::size_t i, const coordinator::Assignment& a, uint32_t node) {
  Seat& c = seats_[i];
  const wire::RoundAssignMsg message =
      coordinator::assignmentMessage(a, static_cast<uint32_t>(std::max<int64_t>(0, a.deadlineMs - nowMs())));
  wire::Frame frame = wire::encode(message);
  countBytes(node, false, frame.size());
  const Fleet::Client& fc = fleet_.clients()[i];
  const int64_t downUs = transfer(frame.size(), nowUs_, fc.downlinkMbps, latencyMs(i), &linkOut(node)) - nowUs_;
  ++c.assignments;
  c.working = true;
  c.heldRound = a.baseRound;
  c.heldChecksum = a.baseChecksum;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double drop = unit(rng_), when = unit(rng_);
  if (drop < s().dropout) {
    // It drops somewhere between receiving the assignment and finishing its work.
    const double work = computeSeconds(fleet_.flopsPerExample(),
                                       static_cast<uint64_t>(double(a.tau) * strategy_.task.batchSize * a.batchScale),
                                       0, fc.flopsPerSecond);
    push(nowUs_ + static_cast<int64_t>(when * (double(downUs) + work * 1e6)), Event::Kind::kDropOut, i, c.assignments);
    return Status::ok();
  }
  // It trains (now, or with its batch on its rank): its Learner is kept until the verdict.
  useLearner(i);
  ++c.unsettled;
  if (ranks_) {  // trained with the rest of the batch; its event keeps its place
    TrainJob job;
    job.client = i;
    job.seq = seq_++;
    job.assignment = c.assignments;
    job.atUs = nowUs_;
    job.downUs = downUs;
    job.frame = std::move(frame);
    jobs_.push_back(std::move(job));
    return Status::ok();
  }
  return train(i, message, downUs);
}

Status Run::assignRelay(std::size_t r, const coordinator::Assignment& a) {
  RelayState& relay = relays_[r];
  const wire::RoundAssignMsg message =
      coordinator::assignmentMessage(a, static_cast<uint32_t>(std::max<int64_t>(0, a.deadlineMs - nowMs())));
  const wire::Frame frame = wire::encode(message);
  countBytes(0, false, frame.size());
  const int64_t arrivesUs =
      transfer(frame.size(), nowUs_, tiers_.downlinkMbps, tiers_.latencyMs, &coordinatorOut_, &relay.in);
  // The relay reads the frame, as starling-relay does: nothing of the engine's memory
  // (which changes before the frame arrives) is shared with it.
  const std::span<const uint8_t> bytes = frame.bytes();
  auto verified = wire::Message::parse({bytes.begin() + wire::kFrameHeaderBytes, bytes.end()});
  if (!verified) return verified.status().withContext(fmt::format("the assignment to {}", relayId(r)));
  auto received = std::make_unique<RelayState::Received>(RelayState::Received{std::move(*verified), {}});
  auto parsed = wire::parseRoundAssign(received->frame);
  if (!parsed) return parsed.status().withContext(fmt::format("the assignment to {}", relayId(r)));
  received->assign = std::move(*parsed);
  relay.incoming = std::move(received);
  push(arrivesUs, Event::Kind::kRelayAssigned, r, ++relay.assignments);
  return Status::ok();
}

Status Run::setUpRelays(std::span<const float> initial) {
  const Strategy& dc = strategy_;
  if (coordinator::needsStatisticsRound(dc.task))
    return Status(StatusCode::kUnsupported,
                  "relays do not pass statistics rounds on (task.standardize, task.categorical-vocabulary)");
  if (!s().exportDir.empty())
    return Status(StatusCode::kUnsupported, "sim.export-dir records a flat federation: not with relays");
  if (tiers_.relays > fleet_.clients().size())
    return Status(StatusCode::kInvalidArgument, fmt::format("{} relays for {} clients: at most one relay per client",
                                                            tiers_.relays, fleet_.clients().size()));
  relay::RelayRounds rounds;
  rounds.clientsPerRound = tiers_.clientsPerRound;
  rounds.overSelection = tiers_.overSelection;
  rounds.minClients = tiers_.minClients;
  rounds.deadlineMs = tiers_.deadlineMs > 0 ? tiers_.deadlineMs : dc.engine.deadlineMs;
  rounds.localRounds = tiers_.localRounds;
  const wire::WelcomeMsg welcome = coordinator::taskWelcome(dc.engine, dc.task);
  auto downstream = relay::downstreamTask(welcome, rounds);
  if (!downstream) return downstream.status().withContext("the relays' task");
  relayWelcome_ = coordinator::taskWelcome(downstream->first, downstream->second);
  auto task = client::LearnerTask::create(relayWelcome_);
  if (!task) return task.status().withContext("the relays' clients' task");
  relayTask_ = std::move(*task);
  relays_.resize(tiers_.relays);
  for (std::size_t r = 0; r < relays_.size(); ++r) {
    RelayState& relay = relays_[r];
    auto engine = coordinator::RoundEngine::create(downstream->first, {initial.begin(), initial.end()});
    if (!engine) return engine.status().withContext(relayId(r));
    relay.engine = std::move(*engine);
    relay.engine->holdAfter(0);  // Federation::holdForUpstream: no round before the coordinator's model
    client::LearnerOptions lo{client::clientSeed(0, relayId(r))};
    lo.trains = false;
    relay.learner = std::make_unique<client::Learner>(lo, nullptr);
    STARLING_RETURN_IF_ERROR(relay.learner->welcome(welcome, noData_).withContext(relayId(r)));
    relay.in.mbps = relay.out.mbps = tiers_.linkMbps;
  }
  STARLING_RETURN_IF_ERROR(placeClients());
  if (tiers_.sparseRows)
    for (std::size_t r = 0; r < relays_.size(); ++r) {
      relays_[r].full.assign(initial.begin(), initial.end());
      STARLING_RETURN_IF_ERROR(sparseRelay(r));
    }
  return Status::ok();
}

Status Run::placeClients() {
  const std::size_t n = fleet_.clients().size();
  relayOfClient_.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    relayOfClient_[i] = static_cast<uint32_t>(i % relays_.size());
  if (tiers_.placement == "mod") return Status::ok();
  coordinator::RelayPlacementOptions options;
  options.relays = static_cast<uint32_t>(relays_.size());
  if (tiers_.placement == "metis")
    options.method = coordinator::RelayMethod::kMetis;
  else if (tiers_.placement == "random")
    options.method = coordinator::RelayMethod::kRandom;
  else
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("sim.relay-placement is '{}': mod, metis or random", tiers_.placement));
  if (s().rowBucket == 0)
    return Status(StatusCode::kInvalidArgument,
                  "sim.relay-placement " + tiers_.placement + " places clients by their rows: set sim.row-bucket");
  // The clients with data and a row set; the others stay under relay i mod R.
  std::vector<coordinator::ClientRows> clients;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    if (fleet_.clients()[i].examples.empty()) continue;
    STARLING_RETURN_IF_ERROR(offerRows(i));
    if (!rowsOf(i)) continue;
    auto view = rowsOf(i)->view();
    clients.push_back({clientId(i), std::vector<uint32_t>(view->rows().begin(), view->rows().end())});
    index.push_back(i);
  }
  auto placed = coordinator::placeClients(clients, evalModel_->inputDim(), options);
  if (!placed) return placed.status().withContext("sim.relay-placement");
  for (std::size_t k = 0; k < index.size(); ++k)
    relayOfClient_[index[k]] = placed->relayOf[k];
  result_.placementSeconds = placed->seconds;
  return Status::ok();
}

Status Run::sparseRelay(std::size_t r) {
  if (s().rowBucket == 0)
    return Status(StatusCode::kInvalidArgument, "sim.relay-sparse-rows needs clients that offer rows: sim.row-bucket");
  RelayState& relay = relays_[r];
  std::vector<uint32_t> all;
  for (std::size_t i = 0; i < fleet_.clients().size(); ++i) {
    if (relayOfClient_[i] != r || fleet_.clients()[i].examples.empty()) continue;
    STARLING_RETURN_IF_ERROR(offerRows(i));
    if (!rowsOf(i)) return Status::ok();  // a client of the whole model: the relay trains it all
    auto view = rowsOf(i)->view();
    all.insert(all.end(), view->rows().begin(), view->rows().end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (all.empty()) return Status::ok();
  // As starling-relay offers them: buckets of 1, in its Hello.
  const auto inputs = static_cast<uint32_t>(evalModel_->inputDim());
  auto set = compression::RowSet::fromSorted(all, inputs);
  if (!set) return set.status().withContext(relayId(r));
  client::RowOffer offer;
  offer.bucket = 1;
  offer.bytes = compression::encodeRowSet(*set);
  offer.covered = std::move(all);
  offer.touched = offer.covered.size();
  wire::HelloMsg hello;
  hello.rowSet = offer.bytes;
  hello.rowBucket = 1;
  if (!rowsModel_) rowsModel_ = std::make_shared<const model::Model>(*evalModel_);
  auto rows = coordinator::offeredRows(hello, rowsModel_);
  if (!rows) return rows.status().withContext(relayId(r));
  auto welcome = client::compactWelcome(welcome_, offer, inputs);
  if (!welcome) return welcome.status().withContext(relayId(r));
  relay.rows = std::move(*rows);
  relay.view = relay.rows->view();
  client::LearnerOptions lo{client::clientSeed(0, relayId(r))};
  lo.trains = false;
  relay.learner = std::make_unique<client::Learner>(lo, nullptr);
  return relay.learner->welcome(*welcome, noData_).withContext(relayId(r));
}

Status Run::relayAssigned(std::size_t r) {
  RelayState& relay = relays_[r];
  const uint32_t node = static_cast<uint32_t>(r + 1);
  std::unique_ptr<RelayState::Received> received = std::move(relay.incoming);
  const wire::RoundAssignMsg& a = received->assign;
  // As starling-relay: the Learner catches up to the assignment's base model from the
  // frame, the relay's engine adopts it (abandoning a local round still open: after a
  // give-up the open one was left to close) and runs its local rounds. The assignment
  // becomes the relay's work only after the abandon, whose actions must not hand the
  // held engine's empty tally to it (Federation::trainLocalRounds keeps the same order).
  STARLING_RETURN_IF_ERROR(relay.learner->catchUp(a).withContext(fmt::format("{} round {}", relayId(r), a.round)));
  coordinator::RoundEngine& engine = *relay.engine;
  relay.working.reset();  // an earlier assignment's rounds, if any: the coordinator moved on
  if (engine.roundOpen())
    STARLING_RETURN_IF_ERROR(
        perform(engine.abandonOpenRound("the coordinator's next assignment came first", nowMs()), node));
  relay.working = std::move(received);
  relay.tally.reset();
  relay.workingSinceUs = nowUs_;
  if (a.deadlineMs > 0) push(nowUs_ + int64_t(a.deadlineMs) * 900, Event::Kind::kRelayGivesUp, r, relay.assignments);
  if (relay.view) relay.view->scatter(relay.learner->model(), relay.full);  // its rows into its whole model
  auto actions = engine.adopt(relay.view ? std::span<const float>(relay.full) : relay.learner->model(),
                              engine.commits() + 1 + tiers_.localRounds, nowMs(),
                              coordinator::RoundEngine::UpstreamPace{a.tau, a.lr});
  if (!actions) return actions.status().withContext(relayId(r));
  return perform(std::move(*actions), node);
}

Status Run::relayCheckHeld(std::size_t r) {
  RelayState& relay = relays_[r];
  if (!relay.working || !relay.engine->held()) return Status::ok();
  const std::unique_ptr<RelayState::Received> received = std::move(relay.working);
  const wire::RoundAssignMsg& a = received->assign;
  coordinator::LocalRounds rounds = relay.tally.take(relay.engine->model());
  if (rounds.examples == 0)
    return relayQuiet(r, fmt::format("the local rounds for round {} applied no update", a.round));
  client::TrainStats stats;
  stats.steps = static_cast<int>(rounds.steps);
  stats.examples = rounds.examples;
  stats.lossStart = rounds.lossStart;
  stats.lossEnd = rounds.lossEnd;
  stats.seconds = double(nowUs_ - relay.workingSinceUs) / 1e6;
  if (relay.view) relay.full = rounds.model;
  auto update = relay.view ? relay.learner->submit(a, relay.view->gather(rounds.model), stats)
                           : relay.learner->submit(a, rounds.model, stats);
  if (!update) return update.status().withContext(fmt::format("{} round {}", relayId(r), a.round));
  const uint32_t durationMs = static_cast<uint32_t>((nowUs_ - relay.workingSinceUs) / 1000);
  wire::UpdateMsg message = update->message();
  message.durationMs = durationMs;
  const uint64_t frameBytes = wire::encode(message).size();
  coordinator::IncomingUpdate in;
  STARLING_RETURN_IF_ERROR(incoming(*update, durationMs, relay.view.get(), in));
  relay.inFlight = std::move(in);
  relay.inFlightFrameBytes = frameBytes;
  const int64_t arrivesUs =
      transfer(frameBytes, nowUs_, tiers_.uplinkMbps, tiers_.latencyMs, &relay.out, &coordinatorIn_);
  push(arrivesUs, Event::Kind::kUpdateArrives, r, relay.assignments, 0, true);
  return Status::ok();
}

Status Run::relayQuiet(std::size_t r, const std::string& reason) {
  RelayState& relay = relays_[r];
  STARLING_RETURN_IF_ERROR(perform(engine_->clientLeft(relayId(r), reason, nowMs())));
  const uint64_t held = relay.learner->heldRound();
  return perform(
      engine_->clientJoined(relayId(r), 0, held, held > 0 ? relay.learner->modelChecksum() : 0, nowMs(), relay.rows));
}

Status Run::perform(std::vector<Action> actions, uint32_t node) {
  STARLING_RETURN_IF_ERROR(performActions(std::move(actions), node));
  if (finished_) jobs_.clear();  // nothing will read their updates
  STARLING_RETURN_IF_ERROR(flush());
  return node == 0 ? Status::ok() : relayCheckHeld(node - 1);
}

Status Run::performActions(std::vector<Action> actions, uint32_t node) {
  static_assert(std::variant_size_v<Action> == 5, "perform() handles every kind of action");
  const bool toRelays = node == 0 && !relays_.empty();  // the coordinator's clients are the relays
  for (auto& act : actions) {
    if (auto* a = std::get_if<coordinator::Assign>(&act)) {
      STARLING_RETURN_IF_ERROR(toRelays ? assignRelay(relayIndex(a->clientId), a->assignment)
                                        : assign(clientIndex(a->clientId), a->assignment, node));
    } else if (auto* v = std::get_if<coordinator::Verdict>(&act)) {
      if (toRelays) {
        relays_[relayIndex(v->clientId)].learner->settle(v->verdict.round, v->verdict.accepted);
      } else {
        STARLING_RETURN_IF_ERROR(flush());  // the verdict comes after the rounds assigned before it
        verdict(clientIndex(v->clientId), v->verdict.round, v->verdict.accepted);
      }
    } else if (auto* w = std::get_if<coordinator::WakeAt>(&act)) {
      push(w->atMs * 1000, Event::Kind::kWake, 0, 0, node);
    } else if (auto* ended = std::get_if<coordinator::RoundEnded>(&act)) {
      if (node > 0) {  // a relay's local round: counted while it works for the coordinator
        RelayState& relay = relays_[node - 1];
        if (relay.working) relay.tally.count(ended->summary);
        continue;
      }
      const coordinator::RoundSummary& sum = ended->summary;
      RoundRow row;
      row.round = sum.round;
      row.committed = sum.committed;
      row.virtualSeconds = double(nowUs_) / 1e6;
      row.bytesUp = roundUp_;
      row.bytesDown = roundDown_;
      row.edgeBytesUp = edgeUp_;
      row.edgeBytesDown = edgeDown_;
      row.totalBytes = totalBytes_;
      row.modelChecksum = engine_->modelChecksum();
      row.trainLoss = sum.trainLossStart;
      row.epsilon = sum.epsilon;
      row.tau = sum.tau;
      row.uplinkDensity = sum.uplinkDensity;
      row.downlinkDensity = sum.downlinkDensity;
      row.selected = sum.selected;
      row.participants = sum.accepted;
      row.stragglers = sum.stragglers;
      row.dropped = roundDropped_;
      row.startedSeconds = double(sum.startedMs) / 1e3;
      int64_t closerMs = -1;
      uint32_t onTime = 0;
      for (const auto& p : sum.participants) {
        if (p.round != sum.round) continue;  // a late update's record: its assignment was counted in its round
        row.payloadDown += p.bytesDownWire;
        if (p.sticky) {
          ++row.sticky;
          row.payloadDownSticky += p.bytesDownWire;
        }
        if (p.outcome != coordinator::ParticipantOutcome::kAccepted || !p.returnedMs) continue;
        row.stepsMin = onTime == 0 ? p.steps : std::min(row.stepsMin, p.steps);
        row.stepsMax = std::max(row.stepsMax, p.steps);
        row.stepsMean += p.steps;
        ++onTime;
        row.computeMaxSeconds = std::max(row.computeMaxSeconds, double(p.durationMs) / 1e3);
        if (*p.returnedMs > closerMs) {
          closerMs = *p.returnedMs;
          row.closerSteps = p.steps;
          row.closerComputeSeconds = double(p.durationMs) / 1e3;
          row.closerLinkSeconds = double(*p.returnedMs - p.assignedMs - int64_t(p.durationMs)) / 1e3;
        }
      }
      if (onTime > 0) row.stepsMean /= onTime;
      if (!sum.evalStats.empty()) {
        auto merged = model::mergeVectors(sum.evalStats);
        if (!merged) return merged.status().withContext(fmt::format("round {}'s federated evaluation", sum.round));
        const model::Metrics m = model::finalize(*merged);
        row.fedAccuracy = m.accuracy;
        row.fedRmse = m.rmse;
        row.fedExamples = m.examples;
      }
      const uint32_t every = std::max<uint32_t>(1, strategy_.task.evalEvery);
      if (sum.committed && (engine_->commits() % every == 0 || engine_->finished())) {
        STARLING_RETURN_IF_ERROR(evalModel_->setParams(engine_->servedModel()));
        auto e = evalModel_->evaluate(test());
        if (!e) return e.status();
        row.accuracy = e->metrics.accuracy;
        row.testLoss = e->loss;
        row.auc = e->metrics.auc;
        row.rmse = e->metrics.rmse;
        row.r2 = e->metrics.r2;
      }
      if (export_) {
        // The seed the engine gives the round's downlink compressor.
        const uint64_t downSeed = strategy_.engine.seed * 0x100000001b3ull + sum.round;
        STARLING_RETURN_IF_ERROR(
            export_->recordRound(row, sum.accepted, sum.bytesUpWire, downSeed, *evalModel_, engine_->model()));
      }
      roundUp_ = roundDown_ = edgeUp_ = edgeDown_ = 0;
      roundDropped_ = 0;
      result_.rounds.push_back(row);
      if (onRound_) onRound_(row);
      if (s().stopAtTarget && row.accuracy && *row.accuracy >= s().targetAccuracy) {
        finished_ = true;
        return Status::ok();
      }
    } else if (std::holds_alternative<coordinator::Finished>(act)) {
      if (node > 0) continue;  // a relay's rounds end with the coordinator's
      finished_ = true;
      return Status::ok();
    }
  }
  return Status::ok();
}

void Run::scheduleWindow(std::size_t i) {
  const auto& windows = fleet_.windows(i);
  Seat& c = seats_[i];
  if (windows.empty()) return;
  if (c.windowIndex >= windows.size()) {
    if (s().availabilityPeriodS <= 0) return;  // offline for good
    c.windowIndex = 0;
    ++c.windowCycle;
  }
  push(std::max(nowUs_, windowMicros(c, windows[c.windowIndex].start)), Event::Kind::kOnline, i);
}

Status Run::join(std::size_t i) {
  STARLING_RETURN_IF_ERROR(offerRows(i));
  Seat& c = seats_[i];
  c.away = false;
  const uint32_t node = nodeOf(i);
  return perform(engineOf(node).clientJoined(clientId(i), fleet_.clients()[i].examples.size(), c.heldRound,
                                             c.heldChecksum, nowMs(), rowsOf(i)),
                 node);
}

Status Run::offerRows(std::size_t i) {
  if (s().rowBucket == 0 || offers_.count(i) > 0) return Status::ok();
  Offer& c = offers_[i];
  const Fleet::Client& fc = fleet_.clients()[i];
  const data::Dataset shard = train().subset(fc.examples);
  std::optional<data::Dataset> heldOut;
  std::vector<const data::Dataset*> parts{&shard};
  if (!fc.heldOut.empty()) parts.push_back(&heldOut.emplace(train().subset(fc.heldOut)));
  auto offer = client::offerRows(parts, s().rowBucket);
  if (!offer) return offer.status().withContext(fmt::format("client {} offering its rows", i));
  const std::string why = coordinator::sparseRowsRefusal(strategy_.task, !result_.vocabulary.empty(),
                                                         !result_.scaling.mean.empty() && result_.scaling.centre,
                                                         coordinator::noiseShares(strategy_.engine) > 0);
  if (!why.empty()) return Status::ok();  // it trains the whole model, as the daemon's would
  wire::HelloMsg hello;
  hello.rowSet = offer->bytes;
  hello.rowBucket = offer->bucket;
  if (!rowsModel_) rowsModel_ = std::make_shared<const model::Model>(*evalModel_);
  auto rows = coordinator::offeredRows(hello, rowsModel_);
  if (!rows) return rows.status().withContext(fmt::format("client {}'s row set", i));
  auto welcome = client::compactWelcome(nodeOf(i) == 0 ? welcome_ : relayWelcome_, *offer, shard.featureDim());
  if (!welcome) return welcome.status().withContext(fmt::format("client {}", i));
  auto task = client::LearnerTask::create(*welcome);
  if (!task) return task.status().withContext(fmt::format("client {}'s compact model", i));
  auto compactShard = data::restrictFeatures(shard, offer->covered);
  if (!compactShard) return compactShard.status().withContext(fmt::format("client {}", i));
  if (heldOut) {
    auto h = data::restrictFeatures(*heldOut, offer->covered);
    if (!h) return h.status().withContext(fmt::format("client {}", i));
    c.compactHeldOut.emplace(std::move(*h));
  }
  c.compactShard.emplace(std::move(*compactShard));
  c.compactTask = std::move(*task);
  c.rows = std::move(*rows);
  return Status::ok();
}

Status Run::setUp() {
  result_.name = strategy_.name;
  Strategy& dc = strategy_;
  auto attack = client::Attack::parse(s().attack);
  if (!attack) return attack.status().withContext("sim.attack");
  attack_ = *attack;
  if (!(s().attackers >= 0 && s().attackers <= 1))
    return Status(StatusCode::kInvalidArgument, fmt::format("sim.attackers {} is not a fraction", s().attackers));
  STARLING_RETURN_IF_ERROR(coordinator::validateTask(dc.engine, dc.task));
  auto model = model::Model::fromSpec(dc.task.model);
  if (!model) return model.status().withContext("model spec");
  if (fleet_.initialModel().empty()) {
    model->initialize(dc.task.initSeed);
  } else {
    // An imported model's weights: clients cannot build them from a seed, so they get
    // them dense, as from the coordinator.
    std::copy(fleet_.initialModel().begin(), fleet_.initialModel().end(), model->params().begin());
    dc.engine.clientsInitialize = false;
  }
  auto engine = coordinator::RoundEngine::create(dc.engine, {model->params().begin(), model->params().end()});
  if (!engine) return engine.status().withContext("strategy '" + strategy_.name + "'");
  engine_ = std::move(*engine);
  welcome_ = coordinator::taskWelcome(dc.engine, dc.task);
  auto task = client::LearnerTask::create(welcome_);
  if (!task) return task.status().withContext("the clients' task");
  task_ = std::move(*task);
  tiers_ = dc.tiers ? *dc.tiers : s().tiers;
  coordinatorIn_.mbps = coordinatorOut_.mbps = tiers_.coordinatorMbps;
  if (!s().exportDir.empty()) {
    auto x = RunExport::open(s().exportDir, fleet_, strategy_, *model);
    if (!x) return x.status();
    export_ = std::move(*x);
  }
  evalModel_.emplace(std::move(*model));
  // After evalModel_: sparse relays and their placement read the clients' row sets.
  if (tiers_.relays > 0) STARLING_RETURN_IF_ERROR(setUpRelays(evalModel_->params()));
  if (coordinator::needsStatisticsRound(dc.task)) STARLING_RETURN_IF_ERROR(statisticsRound());
  if (!ranks_) return Status::ok();
  // What keeps per-client state that rank 0 would have to read (the uplink memories'
  // eviction, overlap's timing, compact models, relays, the export) stays in one process.
  const char* why = nullptr;
  if (tiers_.relays > 0)
    why = "relays (sim.relays)";
  else if (s().rowBucket > 0)
    why = "clients offering rows (sim.row-bucket)";
  else if (task_->overlap() > 0)
    why = "Overlap Local-SGD (train.overlap)";
  else if (!s().exportDir.empty())
    why = "sim.export-dir";
  else if (task_->errorFeedback() && s().efClients < fleet_.clients().size())
    why = "error feedback with sim.ef-clients below sim.clients (its eviction order is rank 0's)";
  if (why)
    return Status(StatusCode::kUnsupported,
                  fmt::format("strategy '{}': {} runs in one process: start it without mpirun", strategy_.name, why));
  settles_.resize(static_cast<std::size_t>(ranks_->size()));
  return Status::ok();
}

Result<StrategyResult> Run::go(const std::function<void(const RoundRow&)>& onRound) {
  const auto wallStart = std::chrono::steady_clock::now();
  const std::clock_t cpuStart = std::clock();
  onRound_ = onRound;
  STARLING_RETURN_IF_ERROR(setUp());
  if (ranks_ && ranks_->rank() != 0) {
    STARLING_RETURN_IF_ERROR(serve());
    return std::move(result_);
  }
  const Strategy& dc = strategy_;
  rng_.seed(mixSeed(s().seed, 0xd509));

  const int64_t rejoinUs = (s().rejoinMs > 0 ? s().rejoinMs : dc.engine.deadlineMs) * 1000;
  const int64_t limitUs = static_cast<int64_t>(s().maxVirtualHours * 3600e6);
  const uint64_t initialChecksum = s().preloadedModel ? engine_->modelChecksum() : 0;
  const bool traced = !s().availabilityTrace.empty();
  seats_.resize(fleet_.clients().size());
  for (std::size_t i = 0; i < fleet_.clients().size() && !finished_; ++i) {
    const auto& c = fleet_.clients()[i];
    if (c.examples.empty()) continue;  // nothing to train on: it never joins
    if (initialChecksum != 0) seats_[i].heldChecksum = initialChecksum;
    if (traced) {  // it joins when its first window opens (an event at time 0 included)
      seats_[i].online = false;
      seats_[i].away = true;
      scheduleWindow(i);
      continue;
    }
    const uint32_t node = nodeOf(i);
    STARLING_RETURN_IF_ERROR(offerRows(i));
    std::shared_ptr<const coordinator::ClientRowSet> rows = rowsOf(i);
    STARLING_RETURN_IF_ERROR(
        perform(engineOf(node).clientJoined(clientId(i), c.examples.size(), 0, initialChecksum, 0, rows), node));
  }
  for (std::size_t r = 0; r < relays_.size() && !finished_; ++r) {
    STARLING_RETURN_IF_ERROR(perform(relays_[r].engine->start(0), static_cast<uint32_t>(r + 1)));
    STARLING_RETURN_IF_ERROR(
        perform(engine_->clientJoined(relayId(r), 0, 0, 0, 0, relays_[r].rows)));  // holding nothing yet
  }
  if (!finished_) STARLING_RETURN_IF_ERROR(perform(engine_->start(0)));
  while (!finished_) {
    if (queue_.empty()) {
      result_.stopped = "nothing left to happen (too few clients for a round?)";
      break;
    }
    const Event ev = queue_.top();
    queue_.pop();
    nowUs_ = std::max(nowUs_, ev.atUs);
    if (nowUs_ > limitUs) {
      result_.stopped = fmt::format("virtual time passed {} hours", s().maxVirtualHours);
      break;
    }
    switch (ev.kind) {
      case Event::Kind::kWake:
        STARLING_RETURN_IF_ERROR(perform(engineOf(ev.node).tick(nowMs()), ev.node));
        break;
      case Event::Kind::kRelayAssigned:
        if (ev.assignment == relays_[ev.client].assignments) STARLING_RETURN_IF_ERROR(relayAssigned(ev.client));
        break;
      case Event::Kind::kRelayGivesUp: {
        RelayState& relay = relays_[ev.client];
        if (ev.assignment != relay.assignments || !relay.working) break;
        // starling-relay's rule: no update after 90% of the coordinator's deadline; its
        // engine starts no new local round (the open one still closes).
        const uint64_t round = relay.working->assign.round;
        relay.working.reset();
        relay.engine->holdAfter(relay.engine->commits());
        STARLING_RETURN_IF_ERROR(relayQuiet(
            ev.client,
            fmt::format("the local rounds for round {} did not end within 90% of the coordinator's deadline", round)));
        break;
      }
      case Event::Kind::kUpdateLeaves: {
        const Seat& c = seats_[ev.client];
        auto flying = flying_.find(ev.client);
        if (ev.assignment != c.assignments || flying == flying_.end()) break;
        const Fleet::Client& fc = fleet_.clients()[ev.client];
        push(transfer(flying->second.frameBytes, nowUs_, fc.uplinkMbps, latencyMs(ev.client),
                      &linkIn(nodeOf(ev.client))),
             Event::Kind::kUpdateArrives, ev.client, ev.assignment);
        break;
      }
      case Event::Kind::kDropOut: {
        Seat& c = seats_[ev.client];
        if (ev.assignment != c.assignments || c.away) break;  // gone offline first
        c.working = false;
        ++roundDropped_;
        c.away = true;
        c.backAtUs = nowUs_ + rejoinUs;
        const uint32_t node = nodeOf(ev.client);
        STARLING_RETURN_IF_ERROR(
            perform(engineOf(node).clientLeft(clientId(ev.client), "dropped out (simulated)", nowMs()), node));
        push(c.backAtUs, Event::Kind::kRejoin, ev.client);
        break;
      }
      case Event::Kind::kRejoin: {
        Seat& c = seats_[ev.client];
        // Offline now (availability trace): it joins when its next window opens.
        if (c.away && c.online && nowUs_ >= c.backAtUs) STARLING_RETURN_IF_ERROR(join(ev.client));
        break;
      }
      case Event::Kind::kOnline: {
        Seat& c = seats_[ev.client];
        c.online = true;
        push(windowMicros(c, fleet_.windows(ev.client)[c.windowIndex].end), Event::Kind::kOffline, ev.client);
        // It joins now, unless a dropout keeps it away longer (its kRejoin joins it then).
        if (c.away && nowUs_ >= c.backAtUs) STARLING_RETURN_IF_ERROR(join(ev.client));
        break;
      }
      case Event::Kind::kOffline: {
        Seat& c = seats_[ev.client];
        c.online = false;
        if (!c.away) {
          if (c.working) ++roundDropped_;  // its work for the round is lost
          c.working = false;
          if (auto flying = flying_.find(ev.client); flying != flying_.end()) {
            verdict(ev.client, flying->second.update.round, false);  // never sent: back into its memory
            flying_.erase(flying);
          }
          c.away = true;
          const uint32_t node = nodeOf(ev.client);
          STARLING_RETURN_IF_ERROR(
              perform(engineOf(node).clientLeft(clientId(ev.client), "offline (availability trace)", nowMs()), node));
        }
        ++c.windowIndex;
        scheduleWindow(ev.client);
        break;
      }
      case Event::Kind::kUpdateArrives: {
        if (ev.relay) {
          RelayState& relay = relays_[ev.client];
          if (ev.assignment != relay.assignments || !relay.inFlight) break;
          countBytes(0, true, relay.inFlightFrameBytes);
          coordinator::IncomingUpdate u = std::move(*relay.inFlight);
          relay.inFlight.reset();
          STARLING_RETURN_IF_ERROR(perform(engine_->updateArrived(relayId(ev.client), std::move(u), nowMs())));
          break;
        }
        Seat& c = seats_[ev.client];
        auto flying = flying_.find(ev.client);
        if (ev.assignment != c.assignments || flying == flying_.end()) break;
        c.working = false;
        const uint32_t node = nodeOf(ev.client);
        countBytes(node, true, flying->second.frameBytes);
        coordinator::IncomingUpdate u = std::move(flying->second.update);
        flying_.erase(flying);
        STARLING_RETURN_IF_ERROR(
            perform(engineOf(node).updateArrived(clientId(ev.client), std::move(u), nowMs()), node));
        break;
      }
    }
  }
  result_.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();
  result_.cpuSeconds = double(std::clock() - cpuStart) / CLOCKS_PER_SEC;
  return std::move(result_);
}

Status Run::flush() {
  if (jobs_.empty()) return Status::ok();
  std::vector<TrainJob> jobs = std::move(jobs_);
  jobs_.clear();
  const auto ranks = static_cast<std::size_t>(ranks_->size());
  // Each rank's batch: its verdicts, the engine's model, its clients' RoundAssign frames.
  std::vector<ByteWriter> batches(ranks);
  std::vector<std::vector<std::size_t>> owned(ranks);
  for (std::size_t k = 0; k < jobs.size(); ++k)
    owned[static_cast<std::size_t>(ranks_->ownerOf(jobs[k].client))].push_back(k);
  for (std::size_t r = 1; r < ranks; ++r) {
    if (owned[r].empty()) continue;
    ByteWriter& w = batches[r];
    w.put(RankMessage::kTrain);
    w.putBytes(settles_[r].take());
    w.putFloats(engine_->model());
    w.put<uint64_t>(owned[r].size());
    for (std::size_t k : owned[r]) {
      w.put<uint64_t>(jobs[k].client);
      w.putBytes(jobs[k].frame.bytes());
    }
    ranks_->send(static_cast<int>(r), w.take());
  }
  // Rank 0's own share, while the others train theirs.
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> results(jobs.size());
  for (std::size_t k : owned[0]) {
    auto done = trainJob(jobs[k].client, jobs[k].frame.bytes(), engine_->model());
    if (!done) return done.status();
    results[k] = {done->first, done->second.toVector()};
  }
  ranks_->waitSends();
  for (std::size_t r = 1; r < ranks; ++r) {
    if (owned[r].empty()) continue;
    const std::vector<uint8_t> reply = ranks_->receive(static_cast<int>(r));
    ByteReader in(reply, fmt::format("rank {}'s updates", r));
    auto failed = in.get<uint8_t>();
    if (!failed) return failed.status();
    if (*failed) {
      auto why = in.getBytes();
      if (!why) return why.status();
      return Status(StatusCode::kInternal, fmt::format("rank {}: {}", r, std::string(why->begin(), why->end())));
    }
    for (std::size_t k : owned[r]) {
      auto computeUs = in.get<int64_t>();
      if (!computeUs) return computeUs.status();
      auto frame = in.getBytes();
      if (!frame) return frame.status();
      results[k] = {*computeUs, std::vector<uint8_t>(frame->begin(), frame->end())};
    }
  }
  for (std::size_t k = 0; k < jobs.size(); ++k)
    STARLING_RETURN_IF_ERROR(received(jobs[k], results[k].first, results[k].second));
  return Status::ok();
}

Result<std::pair<int64_t, wire::Frame>> Run::trainJob(std::size_t i, std::span<const uint8_t> assignFrame,
                                                      std::span<const float> engineModel) {
  if (assignFrame.size() < wire::kFrameHeaderBytes)
    return Status(StatusCode::kMalformed, fmt::format("client {}'s assignment: a short frame", i));
  auto verified = wire::Message::parse({assignFrame.begin() + wire::kFrameHeaderBytes, assignFrame.end()});
  if (!verified) return verified.status().withContext(fmt::format("client {}'s assignment", i));
  auto a = wire::parseRoundAssign(*verified);
  if (!a) return a.status().withContext(fmt::format("client {}'s assignment", i));
  auto r = trainClient(i, *a, engineModel);
  if (!r) return r.status();
  wire::UpdateMsg message = r->update->message();
  message.durationMs = static_cast<uint32_t>(r->computeUs / 1000);
  return std::make_pair(r->computeUs, wire::encode(message));
}

Status Run::received(const TrainJob& job, int64_t computeUs, std::span<const uint8_t> frame) {
  const std::size_t i = job.client;
  const std::string who = fmt::format("client {}'s update", i);
  if (frame.size() < wire::kFrameHeaderBytes) return Status(StatusCode::kMalformed, who + ": a short frame");
  auto verified = wire::Message::parse({frame.begin() + wire::kFrameHeaderBytes, frame.end()});
  if (!verified) return verified.status().withContext(who);
  auto u = wire::parseUpdate(*verified);
  if (!u) return u.status().withContext(who);
  // As the coordinator reads it (Federation::update), and as incoming() makes it.
  coordinator::IncomingUpdate in;
  if (!u->delta) return Status(StatusCode::kMalformed, who + ": compressed tensor is missing");
  STARLING_RETURN_IF_ERROR(
      coordinator::decodeUpdate(*u->delta, nullptr, static_cast<uint32_t>(engine_->model().size()), in.delta)
          .withContext(who));
  in.round = u->round;
  in.baseRound = u->baseRound;
  in.examples = u->examples;
  in.steps = u->steps;
  in.lossStart = u->lossStart;
  in.lossEnd = u->lossEnd;
  in.durationMs = std::max<uint32_t>(1, u->durationMs);
  in.bytesWire = u->delta->byteSize();
  in.evalStats = u->evalStats;
  flying_[i] = InFlight{std::move(in), frame.size()};
  const Fleet::Client& fc = fleet_.clients()[i];
  const int64_t leavesUs = job.atUs + job.downUs + computeUs;
  if (linkIn(0).mbps > 0)
    push(leavesUs, Event::Kind::kUpdateLeaves, i, job.assignment, 0, false, job.seq);
  else
    push(leavesUs + linkMicros(frame.size(), fc.uplinkMbps, latencyMs(i)), Event::Kind::kUpdateArrives, i,
         job.assignment, 0, false, job.seq);
  return Status::ok();
}

Status Run::serve() {
  for (;;) {
    const std::vector<uint8_t> bytes = ranks_->receive(0);
    ByteReader in(bytes, "rank 0's batch");
    auto kind = in.get<RankMessage>();
    if (!kind) return kind.status();
    if (*kind == RankMessage::kDone) return Status::ok();
    ByteWriter out;
    Status st = [&]() -> Status {
      auto settles = in.getBytes();
      if (!settles) return settles.status();
      ByteReader verdicts(*settles, "rank 0's verdicts");
      for (std::size_t k = 0; k < settles->size() / 17; ++k) {
        auto i = verdicts.get<uint64_t>();
        auto round = verdicts.get<uint64_t>();
        auto accepted = verdicts.get<uint8_t>();
        if (!i || !round || !accepted) return Status(StatusCode::kMalformed, "rank 0's verdicts end early");
        if (*accepted == kEvict)
          evict(*i);
        else
          settle(*i, *round, *accepted != 0);
      }
      auto model = in.getFloats();
      if (!model) return model.status();
      auto count = in.get<uint64_t>();
      if (!count) return count.status();
      out.put<uint8_t>(0);
      for (uint64_t k = 0; k < *count; ++k) {
        auto i = in.get<uint64_t>();
        if (!i) return i.status();
        auto frame = in.getBytes();
        if (!frame) return frame.status();
        if (*i >= fleet_.clients().size())
          return Status(StatusCode::kMalformed,
                        fmt::format("rank 0 assigned client {} of {}", *i, fleet_.clients().size()));
        auto done = trainJob(*i, *frame, *model);
        if (!done) return done.status();
        out.put<int64_t>(done->first);
        out.putBytes(done->second.bytes());
      }
      return Status::ok();
    }();
    if (!st) {
      ByteWriter failed;
      failed.put<uint8_t>(1);
      const std::string why = st.message();
      failed.putBytes({reinterpret_cast<const uint8_t*>(why.data()), why.size()});
      ranks_->send(0, failed.take());
      ranks_->waitSends();
      return st;
    }
    ranks_->send(0, out.take());
    ranks_->waitSends();
  }
}

}  // namespace

Result<StrategyResult> runStrategy(const Fleet& fleet, const Strategy& strategy,
                                   const std::function<void(const RoundRow&)>& onRound, Ranks* ranks) {
  Run run(fleet, strategy, ranks);
  auto result = run.go(onRound);
  if (ranks && ranks->size() > 1 && ranks->rank() == 0) {  // the others wait for the next strategy
    for (int r = 1; r < ranks->size(); ++r) {
      ByteWriter w;
      w.put(RankMessage::kDone);
      ranks->send(r, w.take());
    }
    ranks->waitSends();
  }
  return result;
}

}  // namespace starling::sim
