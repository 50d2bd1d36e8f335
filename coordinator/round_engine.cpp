#include "starling/coordinator/round_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

#include "starling/util/mix.hpp"

#include "engine/aggregator.hpp"
#include "engine/downlink.hpp"
#include "engine/pace.hpp"
#include "engine/privacy_budget.hpp"
#include "engine/selection.hpp"
#include "engine/server_optimizer.hpp"
#include "engine/shards.hpp"
#include "engine/staleness.hpp"

namespace starling::coordinator {

struct RoundEngine::Client {
  std::string id;
  uint64_t examples = 0;
  bool connected = false;
  bool busy = false;                  // training for us: assigned, update not yet in
  std::optional<uint64_t> heldRound;  // the model it holds; nullopt = unknown, send dense
  uint64_t lastAssigned = 0;          // the last round assigned to it
  // The last kAcceptedKept rounds whose update of its was applied, increasing: a client
  // that reconnects settles its pending updates by them.
  std::vector<uint64_t> accepted;  // a vector: an idle client's record allocates nothing
  void recordAccepted(uint64_t round) {
    if (!accepted.empty() && accepted.back() >= round) {
      if (std::find(accepted.begin(), accepted.end(), round) != accepted.end()) return;
      accepted.insert(std::upper_bound(accepted.begin(), accepted.end(), round), round);
    } else {
      accepted.push_back(round);
    }
    if (accepted.size() > kAcceptedKept)
      accepted.erase(accepted.begin(), accepted.end() - static_cast<std::ptrdiff_t>(kAcceptedKept));
  }
  double stepsPerMs = 0;         // measured speed (EWMA) at batch scale 1, 0 = unknown
  float batchScale = 1.0f;       // of lastAssigned (EngineConfig::dynamicBatch)
  int64_t idleSinceMs = 0;       // joined, or its last update arrived (ParticipantResult::waitMs)
  bool sticky = false;           // of lastAssigned: drawn from the sticky group
  double selectionWeight = 1.0;  // of lastAssigned (EngineConfig::stickyClients)
  // The round of the broadcast whose indices the client holds as the reference for
  // relative indices: the last entry of the last log replay it was sent. nullopt after
  // a catch-up by value or a dense model, and whenever it (re)joins, leaves or is
  // out of sync.
  std::optional<uint64_t> indicesRound;
  // A client that trains the compact model of its rows (docs/sparse.md): its
  // assignments carry the view's values and checksum; null: the whole model.
  std::shared_ptr<const ClientRowSet> rows;
};

// An update that will be aggregated. Its delta is released once it has been added
// to the round's running sum (or rejected): only the record and the norm stay.
struct RoundEngine::Pending {
  ParticipantResult record;
  uint64_t round = 0;
  uint32_t staleness = 0;
  Contribution part;     // what the aggregator sees
  bool settled = false;  // added to the sum or rejected; delta released
  uint64_t baseRound = 0;
  std::vector<double> evalStats;  // federated evaluation of the base model (may be empty)
};

struct RoundEngine::OpenRound {
  uint64_t round = 0;
  int64_t startedMs = 0;
  int64_t deadlineMs = 0;
  uint32_t tau = 0;
  double lr = 0;
  double upDensity = 1;
  double downDensity = 1;
  uint32_t selected = 0;
  uint32_t goal = 0;       // the round closes once this many updates are in (K; poisson: all selected)
  double privacyRate = 0;  // the rate the round is accounted at (PrivacyBudget::rate)
  double budgetMs = std::numeric_limits<double>::infinity();  // compute time per client (budgetQuantile)
  double meanSpeed = 0;  // Pace::referenceSpeed of the selected clients measured (dynamicBatch; 0 = none)
  uint64_t bytesDownRaw = 0;
  uint64_t bytesDownWire = 0;
  std::map<std::string, ParticipantResult> outstanding;  // assigned, no update yet
  std::vector<std::unique_ptr<Pending>> received;
  std::vector<ParticipantResult> closed;  // dropped, rejected
};

RoundEngine::RoundEngine(EngineConfig config) : config_(std::move(config)) {}

RoundEngine::~RoundEngine() = default;

Result<std::unique_ptr<RoundEngine>> RoundEngine::create(EngineConfig config, std::vector<float> initialModel) {
  std::unique_ptr<RoundEngine> e(new RoundEngine(std::move(config)));
  STARLING_RETURN_IF_ERROR(e->init(std::move(initialModel)));
  return e;
}

Result<std::unique_ptr<RoundEngine>> RoundEngine::resume(EngineConfig config, const EngineSnapshot& snap) {
  std::unique_ptr<RoundEngine> e(new RoundEngine(std::move(config)));
  STARLING_RETURN_IF_ERROR(e->init(snap.model));
  uint64_t committed = 0;
  STARLING_RETURN_IF_ERROR(e->restoreState(snap.state, committed));
  STARLING_RETURN_IF_ERROR(e->downlink_->resume(committed, snap.serverMemory, snap.catchUp));
  STARLING_RETURN_IF_ERROR(e->optimizer_->restoreVectors(snap.vectors));
  return e;
}

Status RoundEngine::init(std::vector<float> model) {
  const EngineConfig& c = config_;
  if (model.empty()) return Status(StatusCode::kInvalidArgument, "the initial model is empty");
  if (c.clientsPerRound == 0) return Status(StatusCode::kInvalidArgument, "clients per round must be at least 1");
  if (c.overSelection < 1.0) return Status(StatusCode::kInvalidArgument, "over-selection must be at least 1.0");
  if (c.deadlineMs <= 0) return Status(StatusCode::kInvalidArgument, "the deadline must be positive");
  if (!(c.lr > 0)) return Status(StatusCode::kInvalidArgument, "the learning rate must be positive");
  const std::size_t dim = model.size();
  auto shards = makeShards(c, dim);
  if (!shards) return shards.status();
  shards_ = std::move(*shards);
  auto optimizer = ServerOptimizer::create(c, dim, shards_.get());
  if (!optimizer) return optimizer.status();
  auto selection = Selection::create(c);
  if (!selection) return selection.status();
  auto pace = Pace::create(c);
  if (!pace) return pace.status();
  auto privacy = PrivacyBudget::create(c);
  if (!privacy) return privacy.status();
  auto rule = Aggregator::rule(c);
  if (!rule) return rule.status();
  if (c.sampling == "poisson" && c.mode != "sync")
    return Status(StatusCode::kInvalidArgument, "poisson sampling needs mode sync");
  auto isTopK = [](const std::string& name) { return name == "topk" || name == "topk-sampled"; };
  if (c.uplinkTernary && !isTopK(c.uplink))
    return Status(StatusCode::kInvalidArgument, "ternary values need a topk or topk-sampled compressor on that link");
  auto weight = StalenessWeight::parse(c.stalenessWeight);
  if (!weight) return weight.status();
  if (c.mode == "sync")
    mode_ = Mode::kSync;
  else if (c.mode == "async")
    mode_ = Mode::kAsync;
  else if (c.mode == "ssp")
    mode_ = Mode::kSsp;
  else if (c.mode == "dssp")
    mode_ = Mode::kDssp;
  else
    return Status(StatusCode::kInvalidArgument, fmt::format("unknown mode '{}' (sync, async, ssp or dssp)", c.mode));
  if (mode_ == Mode::kSsp || mode_ == Mode::kDssp) {
    const uint32_t top = c.stalenessMax > 0 ? c.stalenessMax : c.stalenessBound + 4;
    if (mode_ == Mode::kDssp && top < c.stalenessBound)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("staleness-max ({}) is below staleness-bound ({})", top, c.stalenessBound));
    gate_ = std::make_unique<ClockBound>(
        ClockBound::create({c.stalenessBound, mode_ == Mode::kDssp ? top - c.stalenessBound : 0u}));
  }
  auto downlink = Downlink::create(c, std::move(model));
  if (!downlink) return downlink.status();
  // The uplink's compressor runs on the clients: only its name and options are checked here.
  auto up = compression::makeCompressor(
      c.uplink, compression::linkOptions(c.fp16Values, c.uplinkTernary, c.errorFeedback, c.qsgdLevels));
  if (!up) return up.status().withContext("uplink compressor");
  optimizer_ = std::make_unique<ServerOptimizer>(std::move(*optimizer));
  selection_ = std::make_unique<Selection>(std::move(*selection));
  pace_ = std::make_unique<Pace>(std::move(*pace));
  downlink_ = std::move(*downlink);
  privacy_ = std::make_unique<PrivacyBudget>(std::move(*privacy));
  // Under privacy clipping bounds every update, and a limit from the others' norms would
  // make one client's fate depend on the rest: no norm-ratio check.
  aggregator_ =
      std::make_unique<Aggregator>(dim, privacy_->on() ? 0.0 : c.maxNormRatio, c.senderMean, *weight, shards_.get());
  aggregator_->setRule(*rule);
  setNoise(compression::seededNoise(mixSeeds(c.seed, 0x6e6f697365)));  // "noise"
  return Status::ok();
}

