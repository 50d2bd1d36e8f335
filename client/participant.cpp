#include "starling/client/participant.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "starling/data/feature_scaling.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/row_view.hpp"
#include "starling/net/certificates.hpp"

namespace starling::client {
namespace fb = wire::fb;

namespace {
// How long a connection the coordinator closed is read for a goodbye it sent first.
constexpr std::chrono::seconds kGoodbyeWait{2};

LearnerOptions learnerOptions(uint64_t seed, const ParticipantOptions& o) {
  LearnerOptions l;
  l.seed = seed;
  l.audit = !o.auditOut.empty();
  l.trains = !o.localWork;
  l.attack = o.attack;
  return l;
}
}  // namespace

Result<ServerList> serverList(const std::string& addresses, const net::TlsIdentity& identity,
                              const std::string& serverName, const net::TlsOptions& tlsOptions) {
  ServerList out;
  std::size_t n = 0;
  for (std::size_t start = 0; start <= addresses.size();) {
    std::size_t end = addresses.find(',', start);
    if (end == std::string::npos) end = addresses.size();
    std::string address = addresses.substr(start, end - start);
    start = end + 1;
    while (!address.empty() && address.front() == ' ')
      address.erase(address.begin());
    while (!address.empty() && address.back() == ' ')
      address.pop_back();
    if (address.empty()) continue;
    auto endpoint = net::parseEndpoint(address);
    if (!endpoint) return endpoint.status();
    const std::string host = serverName.empty() ? endpoint->host : serverName;
    if (n++ == 0) {
      auto tls = net::TlsContext::create(net::TlsRole::kClient, identity, host, tlsOptions);
      if (!tls) return tls.status();
      out.first = *endpoint;
      out.tls = *tls;
      continue;
    }
    std::shared_ptr<const net::TlsContext> tls;  // another host: its own expected name
    if (host != (serverName.empty() ? out.first.host : serverName)) {
      auto made = net::TlsContext::create(net::TlsRole::kClient, identity, host, tlsOptions);
      if (!made) return made.status();
      tls = *made;
    }
    out.alternates.push_back({*endpoint, std::move(tls)});
  }
  if (n == 0) return Status(StatusCode::kInvalidArgument, "no address (HOST:PORT)");
  return out;
}

Participant::Participant(const data::Dataset& shard, ParticipantOptions options, std::shared_ptr<spdlog::logger> log)
    : shard_(&shard),
      numExamples_(shard.size()),
      options_(std::move(options)),
      log_(std::move(log)),
      seed_(clientSeed(options_.seed, options_.id)),
      learner_(learnerOptions(seed_, options_), log_) {}

Participant::Participant(DeferredData data, ParticipantOptions options, std::shared_ptr<spdlog::logger> log)
    : numExamples_(data.numExamples),
      deferred_(std::move(data)),
      options_(std::move(options)),
      log_(std::move(log)),
      seed_(clientSeed(options_.seed, options_.id)),
      learner_(learnerOptions(seed_, options_), log_) {}

void Participant::startLoading() {
  if (shard_ != nullptr || loading_.valid()) return;
  loadStarted_ = std::chrono::steady_clock::now();
  std::function<Result<data::Dataset>()> load = std::move(deferred_.load);
  deferred_.load = nullptr;
  if (!load) load = [] { return Result<data::Dataset>(Status(StatusCode::kInvalidArgument, "no loader given")); };
  loading_ = std::async(std::launch::async, std::move(load));
}

bool Participant::dataReady() const {
  return shard_ != nullptr ||
         (loading_.valid() && loading_.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

Status Participant::finishLoading() {
  if (shard_ != nullptr) return Status::ok();
  startLoading();
  Result<data::Dataset> loaded = loading_.get();  // blocks while the loader thread runs
  Status st = loaded.status();
  if (st && loaded->size() != numExamples_)
    st = Status(StatusCode::kMalformed,
                fmt::format("{} examples loaded, {} announced (held-out ones included)", loaded->size(), numExamples_));
  if (!st) {
    dataFailed_ = true;
    return st.withContext("loading the training data");
  }
  owned_.emplace(std::move(loaded).value());
  shard_ = &*owned_;
  log_->info("training data loaded: {} examples, {:.2f} s after joining", shard_->size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - loadStarted_).count());
  return Status::ok();
}

void Participant::holdOut() {
  if (heldOutDone_) return;
  heldOutDone_ = true;
  if (heldOutCount(shard_->size(), options_.evalFraction) == 0) return;
  std::vector<uint32_t> rows(shard_->size());
  for (uint32_t i = 0; i < rows.size(); ++i)
    rows[i] = i;
  const HeldOutSplit split = splitHeldOut(rows, options_.evalFraction, seed_ ^ 0xe7a1u);
  heldOut_.emplace(shard_->subset(split.heldOut));
  trainPart_.emplace(shard_->subset(split.kept));
  shard_ = &*trainPart_;
  owned_.reset();  // the parts are copies
  learner_.setHeldOut(&*heldOut_);
  log_->info("holding out {} of {} examples for federated evaluation", heldOut_->size(),
             heldOut_->size() + trainPart_->size());
}

Status Participant::scale(const wire::WelcomeMsg& w) {
  if (w.featureMean.empty() && w.categoricalVocabulary.empty()) return Status::ok();
  const data::CategoryVocabulary vocabulary = vocabularyOf(w.categoricalVocabulary);
  if (rawTrain_ != nullptr) {
    if (scaledMean_ == w.featureMean && scaledStd_ == w.featureStd && scaledVocabulary_ == vocabulary)
      return Status::ok();
    return Status(StatusCode::kInvalidArgument,
                  "the coordinator's feature scaling or vocabulary changed since this client prepared its data "
                  "(restart the client)");
  }
  // The categorical columns over the agreed vocabulary first, then the scaling (which
  // leaves their one-hot features as they are).
  // (One new copy of the data at a time, not a copy of the original first.)
  auto prepare = [&](const data::Dataset& d) -> Result<data::Dataset> {
    std::optional<data::Dataset> recoded;
    if (!vocabulary.empty()) {
      auto r = data::recodeCategories(d, vocabulary);
      if (!r) return r.status().withContext("the Welcome's categorical vocabulary");
      recoded.emplace(std::move(*r));
    }
    if (w.featureMean.empty()) return std::move(*recoded);  // not both empty: returned above
    auto scaled =
        data::scaleFeatures(recoded ? *recoded : d, data::FeatureScaling{w.featureMean, w.featureStd, w.featureCentre});
    if (!scaled) return scaled.status().withContext("the Welcome's feature scaling");
    return scaled;
  };
  auto train = prepare(*shard_);
  if (!train) return train.status();
  std::optional<data::Dataset> held;
  if (heldOut_) {
    auto h = prepare(*heldOut_);
    if (!h) return h.status();
    held.emplace(std::move(*h));
  }
  rawTrain_ = shard_;
  scaledTrain_.emplace(std::move(*train));
  shard_ = &*scaledTrain_;
  if (held) {
    scaledHeldOut_.emplace(std::move(*held));
    learner_.setHeldOut(&*scaledHeldOut_);
  }
  scaledMean_ = w.featureMean;
  scaledStd_ = w.featureStd;
  scaledVocabulary_ = vocabulary;
  if (!vocabulary.empty())
    log_->info("categorical columns one-hot over the statistics round's vocabulary ({} columns)", vocabulary.size());
  if (!w.featureMean.empty())
    log_->info("features scaled by the statistics round's {} ({} features)",
               w.featureCentre ? "mean and std (z-scores)" : "std (sparse data: divided, not centred)",
               w.featureMean.size());
  return Status::ok();
}

Status Participant::welcome(const wire::WelcomeMsg& w) {
  if (Status loaded = finishLoading(); !loaded) return loaded;
  holdOut();
  if (Status st = scale(w); !st) return st;
  if (options_.onWelcome)
    if (Status st = options_.onWelcome(w); !st) return st;
  trainsCompact_ = false;
  if (w.sparseRows && options_.rowSource) {  // a relay: no data of its own to restrict
    if (!rowOffer_) return Status(StatusCode::kMalformed, "the Welcome trains rows this relay did not offer");
    auto inputs = model::specInputs(w.modelSpec);
    if (!inputs) return inputs.status();
    auto cw = compactWelcome(w, *rowOffer_, *inputs);
    if (!cw) return cw.status();
    if (Status st = learner_.welcome(*cw, *shard_); !st) return st;
    trainsCompact_ = true;
    log_->info("training the compact model {} of the {} rows offered", cw->modelSpec, rowOffer_->covered.size());
  } else if (w.sparseRows) {
    if (!rowOffer_) return Status(StatusCode::kMalformed, "the Welcome trains rows this client did not offer");
    auto cw = compactWelcome(w, *rowOffer_, shard_->featureDim());
    if (!cw) return cw.status();
    if (Status st = compact(); !st) return st;
    learner_.setHeldOut(compactHeldOut_ ? &*compactHeldOut_ : nullptr);
    if (Status st = learner_.welcome(*cw, *compactTrain_); !st) return st;
    trainsCompact_ = true;
    log_->info("training the compact model {} of the {} rows this client offered ({} touched)", cw->modelSpec,
               rowOffer_->covered.size(), rowOffer_->touched);
  } else {
    learner_.setHeldOut(heldOutData());
    if (Status st = learner_.welcome(w, *shard_); !st) return st;
    if (rowOffer_)
      log_->info(
          "the coordinator did not take the {} rows this client offered: training the whole model {} "
          "(the coordinator's log says why)",
          rowOffer_->covered.size(), w.modelSpec);
  }
  syncStats();
  log_->info("joined task '{}' as '{}' (coordinator at round {}, model {})", w.task, w.clientId, w.round, w.modelSpec);
  return Status::ok();
}

std::optional<std::size_t> Participant::serverAt(const std::string& address) const {
  auto endpoint = net::parseEndpoint(address);
  if (!endpoint) return std::nullopt;
  const auto same = [&](const net::Endpoint& e) { return e.toString() == endpoint->toString(); };
  if (same(options_.coordinator)) return 0;
  for (std::size_t i = 0; i < options_.alternates.size(); ++i)
    if (same(options_.alternates[i].endpoint)) return i + 1;
  return std::nullopt;
}

const data::Dataset* Participant::heldOutData() const {
  if (scaledHeldOut_) return &*scaledHeldOut_;
  return heldOut_ ? &*heldOut_ : nullptr;
}

Status Participant::makeRowOffer() {
  if (options_.rowSource) {  // a relay: its clients' rows, as they are now
    rowOffer_ = options_.rowSource();
    return Status::ok();
  }
  if (options_.rowBucket == 0 || rowOffer_) return Status::ok();
  if (Status loaded = finishLoading(); !loaded) return loaded;
  holdOut();
  std::vector<const data::Dataset*> parts{shard_};
  if (heldOut_) parts.push_back(&*heldOut_);
  auto offer = offerRows(parts, options_.rowBucket);
  if (!offer) return offer.status().withContext("offering this client's rows");
  rowOffer_.emplace(std::move(*offer));
  log_->info("offering {} rows in buckets of {} ({} touched by the data, {} bytes)", rowOffer_->covered.size(),
             rowOffer_->bucket, rowOffer_->touched, rowOffer_->bytes.size());
  return Status::ok();
}

Status Participant::compact() {
  if (compactTrain_) return Status::ok();  // made once: the Learner trains on it
  auto train = data::restrictFeatures(*shard_, rowOffer_->covered);
  if (!train) return train.status().withContext("the compact model's training data");
  if (const data::Dataset* held = heldOutData()) {
    auto h = data::restrictFeatures(*held, rowOffer_->covered);
    if (!h) return h.status().withContext("the compact model's held-out data");
    compactHeldOut_.emplace(std::move(*h));
  }
  compactTrain_.emplace(std::move(*train));
  return Status::ok();
}

void Participant::syncStats() {
  const LearnerStats& l = learner_.stats();
  stats_.roundsTrained = l.roundsTrained;
  stats_.roundsAccepted = l.roundsAccepted;
  stats_.roundsRejected = l.roundsRejected;
  stats_.roundsOverlapped = l.overlapped;
  stats_.resyncs = l.resyncs;
  stats_.bytesUp = l.bytesUp;
  stats_.lastLoss = l.lastLoss;
}

Participant::~Participant() = default;

void Participant::startBackground() {
  if (!learner_.backgroundPending()) return;
  const double slowdown = options_.slowdown;
  background_ = std::async(std::launch::async, [this, slowdown]() -> Status {
    const auto started = std::chrono::steady_clock::now();
    auto stats = learner_.advance();
    if (!stats) return stats.status().withContext("training in the background");
    if (slowdown > 1.0)
      std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          (std::chrono::steady_clock::now() - started) * (slowdown - 1.0)));
    return Status::ok();
  });
}

