#pragma once
// Participant: a client's whole life in a federation, the connection loop around a
// Learner (learner.hpp). It connects over mutual TLS, introduces itself, hands the
// Welcome to the Learner (the task, settling updates in flight), and for each round
// has the Learner catch up, train and compress, and sends the Update; verdicts go to
// the Learner. After any disconnect it reconnects with exponential backoff and jitter.
// It returns when the coordinator says training is complete, also when it said so
// while this client was still training and closed the connection before the client's
// update could be sent (an asynchronous task ends as its last server step commits).
//
// Threading: run() is a coroutine on the caller's executor; training blocks it
// while it runs (a client has one job). Deferred data (below) loads on a thread of
// its own; destroying the Participant waits for that thread. Under Overlap Local-SGD
// (the task's train.overlap) the steps after each update run on a worker thread while
// the executor goes on reading frames (verdicts, heartbeats, the next assignment, which
// waits for them); meanwhile the executor only settles verdicts on the Learner (the
// calls learner.hpp allows alongside advance()). Destroying the Participant waits for
// that thread too. Not copyable.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "starling/client/learner.hpp"
#include "starling/client/sparse_rows.hpp"
#include "starling/data/dataset.hpp"
#include "starling/net/certificates.hpp"
#include "starling/net/connection.hpp"
#include "starling/net/tls_context.hpp"
#include "starling/wire/messages.hpp"

namespace spdlog {
class logger;
}