Status RoundEngine::setShardRows(EngineConfig::ShardRows rows) {
  if (!shards_) return Status(StatusCode::kInvalidArgument, "the engine runs one shard: a shard map needs two or more");
  auto map = ShardMap::fromRows(shards_->map().dim(), shards_->count(), rows.rowWidth, rows.rowCount, rows.rows,
                                rows.shardOf, rows.columns ? RowLayout::kColumns : RowLayout::kContiguous);
  if (!map) return map.status();
  STARLING_RETURN_IF_ERROR(shards_->setMap(std::move(*map)));
  config_.shardRows = std::move(rows);
  return Status::ok();
}

std::optional<double> RoundEngine::epsilon() const {
  if (!privacy_->on()) return std::nullopt;
  return privacy_->epsilon();
}

void RoundEngine::setNoise(std::unique_ptr<compression::GaussianNoise> noise) {
  noise_ = std::move(noise);
  if (privacy_->on())
    aggregator_->setPrivacy(privacy_->clipNorm(), privacy_->noiseStd(), noise_.get(), privacy_->noiseShares());
}

uint64_t RoundEngine::committedRound() const {
  return downlink_->round();
}

std::span<const float> RoundEngine::model() const {
  return downlink_->model();
}

std::span<const float> RoundEngine::servedModel() const {
  return optimizer_->average().empty() ? model() : optimizer_->average();
}

uint64_t RoundEngine::modelChecksum() const {
  return downlink_->checksum();
}

uint32_t RoundEngine::currentTau() const {
  return pace_->tau();
}

std::vector<std::string> RoundEngine::stickyGroup() const {
  return selection_->group();
}

std::vector<uint64_t> RoundEngine::heldUpdateRounds(const std::string& id) const {
  std::vector<uint64_t> rounds;
  for (const auto& p : late_)
    if (p->record.clientId == id) rounds.push_back(p->round);
  if (open_)
    for (const auto& p : open_->received)
      if (p->record.clientId == id) rounds.push_back(p->round);
  return rounds;
}

std::vector<uint64_t> RoundEngine::acceptedRounds(const std::string& id) const {
  auto it = clients_.find(id);
  if (it == clients_.end()) return {};
  return {it->second->accepted.begin(), it->second->accepted.end()};
}

uint64_t RoundEngine::lastAcceptedRound(const std::string& id) const {
  auto it = clients_.find(id);
  return it == clients_.end() || it->second->accepted.empty() ? 0 : it->second->accepted.back();
}

std::vector<Action> RoundEngine::start(int64_t nowMs) {
  std::vector<Action> out;
  if (finished()) {
    out.push_back(Finished{});
    return out;
  }
  maybeStartRound(nowMs, out);
  return out;
}

std::vector<Action> RoundEngine::clientJoined(const std::string& id, uint64_t examples, uint64_t heldRound,
                                              uint64_t heldChecksum, int64_t nowMs,
                                              std::shared_ptr<const ClientRowSet> rows) {
  auto& slot = clients_[id];
  if (!slot) {
    slot = std::make_unique<Client>();
    slot->id = id;
  }
  Client& c = *slot;
  c.connected = true;
  c.examples = examples;
  c.busy = false;  // whatever it was doing for us was lost with its connection
  c.idleSinceMs = nowMs;
  c.indicesRound.reset();
  // Trust the model it holds only if we can name that model: the current one, or an
  // earlier one we remember. A client holding nothing builds the round-0 model itself
  // when clientsInitialize (the checksum of its first assignment proves it).
  c.heldRound.reset();
  if (rows && rows->fullSize() != downlink_->model().size()) rows.reset();  // (a programmer error: another model)
  c.rows = std::move(rows);
  // A client holding a view: the checksums the engine remembers are of the whole
  // model, and the compact model's initialization is not the view of the round-0
  // model's, so its first assignment brings the view's values.
  if (c.rows) {
  } else if (downlink_->knows(heldRound, heldChecksum)) {
    c.heldRound = heldRound;
  } else if (heldRound == 0 && heldChecksum == 0 && config_.clientsInitialize) {
    c.heldRound = 0;
  }
  // Whatever it had in flight was lost with its connection.
  inflight_.erase(id);
  if (gate_ && !gate_->active(id)) gate_->join(id, nowMs);
  std::vector<Action> out;
  if (finished()) return out;
  maybeStartRound(nowMs, out);
  return out;
}