asio::awaitable<Status> Participant::finishBackground() {
  if (!background_.valid()) co_return Status::ok();
  // Polled: a worker thread's end cannot complete an Asio wait without an executor of
  // its own, and a millisecond is nothing next to tau steps.
  asio::steady_timer poll(co_await asio::this_coro::executor);
  while (background_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    poll.expires_after(std::chrono::milliseconds(1));
    co_await poll.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  co_return background_.get();
}

asio::awaitable<Status> Participant::run(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls) {
  std::mt19937_64 jitter(seed_);
  auto failingSince = std::chrono::steady_clock::now();
  auto delay = options_.backoffInitial;
  // The address tried now: 0 = options_.coordinator, i = alternates[i - 1]. A failed
  // connection or session moves on to the next, in turn.
  std::size_t at = 0;
  for (;;) {
    const net::Endpoint& endpoint = at == 0 ? options_.coordinator : options_.alternates[at - 1].endpoint;
    std::shared_ptr<const net::TlsContext> context = tls;
    if (at > 0 && options_.alternates[at - 1].tls) context = options_.alternates[at - 1].tls;
    auto conn = co_await net::connect(executor, endpoint, context, options_.limits);
    Status st;
    bool welcomed = false;
    if (!conn) {
      st = conn.status();
      // A refused certificate will be refused again: give up now.
      if (st.code() == StatusCode::kUnauthenticated)
        co_return st.withContext(fmt::format("connecting to {}", endpoint.toString()));
    } else if (const net::Role role = net::roleFromOu(conn->peer().role, net::Role::kCoordinator);
               !options_.serverRoles.empty() && std::find(options_.serverRoles.begin(), options_.serverRoles.end(),
                                                          role) == options_.serverRoles.end()) {
      // A server of the CA in another role (a relay where a coordinator is wanted): a
      // reconnect would find it again.
      co_await conn->close();
      co_return Status(
          StatusCode::kUnauthenticated,
          fmt::format("{} at {} has the certificate of a {}, not of a {}", conn->peer().commonName, endpoint.toString(),
                      net::roleName(role), net::roleName(options_.serverRoles.front())));
    } else {
      ++stats_.connections;
      log_->debug("connected to {} over TLS ({}{})", endpoint.toString(), conn->peer().cipherSuite,
                  conn->peer().resumed ? ", resumed session" : "");
      server_ = at;
      st = co_await session(*conn, welcomed);
      if (st.isOk() || dataFailed_) co_return st;
      if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kUnauthenticated ||
          st.code() == StatusCode::kUnsupported)
        co_return st;
    }
    if (welcomed) {
      failingSince = std::chrono::steady_clock::now();
      delay = options_.backoffInitial;
    }
    if (std::chrono::steady_clock::now() - failingSince > options_.giveUpAfter)
      co_return st.withContext(
          fmt::format("no session with {} for {} s", endpoint.toString(), options_.giveUpAfter.count() / 1000));
    std::string next;
    if (redirect_) {  // a relay's placement: the named server, at once
      // The backoff is kept (a Welcome resets it): a client sent back and forth between a
      // relay that redirects it and one that is down backs off as after any failure.
      at = *redirect_;
      redirect_.reset();
      const net::Endpoint& to = at == 0 ? options_.coordinator : options_.alternates[at - 1].endpoint;
      log_->info("{}; training with {} now", st.message(), to.toString());
      continue;
    }
    if (!options_.alternates.empty()) {
      at = (at + 1) % (options_.alternates.size() + 1);
      next = fmt::format(" at {}",
                         at == 0 ? options_.coordinator.toString() : options_.alternates[at - 1].endpoint.toString());
    }
    // Full jitter: a random delay in [delay/2, delay], so a fleet does not reconnect in step.
    std::uniform_int_distribution<int64_t> pick(delay.count() / 2, delay.count());
    auto wait = std::chrono::milliseconds(pick(jitter));
    log_->warn("{}; reconnecting{} in {} ms", st.message(), next, wait.count());
    asio::steady_timer timer(executor, wait);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    delay = std::min(delay * 2, options_.backoffMax);
  }
}

