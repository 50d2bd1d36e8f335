#include "starling/client/participant.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdio>
#include <random>

#include "starling/client/replay.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/precision.hpp"
#include "starling/util/checksum.hpp"

namespace starling::client {
namespace fb = wire::fb;

namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 27);
}

}  // namespace

Participant::Participant(const data::Dataset& shard, ParticipantOptions options, std::shared_ptr<spdlog::logger> log)
    : shard_(&shard), numExamples_(shard.size()), options_(std::move(options)), log_(std::move(log)) {
  seed_ = options_.seed;
  for (char ch : options_.id)
    seed_ = mix(seed_, static_cast<unsigned char>(ch));
}

Participant::Participant(DeferredData data, ParticipantOptions options, std::shared_ptr<spdlog::logger> log)
    : numExamples_(data.numExamples), deferred_(std::move(data)), options_(std::move(options)), log_(std::move(log)) {
  seed_ = options_.seed;
  for (char ch : options_.id)
    seed_ = mix(seed_, static_cast<unsigned char>(ch));
}

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
                fmt::format("{} examples loaded, {} announced in Hello", loaded->size(), numExamples_));
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

Status Participant::welcome(const wire::WelcomeMsg& w) {
  if (Status loaded = finishLoading(); !loaded) return loaded;
  if (Status setup = setUpTask(w); !setup) return setup;
  initSeed_ = w.initSeed;
  // Nothing held: build the round-0 model as the coordinator did; the first
  // assignment catches up from it and its checksum proves it (or brings a dense copy).
  if (heldRound_ == 0) buildInitialModel();
  // Settle the updates that were in flight when the last connection ended: still held by
  // the coordinator (their verdicts come later), applied (and durable), or lost.
  const auto listed = [](const std::vector<uint64_t>& rounds, uint64_t r) {
    return std::find(rounds.begin(), rounds.end(), r) != rounds.end();
  };
  for (uint64_t r : std::vector<uint64_t>(pending_)) {
    if (listed(w.heldRounds, r)) continue;
    // A coordinator that does not list its accepted rounds names the last one only.
    const bool applied = w.acceptedRounds ? listed(*w.acceptedRounds, r) : w.lastAcceptedRound >= r;
    if (!applied)
      log_->warn("the update for round {} was not applied (coordinator at round {}): rolled back into memory", r,
                 w.round);
    settle(applied, r);
  }
  log_->info("joined task '{}' as '{}' (coordinator at round {}, model {})", w.task, w.clientId, w.round, modelSpec_);
  return Status::ok();
}

Participant::~Participant() = default;