std::vector<Action> RoundEngine::clientLeft(const std::string& id, const std::string& reason, int64_t nowMs) {
  std::vector<Action> out;
  auto it = clients_.find(id);
  if (it == clients_.end()) return out;
  Client& c = *it->second;
  c.connected = false;
  c.busy = false;
  c.indicesRound.reset();
  if (gate_) gate_->leave(id, nowMs);  // those it held back are idle again: topUp assigns them
  dropOutstanding(id, reason, nowMs, out);
  return out;
}

void RoundEngine::dropOutstanding(const std::string& id, const std::string& reason, int64_t nowMs,
                                  std::vector<Action>& out) {
  if (auto f = inflight_.find(id); f != inflight_.end()) {
    ParticipantResult rec = f->second;
    rec.outcome = ParticipantOutcome::kDropped;
    rec.reason = reason;
    (open_ ? open_->closed : orphans_).push_back(rec);
    inflight_.erase(f);
  }
  if (!open_) return;
  auto a = open_->outstanding.find(id);
  if (a != open_->outstanding.end()) {
    ParticipantResult rec = a->second;
    rec.outcome = ParticipantOutcome::kDropped;
    rec.reason = reason;
    open_->closed.push_back(rec);
    open_->outstanding.erase(a);
  } else if (!async()) {
    return;
  }
  if (async()) {
    topUp(nowMs, out);  // its slot is free (an asynchronous step waits for K updates, not for anyone)
  } else if (open_->outstanding.empty()) {
    // Nobody else can still deliver: decide now rather than at the deadline.
    if (open_->received.size() >= minGoal())
      closeRound(nowMs, out);
    else
      abandonRound(fmt::format("only {} of at least {} updates: every other participant left or failed",
                               open_->received.size(), minGoal()),
                   nowMs, out);
  }
}

uint32_t RoundEngine::minGoal() const {
  // Under differential privacy a round is released whatever arrived (the noise over D
  // alone when nothing did): abandoning the rounds that drew or kept few clients would
  // bias which samples are released, and the accountant assumes every draw counts.
  if (privacy_->on()) return 0;
  const uint32_t goal = config_.minGoal > 0 ? config_.minGoal : (config_.clientsPerRound + 1) / 2;
  // Poisson sampling without privacy: never more than the round drew.
  return open_ && privacy_->poisson() ? std::min(goal, open_->goal) : goal;
}

std::vector<Action> RoundEngine::clientOutOfSync(const std::string& id, const std::string& reason, int64_t nowMs) {
  std::vector<Action> out;
  auto it = clients_.find(id);
  if (it == clients_.end()) return out;
  Client& c = *it->second;
  c.heldRound.reset();
  c.indicesRound.reset();
  // It does not train on an assignment it could not apply: out of this round, free
  // for the next (with the dense model) instead of busy until it reconnects.
  c.busy = false;
  dropOutstanding(id, "out of sync: " + reason, nowMs, out);
  if (!open_) maybeStartRound(nowMs, out);
  return out;
}

std::vector<Action> RoundEngine::tick(int64_t nowMs) {
  std::vector<Action> out;
  if (async()) {
    expireAssignments(nowMs);
    maybeStartRound(nowMs, out);  // tops up an open round, or opens one
    return out;
  }
  if (open_ && nowMs >= open_->deadlineMs) {
    if (open_->received.size() >= minGoal())
      closeRound(nowMs, out);
    else
      abandonRound(fmt::format("only {} of at least {} updates by the deadline", open_->received.size(), minGoal()),
                   nowMs, out);
  } else if (!open_ && !finished()) {
    maybeStartRound(nowMs, out);
  }
  return out;
}

double RoundEngine::fleetReferenceSpeed() const {
  if (!config_.dynamicBatch) return 0;
  std::vector<double> speeds;
  for (const auto& [id, c] : clients_)
    if (c->stepsPerMs > 0) speeds.push_back(c->stepsPerMs);
  return pace_->referenceSpeed(speeds);
}

Assignment RoundEngine::makeAssignment(Client& c, uint64_t round, int64_t nowMs) {
  Assignment a;
  a.round = round;
  a.baseRound = downlink_->round();
  const double meanSpeed = async() ? fleetReferenceSpeed() : open_->meanSpeed;
  a.batchScale = static_cast<float>(pace_->batchScale(c.stepsPerMs, meanSpeed));
  c.batchScale = a.batchScale;
  // A step at scale s takes about s times as long as one at scale 1.
  a.tau = pace_->stepsFor(c.stepsPerMs / a.batchScale, open_->budgetMs);
  a.lr = static_cast<float>(open_->lr);
  a.uplinkDensity = static_cast<float>(open_->upDensity);
  a.deadlineMs = nowMs + config_.deadlineMs;
  a.baseChecksum = downlink_->checksum();
  a.evaluate = config_.federatedEvalEvery > 0 && a.baseRound > 0 && a.baseRound % config_.federatedEvalEvery == 0;
  const std::shared_ptr<const model::RowView> view = c.rows ? c.rows->view() : nullptr;
  if (view) {
    a.baseChecksum = view->checksum(downlink_->model());
    if (!c.heldRound || *c.heldRound != downlink_->round()) {
      Downlink::CatchUp up = downlink_->viewCatchUp(c.heldRound, *view);
      a.denseModel = std::move(up.denseModel);
      a.values = std::move(up.values);
    }
    c.indicesRound.reset();
  } else if (!c.heldRound || *c.heldRound != downlink_->round()) {
    Downlink::CatchUp up = downlink_->catchUp(c.heldRound, c.indicesRound);
    a.denseModel = std::move(up.denseModel);
    a.values = std::move(up.values);
    a.broadcasts = std::move(up.broadcasts);
    c.indicesRound = up.indicesRound;
  }
  c.heldRound = downlink_->round();
  return a;
}

std::vector<Action> RoundEngine::shutdown(const std::string& reason, int64_t nowMs) {
  std::vector<Action> out;
  stopping_ = true;
  if (open_) abandonRound(reason, nowMs, out);
  return out;
}

