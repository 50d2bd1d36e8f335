#pragma once
// Federation: the daemon's shell around the RoundEngine. It turns client messages
// into engine events, carries out the engine's actions (send, persist, wake up),
// evaluates the global model, and keeps the SQLite store in step: one transaction
// per ended round, the checkpoint with it, so a restarted coordinator resumes from
// the last committed round.
//
// A task that standardizes (task.standardize) and has no statistics stored runs a
// statistics round first (docs/coordinator.md): clients are held before their Welcome,
// asked for their feature sums (StatsRequest / FeatureStats), and welcomed, with the
// merged scaling, once the round has succeeded; a restart reuses the stored scaling.
//
// Threading: every engine call and store write runs on one strand; SessionHandler
// callbacks arrive on session strands and are posted onto it. Evaluating the global
// model on the held-out set runs on a worker thread while the next round trains:
// the round is committed first, its accuracy recorded when the worker is done.

#include <spdlog/logger.h>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "starling/coordinator/client_rows.hpp"
#include "starling/coordinator/local_rounds.hpp"
#include "starling/coordinator/observer.hpp"
#include "starling/coordinator/relay_placement.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/coordinator/server.hpp"
#include "starling/coordinator/store.hpp"
#include "starling/coordinator/task.hpp"
#include "starling/data/categories.hpp"
#include "starling/data/dataset.hpp"
#include "starling/data/feature_scaling.hpp"
#include "starling/model/model.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {

// One line per ended round, for the console and the demo.
struct RoundReport {
  RoundSummary summary;
  std::optional<model::Evaluation> evaluation;
};

// Test-only switches (hidden flags of starling-coordinator run), for the crash-point
// test of tests/cli: neither changes what the federation does until it fires.
struct FederationTestHooks {
  // Abort the process at a named point of closing a committed round: "aggregated" (the
  // engine has aggregated, nothing is on disk), "mid-persist" (inside the round's
  // transaction), "persisted" (the round is durable, nothing else sent), "verdict-K"
  // (after the K-th verdict sent since the last round ended or assignment went out,
  // K >= 1: the verdicts of a round's close) or "assigning" (before the
  // next round's first assignment). "POINT@N" fires at the N-th time the point is
  // reached (default 1). Frames already queued are given 300 ms to leave, except at
  // "mid-persist", which exits at once.
  std::string crashAt;
  // Keep, per client, the sum of the updates applied from it (checkpointed with each
  // round as the vector "audit:ID"), and write them to this file when training
  // completes: a line "ID v0 v1 ..." per client.
  std::string auditOut;
};

// The exit status of a FederationTestHooks::crashAt crash.
inline constexpr int kTestCrashExitCode = 86;

class Federation : public SessionHandler, public std::enable_shared_from_this<Federation> {
 public:
  // Opens the task: resumes from the store's last checkpoint when there is one (and
  // refuses a store made for another task), otherwise initializes the model.
  static Result<std::shared_ptr<Federation>> create(asio::io_context& io, EngineConfig engine, TaskConfig task,
                                                    std::unique_ptr<Store> store, std::shared_ptr<spdlog::logger> log);

  // Called once training is complete (the final model saved, clients told), or
  // when the federation cannot go on (a store failure); the status says which.
  void onFinished(std::function<void(const Status&)> callback) { finished_ = std::move(callback); }
  // Called after every ended round.
  void onRound(std::function<void(const RoundReport&)> callback) { roundCallback_ = std::move(callback); }

  // Stops: a round in flight is abandoned with `reason` and recorded.
  void shutdown(const std::string& reason);

  void onMessage(const std::shared_ptr<Session>& session, wire::Message message) override;
  void onClosed(const std::shared_ptr<Session>& session, const Status& why) override;

  // Before the first event: who is told what happens (the dashboard); none by default.
  void setObserver(std::shared_ptr<FederationObserver> observer) { observer_ = std::move(observer); }

  // Before the first event. See FederationTestHooks.
  Status setTestHooks(FederationTestHooks hooks);

  // Relays (starling-relay). holdForUpstream(), before the first event: no round starts
  // until trainLocalRounds(). trainLocalRounds(): the upstream's model is adopted
  // (RoundEngine::adopt, recorded as a round without participants), `localRounds` rounds
  // commit, and `held` gets what they trained, on the federation's strand; an error (a
  // model of another size, the federation ended) goes to `held` instead. complete(): the
  // upstream's training is complete: clients are told, as at the end of a task.
  void holdForUpstream();
  void trainLocalRounds(std::vector<float> upstreamModel, uint32_t localRounds,
                        std::optional<RoundEngine::UpstreamPace> pace, std::function<void(Result<LocalRounds>)> held);
  // The local rounds in progress are not waited for any more (the upstream's deadline
  // passed): no new one starts, the open one still closes, `held` is not called. The
  // next trainLocalRounds() abandons a round still open.
  void cancelLocalRounds();
  void complete();
  // A relay's federation: the coordinator's placement (RoundAssign.placement) of
  // version `version`; `self` is this relay's identity. Connected clients placed on
  // another relay are told to go there (Bye.redirect) and disconnected, and so is any
  // that joins here later; on the federation's strand.
  void applyPlacement(std::string self, std::vector<wire::PlacedClientMsg> placement, uint64_t version);
  // A relay with sparse rows upstream (starling-relay --sparse-rows): the rows its
  // coordinator sends it and takes from it. A client that trains rows outside them (or
  // the whole model) is welcomed but not selected until they cover its rows: its
  // training would be lost upstream. nullopt: every row (the default). On the
  // federation's strand.
  void setUpstreamRows(std::optional<std::vector<uint32_t>> rows);