namespace starling::client {

// A further address a client may train with (starling-client --coordinator A,B,...).
struct AlternateServer {
  net::Endpoint endpoint;
  std::shared_ptr<const net::TlsContext> tls;  // null: run()'s (the same expected host name)
};

// "HOST:PORT[,HOST:PORT...]" (starling-client --coordinator, the C API's `coordinator`):
// the first server and its TLS context, and the others as alternates, each expecting
// its own host name in the server's certificate unless serverName names one for all.
struct ServerList {
  net::Endpoint first;
  std::shared_ptr<const net::TlsContext> tls;
  std::vector<AlternateServer> alternates;
};
// `tlsOptions` apply to every server's context (e.g. resumption off).
Result<ServerList> serverList(const std::string& addresses, const net::TlsIdentity& identity,
                              const std::string& serverName, const net::TlsOptions& tlsOptions = {});

struct ParticipantOptions {
  net::Endpoint coordinator;
  // Tried in turn after `coordinator` whenever a connection or a session fails (a relay
  // that died: its clients move to another relay, or to the coordinator); back to
  // `coordinator` after the last. Each new server settles the updates in flight as any
  // reconnect does (one that does not know them rolls them back into the memory).
  std::vector<AlternateServer> alternates;
  std::string id;  // informative; the certificate decides
  net::ConnectionLimits limits;
  std::chrono::milliseconds backoffInitial{200};   // first reconnect delay
  std::chrono::milliseconds backoffMax{5'000};     // delays double up to this, with jitter
  std::chrono::milliseconds giveUpAfter{300'000};  // stop after failing this long without a Welcome
  uint64_t seed = 0;                               // local randomness (sampler, jitter)
  // Test-only (the crash-point test): when training completes, write here the sum of
  // every difference this client computed ("computed v0 v1 ...") and its uplink memory
  // ("memory v0 v1 ..."). Their difference is what the coordinator must have applied.
  std::string auditOut;
  // Test-only: this client is hostile (client::Attack; tests/cli/attack_test.sh).
  Attack attack;
  // Federated evaluation: this fraction of the examples (a seeded draw) is held out of
  // training, and the model is evaluated on it when the coordinator asks
  // (RoundAssign.evaluate). 0 = none held out.
  double evalFraction = 0;
  // A device this many times slower than the machine it runs on (>= 1): after each
  // round's training the client waits (slowdown - 1) x the time the training took, and
  // reports slowdown x that time as its duration (under overlap the worker thread waits
  // after the background steps, so the next update cannot leave before them). For benchmarks and tests of uneven
  // fleets on one machine (bench-federation --hetero, the async CLI test).
  double slowdown = 1.0;
  // A relay (starling-relay) acts as a client of its coordinator without data of its
  // own: onWelcome sees each Welcome before the Learner does (an error ends run());
  // localWork, when set, replaces local training: it gets the Learner caught up to the
  // assignment's base model and returns the update (Learner::submit), and the Learner
  // builds no Trainer. kTimeout from it: no update for that round (the client says
  // goodbye with the reason and joins again).
  std::function<Status(const wire::WelcomeMsg&)> onWelcome;
  std::function<Result<LocalUpdate>(Learner&, const wire::RoundAssignMsg&)> localWork;
  // The roles (net::Role, from its certificate) a server may have for this client to
  // train with it; empty: any server of the CA (a coordinator or a relay). A relay
  // lists the coordinator only.
  std::vector<net::Role> serverRoles;
  // The examples Hello announces (the coordinator's FedAvg weight n_k), when the shard
  // does not stand for the client's data (ShadowSync: the app trains on data the
  // library never sees). Unset: the shard's examples, held-out ones excluded.
  std::optional<uint64_t> announcedExamples;
  // Sparse models (docs/sparse.md): offer the coordinator the first-layer rows this
  // client's data touches, in buckets of this many rows (coarser buckets reveal less
  // of which features the client holds and move more rows); a coordinator that takes
  // them has the client train the compact model of those rows. 0 = offer none. The
  // data is then loaded before the first Hello (the offer is made from it).
  uint32_t rowBucket = 0;
  // A relay: the address its own clients reach it at, said in Hello (Hello.listen) so
  // that the coordinator's placement can send clients here ("" = none).
  std::string advertise;
  // A relay with sparse rows upstream (starling-relay --sparse-rows): the rows to offer
  // at each Hello, instead of rows from data (null, or nullopt from it: offer none); the
  // Welcome's sparse_rows then makes the Learner the compact model of offer.covered,
  // whose inputs are the coordinator's model's (there is no data to check them on).
  std::function<std::optional<RowOffer>()> rowSource;
  // Asked after each verdict once no update is pending (round, accepted): true makes the
  // client say goodbye and join the same server again at once, offering rowSource()'s
  // rows anew (a relay whose clients' rows changed, after its flushing update).
  std::function<bool(uint64_t, bool)> rejoinAfter;
};

struct ParticipantStats {
  uint64_t roundsTrained = 0;
  uint64_t roundsAccepted = 0;
  uint64_t roundsRejected = 0;
  uint64_t roundsOverlapped = 0;  // Overlap Local-SGD: rounds whose steps ran before their assignment
  uint64_t connections = 0;
  uint64_t resyncs = 0;    // dense models received
  uint64_t bytesUp = 0;    // update payload bytes sent
  uint64_t bytesDown = 0;  // assignment frame bytes received
  uint64_t heldRound = 0;
  uint64_t checksum = 0;
  double lastLoss = 0;
};

// Training data that loads after the client has joined, so that joining does not wait
// for it: numExamples is reported in Hello; load() runs once, on a thread of its own
// started when the first Hello has been sent, and must return exactly that many
// examples. The Participant answers heartbeats meanwhile and holds the task (Welcome)
// until the data is there; a RoundAssign waits for it. A load failure ends run() with
// that failure (it is not retried).
struct DeferredData {
  uint64_t numExamples = 0;
  std::function<Result<data::Dataset>()> load;
};

class Participant {
 public:
  // shard: this client's examples; must outlive the Participant.
  Participant(const data::Dataset& shard, ParticipantOptions options, std::shared_ptr<spdlog::logger> log);
  // The Participant owns the data once loaded.
  Participant(DeferredData data, ParticipantOptions options, std::shared_ptr<spdlog::logger> log);
  ~Participant();
  Participant(const Participant&) = delete;
  Participant& operator=(const Participant&) = delete;

  // Runs until the coordinator says training is complete (ok), or a failure that
  // retrying cannot fix: refused authentication, an unusable task, or no Welcome
  // for giveUpAfter.
  asio::awaitable<Status> run(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls);

  const ParticipantStats& stats() const { return stats_; }
  // The global model as this client last knew it: the compact model of its rows when
  // the last Welcome took them (compactRows() non-empty), else the whole model.
  std::span<const float> model() const { return learner_.model(); }
  // The first-layer rows model() covers when the last Welcome took this client's rows
  // (ParticipantOptions::rowBucket or rowSource): the compact model's input k is row
  // rows[k], ascending. Empty when it trains the whole model. Not while run() is in
  // progress.
  std::span<const uint32_t> compactRows() const {
    return trainsCompact_ && rowOffer_ ? std::span<const uint32_t>(rowOffer_->covered) : std::span<const uint32_t>();
  }

 private:
  // One connection: ok when training is complete, kClosed/kIo/kTimeout to retry.
  asio::awaitable<Status> session(net::Connection& conn, bool& welcomed);
  // A send failed because the coordinator closed the connection (`failed`). It may
  // have ended the task and said goodbye before closing while this client trained:
  // reads what it sent (a few seconds at most) and returns ok after a Bye that says
  // training is complete; otherwise kClosed, with the goodbye's reason when there was
  // one (a coordinator stopping), and the caller reconnects.
  asio::awaitable<Status> goodbyeAfter(net::Connection& conn, Status failed);
  // The coordinator said training is complete: settles what is pending, writes the
  // audit, logs that the task is finished (`how`: how the goodbye came).
  void taskEnded(std::string_view how);
  // Overlap Local-SGD: after an update is sent, the Learner's next steps (and
  // --slowdown's wait for them) start on a worker thread; finishBackground() waits for
  // them without blocking the executor and returns their failure, if any.
  void startBackground();
  asio::awaitable<Status> finishBackground();
  void startLoading();
  bool dataReady() const;
  Status finishLoading();  // waits for the loader; ok at once when the data is there
  Status welcome(const wire::WelcomeMsg& welcome);
  void syncStats();  // stats_ <- the Learner's counters (held round and checksum: after each catch-up)
  void holdOut();    // once the data is there: ParticipantOptions::evalFraction of it for evaluation
  // Welcome's categorical vocabulary and feature scaling (task.categorical-vocabulary,
  // task.standardize): the training and held-out parts re-encoded and scaled once; the
  // same again (a reconnect) changes nothing, another one is refused.
  Status scale(const wire::WelcomeMsg& welcome);
  // Sparse models: the rows offered in Hello (made once, from the data as loaded), and,
  // once a Welcome takes them, the training and held-out examples over those rows.
  Status makeRowOffer();
  Status compact();
  const data::Dataset* heldOutData() const;
  // A relay's Bye.redirect: the index (0 = coordinator, i = alternates[i - 1]) of the
  // server to train with next, or nullopt when the address is none of this client's.
  std::optional<std::size_t> serverAt(
      const std::string& address) const;  // the held-out part as the Learner evaluates it (or null)

  const data::Dataset* shard_ = nullptr;  // null until deferred data has loaded
  uint64_t numExamples_ = 0;              // all of the data, held-out examples included
  DeferredData deferred_;
  std::future<Result<data::Dataset>> loading_;
  std::chrono::steady_clock::time_point loadStarted_;
  std::optional<data::Dataset> owned_;                // loaded deferred data
  std::optional<data::Dataset> trainPart_, heldOut_;  // evalFraction > 0: the two parts of the data
  bool heldOutDone_ = false;
  // Feature scaling and vocabulary: the unscaled training examples (what a StatsRequest
  // is answered from), the prepared copies the Learner uses, and what they were made with.
  const data::Dataset* rawTrain_ = nullptr;
  std::optional<data::Dataset> scaledTrain_, scaledHeldOut_;
  std::vector<double> scaledMean_, scaledStd_;
  data::CategoryVocabulary scaledVocabulary_;
  std::optional<RowOffer> rowOffer_;
  std::optional<data::Dataset> compactTrain_, compactHeldOut_;
  bool trainsCompact_ = false;           // the last Welcome took the rows: the Learner holds the compact model
  std::optional<std::size_t> redirect_;  // a relay's Bye.redirect: the server to try next
  std::size_t server_ = 0;               // the server of the session: run()'s `at`
  bool dataFailed_ = false;
  ParticipantOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  ParticipantStats stats_;
  uint64_t seed_ = 0;  // clientSeed(options.seed, options.id): the Learner's, and the reconnect jitter's
  Learner learner_;
  // The worker of startBackground(); after learner_, so that it is destroyed (joined)
  // before the Learner it trains.
  std::future<Status> background_;
};

}  // namespace starling::client