std::vector<const std::string*> RoundEngine::idleClients() const {
  std::vector<const std::string*> idle;
  // In the asynchronous modes a client is not assigned twice from the same model
  // version (the open round): it would train from the same base again, and its two
  // updates would carry one round number, which names a pending update on the client.
  const uint64_t open = open_ && async() ? open_->round : 0;
  // Under privacy in the asynchronous modes a client lands at most once in a server step
  // (not while its update waits in the open buffer), and trains only while its budget
  // allows (PrivacyBudget::clientAllowed).
  std::set<std::string_view> buffered;
  if (open != 0 && privacy_->individual()) {
    for (const auto& p : open_->received)
      buffered.insert(p->record.clientId);
    for (const auto& p : late_)
      buffered.insert(p->record.clientId);
  }
  for (const auto& [id, c] : clients_)
    if (c->connected && !c->busy && !(gate_ && gate_->waiting(id)) && (open == 0 || c->lastAssigned != open) &&
        (buffered.empty() || buffered.count(id) == 0) && (!privacy_->individual() || privacy_->clientAllowed(id)))
      idle.push_back(&id);
  return idle;
}

void RoundEngine::openRound(int64_t nowMs, double denominator) {
  open_ = std::make_unique<OpenRound>();
  open_->goal = config_.clientsPerRound;
  open_->round = nextRound_++;
  open_->startedMs = nowMs;
  open_->deadlineMs = nowMs + config_.deadlineMs;
  open_->tau = pace_->tau();
  open_->lr = pace_->lr(commits_);
  open_->upDensity = pace_->uplinkDensity(commits_);
  open_->downDensity = pace_->downlinkDensity(commits_);
  aggregator_->begin(denominator);
}

void RoundEngine::maybeStartRound(int64_t nowMs, std::vector<Action>& out) {
  if (finished() || stopping_ || held()) return;
  if (open_) {
    if (async()) topUp(nowMs, out);
    return;
  }
  std::vector<const std::string*> idle = idleClients();
  // The asynchronous modes wait for min-clients before the first server step of this
  // engine (at the start, and again after a resume, when the fleet reconnects);
  // afterwards the next step's buffer opens as soon as the last one closed.
  if (async() && privacyBudgetSpent()) {
    // Under privacy no connected client may train again (at the start, or after a
    // resume late in the run): the budget ends training.
    budgetSpent_ = true;
    out.push_back(Finished{});
    return;
  }
  // The clients the budget excludes still count towards min-clients: they are the fleet.
  std::size_t present = idle.size();
  if (privacy_->individual())
    present = static_cast<std::size_t>(std::count_if(
        clients_.begin(), clients_.end(), [&](const auto& c) { return c.second->connected && !c.second->busy; }));
  if (!(async() && asyncStarted_) && !selection_->due(present)) return;
  if (async()) {
    asyncStarted_ = true;
    openRound(nowMs, privacy_->on() ? privacy_->denominator(0) : 1.0);
    topUp(nowMs, out);
    return;
  }
  // The privacy budget: the round is accounted at the rate it samples at (fixed: the
  // clients it will assign over the idle ones), and must keep epsilon within the target.
  const std::size_t idleCount = idle.size();
  const auto fixedCount = std::min<std::size_t>(
      idleCount, static_cast<std::size_t>(std::ceil(config_.clientsPerRound * config_.overSelection - 1e-9)));
  const double rate = privacy_->rate(fixedCount, idleCount);
  if (!privacy_->allows(rate)) {
    // Under fixed sampling the rate falls as more clients are idle: the budget ends
    // training only once every connected client is idle and the round still does not fit.
    if (!privacy_->poisson() &&
        idleCount < static_cast<std::size_t>(std::count_if(
                        clients_.begin(), clients_.end(), [](const auto& c) { return c.second->connected; })))
      return;
    budgetSpent_ = true;
    out.push_back(Finished{});
    return;
  }
  const std::vector<Selection::Pick> picks = selection_->select(std::move(idle), nextRound_);
  if (picks.empty() && !privacy_->on()) return;  // poisson drew nobody: the next event draws again
  openRound(nowMs, privacy_->denominator(idleCount));
  open_->privacyRate = rate;
  open_->selected = static_cast<uint32_t>(picks.size());
  if (privacy_->poisson()) open_->goal = open_->selected;
  if (picks.empty()) {
    // Privacy: a draw of nobody is a round too (the noise over D is released and
    // accounted), or the released rounds would lean towards larger draws. It closes on
    // the shell's next tick (now), not here: a run of empty draws is not a recursion.
    open_->deadlineMs = nowMs;
    out.push_back(WakeAt{nowMs});
    return;
  }
  std::vector<double> speeds;  // the measured ones
  for (const Selection::Pick& pick : picks)
    if (const double v = clients_.at(pick.id)->stepsPerMs; v > 0) speeds.push_back(v);
  open_->budgetMs = pace_->roundBudgetMs(speeds);
  open_->meanSpeed = pace_->referenceSpeed(speeds);
  for (const Selection::Pick& pick : picks)
    assignPick(pick.id, pick.sticky, pick.weight, nowMs, out);
  out.push_back(WakeAt{open_->deadlineMs});
}