  uint64_t resumedFrom() const { return resumedFrom_; }
  const RoundEngine& engine() const { return *engine_; }

 private:
  Federation(asio::io_context& io, TaskConfig task, std::unique_ptr<Store> store, std::shared_ptr<spdlog::logger> log);
  int64_t nowMs() const;
  void handle(const std::shared_ptr<Session>& session, const wire::Message& message);
  void hello(const std::shared_ptr<Session>& session, const wire::HelloMsg& hello);
  void update(const std::shared_ptr<Session>& session, const wire::UpdateMsg& update);
  // Records a client turned away (the refusals table); a failure to record is logged.
  void recordRefusal(const Session& session, const std::string& why);
  // Sends the Welcome (with the feature scaling, if any) and tells the engine.
  void welcomeClient(const std::shared_ptr<Session>& session, const wire::HelloMsg& hello);
  // The rows the Hello offers, when the task takes them (train.sparse-rows,
  // features the client holds as they are); null otherwise (logged: the client then
  // trains the whole model).
  std::shared_ptr<const ClientRowSet> clientRows(const std::string& id, const wire::HelloMsg& hello);
  // The placement file (task.placementFile): read again when it changed since it was
  // last read, kept in the database as a new version when its clients changed.
  void refreshPlacement();
  // The shard map file (task.shardMapFile): its map when the file changed since it was
  // last read and places the rows otherwise than the map applied; nullopt when not.
  Result<std::optional<RowShards>> changedShardMap();
  // Between rounds: applies a changed shard map to the engine and keeps it in the
  // database as a new version (a bad one is logged and not applied).
  void refreshShardMap(uint64_t round);
  // The assignment of a relay: with the placement when there is one.
  Frame relayAssignFrame(const Assignment& a);
  // A relay's federation: redirects `session` when the placement puts its client on
  // another relay; true when it did.
  bool redirectIfPlacedElsewhere(const std::shared_ptr<Session>& session);
  // The statistics round: start it once enough clients wait; take an answer; close it
  // when every asked client answered or at its deadline.
  void maybeStartStatistics();
  void featureStats(const std::shared_ptr<Session>& session, const wire::FeatureStatsMsg& stats);
  void closeStatistics();
  int64_t statsDeadlineMs() const;  // task.stats-deadline-ms, or the round deadline
  // True until the statistics round (standardize, categorical vocabulary) has given what
  // clients need before their Welcome.
  bool statsPending() const { return needsStatisticsRound(task_) && !statsDone_; }
  // The round's results become the task's: the test set is re-encoded over the
  // vocabulary and scaled, waiting clients welcomed.
  Status adoptStatistics(const data::CategoryVocabulary& vocabulary, const data::FeatureScaling& scaling);
  void perform(std::vector<Action> actions);
  void performActions(std::vector<Action> actions);
  void sendTo(const std::string& clientId, Frame frame);
  Frame assignFrame(const Assignment& a);
  bool persist(const RoundSummary& summary);
  // Reports an ended round: the log line, the recorded accuracy, the callback.
  void report(const RoundSummary& summary, const std::optional<model::Evaluation>& evaluation);
  // Logs the clients' evaluation of the round's base model, and records it as that
  // round's metrics when the coordinator has no test set of its own.
  void reportFederatedEvaluation(const RoundSummary& summary);
  // Evaluates the current global model on the worker, then reports `summary`.
  void startEvaluation(RoundSummary summary);
  // Waits for an evaluation in flight, if any, and reports its round.
  void finishEvaluation();
  void finish(const Status& status);
  void wakeAt(int64_t atMs);
  // FederationTestHooks: true when `point` fires (the process then exits).
  bool crashPoint(const std::string& point);
  void auditRound(const RoundSummary& summary);
  Status writeAudit() const;