void Participant::taskEnded(std::string_view how) {
  // Training is over: an update still pending will never be applied.
  learner_.settleAll(false);
  syncStats();
  if (!options_.auditOut.empty())
    if (Status audit = learner_.writeAudit(options_.auditOut); !audit) log_->error("{}", audit.message());
  log_->info("training complete{}: {} rounds trained, {} accepted; the task is finished", how, stats_.roundsTrained,
             stats_.roundsAccepted);
}

asio::awaitable<Status> Participant::goodbyeAfter(net::Connection& conn, Status failed) {
  // Only a peer that closed (kClosed: end of stream, reset, broken pipe) can have
  // said goodbye first; anything else is retried as before.
  if (failed.code() != StatusCode::kClosed) co_return failed;
  // The frames the coordinator sent before closing are in this side's buffers, so
  // reading them takes no time; the guard only bounds a peer that half-closed.
  asio::steady_timer guard(co_await asio::this_coro::executor, kGoodbyeWait);
  guard.async_wait([stream = std::weak_ptr<net::TlsStream>(conn.stream().shared_from_this())](std::error_code ec) {
    if (auto s = stream.lock(); s && !ec) s->close();
  });
  for (;;) {
    auto msg = co_await conn.receive();
    if (!msg) break;
    if (msg->type() == fb::Body::RoundResult) {
      if (auto r = wire::parseRoundResult(*msg)) learner_.settle(r->round, r->accepted);
    } else if (msg->type() == fb::Body::Bye) {
      auto bye = wire::parseBye(*msg);
      if (!bye) break;
      guard.cancel();
      if (!bye->done) co_return Status(StatusCode::kClosed, "the coordinator said goodbye: " + bye->reason);
      taskEnded(
          " (the coordinator ended the task while this client worked; its goodbye was read after the "
          "connection closed)");
      co_return Status::ok();
    }
  }
  guard.cancel();
  co_return failed;
}