void RoundEngine::topUp(int64_t nowMs, std::vector<Action>& out) {
  if (!open_ || finished() || stopping_ || held()) return;
  // ssp and dssp without a concurrency: every connected client is a worker; the gate
  // decides who waits.
  std::size_t slots = config_.concurrency;
  if (slots == 0)
    slots = mode_ == Mode::kAsync
                ? static_cast<std::size_t>(std::ceil(config_.clientsPerRound * config_.overSelection - 1e-9))
                : std::numeric_limits<std::size_t>::max();
  const std::size_t used = open_->outstanding.size() + inflight_.size();
  if (used < slots) {
    std::vector<const std::string*> idle = idleClients();
    if (!idle.empty()) {
      const std::vector<Selection::Pick> picks = selection_->select(std::move(idle), open_->round, slots - used);
      open_->selected += static_cast<uint32_t>(picks.size());
      for (const Selection::Pick& pick : picks)
        assignPick(pick.id, pick.sticky, pick.weight, nowMs, out);
    } else if (used == 0 && privacy_->individual()) {
      // Under privacy nobody trains and nobody may join this step: every client the
      // budget allows has an update in the buffer already, or its update of this step
      // was refused. When no connected client may train at all, the budget ends training
      // (the buffer released as the last step). Otherwise a buffer that holds updates is
      // released as it is (over the same K), and an empty one is renumbered so that the
      // clients it assigned can be assigned again.
      const bool spent = privacyBudgetSpent();
      const bool holds = !open_->received.empty() || !late_.empty();
      if (spent) budgetSpent_ = true;
      if (holds) {
        closeRound(nowMs, out);
        return;
      }
      if (spent) {
        if (open_->closed.empty() && orphans_.empty()) {
          open_.reset();
        } else {
          abandonRound("the privacy budget is spent", nowMs, out);  // keeps the step's records
        }
        out.push_back(Finished{});
        return;
      }
      // Renumbered only for a client that waits on this step's number (a straggler still
      // busy is waited for): each renumbering spends a round number.
      const uint64_t step = open_->round;
      const bool refusedHere = std::any_of(clients_.begin(), clients_.end(), [&](const auto& c) {
        return c.second->connected && !c.second->busy && c.second->lastAssigned == step &&
               privacy_->clientAllowed(c.first);
      });
      if (refusedHere) {
        open_->round = nextRound_++;
        idle = idleClients();
        const std::vector<Selection::Pick> picks = selection_->select(std::move(idle), open_->round, slots - used);
        open_->selected += static_cast<uint32_t>(picks.size());
        for (const Selection::Pick& pick : picks)
          assignPick(pick.id, pick.sticky, pick.weight, nowMs, out);
      }
    }
  }
  // One timer serves the daemon: ask for the earliest deadline of any assignment.
  std::optional<int64_t> next;
  auto earliest = [&](const ParticipantResult& rec) {
    const int64_t at = rec.assignedMs + config_.deadlineMs;
    next = next ? std::min(*next, at) : at;
  };
  for (const auto& [id, rec] : open_->outstanding)
    earliest(rec);
  for (const auto& [id, rec] : inflight_)
    earliest(rec);
  if (next) out.push_back(WakeAt{*next});
}

void RoundEngine::expireAssignments(int64_t nowMs) {
  const std::string why = fmt::format("no update within {} ms", config_.deadlineMs);
  auto expire = [&](std::map<std::string, ParticipantResult>& assigned) {
    for (auto it = assigned.begin(); it != assigned.end();) {
      if (it->second.assignedMs + config_.deadlineMs > nowMs) {
        ++it;
        continue;
      }
      ParticipantResult rec = it->second;
      rec.outcome = ParticipantOutcome::kStraggler;
      rec.reason = why;
      (open_ ? open_->closed : orphans_).push_back(rec);
      // It no longer holds back the others; it rejoins the gate when its update arrives.
      if (gate_) gate_->leave(it->first, nowMs);
      it = assigned.erase(it);
    }
  };
  if (open_) expire(open_->outstanding);
  expire(inflight_);
}

uint32_t bufferSize(const EngineConfig& c) {
  return c.bufferSize > 0 ? c.bufferSize : c.clientsPerRound;
}

bool RoundEngine::bufferFull() const {
  return open_ && open_->received.size() + late_.size() >= bufferSize(config_);
}

void RoundEngine::stepFinished(const std::string& id, int64_t nowMs) {
  if (gate_) gate_->finished(id, nowMs);  // whom it releases, topUp finds idle
}

void RoundEngine::assignPick(const std::string& id, bool sticky, double weight, int64_t nowMs,
                             std::vector<Action>& out) {
  Client* c = clients_.at(id).get();
  {
    Assign act{c->id, makeAssignment(*c, open_->round, nowMs)};
    uint64_t wire = 0;
    for (const auto& b : act.assignment.broadcasts)
      wire += b->byteSize();
    if (act.assignment.denseModel) wire += act.assignment.denseModel->size() * sizeof(float);
    if (act.assignment.values) wire += act.assignment.values->byteSize();
    open_->bytesDownWire += wire;
    open_->bytesDownRaw +=
        downlink_->model().size() * sizeof(float) * std::max<std::size_t>(1, act.assignment.broadcasts.size());
    ParticipantResult rec;
    rec.round = open_->round;
    rec.clientId = c->id;
    rec.assignedMs = nowMs;
    rec.waitMs = std::max<int64_t>(0, nowMs - c->idleSinceMs);
    c->lastAssigned = open_->round;
    c->sticky = sticky;
    c->selectionWeight = weight;
    rec.bytesDownWire = wire;
    rec.sticky = sticky;
    rec.selectionWeight = weight;
    open_->outstanding.emplace(c->id, rec);
    c->busy = true;
    out.push_back(std::move(act));
  }
}

std::vector<Action> RoundEngine::updateRejected(const std::string& id, uint64_t round, const std::string& reason,
                                                int64_t nowMs) {
  std::vector<Action> out;
  auto it = clients_.find(id);
  if (it != clients_.end()) {
    it->second->busy = false;
    it->second->idleSinceMs = nowMs;
  }
  ParticipantResult rec;
  rec.clientId = id;
  rec.outcome = ParticipantOutcome::kRejected;
  rec.reason = reason;
  rec.returnedMs = nowMs;
  if (auto f = inflight_.find(id); f != inflight_.end()) {
    rec.assignedMs = f->second.assignedMs;
    rec.waitMs = f->second.waitMs;
    rec.bytesDownWire = f->second.bytesDownWire;
    inflight_.erase(f);
  }
  // Recorded under the open round (or the next one to end): the round an update
  // names may not exist.
  if (open_) {
    rec.round = open_->round;
    auto a = open_->outstanding.find(id);
    if (a != open_->outstanding.end()) {
      rec.assignedMs = a->second.assignedMs;
      rec.waitMs = a->second.waitMs;
      rec.bytesDownWire = a->second.bytesDownWire;
      open_->outstanding.erase(a);
    }
    open_->closed.push_back(rec);
  } else {
    orphans_.push_back(rec);
  }
  out.push_back(Verdict{id, {round, false, reason}});
  if (async()) {
    if (it != clients_.end()) stepFinished(id, nowMs);
    maybeStartRound(nowMs, out);
    return out;
  }
  if (open_ && open_->outstanding.empty()) {
    if (open_->received.size() >= minGoal())
      closeRound(nowMs, out);
    else
      abandonRound(fmt::format("only {} of at least {} updates", open_->received.size(), minGoal()), nowMs, out);
  }
  return out;
}