  asio::io_context& io_;
  asio::strand<asio::io_context::executor_type> strand_;
  TaskConfig task_;
  std::vector<std::string> required_;  // requiredCapabilities() of the task
  std::unique_ptr<Store> store_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<RoundEngine> engine_;
  std::optional<model::Model> evalModel_;
  // Sparse models: the task's model for the clients' views (made at the first offer),
  // and the rows of each client that trains them, by id (replaced at each Hello).
  std::shared_ptr<const model::Model> rowsModel_;
  // Placement of clients on relays: the coordinator's (version 0 = none), when its file
  // was last read, and the address each relay said its clients reach it at; a relay's
  // federation: the clients placed elsewhere, with their relay's address.
  RelayPlacementMap placement_;
  std::optional<std::filesystem::file_time_type> placementRead_;
  // The engine's shard map from engine.shard-map (version 0 = none), when its file was
  // last read, and the first layer's shape (EngineConfig::ShardRows without rows).
  RowShards shardMap_;
  std::optional<std::filesystem::file_time_type> shardMapRead_;
  EngineConfig::ShardRows shardShape_;
  std::map<std::string, std::string> relayAddress_;
  std::map<std::string, std::string> placedElsewhere_;
  uint64_t appliedPlacement_ = 0;
  std::vector<wire::PlacedClientMsg> appliedEntries_;
  std::map<std::string, std::shared_ptr<const ClientRowSet>> rows_;
  // setUpstreamRows(): the rows the relay's coordinator takes (nullopt: all), and the
  // clients welcomed but waiting for them (what their Hello said).
  std::optional<std::vector<uint32_t>> upstreamRows_;
  struct Parked {
    uint64_t examples = 0;
    uint64_t heldRound = 0;
    uint64_t heldChecksum = 0;
  };
  std::map<std::string, Parked> parked_;
  bool coveredUpstream(const std::shared_ptr<const ClientRowSet>& rows) const;
  // server.placement-drift (docs/placement.md, "Recomputed on drift"): each relay's
  // clients and the rows they offered it (Update.members; clients without rows left
  // out), the relay traffic in rows a round at the last computation (0: none yet), and
  // the computation in flight (METIS on a worker thread).
  struct MemberRows {
    std::string id;
    std::vector<uint32_t> rows;
  };
  struct Recomputed {
    std::vector<std::pair<std::string, std::string>> clients;  // (client, relay), by client
    uint64_t rowsBefore = 0;
    uint64_t rowsAfter = 0;
    uint32_t relays = 0;
    double seconds = 0;
  };
  std::map<std::string, std::vector<MemberRows>> relayMembers_;
  uint64_t computedTraffic_ = 0;
  std::future<Result<Recomputed>> recomputing_;
  void takeMembers(const std::string& relay, const std::vector<wire::MemberRowsMsg>& members);
  void maybeRecomputePlacement(uint64_t round);
  void applyRecomputed(Result<Recomputed> recomputed, uint64_t round);
  void fillClientRows(LocalRounds& out) const;
  std::optional<data::Dataset> testSet_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;  // by certificate identity
  // The statistics round: the scaling (task.standardize) and the vocabulary
  // (task.categorical-vocabulary) every client applies (empty until known), the clients
  // held before their Welcome until they are, and the round in flight.
  bool statsDone_ = false;
  data::FeatureScaling scaling_;
  data::CategoryVocabulary vocabulary_;
  std::map<std::string, wire::HelloMsg> waiting_;
  bool statsOpen_ = false;
  uint32_t statsAttempts_ = 0;
  std::set<std::string> statsAsked_;
  std::map<std::string, data::FeatureSums> statsReceived_;
  std::map<std::string, data::CategoryCounts> statsCategories_;  // by client, with categorical-vocabulary
  asio::steady_timer statsTimer_;
  asio::steady_timer timer_;
  std::chrono::steady_clock::time_point epoch_;
  int64_t wallEpochMs_ = 0;
  std::shared_ptr<FederationObserver> observer_;
  uint64_t resumedFrom_ = 0;
  bool done_ = false;
  // trainLocalRounds() in progress: its callback and what its rounds trained so far.
  std::function<void(Result<LocalRounds>)> relayHeld_;
  LocalRoundsTally relayRounds_;
  // Called by perform() after its actions: hands the local rounds to relayHeld_ once the
  // engine is held.
  void relayCheckHeld();
  std::function<void(const Status&)> finished_;
  std::function<void(const RoundReport&)> roundCallback_;
  FederationTestHooks hooks_;
  std::map<std::string, uint32_t> crashCounts_;  // times each crash point was reached
  uint32_t verdictsSinceRound_ = 0;              // verdicts since the last round ended or assignment
  bool afterRound_ = false;                      // a committed round ended; no assignment since
  // auditOut: the updates waiting for a verdict by (client, round), dense, and the sums
  // applied so far.
  std::map<std::pair<std::string, uint64_t>, std::vector<float>> auditHeld_;
  std::map<std::string, std::vector<double>> auditApplied_;
  // The evaluation in flight (on a worker; it uses evalModel_ and testSet_ only) and
  // the round it reports. Declared last: destroying the future waits for the worker.
  std::optional<RoundSummary> evaluating_;
  std::future<Result<model::Evaluation>> evaluation_;
};

}  // namespace starling::coordinator