asio::awaitable<Status> Participant::session(net::Connection& conn, bool& welcomed) {
  learner_.forgetReplayIndices();  // the coordinator forgets what this client held on reconnect
  const uint64_t held = learner_.heldRound();
  if (Status offered = makeRowOffer(); !offered) co_return offered;
  wire::HelloMsg hello = wire::clientHello(
      options_.id,
      options_.announcedExamples.value_or(numExamples_ - heldOutCount(numExamples_, options_.evalFraction)), held,
      held > 0 ? learner_.modelChecksum() : 0);
  if (rowOffer_) {
    hello.rowSet = rowOffer_->bytes;
    hello.rowBucket = rowOffer_->bucket;
  }
  hello.listen = options_.advertise;
  const wire::Frame helloFrame = wire::encode(hello);
  Status st = co_await conn.send(helloFrame.bytes());
  if (!st) co_return st;
  // Deferred data loads on a thread of its own from here on: the coordinator has
  // counted this client, and this thread keeps answering heartbeats meanwhile.
  startLoading();
  std::optional<wire::Message> heldWelcome;  // a Welcome waiting for the data
  bool sentStats = false;                    // FeatureStats sent, no Welcome yet

  for (;;) {
    auto msg = co_await conn.receive();
    if (!msg) co_return msg.status();
    // The data has arrived, or a round needs it: act on the held Welcome first.
    if (heldWelcome && (dataReady() || msg->type() == fb::Body::RoundAssign)) {
      if (Status bg = co_await finishBackground(); !bg) co_return bg;
      auto w = wire::parseWelcome(*heldWelcome);
      Status st2 = w ? welcome(*w) : w.status();
      heldWelcome.reset();
      if (!st2) co_return st2;
    }
    switch (msg->type()) {
      case fb::Body::Welcome: {
        welcomed = true;
        sentStats = false;
        if (!dataReady()) {
          heldWelcome.emplace(std::move(msg).value());
          break;
        }
        auto w = wire::parseWelcome(*msg);
        if (!w) co_return w.status();
        if (Status bg = co_await finishBackground(); !bg) co_return bg;
        if (Status st2 = welcome(*w); !st2) co_return st2;
        break;
      }
      case fb::Body::RoundAssign: {
        auto a = wire::parseRoundAssign(*msg);
        if (!a) co_return a.status();
        stats_.bytesDown += msg->sizeBytes();
        if (!learner_.hasTask()) co_return Status(StatusCode::kMalformed, "RoundAssign before Welcome");
        // Overlap: the steps since the last update may still run; this assignment is
        // their boundary. (Reading nothing meanwhile: no idle timeout, as for training.)
        if (background_.valid()) {
          conn.stream().setDeadline(net::TlsStream::Clock::time_point::max());
          if (Status bg = co_await finishBackground(); !bg) co_return bg;
        }
        // Updates still awaiting their verdicts stay pending (a late one is applied with a
        // later round); the Learner takes the oldest as lost past its limit.
        Status caught = learner_.catchUp(*a);
        syncStats();
        stats_.heldRound = learner_.heldRound();
        stats_.checksum = learner_.modelChecksum();
        if (!caught) {
          log_->warn("{}", caught.message());
          const wire::Frame errorFrame = wire::encode(wire::ErrorMsg{fb::ErrorCode::Unexpected, caught.message()});
          st = co_await conn.send(errorFrame.bytes());
          if (!st) co_return co_await goodbyeAfter(conn, st);
          break;
        }
        // Training and --slowdown's wait read nothing: this side's idle timeout must not
        // cut the connection meanwhile (the coordinator's own covers a round's deadline).
        conn.stream().setDeadline(net::TlsStream::Clock::time_point::max());
        const auto trainStarted = std::chrono::steady_clock::now();
        auto update = options_.localWork ? options_.localWork(learner_, *a) : learner_.train(*a);
        if (!update && update.status().code() == StatusCode::kTimeout && options_.localWork) {
          // The work elsewhere did not end in time (a relay's local rounds): no update for
          // this round. The client says so and leaves (the coordinator frees its
          // assignment and records why), reads a goodbye that may have come meanwhile,
          // and joins again.
          log_->warn("{}; leaving and joining again", update.status().message());
          const wire::Frame byeFrame = wire::encode(wire::ByeMsg{update.status().message(), false, {}});
          (void)co_await conn.send(byeFrame.bytes());
          co_return co_await goodbyeAfter(conn, Status(StatusCode::kClosed, update.status().message()));
        }
        if (!update) co_return update.status();
        syncStats();
        wire::UpdateMsg updateMsg = update->message();
        if (options_.slowdown > 1.0) {
          const auto took = std::chrono::steady_clock::now() - trainStarted;
          asio::steady_timer slow(
              co_await asio::this_coro::executor,
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(took * (options_.slowdown - 1.0)));
          co_await slow.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
          updateMsg.durationMs = static_cast<uint32_t>(std::min<double>(
              std::numeric_limits<uint32_t>::max(), std::ceil(updateMsg.durationMs * options_.slowdown)));
        }
        const wire::Frame updateFrame = wire::encode(updateMsg);
        st = co_await conn.send(updateFrame.bytes());
        if (!st) co_return co_await goodbyeAfter(conn, st);
        startBackground();
        break;
      }
      case fb::Body::StatsRequest: {
        // Before the Welcome of a task that standardizes: the sums of the unscaled
        // training examples (held-out ones excluded).
        auto request = wire::parseStatsRequest(*msg);
        if (!request) co_return Status(StatusCode::kMalformed, "malformed StatsRequest");
        if (Status loaded = finishLoading(); !loaded) co_return loaded;
        holdOut();
        const wire::Frame statsFrame =
            wire::encode(shardStatistics(rawTrain_ != nullptr ? *rawTrain_ : *shard_, request->categories));
        log_->info("sent the feature statistics of {} training examples", shard_->size());
        st = co_await conn.send(statsFrame.bytes());
        if (!st) co_return co_await goodbyeAfter(conn, st);
        sentStats = true;
        break;
      }
      case fb::Body::RoundResult: {
        auto r = wire::parseRoundResult(*msg);
        if (!r) co_return r.status();
        learner_.settle(r->round, r->accepted);
        syncStats();
        if (!r->accepted) log_->warn("update for round {} rejected: {}", r->round, r->reason);
        if (options_.rejoinAfter && learner_.pending().empty() && options_.rejoinAfter(r->round, r->accepted)) {
          const std::string why = "the rows to train changed: joining again with the new ones";
          const wire::Frame byeFrame = wire::encode(wire::ByeMsg{why, false, {}});
          (void)co_await conn.send(byeFrame.bytes());
          co_await conn.close();
          redirect_ = server_;  // the same server, at once
          co_return Status(StatusCode::kClosed, why);
        }
        break;
      }
      case fb::Body::Heartbeat: {
        // Answer, so the coordinator knows this client is alive between rounds.
        auto beat = wire::parseHeartbeat(*msg);
        if (!beat) co_return beat.status();
        const wire::Frame beatFrame = wire::encode(*beat);
        st = co_await conn.send(beatFrame.bytes());
        if (!st) co_return co_await goodbyeAfter(conn, st);
        break;
      }
      case fb::Body::Bye: {
        auto bye = wire::parseBye(*msg);
        if (!bye) co_return bye.status();
        if (!bye->redirect.empty() && !bye->done) {
          redirect_ = serverAt(bye->redirect);
          if (!redirect_)
            log_->warn("told to train with {}, which is none of this client's servers (--coordinator): staying",
                       bye->redirect);
          co_return Status(StatusCode::kClosed, "redirected: " + bye->reason);
        }
        if (bye->done) {
          taskEnded("");
          co_await conn.close();
          co_return Status::ok();
        }
        co_return Status(StatusCode::kClosed, "the coordinator said goodbye: " + bye->reason);
      }
      case fb::Body::Error: {
        auto e = wire::parseError(*msg);
        if (!e) co_return e.status();
        // Missing capabilities will be missing at the next connection too, a certificate
        // whose role cannot train (an operator's) keeps its role, and statistics refused
        // as malformed would be sent again from the same data: give up.
        if (e->code == fb::ErrorCode::Malformed && sentStats)
          co_return Status(StatusCode::kInvalidArgument,
                           "the coordinator refused this client's feature statistics: " + e->message);
        const StatusCode code = e->code == fb::ErrorCode::Unsupported       ? StatusCode::kUnsupported
                                : e->code == fb::ErrorCode::Unauthenticated ? StatusCode::kUnauthenticated
                                                                            : StatusCode::kClosed;
        co_return Status(code, "the coordinator reported an error: " + e->message);
      }
      default:
        co_return Status(StatusCode::kMalformed, fmt::format("unexpected {} from the coordinator", msg->typeName()));
    }
  }
}

}  // namespace starling::client