std::vector<Action> RoundEngine::updateArrived(const std::string& id, IncomingUpdate u, int64_t nowMs) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return updateRejected(id, u.round, "update from a client that has not joined", nowMs);
  Client& c = *it->second;
  const std::size_t dim = downlink_->model().size();
  if (u.delta.count != dim)
    return updateRejected(id, u.round, fmt::format("update has {} elements, the model has {}", u.delta.count, dim),
                          nowMs);
  if (u.examples == 0 || u.steps == 0)
    return updateRejected(id, u.round, "update reports no examples or no steps", nowMs);
  if (!std::isfinite(u.lossStart) || !std::isfinite(u.lossEnd))
    return updateRejected(id, u.round, "update reports a non-finite loss", nowMs);
  if (u.baseRound > downlink_->round())
    return updateRejected(id, u.round, fmt::format("update is based on round {}, which does not exist", u.baseRound),
                          nowMs);

  auto p = std::make_unique<Pending>();
  p->round = u.round;
  p->baseRound = u.baseRound;
  p->evalStats = std::move(u.evalStats);
  p->record.round = u.round;
  // Older than the engine remembers: too stale.
  p->staleness = static_cast<uint32_t>(downlink_->commitsSince(u.baseRound, uint64_t(config_.maxStaleness) + 1));
  auto norm = compression::l2Norm(u.delta);  // from the compressed form: nothing is expanded
  if (!norm) return updateRejected(id, u.round, norm.status().message(), nowMs);
  p->part.norm = *norm;
  if (!std::isfinite(p->part.norm)) return updateRejected(id, u.round, "update contains NaN or Inf", nowMs);
  p->part.delta = std::move(u.delta);
  // FedAvg's n_k is the client's number of examples (Hello), not how many it trained on
  // this round (steps x batch, which would weigh every client alike: ALGORITHMS.md §2).
  p->part.examples = c.examples > 0 ? c.examples : u.examples;
  p->part.steps = u.steps;
  p->part.staleness = p->staleness;
  ParticipantResult& rec = p->record;
  rec.clientId = id;
  rec.returnedMs = nowMs;
  rec.steps = u.steps;
  rec.examples = u.examples;
  rec.lossStart = u.lossStart;
  rec.lossEnd = u.lossEnd;
  rec.bytesUpRaw = dim * sizeof(float);
  rec.bytesUpWire = u.bytesWire;
  rec.durationMs = u.durationMs;
  rec.staleness = p->staleness;
  if (u.round == c.lastAssigned) {  // else rejected below
    rec.sticky = c.sticky;
    rec.selectionWeight = c.selectionWeight;
  }
  p->part.selectionWeight = rec.selectionWeight;
  if (u.durationMs > 0) {
    const double speed = double(u.steps) / double(u.durationMs) * c.batchScale;  // at scale 1
    c.stepsPerMs = c.stepsPerMs > 0 ? 0.5 * c.stepsPerMs + 0.5 * speed : speed;
  }
  c.busy = false;
  c.idleSinceMs = nowMs;

  std::vector<Action> out;
  // In the asynchronous modes an assignment of the open round whose deadline passed
  // (recorded as a straggler, its slot given away) still counts when it arrives.
  const bool onTime =
      open_ && u.round == open_->round && (open_->outstanding.count(id) > 0 || (async() && u.round == c.lastAssigned));
  if (async() && privacy_->individual() && (onTime || u.round == c.lastAssigned)) {
    // A client lands at most once in a private step: it is not assigned while its update
    // waits in the buffer, so a second update there is a copy.
    auto inBuffer = [&](const auto& list) {
      return std::any_of(list.begin(), list.end(), [&](const auto& q) { return q->record.clientId == id; });
    };
    if (open_ && (inBuffer(open_->received) || inBuffer(late_)))
      return updateRejected(id, u.round, "a second update in one server step under differential privacy", nowMs);
  }
  if (async() && (onTime || u.round == c.lastAssigned)) {
    stepFinished(id, nowMs);
    if (auto f = inflight_.find(id); f != inflight_.end()) {
      rec.assignedMs = f->second.assignedMs;
      rec.waitMs = f->second.waitMs;
      rec.bytesDownWire = f->second.bytesDownWire;
      inflight_.erase(f);
    }
  }
  if (onTime) {
    if (auto a = open_->outstanding.find(id); a != open_->outstanding.end()) {
      rec.assignedMs = a->second.assignedMs;
      rec.waitMs = a->second.waitMs;
      rec.bytesDownWire = a->second.bytesDownWire;
      open_->outstanding.erase(a);
    }
    rec.outcome = ParticipantOutcome::kAccepted;
    aggregator_->noteNorm(p->part.norm);
    open_->received.push_back(std::move(p));
    settleReceived();
    if (async()) {
      if (bufferFull())
        closeRound(nowMs, out);
      else
        topUp(nowMs, out);
      return out;
    }
    if (open_->received.size() >= open_->goal) {
      closeRound(nowMs, out);
    } else if (open_->outstanding.empty()) {
      if (open_->received.size() >= minGoal())
        closeRound(nowMs, out);
      else
        abandonRound(fmt::format("only {} of at least {} updates", open_->received.size(), minGoal()), nowMs, out);
    }
    return out;
  }
  if ((open_ && u.round >= open_->round) || u.round != c.lastAssigned || u.round == 0)
    return updateRejected(id, u.round, fmt::format("update for round {}, which was not assigned to it", u.round),
                          nowMs);
  // A late update: usable while it is at most S model versions behind. Under privacy in
  // sync mode never: each round sums only the clients sampled for it.
  const bool privateRound = privacy_->on() && !async();
  if (p->staleness > config_.maxStaleness || privateRound) {
    rec.outcome = ParticipantOutcome::kLateDiscarded;
    rec.reason = privateRound
                     ? std::string("late: under differential privacy a round applies only its own updates")
                     : fmt::format("{} rounds stale, more than the bound of {}", p->staleness, config_.maxStaleness);
    (open_ ? open_->closed : orphans_).push_back(rec);
    out.push_back(Verdict{id, {u.round, false, rec.reason}});
    if (async()) maybeStartRound(nowMs, out);
    return out;
  }
  // Held for the next aggregation. Its verdict goes out with the round that applies it,
  // once that round is durable (a client forgets what it sent when it hears "accepted").
  // The client is free for the next round meanwhile: it keeps this update pending beside
  // the next one (compression::ErrorFeedback holds several).
  rec.outcome = ParticipantOutcome::kLateApplied;
  late_.push_back(std::move(p));
  if (async() && bufferFull())
    closeRound(nowMs, out);
  else
    maybeStartRound(nowMs, out);  // sync: only when no round is open
  return out;
}

RoundSummary RoundEngine::summaryOf(const OpenRound& r, int64_t nowMs) {
  RoundSummary s;
  s.round = r.round;
  s.tau = r.tau;
  s.lr = r.lr;
  s.uplinkDensity = r.upDensity;
  s.downlinkDensity = r.downDensity;
  s.selected = r.selected;
  s.startedMs = r.startedMs;
  s.endedMs = nowMs;
  s.bytesDownRaw = r.bytesDownRaw;
  s.bytesDownWire = r.bytesDownWire;
  return s;
}