asio::awaitable<Status> Participant::run(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls) {
  std::mt19937_64 jitter(seed_);
  auto failingSince = std::chrono::steady_clock::now();
  auto delay = options_.backoffInitial;
  for (;;) {
    auto conn = co_await net::connect(executor, options_.coordinator, tls, options_.limits);
    Status st;
    bool welcomed = false;
    if (!conn) {
      st = conn.status();
      // A refused certificate will be refused again: give up now.
      if (st.code() == StatusCode::kUnauthenticated)
        co_return st.withContext(fmt::format("connecting to {}", options_.coordinator.toString()));
    } else {
      ++stats_.connections;
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
      co_return st.withContext(fmt::format("no session with {} for {} s", options_.coordinator.toString(),
                                           options_.giveUpAfter.count() / 1000));
    // Full jitter: a random delay in [delay/2, delay], so a fleet does not reconnect in step.
    std::uniform_int_distribution<int64_t> pick(delay.count() / 2, delay.count());
    auto wait = std::chrono::milliseconds(pick(jitter));
    log_->warn("{}; reconnecting in {} ms", st.message(), wait.count());
    asio::steady_timer timer(executor, wait);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    delay = std::min(delay * 2, options_.backoffMax);
  }
}

asio::awaitable<Status> Participant::session(net::Connection& conn, bool& welcomed) {
  lastIndices_.reset();  // the coordinator forgets what this client held on reconnect
  const wire::HelloMsg hello =
      wire::clientHello(options_.id, numExamples_, heldRound_, heldRound_ > 0 ? checksum64(xhat_) : 0);
  const wire::Frame helloFrame = wire::encode(hello);
  Status st = co_await conn.send(helloFrame.bytes());
  if (!st) co_return st;
  // Deferred data loads on a thread of its own from here on: the coordinator has
  // counted this client, and this thread keeps answering heartbeats meanwhile.
  startLoading();
  std::optional<wire::Message> heldWelcome;  // a Welcome waiting for the data

  for (;;) {
    auto msg = co_await conn.receive();
    if (!msg) co_return msg.status();
    // The data has arrived, or a round needs it: act on the held Welcome first.
    if (heldWelcome && (dataReady() || msg->type() == fb::Body::RoundAssign)) {
      auto w = wire::parseWelcome(*heldWelcome);
      Status st2 = w ? welcome(*w) : w.status();
      heldWelcome.reset();
      if (!st2) co_return st2;
    }
    switch (msg->type()) {
      case fb::Body::Welcome: {
        welcomed = true;
        if (!dataReady()) {
          heldWelcome.emplace(std::move(msg).value());
          break;
        }
        auto w = wire::parseWelcome(*msg);
        if (!w) co_return w.status();
        if (Status st2 = welcome(*w); !st2) co_return st2;
        break;
      }
      case fb::Body::RoundAssign: {
        auto a = wire::parseRoundAssign(*msg);
        if (!a) co_return a.status();
        stats_.bytesDown += msg->sizeBytes();
        if (!trainer_) co_return Status(StatusCode::kMalformed, "RoundAssign before Welcome");
        // Updates still awaiting their verdicts stay pending (a late one is applied with a
        // later round); past kMaxPending the oldest is taken as lost.
        while (pending_.size() >= kMaxPending) {
          log_->warn("round {} assigned with {} updates awaiting verdicts: rolling round {} back", a->round,
                     pending_.size(), pending_.front());
          settle(false, pending_.front());
        }
        if (Status caught = catchUp(*a); !caught) {
          log_->warn("{}", caught.message());
          const wire::Frame errorFrame = wire::encode(wire::ErrorMsg{fb::ErrorCode::Unexpected, caught.message()});
          st = co_await conn.send(errorFrame.bytes());
          if (!st) co_return st;
          break;
        }
        auto frame = train(*a);
        if (!frame) co_return frame.status();
        st = co_await conn.send(frame->bytes());
        if (!st) co_return st;
        break;
      }
      case fb::Body::RoundResult: {
        auto r = wire::parseRoundResult(*msg);
        if (!r) co_return r.status();
        settle(r->accepted, r->round);
        if (!r->accepted) log_->warn("update for round {} rejected: {}", r->round, r->reason);
        break;
      }
      case fb::Body::Heartbeat: {
        // Answer, so the coordinator knows this client is alive between rounds.
        auto beat = wire::parseHeartbeat(*msg);
        if (!beat) co_return beat.status();
        const wire::Frame beatFrame = wire::encode(*beat);
        st = co_await conn.send(beatFrame.bytes());
        if (!st) co_return st;
        break;
      }
      case fb::Body::Bye: {
        auto bye = wire::parseBye(*msg);
        if (!bye) co_return bye.status();
        if (bye->done) {
          // Training is over: an update still pending will never be applied.
          for (uint64_t r : std::vector<uint64_t>(pending_))
            settle(false, r);
          if (!options_.auditOut.empty())
            if (Status audit = writeAudit(); !audit) log_->error("{}", audit.message());
          log_->info("training complete: {} rounds trained, {} accepted", stats_.roundsTrained, stats_.roundsAccepted);
          co_await conn.close();
          co_return Status::ok();
        }
        co_return Status(StatusCode::kClosed, "the coordinator said goodbye: " + bye->reason);
      }
      case fb::Body::Error: {
        auto e = wire::parseError(*msg);
        if (!e) co_return e.status();
        // Missing capabilities will be missing at the next connection too: give up.
        co_return Status(e->code == fb::ErrorCode::Unsupported ? StatusCode::kUnsupported : StatusCode::kClosed,
                         "the coordinator reported an error: " + e->message);
      }
      default:
        co_return Status(StatusCode::kMalformed, fmt::format("unexpected {} from the coordinator", msg->typeName()));
    }
  }
}

Status Participant::setUpTask(const wire::WelcomeMsg& w) {
  const std::string& spec = w.modelSpec;
  if (!w.hyper || !w.compression) return Status(StatusCode::kMalformed, "Welcome without hyper-parameters");
  const wire::HyperParameters* hyper = &*w.hyper;
  const wire::CompressionSettings* comp = &*w.compression;
  if (trainer_ && spec == modelSpec_) return Status::ok();  // same task after a reconnect
  auto model = model::Model::fromSpec(spec);
  if (!model) return Status(StatusCode::kInvalidArgument, "the coordinator's model: " + model.status().message());
  TrainerOptions to;
  to.batchSize = static_cast<int>(hyper->batchSize);
  to.momentum = hyper->momentum;
  to.weightDecay = hyper->weightDecay;
  to.clipNorm = hyper->clipNorm;
  to.proxMu = hyper->proxMu;
  to.sampler.mode = hyper->prioritySampling ? SamplingMode::kAdaptive : SamplingMode::kUniform;
  const std::size_t d = model->numParams();
  auto trainer = Trainer::create(std::move(*model), *shard_, to);
  if (!trainer)
    return Status(StatusCode::kInvalidArgument,
                  "this client's data cannot train the coordinator's model: " + trainer.status().message());
  trainer_.emplace(std::move(*trainer));
  compression::CompressorOptions co;
  co.values = compression::sparseValueFormat(comp->fp16Values, comp->uplinkTernary);
  auto up = compression::makeCompressor(comp->uplink, co);
  if (!up) return Status(StatusCode::kInvalidArgument, "uplink compressor: " + up.status().message());
  uplink_ = std::move(*up);
  if (comp->modelMantissaBits == 0 || comp->modelMantissaBits > compression::kFp32MantissaBits)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the coordinator's model precision of {} mantissa bits", comp->modelMantissaBits));
  mantissaBits_ = comp->modelMantissaBits;
  errorFeedback_ = comp->errorFeedback;
  memory_.reset();  // two model-sized buffers: only when the task uses them
  if (errorFeedback_) {
    compression::ErrorFeedbackOptions eo;
    eo.maxErrorRatio = comp->errorCap;
    auto mem = compression::ErrorFeedback::create(d, eo);
    if (!mem) return mem.status();
    memory_.emplace(std::move(*mem));
  }
  modelSpec_ = spec;
  xhat_.assign(d, 0.0f);
  delta_.assign(d, 0.0f);
  heldRound_ = 0;
  pending_.clear();
  seed_ = mix(seed_, hyper->seed);
  return Status::ok();
}

void Participant::buildInitialModel() {
  trainer_->model().initialize(initSeed_);
  std::copy(trainer_->model().params().begin(), trainer_->model().params().end(), xhat_.begin());
  heldRound_ = 0;
}

Status Participant::catchUp(const wire::RoundAssignMsg& a) {
  Status st = applyCatchUp(a);
  if (!st) lastIndices_.reset();
  return st;
}

Status Participant::applyCatchUp(const wire::RoundAssignMsg& a) {
  const auto d = static_cast<uint32_t>(xhat_.size());
  compression::Compressed c;
  if (a.model || a.values) lastIndices_.reset();
  if (a.model) {
    Status st = compression::decode(*a.model, d, c);
    if (st) st = compression::expand(c, xhat_);
    if (!st) return st.withContext("the coordinator's model");
    ++stats_.resyncs;
  }
  if (a.values) {
    // The current values of the coordinates that changed since the round we hold.
    Status st = compression::decode(*a.values, d, c);
    if (st) st = compression::overwrite(c, xhat_);
    if (!st) return st.withContext("the coordinator's catch-up values");
    log_->info("catching up from round {} to {}: {} coordinates by value", heldRound_, a.baseRound, c.selected());
  }
  if (!a.broadcast.empty()) {
    // Relative indices: the first tensor's reference is the last replay's last indices.
    std::size_t relative = 0;
    for (const auto& t : a.broadcast)
      relative += t.indexFormat == compression::IndexFormat::kRelative ? 1 : 0;
    const bool firstRelative = a.broadcast.front().indexFormat == compression::IndexFormat::kRelative;
    Status st = replayBroadcasts(a.broadcast, mantissaBits_, lastIndices_, xhat_);
    if (!st) return st.withContext("a broadcast");
    log_->info("catching up from round {} to {}: {} broadcasts, {} with relative indices{}", heldRound_, a.baseRound,
               a.broadcast.size(), relative, firstRelative ? " (the first against the last replay's)" : "");
  }
  heldRound_ = a.baseRound;
  stats_.heldRound = heldRound_;
  stats_.checksum = checksum64(xhat_);
  if (stats_.checksum != a.baseChecksum) {
    // Back to a model we can name (round 0); the coordinator sends the dense one next.
    buildInitialModel();  // (catchUp forgets lastIndices_ with the failure)
    return Status(StatusCode::kMalformed,
                  fmt::format("model checksum mismatch after catching up to round {} ({:016x}, expected {:016x})",
                              a.baseRound, stats_.checksum, a.baseChecksum));
  }
  return Status::ok();
}

Result<wire::Frame> Participant::train(const wire::RoundAssignMsg& a) {
  TrainRequest req;
  req.steps = static_cast<int>(a.tau);
  req.lr = a.lr;
  req.seed = mix(seed_, a.round);
  auto stats = trainer_->run(xhat_, req, delta_);
  if (!stats) return stats.status();
  if (!options_.auditOut.empty()) {
    computed_.resize(delta_.size(), 0.0);
    for (std::size_t i = 0; i < delta_.size(); ++i)
      computed_[i] += delta_[i];
  }
  // The compressed form, its encoding and the frame are each model-sized when the
  // uplink is dense: each is freed as soon as the next one is made, so no more than
  // two of them are alive at once (the client's peak memory).
  std::size_t selected = 0;
  compression::Payload payload;
  {
    compression::Compressed q;
    const compression::CompressParams params{a.density > 0 ? a.density : 1.0, mix(seed_, a.round + 1)};
    Status st =
        errorFeedback_ ? memory_->compress(delta_, *uplink_, params, q, a.round) : uplink_->compress(delta_, params, q);
    if (!st) return st.withContext(fmt::format("compressing the update of round {}", a.round));
    STARLING_RETURN_IF_ERROR(compression::encode(q, payload));
    selected = q.selected();
  }
  const std::size_t payloadBytes = payload.byteSize();
  wire::UpdateMsg update{a.round,
                         a.baseRound,
                         stats->examples,
                         static_cast<uint32_t>(stats->steps),
                         static_cast<float>(stats->lossStart),
                         static_cast<float>(stats->lossEnd),
                         compression::viewOf(payload),
                         static_cast<uint32_t>(stats->seconds * 1000.0)};
  wire::Frame frame = wire::encode(update);
  if (errorFeedback_) pending_.push_back(a.round);
  ++stats_.roundsTrained;
  stats_.bytesUp += payloadBytes;
  stats_.lastLoss = stats->lossEnd;
  log_->info("round {}: {} steps, loss {:.4f} -> {:.4f}, sent {} of {} values ({} bytes)", a.round, stats->steps,
             stats->lossStart, stats->lossEnd, selected, xhat_.size(), payloadBytes);
  return frame;
}

void Participant::settle(bool accepted, uint64_t round) {
  auto it = std::find(pending_.begin(), pending_.end(), round);
  if (it == pending_.end()) return;
  pending_.erase(it);
  if (memory_ && memory_->isPending(round)) (void)(accepted ? memory_->commit(round) : memory_->rollback(round));
  if (accepted)
    ++stats_.roundsAccepted;
  else
    ++stats_.roundsRejected;
}

Status Participant::writeAudit() const {
  std::FILE* f = std::fopen(options_.auditOut.c_str(), "w");
  if (f == nullptr) return Status(StatusCode::kIo, fmt::format("cannot write the audit to '{}'", options_.auditOut));
  fmt::print(f, "computed");
  for (double v : computed_)
    fmt::print(f, " {:.9g}", v);
  fmt::print(f, "\nmemory");
  if (memory_)
    for (float v : memory_->memory())
      fmt::print(f, " {:.9g}", v);
  fmt::print(f, "\n");
  return std::fclose(f) == 0 ? Status::ok() : Status(StatusCode::kIo, "writing the audit to " + options_.auditOut);
}

}  // namespace starling::client