Result<std::vector<Action>> RoundEngine::adopt(std::span<const float> target, uint64_t holdAfter, int64_t nowMs,
                                               std::optional<UpstreamPace> upstream) {
  if (upstream && (upstream->tau == 0 || !(upstream->lr > 0) || !std::isfinite(upstream->lr)))
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the upstream's tau {} and lr {} cannot train", upstream->tau, upstream->lr));
  const std::span<const float> model = downlink_->model();
  if (target.size() != model.size())
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the model to adopt has {} parameters, the task's {}", target.size(), model.size()));
  if (open_ && !async())
    return Status(StatusCode::kInvalidArgument, fmt::format("round {} is still open", open_->round));
  // The broadcast subtracts the step: model - (model - target) = target.
  std::vector<float> step(model.size());
  for (std::size_t i = 0; i < step.size(); ++i) {
    if (!std::isfinite(target[i]))
      return Status(StatusCode::kInvalidArgument, fmt::format("the model to adopt has a non-finite parameter {}", i));
    step[i] = model[i] - target[i];
  }
  RoundSummary s;
  s.round = nextRound_++;
  s.startedMs = s.endedMs = nowMs;
  s.lr = pace_->lr(commits_);
  s.uplinkDensity = pace_->uplinkDensity(commits_);
  s.downlinkDensity = pace_->downlinkDensity(commits_);
  s.serverStep = 1;
  compression::Compressed q;
  const Status st = downlink_->commit(step, s.downlinkDensity, s.round, q);
  if (st) {
    optimizer_->broadcastSent(q);
    ++commits_;
    optimizer_->modelCommitted(downlink_->model());
  }
  s.committed = st.isOk();
  s.reason = st ? "the model adopted from upstream" : "adopting the upstream model: " + st.message();
  s.modelChecksum = downlink_->checksum();
  std::vector<Action> out;
  out.push_back(RoundEnded{std::move(s)});
  if (upstream) pace_->follow(upstream->tau, upstream->lr);
  holdAfter_ = holdAfter;
  if (finished())
    out.push_back(Finished{});
  else
    maybeStartRound(nowMs, out);
  return out;
}

bool RoundEngine::roundOpen() const {
  return open_ != nullptr;
}

std::vector<Action> RoundEngine::abandonOpenRound(const std::string& reason, int64_t nowMs) {
  std::vector<Action> out;
  if (open_ && !async()) abandonRound(reason, nowMs, out);
  return out;
}

void RoundEngine::closeRound(int64_t nowMs, std::vector<Action>& out) {
  OpenRound& r = *open_;
  RoundSummary s = summaryOf(r, nowMs);

  // Updates still held (the round has fewer than Aggregator::kMinNormsToJudge norms so
  // far) and late updates are judged now, together, against the median of all the
  // round's norms.
  std::vector<double> lateNorms;
  for (const auto& p : late_)
    lateNorms.push_back(p->part.norm);
  const double limit = aggregator_->limitAtClose(lateNorms);
  std::vector<std::unique_ptr<Pending>> use;
  for (auto& p : r.received)
    use.push_back(std::move(p));
  for (auto& p : late_)
    use.push_back(std::move(p));
  late_.clear();
  for (auto& p : use)
    if (!p->settled) settle(*p, limit);
  std::vector<ParticipantResult> records = std::move(r.closed);
  for (const ParticipantResult& rec : records)  // the asynchronous modes' expired assignments
    s.stragglers += rec.outcome == ParticipantOutcome::kStraggler ? 1 : 0;

  // ADACOMM's round loss: weighted by the clients' examples (x the selection weight) over
  // the updates on time.
  double lossSum = 0, lossW = 0;
  for (const auto& p : use) {
    if (p->record.outcome == ParticipantOutcome::kRejected || p->staleness > 0) continue;
    lossSum += double(p->part.examples) * p->record.selectionWeight * p->record.lossStart;
    lossW += double(p->part.examples) * p->record.selectionWeight;
  }

  // The federated evaluation of the round's base model: the sums of the updates that
  // evaluated it (late updates evaluated an older model, and a rejected update's sender
  // is not trusted with the metric: theirs are left out).
  s.evalBaseRound = downlink_->round();
  for (auto& p : use)
    if (p->baseRound == s.evalBaseRound && !p->evalStats.empty() && p->record.outcome != ParticipantOutcome::kRejected)
      s.evalStats.push_back(std::move(p->evalStats));

  // Delta, the server's step on it, and the broadcast that applies it.
  const std::span<float> step = aggregator_->finish();
  const std::span<const uint64_t> loads = aggregator_->shardLoads();
  s.shardLoads.assign(loads.begin(), loads.end());
  s.serverStep = optimizer_->apply(step, aggregator_->spread());
  compression::Compressed q;
  const Status st = downlink_->commit(step, r.downDensity, r.round, q);
  if (!st) {
    // Only an empty or non-finite aggregate fails here; the model stays as it was.
    for (auto& p : use) {
      p->record.outcome = ParticipantOutcome::kRejected;
      p->record.reason = "aggregate could not be compressed: " + st.message();
    }
  } else {
    optimizer_->broadcastSent(q);
    ++commits_;
    optimizer_->modelCommitted(downlink_->model());
    if (privacy_->individual()) {
      // Every update the step held is charged, applied or not: whether a client pays
      // must not depend on what its update held.
      std::vector<std::pair<std::string, double>> weights;
      for (const auto& p : use)
        weights.emplace_back(p->record.clientId, aggregator_->privacyWeight(p->staleness));
      privacy_->stepReleased(weights);
    } else {
      privacy_->committed(r.privacyRate);
    }
  }
  s.epsilon = epsilon();

  // The verdicts follow the RoundEnded action (below): they leave only once the round
  // that applied (or refused) the updates is durable.
  std::vector<Verdict> verdicts;
  for (auto& p : use) {
    ParticipantResult& rec = p->record;
    const bool ok = st.isOk() && rec.outcome != ParticipantOutcome::kRejected;
    auto c = clients_.find(rec.clientId);
    if (c != clients_.end() && ok) c->second->recordAccepted(p->round);
    verdicts.push_back(Verdict{rec.clientId, {p->round, ok, ok ? "" : rec.reason}});
    s.returned += p->staleness == 0 ? 1 : 0;
    s.accepted += ok ? 1 : 0;
    s.bytesUpRaw += rec.bytesUpRaw;
    s.bytesUpWire += rec.bytesUpWire;
    records.push_back(rec);
  }
  for (auto& [id, rec] : r.outstanding) {
    if (async()) {  // still training: its update joins a later step, weighted by its staleness
      inflight_.emplace(id, rec);
      continue;
    }
    ParticipantResult straggler = rec;
    straggler.outcome = ParticipantOutcome::kStraggler;
    straggler.reason = nowMs >= r.deadlineMs ? fmt::format("no update within {} ms", config_.deadlineMs)
                                             : fmt::format("the round closed with the first {} updates", s.returned);
    records.push_back(straggler);
    ++s.stragglers;
  }
  for (auto& rec : orphans_) {
    rec.round = r.round;
    records.push_back(rec);
  }
  orphans_.clear();
  s.participants = std::move(records);
  s.committed = st.isOk();
  if (!st) s.reason = st.message();
  s.trainLossStart = lossW > 0 ? lossSum / lossW : 0;
  s.modelChecksum = downlink_->checksum();
  open_.reset();
  if (s.committed && lossW > 0) pace_->roundCommitted(s.trainLossStart, commits_);
  out.push_back(RoundEnded{std::move(s)});
  for (auto& v : verdicts)
    out.push_back(std::move(v));
  if (finished())
    out.push_back(Finished{});
  else
    maybeStartRound(nowMs, out);
}

void RoundEngine::settle(Pending& p, double limit) {
  if (auto why = aggregator_->add(p.part, limit)) {
    p.record.outcome = ParticipantOutcome::kRejected;
    p.record.reason = std::move(*why);
  }
  p.settled = true;
}

bool RoundEngine::privacyBudgetSpent() const {
  if (!privacy_->individual()) return false;
  return std::none_of(clients_.begin(), clients_.end(),
                      [&](const auto& c) { return c.second->connected && privacy_->clientAllowed(c.first); });
}

void RoundEngine::settleReceived() {
  const std::optional<double> limit = aggregator_->limitOnTime();
  if (!limit) return;  // held until a median means something
  for (auto& p : open_->received)
    if (!p->settled) settle(*p, *limit);
}

void RoundEngine::abandonRound(const std::string& reason, int64_t nowMs, std::vector<Action>& out) {
  OpenRound& r = *open_;
  RoundSummary s = summaryOf(r, nowMs);
  s.committed = false;
  s.reason = reason;
  s.modelChecksum = downlink_->checksum();
  s.epsilon = epsilon();
  std::vector<ParticipantResult> records = std::move(r.closed);
  for (auto& p : r.received) {
    p->record.outcome = ParticipantOutcome::kRejected;
    p->record.reason = "round abandoned: " + reason;
    out.push_back(Verdict{p->record.clientId, {r.round, false, p->record.reason}});
    ++s.returned;
    s.bytesUpRaw += p->record.bytesUpRaw;
    s.bytesUpWire += p->record.bytesUpWire;
    records.push_back(p->record);
  }
  for (auto& [id, rec] : r.outstanding) {
    ParticipantResult straggler = rec;
    straggler.outcome = ParticipantOutcome::kStraggler;
    straggler.reason = "round abandoned: " + reason;
    records.push_back(straggler);
    ++s.stragglers;
  }
  for (auto& [id, rec] : inflight_) {
    ParticipantResult straggler = rec;
    straggler.outcome = ParticipantOutcome::kStraggler;
    straggler.reason = "round abandoned: " + reason;
    records.push_back(straggler);
    ++s.stragglers;
  }
  inflight_.clear();
  for (auto& rec : orphans_) {
    rec.round = r.round;
    records.push_back(rec);
  }
  orphans_.clear();
  s.participants = std::move(records);
  open_.reset();
  out.push_back(RoundEnded{std::move(s)});
  maybeStartRound(nowMs, out);
}

EngineSnapshot RoundEngine::snapshot() const {
  EngineSnapshot s;
  s.round = downlink_->round();
  s.model.assign(downlink_->model().begin(), downlink_->model().end());
  s.serverMemory.assign(downlink_->memory().begin(), downlink_->memory().end());
  s.state = serializeState();
  s.catchUp = downlink_->serialize();
  optimizer_->saveVectors(s.vectors);
  return s;
}

// The engine state: "committed", "next", "commits", Pace's lines, Selection's "rng",
// an "accepted" line per client with applied updates, Selection's "sticky" lines.
std::string RoundEngine::serializeState() const {
  std::ostringstream o;
  o.precision(17);
  o << "committed " << downlink_->round() << "\nnext " << nextRound_ << "\ncommits " << commits_;
  pace_->writeState(o);
  selection_->writeRng(o);
  o << "\n";
  privacy_->writeState(o);
  for (const auto& [id, c] : clients_)
    if (!c->accepted.empty()) o << "accepted " << id << " " << fmt::format("{}", fmt::join(c->accepted, ",")) << "\n";
  selection_->writeGroup(o);
  return o.str();
}

Status RoundEngine::restoreState(const std::string& state, uint64_t& committed) {
  std::istringstream in(state);
  std::string key;
  int line = 0;
  committed = 0;
  while (in >> key) {
    ++line;
    bool ok = true;
    if (key == "committed")
      ok = static_cast<bool>(in >> committed);
    else if (key == "next")
      ok = static_cast<bool>(in >> nextRound_);
    else if (key == "commits")
      ok = static_cast<bool>(in >> commits_);
    else if (key == "accepted") {
      // "accepted ID R1,R2,..." (increasing; checkpoints before several were kept: one round).
      std::string id, rounds;
      ok = static_cast<bool>(in >> id >> rounds);
      if (ok) {
        auto& c = clients_[id];
        if (!c) {
          c = std::make_unique<Client>();
          c->id = id;
        }
        std::istringstream list(rounds);
        for (std::string r; ok && std::getline(list, r, ',');) {
          uint64_t round = 0;
          auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), round);
          ok = ec == std::errc() && end == r.data() + r.size() && round > 0;
          if (ok) c->recordAccepted(round);
        }
      }
    } else if (!pace_->readState(key, in, ok) && !selection_->readState(key, in, ok) &&
               !privacy_->readState(key, in, ok)) {
      return Status(StatusCode::kMalformed, fmt::format("engine state, entry {}: unknown key '{}'", line, key));
    }
    if (!ok)
      return Status(StatusCode::kMalformed, fmt::format("engine state, entry {}: bad value for '{}'", line, key));
  }
  if (nextRound_ <= committed) nextRound_ = committed + 1;
  return Status::ok();
}

}  // namespace starling::coordinator
