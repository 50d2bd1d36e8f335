#include "starling/coordinator/round_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "starling/compression/fp16.hpp"
#include "starling/compression/precision.hpp"
#include "starling/compression/topk.hpp"
#include "starling/compression/wire_codec.hpp"
#include "starling/util/checksum.hpp"

#include "catch_up_generated.h"

namespace starling::coordinator {
namespace {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Orders the sticky group's members last assigned in the same round, for leaving it:
// a pseudo-random order that changes from round to round. By id alone the smallest ids
// would always leave first, and over a long run be selected less often than the others.
uint64_t stickyTieKey(const std::string& id, uint64_t round) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the id
  for (const unsigned char ch : id)
    h = (h ^ ch) * 0x100000001b3ull;
  uint64_t state = h ^ (round * 0x9e3779b97f4a7c15ull);
  return splitmix(state);
}

// The norm check needs this many norms before a median means something.
constexpr std::size_t kMinNormsToJudge = 3;

// The element at size / 2 of the sorted values (the upper median).
double upperMedian(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

bool usesDensity(const std::string& name) {
  return name == "topk" || name == "topk-sampled" || name == "randk";
}

// GlueFL's shared mask on the downlink (He et al., MLSys 2023): of the k coordinates
// a top-k broadcast sends, round(shared x k) are those of largest |v| among the previous
// broadcast's coordinates, the others those of largest |v| among the rest (ties: the
// lower index). Over g rounds the broadcasts then touch at most k + (g - 1)(k - shared k)
// coordinates, which keeps catch-up by value small for clients that missed rounds.
class SharedMaskTopK final : public compression::Compressor {
 public:
  SharedMaskTopK(compression::ValueFormat values, double shared) : values_(values), shared_(shared) {}
  std::string_view name() const override { return "topk-shared"; }
  Status compress(std::span<const float> v, const compression::CompressParams& params,
                  compression::Compressed& out) override {
    STARLING_RETURN_IF_ERROR(compression::checkInput(v));
    auto k = compression::selectedCount(v.size(), params.density);
    if (!k) return k.status();
    auto larger = [&](uint32_t a, uint32_t b) {
      const float ma = std::fabs(v[a]), mb = std::fabs(v[b]);
      return ma != mb ? ma > mb : a < b;
    };
    std::vector<uint32_t> kept = std::move(mask_);
    const auto keep = std::min<std::size_t>(kept.size(), static_cast<std::size_t>(std::lround(shared_ * *k)));
    std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(keep), kept.end(), larger);
    kept.resize(keep);
    taken_.assign(v.size(), 0);
    for (uint32_t i : kept)
      taken_[i] = 1;
    rest_.clear();
    for (uint32_t i = 0; i < v.size(); ++i)
      if (!taken_[i]) rest_.push_back(i);
    const std::size_t more = std::min<std::size_t>(*k - keep, rest_.size());
    std::nth_element(rest_.begin(), rest_.begin() + static_cast<std::ptrdiff_t>(more), rest_.end(), larger);
    kept.insert(kept.end(), rest_.begin(), rest_.begin() + static_cast<std::ptrdiff_t>(more));
    std::sort(kept.begin(), kept.end());
    mask_ = std::move(kept);
    out.clear();
    out.encoding = compression::Encoding::kTopK;
    out.count = static_cast<uint32_t>(v.size());
    out.valueFormat = values_;
    out.indices = mask_;
    out.values.resize(mask_.size());
    for (std::size_t j = 0; j < mask_.size(); ++j)
      out.values[j] = v[mask_[j]];
    if (values_ == compression::ValueFormat::kFp16) compression::roundToHalfSaturating(out.values, out.values);
    if (values_ == compression::ValueFormat::kSignBits) compression::makeTernary(out);
    return Status::ok();
  }

  // The previous broadcast's coordinates, for a checkpoint, and back.
  const std::vector<uint32_t>& mask() const { return mask_; }
  void setMask(std::vector<uint32_t> mask) { mask_ = std::move(mask); }

 private:
  compression::ValueFormat values_;
  double shared_;
  std::vector<uint32_t> mask_;  // the previous broadcast's coordinates, increasing
  std::vector<uint8_t> taken_;
  std::vector<uint32_t> rest_;
};

}  // namespace

struct RoundEngine::Client {
  std::string id;
  uint64_t examples = 0;
  bool connected = false;
  bool busy = false;                  // training for us: assigned, update not yet in
  std::optional<uint64_t> heldRound;  // the model it holds; nullopt = unknown, send dense
  uint64_t lastAssigned = 0;          // the last round assigned to it
  // The last kAcceptedKept rounds whose update of its was applied, increasing: a client
  // that reconnects settles its pending updates by them.
  std::deque<uint64_t> accepted;
  void recordAccepted(uint64_t round) {
    if (!accepted.empty() && accepted.back() >= round) {
      if (std::find(accepted.begin(), accepted.end(), round) != accepted.end()) return;
      accepted.insert(std::upper_bound(accepted.begin(), accepted.end(), round), round);
    } else {
      accepted.push_back(round);
    }
    while (accepted.size() > kAcceptedKept)
      accepted.pop_front();
  }
  double stepsPerMs = 0;              // measured speed (EWMA), 0 = unknown
  bool sticky = false;                // of lastAssigned: drawn from the sticky group
  double selectionWeight = 1.0;       // of lastAssigned (EngineConfig::stickyClients)
  // The round of the broadcast whose indices the client holds as the reference for
  // relative indices: the last entry of the last log replay it was sent. nullopt after
  // a catch-up by value or a dense model, and whenever it (re)joins, leaves or is
  // out of sync.
  std::optional<uint64_t> indicesRound;
};

// An update that will be aggregated. Its delta is released once it has been added
// to the round's running sum (or rejected): only the record and the norm stay.
struct RoundEngine::Pending {
  ParticipantResult record;
  uint64_t round = 0;
  uint32_t staleness = 0;
  compression::Compressed delta;
  double norm = 0;
  bool settled = false;  // added to the sum or rejected; delta released
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
  double budgetMs = std::numeric_limits<double>::infinity();  // compute time per client (budgetQuantile)
  uint64_t bytesDownRaw = 0;
  uint64_t bytesDownWire = 0;
  std::map<std::string, ParticipantResult> outstanding;  // assigned, no update yet
  std::vector<std::unique_ptr<Pending>> received;
  std::vector<ParticipantResult> closed;  // dropped, rejected
  // Streaming aggregation: the norms of every update received on time, and the
  // running sums (see RoundEngine::settle).
  std::vector<double> norms;
  double weightSum = 0;  // sum of w_k = n_k / sqrt(1 + s_k)
  double stepSum = 0;    // sum of w_k * steps_k
  double normSqSum = 0;  // sum of w_k * (||q_k|| / steps_k)^2, for FedExP
};

RoundEngine::RoundEngine(EngineConfig config, std::vector<float> model)
    : config_(std::move(config)), model_(std::move(model)) {}

RoundEngine::~RoundEngine() = default;

Result<std::unique_ptr<RoundEngine>> RoundEngine::create(EngineConfig config, std::vector<float> initialModel) {
  std::unique_ptr<RoundEngine> e(new RoundEngine(std::move(config), std::move(initialModel)));
  STARLING_RETURN_IF_ERROR(e->init());
  e->tau_ = e->config_.tau;
  e->rng_ = e->config_.seed;
  return e;
}

Result<std::unique_ptr<RoundEngine>> RoundEngine::resume(EngineConfig config, const EngineSnapshot& snap) {
  std::unique_ptr<RoundEngine> e(new RoundEngine(std::move(config), snap.model));
  STARLING_RETURN_IF_ERROR(e->init());
  if (snap.serverMemory.size() != e->model_.size() && !snap.serverMemory.empty())
    return Status(StatusCode::kMalformed, "checkpoint's server memory and model differ in size");
  e->tau_ = e->config_.tau;
  e->rng_ = e->config_.seed;
  STARLING_RETURN_IF_ERROR(e->restoreState(snap.state));
  if (e->memory_ && !snap.serverMemory.empty()) STARLING_RETURN_IF_ERROR(e->memory_->restore(snap.serverMemory));
  const EngineConfig& c = e->config_;
  const bool sgd = c.serverOptimizer == "sgd";
  const std::pair<const char*, std::vector<float>*> used[] = {
      {"server-momentum", sgd && c.serverMomentum > 0 ? &e->velocity_ : nullptr},
      {"server-first-moment", !sgd ? &e->velocity_ : nullptr},
      {"server-second-moment", !sgd ? &e->secondMoment_ : nullptr},
      {"model-average", c.modelEma > 0 ? &e->average_ : nullptr},
  };
  for (const auto& [name, values] : snap.vectors) {
    if (values.size() != e->model_.size())
      return Status(StatusCode::kMalformed, fmt::format("checkpoint's vector '{}' has {} values, the model {}", name,
                                                        values.size(), e->model_.size()));
    const auto* slot = std::find_if(std::begin(used), std::end(used), [&](const auto& u) { return name == u.first; });
    if (slot == std::end(used))
      return Status(StatusCode::kMalformed, fmt::format("checkpoint holds an unknown vector '{}'", name));
    if (slot->second != nullptr) *slot->second = values;
  }
  e->modelChecksum_ = checksum64(e->model_);
  if (!snap.catchUp.empty()) {
    STARLING_RETURN_IF_ERROR(e->restoreCatchUp(snap.catchUp));
  } else {
    // A checkpoint without its catch-up state: which coordinates changed before it is
    // not known, so all of them may have (a client behind it gets the dense model).
    std::fill(e->changedAt_.begin(), e->changedAt_.end(),
              static_cast<uint32_t>(std::min<uint64_t>(e->committedRound_, UINT32_MAX)));
    e->history_.assign(1, {e->committedRound_, e->modelChecksum_});
  }
  return e;
}

Status RoundEngine::init() {
  const EngineConfig& c = config_;
  if (model_.empty()) return Status(StatusCode::kInvalidArgument, "the initial model is empty");
  if (c.clientsPerRound == 0) return Status(StatusCode::kInvalidArgument, "clients per round must be at least 1");
  if (c.overSelection < 1.0) return Status(StatusCode::kInvalidArgument, "over-selection must be at least 1.0");
  if (c.deadlineMs <= 0) return Status(StatusCode::kInvalidArgument, "the deadline must be positive");
  if (!(c.lr > 0)) return Status(StatusCode::kInvalidArgument, "the learning rate must be positive");
  if (!(c.serverLr > 0) || !std::isfinite(c.serverLr))
    return Status(StatusCode::kInvalidArgument, "the server learning rate must be positive");
  if (!(c.serverMomentum >= 0 && c.serverMomentum < 1))
    return Status(StatusCode::kInvalidArgument, "server momentum must be in [0, 1)");
  if (!(c.modelEma >= 0 && c.modelEma < 1))
    return Status(StatusCode::kInvalidArgument, "the model EMA decay must be in [0, 1) (0 = off)");
  if (c.stickyClients > 0) {
    const auto want = static_cast<uint64_t>(std::ceil(c.clientsPerRound * c.overSelection - 1e-9));
    if (c.stickyClients < want)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("sticky clients ({}) must be at least the clients selected per round ({})",
                                c.stickyClients, want));
    if (!(c.stickyFraction >= 0 && c.stickyFraction <= 1))
      return Status(StatusCode::kInvalidArgument, "the sticky fraction must be in [0, 1]");
  }
  if (!(c.budgetTauFactor >= 1))
    return Status(StatusCode::kInvalidArgument, "the budget tau factor must be at least 1 (1 = off)");
  if (c.serverOptimizer != "sgd" && c.serverOptimizer != "adam" && c.serverOptimizer != "yogi")
    return Status(StatusCode::kInvalidArgument, "server optimizer must be sgd, adam or yogi");
  if (c.serverOptimizer != "sgd") {
    if (c.serverMomentum > 0 || c.extrapolate)
      return Status(StatusCode::kInvalidArgument,
                    "server momentum and extrapolate belong to the sgd server optimizer, not " + c.serverOptimizer);
    if (!(c.serverBeta1 >= 0 && c.serverBeta1 < 1) || !(c.serverBeta2 >= 0 && c.serverBeta2 < 1) ||
        !(c.serverEps > 0) || !std::isfinite(c.serverEps))
      return Status(StatusCode::kInvalidArgument, "server betas must be in [0, 1) and eps positive");
  }
  if (c.modelMantissaBits == 0 || c.modelMantissaBits > compression::kFp32MantissaBits)
    return Status(StatusCode::kInvalidArgument, "model mantissa bits must be in [1, 23]");
  if (c.tau == 0 || c.tauMin == 0 || c.tauMin > c.tauMax)
    return Status(StatusCode::kInvalidArgument, "need 1 <= tauMin <= tauMax and tau >= 1");
  auto isTopK = [](const std::string& name) { return name == "topk" || name == "topk-sampled"; };
  if ((c.uplinkTernary && !isTopK(c.uplink)) || (c.downlinkTernary && !isTopK(c.downlink)))
    return Status(StatusCode::kInvalidArgument, "ternary values need a topk or topk-sampled compressor on that link");
  const auto downValues = compression::sparseValueFormat(c.fp16Values, c.downlinkTernary);
  auto down = compression::makeCompressor(c.downlink, {downValues});
  if (!down) return down.status().withContext("downlink compressor");
  down_ = std::move(*down);
  if (c.downlinkShared > 0) {
    if (!(c.downlinkShared < 1) || (c.downlink != "topk" && c.downlink != "topk-sampled"))
      return Status(StatusCode::kInvalidArgument,
                    "a downlink shared mask needs a topk downlink and a fraction in [0, 1)");
    down_ = std::make_unique<SharedMaskTopK>(downValues, c.downlinkShared);
  }
  if (c.downlinkRelativeIndices && !isTopK(c.downlink))
    return Status(StatusCode::kInvalidArgument, "relative downlink indices need a topk or topk-sampled downlink");
  auto up = compression::makeCompressor(c.uplink, {compression::sparseValueFormat(c.fp16Values, c.uplinkTernary)});
  if (!up) return up.status().withContext("uplink compressor");
  auto upSchedule = compression::WarmupDensity::create(c.uplinkDensity, c.warmupRounds);
  if (!upSchedule) return upSchedule.status().withContext("uplink density");
  auto downSchedule = compression::WarmupDensity::create(c.downlinkDensity, c.warmupRounds);
  if (!downSchedule) return downSchedule.status().withContext("downlink density");
  upSchedule_ = std::move(*upSchedule);
  downSchedule_ = std::move(*downSchedule);
  if (c.errorFeedback) {
    compression::ErrorFeedbackOptions eo;
    eo.maxErrorRatio = c.downlinkErrorCap;
    auto mem = compression::ErrorFeedback::create(model_.size(), eo);
    if (!mem) return mem.status();
    memory_.emplace(std::move(*mem));
  }
  modelChecksum_ = checksum64(model_);
  changedAt_.assign(c.catchUpByValue ? model_.size() : 0, 0);
  history_.assign(1, {committedRound_, modelChecksum_});
  return Status::ok();
}

bool RoundEngine::knownModel(uint64_t round, uint64_t checksum) const {
  for (const auto& [r, sum] : history_)
    if (r == round && sum == checksum) return true;
  for (const auto& entry : log_)
    if ((entry.round == round && entry.checksumAfter == checksum) ||
        (entry.previousRound == round && entry.checksumBefore == checksum))
      return true;
  return false;
}

std::shared_ptr<const compression::Payload> RoundEngine::valuesSince(uint64_t round) {
  if (changedAt_.size() != model_.size() || committedRound_ > UINT32_MAX) return nullptr;
  auto& slot = valueCache_[round];
  if (slot) return slot;
  compression::Compressed c;
  c.encoding = compression::Encoding::kTopK;
  c.valueFormat = compression::ValueFormat::kFp32;
  c.count = static_cast<uint32_t>(model_.size());
  for (std::size_t i = 0; i < changedAt_.size(); ++i) {
    if (changedAt_[i] > round) c.indices.push_back(static_cast<uint32_t>(i));
  }
  const bool unchanged = c.indices.empty();
  if (unchanged) c.indices.push_back(0);  // nothing changed (only zeros were broadcast): one, unchanged
  // Every commit after `round` in the undo log: the client's value at each changed
  // coordinate is the one before the first of them that changed it.
  if (!undo_.empty() && undo_.front().previousRound <= round) {
    xorBase_.resize(model_.size());
    xorBase_[0] = model_[0];
    for (auto e = undo_.rbegin(); e != undo_.rend() && e->previousRound >= round; ++e)
      for (std::size_t j = 0; j < e->indices.size(); ++j)
        xorBase_[e->indices[j]] = e->before[j];
    // The changed coordinates' values have their low bits clear (modelMantissaBits):
    // only the bits above them are sent.
    c.valueFormat = compression::ValueFormat::kXor32;
    c.block = unchanged ? 0 : compression::kFp32MantissaBits - config_.modelMantissaBits;
    for (uint32_t i : c.indices)
      c.xorWords.push_back((std::bit_cast<uint32_t>(model_[i]) >> c.block) ^
                           (std::bit_cast<uint32_t>(xorBase_[i]) >> c.block));
  } else {
    for (uint32_t i : c.indices)
      c.values.push_back(model_[i]);
  }
  auto p = std::make_shared<compression::Payload>();
  if (!compression::encode(c, *p)) return nullptr;
  slot = std::move(p);
  return slot;
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

double RoundEngine::lrFor(uint64_t commits) const {
  return config_.lr * std::pow(config_.lrDecay, static_cast<double>(commits));
}

uint32_t RoundEngine::tauFor(const Client& c, double budgetMs) const {
  if (!config_.stepBudgets || c.stepsPerMs <= 0) return tau_;
  const double affordable =
      c.stepsPerMs * std::min(budgetMs, config_.budgetFraction * static_cast<double>(config_.deadlineMs));
  const auto budget = static_cast<uint32_t>(std::clamp(std::floor(affordable), 0.0, 4e9));
  // Time budgets: a client faster than the quantile's may use its time for more than tau.
  uint32_t most = tau_;
  if (config_.budgetTauFactor > 1 && std::isfinite(budgetMs))
    most = static_cast<uint32_t>(std::clamp(std::floor(config_.budgetTauFactor * tau_), double(tau_), 4e9));
  return std::clamp(std::min(most, budget), config_.tauMin, std::max(config_.tauMin, most));
}

std::vector<Action> RoundEngine::start(int64_t nowMs) {
  std::vector<Action> out;
  if (finished()) {
    out.push_back({Action::Kind::kFinished, {}, {}, {}, {}, 0});
    return out;
  }
  maybeStartRound(nowMs, out);
  return out;
}

std::vector<Action> RoundEngine::clientJoined(const std::string& id, uint64_t examples, uint64_t heldRound,
                                              uint64_t heldChecksum, int64_t nowMs) {
  auto& slot = clients_[id];
  if (!slot) {
    slot = std::make_unique<Client>();
    slot->id = id;
  }
  Client& c = *slot;
  c.connected = true;
  c.examples = examples;
  c.busy = false;  // whatever it was doing for us was lost with its connection
  c.indicesRound.reset();
  // Trust the model it holds only if we can name that model: the current one, or an
  // earlier one we remember. A client holding nothing builds the round-0 model itself
  // when clientsInitialize (the checksum of its first assignment proves it).
  c.heldRound.reset();
  if ((heldRound == committedRound_ && heldChecksum == modelChecksum_) || knownModel(heldRound, heldChecksum))
    c.heldRound = heldRound;
  else if (heldRound == 0 && heldChecksum == 0 && config_.clientsInitialize)
    c.heldRound = 0;
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
  dropOutstanding(id, reason, nowMs, out);
  return out;
}

void RoundEngine::dropOutstanding(const std::string& id, const std::string& reason, int64_t nowMs,
                                  std::vector<Action>& out) {
  if (!open_) return;
  auto a = open_->outstanding.find(id);
  if (a == open_->outstanding.end()) return;
  ParticipantResult rec = a->second;
  rec.outcome = "dropped";
  rec.reason = reason;
  open_->closed.push_back(rec);
  open_->outstanding.erase(a);
  if (open_->outstanding.empty()) {
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
  return config_.minGoal > 0 ? config_.minGoal : (config_.clientsPerRound + 1) / 2;
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

Assignment RoundEngine::makeAssignment(Client& c, uint64_t round, int64_t nowMs) {
  Assignment a;
  a.round = round;
  a.baseRound = committedRound_;
  a.tau = tauFor(c, open_->budgetMs);
  a.lr = static_cast<float>(open_->lr);
  a.uplinkDensity = static_cast<float>(open_->upDensity);
  a.deadlineMs = nowMs + config_.deadlineMs;
  a.baseChecksum = modelChecksum_;
  if (!c.heldRound || *c.heldRound != committedRound_) {
    // Whichever is the fewest bytes: the dense model, the broadcasts since the
    // client's round (a client that missed a few dense broadcasts would otherwise
    // download several models' worth), or the current values of the coordinates they
    // touched.
    enum class Via { kDense, kLog, kValues } via = Via::kDense;
    std::size_t best = model_.size() * sizeof(float);
    auto first = log_.end();
    std::shared_ptr<const compression::Payload> values;
    // An entry's relative form is decodable when the client holds the indices it is
    // coded against: those of the entry before it in the same replay, or for the first,
    // those of the broadcast before it (Client::indicesRound).
    auto sent = [&](std::deque<LogEntry>::const_iterator e) {
      const bool referenced = e != first || (c.indicesRound && *c.indicesRound == e->previousRound);
      return e->relative && referenced ? e->relative : e->payload;
    };
    if (c.heldRound) {
      // The log is a chain (each entry starts where the previous one ended): it can
      // bring the client forward if some entry starts at the model it holds.
      first =
          std::find_if(log_.begin(), log_.end(), [&](const LogEntry& e) { return e.previousRound == *c.heldRound; });
      if (first != log_.end()) {
        std::size_t logBytes = 0;
        for (auto e = first; e != log_.end(); ++e)
          logBytes += sent(e)->byteSize();
        if (logBytes < best) {
          best = logBytes;
          via = Via::kLog;
        }
      }
      if (config_.catchUpByValue) values = valuesSince(*c.heldRound);
      if (values && values->byteSize() < best) {
        best = values->byteSize();
        via = Via::kValues;
      }
    }
    switch (via) {
      case Via::kLog:
        for (auto e = first; e != log_.end(); ++e)
          a.broadcasts.push_back(sent(e));
        // The client keeps the last one's indices: the next replay's first reference.
        c.indicesRound.reset();
        if (log_.back().payload->encoding == compression::Encoding::kTopK) c.indicesRound = log_.back().round;
        break;
      case Via::kValues:
        a.values = std::move(values);
        c.indicesRound.reset();
        break;
      case Via::kDense:
        if (!denseCache_) denseCache_ = std::make_shared<const std::vector<float>>(model_);
        a.denseModel = denseCache_;
        c.indicesRound.reset();
        break;
    }
  }
  c.heldRound = committedRound_;
  return a;
}

std::vector<Action> RoundEngine::shutdown(const std::string& reason, int64_t nowMs) {
  std::vector<Action> out;
  stopping_ = true;
  if (open_) abandonRound(reason, nowMs, out);
  return out;
}

void RoundEngine::maybeStartRound(int64_t nowMs, std::vector<Action>& out) {
  if (open_ || finished() || stopping_) return;
  std::vector<Client*> idle;
  for (auto& [id, c] : clients_)
    if (c->connected && !c->busy) idle.push_back(c.get());
  const uint32_t need = config_.minClients > 0 ? config_.minClients : config_.clientsPerRound;
  if (idle.size() < need || idle.empty()) return;
  const std::vector<Pick> picks = select(std::move(idle), nextRound_);

  open_ = std::make_unique<OpenRound>();
  open_->round = nextRound_++;
  open_->startedMs = nowMs;
  open_->deadlineMs = nowMs + config_.deadlineMs;
  open_->tau = tau_;
  open_->lr = lrFor(commits_);
  open_->upDensity = usesDensity(config_.uplink) ? upSchedule_->density(commits_) : 1.0;
  open_->downDensity = usesDensity(config_.downlink) ? downSchedule_->density(commits_) : 1.0;
  open_->selected = static_cast<uint32_t>(picks.size());
  if (config_.stepBudgets && config_.budgetQuantile > 0) {
    std::vector<double> speeds;
    for (const Pick& p : picks)
      if (p.client->stepsPerMs > 0) speeds.push_back(p.client->stepsPerMs);
    if (!speeds.empty()) {
      std::sort(speeds.begin(), speeds.end());
      const double q = std::min(config_.budgetQuantile, 1.0) * static_cast<double>(speeds.size() - 1);
      open_->budgetMs = static_cast<double>(tau_) / speeds[static_cast<std::size_t>(std::floor(q))];
    }
  }
  aggregate_.assign(model_.size(), 0.0f);  // the round's running sum
  if (config_.senderMean) coverage_.assign(model_.size(), 0.0f);
  for (const Pick& pick : picks) {
    Client* c = pick.client;
    Action act{Action::Kind::kAssign, c->id, makeAssignment(*c, open_->round, nowMs), {}, {}, 0};
    uint64_t wire = 0;
    for (const auto& b : act.assignment.broadcasts)
      wire += b->byteSize();
    if (act.assignment.denseModel) wire += act.assignment.denseModel->size() * sizeof(float);
    if (act.assignment.values) wire += act.assignment.values->byteSize();
    open_->bytesDownWire += wire;
    open_->bytesDownRaw += model_.size() * sizeof(float) * std::max<std::size_t>(1, act.assignment.broadcasts.size());
    ParticipantResult rec;
    rec.round = open_->round;
    rec.clientId = c->id;
    rec.assignedMs = nowMs;
    c->lastAssigned = open_->round;
    c->sticky = pick.sticky;
    c->selectionWeight = pick.weight;
    rec.bytesDownWire = wire;
    rec.sticky = pick.sticky;
    rec.selectionWeight = pick.weight;
    open_->outstanding.emplace(c->id, rec);
    c->busy = true;
    out.push_back(std::move(act));
  }
  out.push_back({Action::Kind::kWakeAt, {}, {}, {}, {}, open_->deadlineMs});
}

std::vector<RoundEngine::Pick> RoundEngine::select(std::vector<Client*> idle, uint64_t round) {
  const auto want = static_cast<std::size_t>(std::ceil(config_.clientsPerRound * config_.overSelection - 1e-9));
  auto shuffle = [&](std::vector<Client*>& v) {  // deterministic: clients_ is ordered by id
    for (std::size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[splitmix(rng_) % i]);
  };
  std::vector<Pick> picks;
  if (config_.stickyClients == 0) {
    shuffle(idle);
    idle.resize(std::min(idle.size(), want));
    for (Client* c : idle)
      picks.push_back({c, false, 1.0});
    return picks;
  }
  // GlueFL: cs of the n selected from the group's idle members, the other ns from the
  // other idle clients (either part takes more when the other runs short). A member is
  // selected with probability cs / s, another client with ns / o; uniform sampling
  // selects each with n / N, so the selection weights are (n / N) / (cs / s) and
  // (n / N) / (ns / o): E[selected x weight] = n / N for every idle client, given the group.
  std::vector<Client*> members, others;
  for (Client* c : idle)
    (sticky_.count(c->id) > 0 ? members : others).push_back(c);
  shuffle(members);
  shuffle(others);
  const std::size_t n = std::min(idle.size(), want);
  std::size_t cs = std::min(members.size(), static_cast<std::size_t>(std::lround(config_.stickyFraction * double(n))));
  const std::size_t ns = std::min(others.size(), n - cs);
  cs = std::min(members.size(), n - ns);
  const double uniform = double(n) / double(idle.size());
  auto weight = [&](std::size_t available, std::size_t drawn) {
    return config_.stickyReweight ? uniform * double(available) / double(drawn) : 1.0;
  };
  for (std::size_t i = 0; i < cs; ++i)
    picks.push_back({members[i], true, weight(members.size(), cs)});
  for (std::size_t i = 0; i < ns; ++i)
    picks.push_back({others[i], false, weight(others.size(), ns)});
  // Every participant is (now) a member, assigned this round; the members assigned
  // longest ago leave (ties: in stickyTieKey's order, deterministic for the state).
  for (const Pick& p : picks)
    sticky_[p.client->id] = round;
  auto age = [](const auto& member) { return std::pair(member.second, stickyTieKey(member.first, member.second)); };
  while (sticky_.size() > config_.stickyClients) {
    auto oldest = sticky_.begin();
    for (auto it = sticky_.begin(); it != sticky_.end(); ++it)
      if (age(*it) < age(*oldest)) oldest = it;
    sticky_.erase(oldest);
  }
  return picks;
}

std::vector<std::string> RoundEngine::stickyGroup() const {
  std::vector<std::string> out;
  for (const auto& [id, round] : sticky_)
    out.push_back(id);
  return out;
}

std::vector<Action> RoundEngine::updateRejected(const std::string& id, uint64_t round, const std::string& reason,
                                                int64_t nowMs) {
  std::vector<Action> out;
  auto it = clients_.find(id);
  if (it != clients_.end()) it->second->busy = false;
  ParticipantResult rec;
  rec.clientId = id;
  rec.outcome = "rejected";
  rec.reason = reason;
  rec.returnedMs = nowMs;
  // Recorded under the open round (or the next one to end): the round an update
  // names may not exist.
  if (open_) {
    rec.round = open_->round;
    auto a = open_->outstanding.find(id);
    if (a != open_->outstanding.end()) {
      rec.assignedMs = a->second.assignedMs;
      rec.bytesDownWire = a->second.bytesDownWire;
      open_->outstanding.erase(a);
    }
    open_->closed.push_back(rec);
  } else {
    orphans_.push_back(rec);
  }
  out.push_back({Action::Kind::kVerdict, id, {}, {round, false, reason}, {}, 0});
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
  if (u.delta.count != model_.size())
    return updateRejected(id, u.round,
                          fmt::format("update has {} elements, the model has {}", u.delta.count, model_.size()), nowMs);
  if (u.examples == 0 || u.steps == 0)
    return updateRejected(id, u.round, "update reports no examples or no steps", nowMs);
  if (!std::isfinite(u.lossStart) || !std::isfinite(u.lossEnd))
    return updateRejected(id, u.round, "update reports a non-finite loss", nowMs);
  if (u.baseRound > committedRound_)
    return updateRejected(id, u.round, fmt::format("update is based on round {}, which does not exist", u.baseRound),
                          nowMs);

  auto p = std::make_unique<Pending>();
  p->round = u.round;
  p->record.round = u.round;
  p->staleness = static_cast<uint32_t>(commitsSince(u.baseRound));
  auto norm = compression::l2Norm(u.delta);  // from the compressed form: nothing is expanded
  if (!norm) return updateRejected(id, u.round, norm.status().message(), nowMs);
  p->norm = *norm;
  if (!std::isfinite(p->norm)) return updateRejected(id, u.round, "update contains NaN or Inf", nowMs);
  p->delta = std::move(u.delta);
  ParticipantResult& rec = p->record;
  rec.clientId = id;
  rec.returnedMs = nowMs;
  rec.steps = u.steps;
  rec.examples = u.examples;
  rec.lossStart = u.lossStart;
  rec.lossEnd = u.lossEnd;
  rec.bytesUpRaw = model_.size() * sizeof(float);
  rec.bytesUpWire = u.bytesWire;
  rec.durationMs = u.durationMs;
  rec.staleness = p->staleness;
  if (u.round == c.lastAssigned) {  // else rejected below
    rec.sticky = c.sticky;
    rec.selectionWeight = c.selectionWeight;
  }
  if (u.durationMs > 0) {
    const double speed = double(u.steps) / double(u.durationMs);
    c.stepsPerMs = c.stepsPerMs > 0 ? 0.5 * c.stepsPerMs + 0.5 * speed : speed;
  }
  c.busy = false;

  std::vector<Action> out;
  const bool onTime = open_ && u.round == open_->round && open_->outstanding.count(id) > 0;
  if (onTime) {
    auto a = open_->outstanding.find(id);
    rec.assignedMs = a->second.assignedMs;
    rec.bytesDownWire = a->second.bytesDownWire;
    open_->outstanding.erase(a);
    rec.outcome = "accepted";
    open_->norms.push_back(p->norm);
    open_->received.push_back(std::move(p));
    settleReceived();
    if (open_->received.size() >= config_.clientsPerRound) {
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
  // A late update: usable while it is at most S model versions behind.
  if (p->staleness > config_.maxStaleness) {
    rec.outcome = "late-discarded";
    rec.reason = fmt::format("{} rounds stale, more than the bound of {}", p->staleness, config_.maxStaleness);
    (open_ ? open_->closed : orphans_).push_back(rec);
    out.push_back({Action::Kind::kVerdict, id, {}, {u.round, false, rec.reason}, {}, 0});
    return out;
  }
  // Held for the next aggregation. Its verdict goes out with the round that applies it,
  // once that round is durable (a client forgets what it sent when it hears "accepted").
  // The client is free for the next round meanwhile: it keeps this update pending beside
  // the next one (compression::ErrorFeedback holds several).
  rec.outcome = "late-applied";
  late_.push_back(std::move(p));
  if (!open_) maybeStartRound(nowMs, out);
  return out;
}

uint64_t RoundEngine::commitsSince(uint64_t baseRound) const {
  if (baseRound == committedRound_) return 0;
  auto first = std::find(previousRounds_.begin(), previousRounds_.end(), baseRound);
  if (first == previousRounds_.end()) return uint64_t(config_.maxStaleness) + 1;  // older than we know: too stale
  return static_cast<uint64_t>(std::distance(first, previousRounds_.end()));
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

void RoundEngine::closeRound(int64_t nowMs, std::vector<Action>& out) {
  OpenRound& r = *open_;
  RoundSummary s = summaryOf(r, nowMs);

  // Updates still held (the round has fewer than kMinNormsToJudge norms so far) and
  // late updates are judged now, together, against the median of all the round's norms.
  std::vector<double> norms = r.norms;
  for (const auto& p : late_)
    norms.push_back(p->norm);
  const bool check = config_.maxNormRatio > 0 && norms.size() >= kMinNormsToJudge;
  const double limit = check ? config_.maxNormRatio * upperMedian(std::move(norms)) : 0;
  std::vector<std::unique_ptr<Pending>> use;
  for (auto& p : r.received)
    use.push_back(std::move(p));
  for (auto& p : late_)
    use.push_back(std::move(p));
  late_.clear();
  for (auto& p : use)
    if (!p->settled) settle(*p, limit);
  std::vector<ParticipantResult> records = std::move(r.closed);

  // Delta = (stepSum / weightSum) * sum_k (w_k / weightSum) q_k / steps_k: the running
  // sum holds sum_k (w_k / steps_k) q_k (see settle()).
  double lossSum = 0, lossW = 0;
  for (const auto& p : use) {
    if (p->record.outcome == "rejected" || p->staleness > 0) continue;
    lossSum += double(p->record.examples) * p->record.selectionWeight * p->record.lossStart;
    lossW += double(p->record.examples) * p->record.selectionWeight;
  }
  if (r.weightSum > 0) {
    const auto scale = static_cast<float>(r.stepSum / (r.weightSum * r.weightSum));
    for (float& x : aggregate_)
      x *= scale;
    if (config_.senderMean)
      for (std::size_t i = 0; i < aggregate_.size(); ++i)
        if (coverage_[i] > 0) aggregate_[i] *= static_cast<float>(r.weightSum / coverage_[i]);
  }

  // The server optimizer (EngineConfig::serverLr, extrapolate, serverMomentum).
  double step = config_.serverLr;
  if (config_.extrapolate && r.weightSum > 0) {
    // Each update enters Delta as a_k = (stepSum / W) q_k / steps_k with weight w_k / W:
    // sum_k (w_k / W) ||a_k||^2 = (stepSum / W)^2 normSqSum / W.
    const double unit = r.stepSum / r.weightSum;
    const double spread = unit * unit * r.normSqSum / r.weightSum;
    double meanSq = 0;
    for (float x : aggregate_)
      meanSq += double(x) * double(x);
    if (meanSq > 0 && std::isfinite(spread)) step *= std::max(1.0, spread / (2.0 * meanSq));
  }
  s.serverStep = step;
  if (config_.serverOptimizer != "sgd") {
    const bool yogi = config_.serverOptimizer == "yogi";
    const auto eps = static_cast<float>(config_.serverEps);
    if (velocity_.size() != aggregate_.size()) velocity_.assign(aggregate_.size(), 0.0f);
    if (secondMoment_.size() != aggregate_.size()) secondMoment_.assign(aggregate_.size(), yogi ? eps * eps : 0.0f);
    const auto b1 = static_cast<float>(config_.serverBeta1);
    const auto b2 = static_cast<float>(config_.serverBeta2);
    const auto eta = static_cast<float>(step);
    for (std::size_t i = 0; i < aggregate_.size(); ++i) {
      const float g = aggregate_[i];
      const float g2 = g * g;
      float& m = velocity_[i];
      float& v = secondMoment_[i];
      m = b1 * m + (1.0f - b1) * g;
      if (yogi)
        v -= (1.0f - b2) * g2 * (v > g2 ? 1.0f : (v < g2 ? -1.0f : 0.0f));
      else
        v = b2 * v + (1.0f - b2) * g2;
      aggregate_[i] = eta * m / (std::sqrt(v) + eps);
    }
    step = 1.0;  // applied above
  } else if (config_.serverMomentum > 0) {
    if (velocity_.size() != aggregate_.size()) velocity_.assign(aggregate_.size(), 0.0f);
    const auto beta = static_cast<float>(config_.serverMomentum);
    for (std::size_t i = 0; i < aggregate_.size(); ++i) {
      velocity_[i] = beta * velocity_[i] + aggregate_[i];
      aggregate_[i] = velocity_[i];
    }
  }
  if (step != 1.0) {
    const auto eta = static_cast<float>(step);
    for (float& x : aggregate_)
      x *= eta;
  }

  // Server-side compression of the broadcast, with its own error feedback.
  compression::Compressed q;
  const compression::CompressParams params{r.downDensity, config_.seed * 0x100000001b3ull + r.round};
  Status st = memory_ ? memory_->compress(aggregate_, *down_, params, q) : down_->compress(aggregate_, params, q);
  if (st && memory_) st = memory_->commit();
  if (!st) {
    // Only an empty or non-finite aggregate fails here; keep the model as it was.
    for (auto& p : use) {
      p->record.outcome = "rejected";
      p->record.reason = "aggregate could not be compressed: " + st.message();
    }
  } else {
    auto payload = std::make_shared<compression::Payload>();
    (void)compression::encode(q, *payload);
    if (config_.catchUpXorRounds > 0 && changedAt_.size() == model_.size()) {
      if (q.encoding == compression::Encoding::kTopK || q.encoding == compression::Encoding::kRandK) {
        Undo& u = undo_.emplace_back();
        u.previousRound = committedRound_;
        u.indices = q.indices;
        u.before.reserve(q.indices.size());
        for (uint32_t i : q.indices)
          u.before.push_back(model_[i]);
        while (undo_.size() > config_.catchUpXorRounds)
          undo_.pop_front();
      } else {
        undo_.clear();  // every coordinate changed: older clients get the plain values
      }
    }
    (void)compression::addScaled(q, -1.0f, model_);
    roundToPrecision(q);
    if (!velocity_.empty() && config_.momentumMasking && q.encoding == compression::Encoding::kTopK)
      for (uint32_t i : q.indices)
        velocity_[i] = 0.0f;
    const uint64_t before = modelChecksum_;
    modelChecksum_ = checksum64(model_);
    if (changedAt_.size() == model_.size()) {
      const auto stamp = static_cast<uint32_t>(std::min<uint64_t>(r.round, UINT32_MAX));
      if (q.encoding == compression::Encoding::kTopK || q.encoding == compression::Encoding::kRandK) {
        for (uint32_t i : q.indices)
          changedAt_[i] = stamp;
      } else {
        std::fill(changedAt_.begin(), changedAt_.end(), stamp);
      }
    }
    valueCache_.clear();
    history_.emplace_back(r.round, modelChecksum_);
    while (history_.size() > std::max<std::size_t>(1, config_.checksumHistory))
      history_.pop_front();
    LogEntry& entry = log_.emplace_back(LogEntry{r.round, committedRound_, before, modelChecksum_, payload, {}, {}});
    if (config_.downlinkRelativeIndices && q.encoding == compression::Encoding::kTopK) {
      entry.indices = q.indices;
      // Against the previous broadcast's indices, when it is logged, top-k and smaller.
      if (log_.size() > 1) {
        const LogEntry& previous = log_[log_.size() - 2];
        auto relative = std::make_shared<compression::Payload>();
        if (previous.round == committedRound_ && previous.payload->encoding == compression::Encoding::kTopK &&
            compression::encodeRelative(q, previous.indices, *relative) && relative->byteSize() < payload->byteSize())
          entry.relative = std::move(relative);
      }
    }
    previousRounds_.push_back(committedRound_);
    while (previousRounds_.size() > config_.catchUpRounds)
      previousRounds_.pop_front();
    // A client that catches up receives every entry from its round on; once the log
    // holds more bytes than the dense model, the oldest entry is worth less than the
    // dense copy a client that far behind gets instead (with uncompressed broadcasts,
    // one entry is already the model's size).
    logBytes_ += payload->byteSize();
    const std::size_t denseBytes = model_.size() * sizeof(float);
    while (log_.size() > config_.catchUpRounds || (log_.size() > 1 && logBytes_ > denseBytes)) {
      logBytes_ -= log_.front().payload->byteSize();
      log_.pop_front();
    }
    committedRound_ = r.round;
    denseCache_.reset();
    ++commits_;
    if (config_.modelEma > 0) {
      if (average_.empty()) {
        average_ = model_;
      } else {
        const auto a = static_cast<float>(config_.modelEma);
        for (std::size_t i = 0; i < model_.size(); ++i)
          average_[i] = a * average_[i] + (1.0f - a) * model_[i];
      }
    }
  }

  // The verdicts follow the kRoundEnded action (below): they leave only once the round
  // that applied (or refused) the updates is durable.
  std::vector<Action> verdicts;
  for (auto& p : use) {
    ParticipantResult& rec = p->record;
    const bool ok = st.isOk() && rec.outcome != "rejected";
    auto c = clients_.find(rec.clientId);
    if (c != clients_.end() && ok) c->second->recordAccepted(p->round);
    verdicts.push_back({Action::Kind::kVerdict, rec.clientId, {}, {p->round, ok, ok ? "" : rec.reason}, {}, 0});
    s.returned += p->staleness == 0 ? 1 : 0;
    s.accepted += ok ? 1 : 0;
    s.bytesUpRaw += rec.bytesUpRaw;
    s.bytesUpWire += rec.bytesUpWire;
    records.push_back(rec);
  }
  for (auto& [id, rec] : r.outstanding) {
    ParticipantResult straggler = rec;
    straggler.outcome = "straggler";
    straggler.reason = fmt::format("no update within {} ms", config_.deadlineMs);
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
  s.modelChecksum = modelChecksum_;
  open_.reset();
  if (s.committed && config_.adaptiveTau && lossW > 0) updateTau(s.trainLossStart);
  out.push_back({Action::Kind::kRoundEnded, {}, {}, {}, std::move(s), 0});
  for (auto& v : verdicts)
    out.push_back(std::move(v));
  if (finished())
    out.push_back({Action::Kind::kFinished, {}, {}, {}, {}, 0});
  else
    maybeStartRound(nowMs, out);
}

void RoundEngine::settle(Pending& p, double limit) {
  OpenRound& r = *open_;
  if (limit > 0 && p.norm > limit) {
    p.record.outcome = "rejected";
    p.record.reason = fmt::format("update norm {:.3g} is over {} x the round's median", p.norm, config_.maxNormRatio);
  } else {
    // Weights: examples x 1/sqrt(1 + staleness); FedNova-style normalization by steps
    // is applied at the close, when the sums are complete.
    // With sticky sampling, x the selection weight (unbiased for uniform sampling's sum).
    const double w = double(p.record.examples) * p.record.selectionWeight / std::sqrt(1.0 + p.staleness);
    r.weightSum += w;
    r.stepSum += w * p.record.steps;
    const double perStep = p.norm / double(p.record.steps);
    r.normSqSum += w * perStep * perStep;
    (void)compression::addScaled(p.delta, static_cast<float>(w / double(p.record.steps)), aggregate_);
    if (config_.senderMean) {
      const bool sparse =
          p.delta.encoding == compression::Encoding::kTopK || p.delta.encoding == compression::Encoding::kRandK;
      if (sparse) {
        for (uint32_t i : p.delta.indices)
          coverage_[i] += static_cast<float>(w);
      } else {
        for (float& c : coverage_)
          c += static_cast<float>(w);
      }
    }
  }
  p.delta = compression::Compressed{};  // releases its buffers
  p.settled = true;
}

void RoundEngine::settleReceived() {
  OpenRound& r = *open_;
  const bool check = config_.maxNormRatio > 0;
  if (check && r.norms.size() < kMinNormsToJudge) return;  // held until a median means something
  const double limit = check ? config_.maxNormRatio * upperMedian(r.norms) : 0;
  for (auto& p : r.received)
    if (!p->settled) settle(*p, limit);
}

void RoundEngine::abandonRound(const std::string& reason, int64_t nowMs, std::vector<Action>& out) {
  OpenRound& r = *open_;
  RoundSummary s = summaryOf(r, nowMs);
  s.committed = false;
  s.reason = reason;
  s.modelChecksum = modelChecksum_;
  std::vector<ParticipantResult> records = std::move(r.closed);
  for (auto& p : r.received) {
    p->record.outcome = "rejected";
    p->record.reason = "round abandoned: " + reason;
    out.push_back({Action::Kind::kVerdict, p->record.clientId, {}, {r.round, false, p->record.reason}, {}, 0});
    ++s.returned;
    s.bytesUpRaw += p->record.bytesUpRaw;
    s.bytesUpWire += p->record.bytesUpWire;
    records.push_back(p->record);
  }
  for (auto& [id, rec] : r.outstanding) {
    ParticipantResult straggler = rec;
    straggler.outcome = "straggler";
    straggler.reason = "round abandoned: " + reason;
    records.push_back(straggler);
    ++s.stragglers;
  }
  for (auto& rec : orphans_) {
    rec.round = r.round;
    records.push_back(rec);
  }
  orphans_.clear();
  s.participants = std::move(records);
  open_.reset();
  out.push_back({Action::Kind::kRoundEnded, {}, {}, {}, std::move(s), 0});
  maybeStartRound(nowMs, out);
}

void RoundEngine::roundToPrecision(const compression::Compressed& q) {
  if (config_.modelMantissaBits >= compression::kFp32MantissaBits) return;
  const bool sparse = q.encoding == compression::Encoding::kTopK || q.encoding == compression::Encoding::kRandK;
  // Rounding is compression too: the server memory keeps what it took from (or added
  // to) the step, e <- e + (rounded - unrounded), so the applied steps plus the memory
  // still add up to every aggregate (docs/coordinator.md, step 2, the model's precision).
  std::vector<float> before;
  if (memory_) {
    if (sparse) {
      before.reserve(q.indices.size());
      for (uint32_t i : q.indices)
        before.push_back(model_[i]);
    } else {
      before = model_;
    }
  }
  (void)compression::roundChanged(q, config_.modelMantissaBits, model_);
  if (!memory_) return;
  for (std::size_t j = 0; j < before.size(); ++j)
    before[j] = model_[sparse ? q.indices[j] : j] - before[j];
  (void)memory_->carry(sparse ? std::span<const uint32_t>(q.indices) : std::span<const uint32_t>(), before);
}

void RoundEngine::updateTau(double roundLoss) {
  if (!haveLoss_) {
    lossF0_ = lossF_ = roundLoss;
    haveLoss_ = true;
    return;
  }
  lossF_ = config_.lossSmoothing * lossF_ + (1.0 - config_.lossSmoothing) * roundLoss;
  if (lossF0_ <= 0) return;
  const double ratio = (config_.lr / lrFor(commits_)) * (lossF_ / lossF0_);
  const double t = std::ceil(std::sqrt(std::max(ratio, 0.0)) * config_.tau);
  tau_ = static_cast<uint32_t>(std::clamp(t, double(config_.tauMin), double(config_.tauMax)));
}

EngineSnapshot RoundEngine::snapshot() const {
  EngineSnapshot s;
  s.round = committedRound_;
  s.model = model_;
  if (memory_) s.serverMemory.assign(memory_->memory().begin(), memory_->memory().end());
  s.state = serializeState();
  s.catchUp = serializeCatchUp();
  if (!velocity_.empty())
    s.vectors[config_.serverOptimizer == "sgd" ? "server-momentum" : "server-first-moment"] = velocity_;
  if (!secondMoment_.empty()) s.vectors["server-second-moment"] = secondMoment_;
  if (!average_.empty()) s.vectors["model-average"] = average_;
  return s;
}

std::string RoundEngine::serializeState() const {
  std::ostringstream o;
  o.precision(17);
  o << "committed " << committedRound_ << "\nnext " << nextRound_ << "\ncommits " << commits_ << "\ntau " << tau_
    << "\nloss0 " << lossF0_ << "\nloss " << lossF_ << "\nhaveLoss " << (haveLoss_ ? 1 : 0) << "\nrng " << rng_ << "\n";
  for (const auto& [id, c] : clients_)
    if (!c->accepted.empty()) o << "accepted " << id << " " << fmt::format("{}", fmt::join(c->accepted, ",")) << "\n";
  for (const auto& [id, round] : sticky_)
    o << "sticky " << id << " " << round << "\n";
  return o.str();
}

Status RoundEngine::restoreState(const std::string& state) {
  std::istringstream in(state);
  std::string key;
  int line = 0;
  while (in >> key) {
    ++line;
    bool ok = true;
    if (key == "committed")
      ok = static_cast<bool>(in >> committedRound_);
    else if (key == "next")
      ok = static_cast<bool>(in >> nextRound_);
    else if (key == "commits")
      ok = static_cast<bool>(in >> commits_);
    else if (key == "tau")
      ok = static_cast<bool>(in >> tau_);
    else if (key == "loss0")
      ok = static_cast<bool>(in >> lossF0_);
    else if (key == "loss")
      ok = static_cast<bool>(in >> lossF_);
    else if (key == "haveLoss") {
      int v = 0;
      ok = static_cast<bool>(in >> v);
      haveLoss_ = v != 0;
    } else if (key == "rng")
      ok = static_cast<bool>(in >> rng_);
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
    } else if (key == "sticky") {
      std::string id;
      uint64_t round = 0;
      ok = static_cast<bool>(in >> id >> round);
      if (ok) sticky_[id] = round;
    } else {
      return Status(StatusCode::kMalformed, fmt::format("engine state, entry {}: unknown key '{}'", line, key));
    }
    if (!ok)
      return Status(StatusCode::kMalformed, fmt::format("engine state, entry {}: bad value for '{}'", line, key));
  }
  if (nextRound_ <= committedRound_) nextRound_ = committedRound_ + 1;
  return Status::ok();
}

std::vector<uint8_t> RoundEngine::serializeCatchUp() const {
  namespace cf = coordinator::fb;
  flatbuffers::FlatBufferBuilder b(1024 + changedAt_.size() * sizeof(uint32_t) + logBytes_ * 2);
  std::vector<cf::ModelStamp> history;
  for (const auto& [round, sum] : history_)
    history.emplace_back(round, sum);
  std::vector<flatbuffers::Offset<cf::Broadcast>> log;
  for (const LogEntry& e : log_) {
    auto payload = compression::toWire(b, *e.payload);
    auto relative =
        e.relative ? compression::toWire(b, *e.relative) : flatbuffers::Offset<wire::fb::CompressedTensor>();
    auto indices = e.indices.empty() ? flatbuffers::Offset<flatbuffers::Vector<uint32_t>>() : b.CreateVector(e.indices);
    log.push_back(cf::CreateBroadcast(b, e.round, e.previousRound, e.checksumBefore, e.checksumAfter, payload, indices,
                                      relative));
  }
  std::vector<flatbuffers::Offset<cf::Undo>> undo;
  for (const Undo& u : undo_)
    undo.push_back(cf::CreateUndoDirect(b, u.previousRound, &u.indices, &u.before));
  const std::vector<uint64_t> previous(previousRounds_.begin(), previousRounds_.end());
  const auto* shared = dynamic_cast<const SharedMaskTopK*>(down_.get());
  const std::string format = downlinkFormat();
  auto root = cf::CreateCatchUpStateDirect(b, committedRound_, modelChecksum_, format.c_str(), &history, &changedAt_,
                                           &previous, &log, &undo, shared != nullptr ? &shared->mask() : nullptr);
  b.Finish(root, cf::CatchUpStateIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

// What a broadcast's bytes, a replay's rounding and the next broadcast's relative coding
// depend on: a log or undo values kept under another format are of no use to the
// clients of this one.
std::string RoundEngine::downlinkFormat() const {
  return fmt::format("{} values {} mantissa {} relative {}", config_.downlink,
                     static_cast<int>(compression::sparseValueFormat(config_.fp16Values, config_.downlinkTernary)),
                     config_.modelMantissaBits, config_.downlinkRelativeIndices);
}

// Takes what the configuration still uses: a smaller catchUpRounds, catchUpXorRounds or
// checksumHistory keeps the newest entries; the broadcast log and the undo values
// kept under another downlink format (downlinkFormat()), and whatever the
// configuration no longer keeps, are dropped.
Status RoundEngine::restoreCatchUp(std::span<const uint8_t> bytes) {
  namespace cf = coordinator::fb;
  auto bad = [](const std::string& what) {
    return Status(StatusCode::kMalformed, "checkpoint's catch-up state: " + what);
  };
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), 64, std::numeric_limits<uint32_t>::max());
  if (!cf::VerifyCatchUpStateBuffer(verifier))  // (checks the size before the identifier)
    return bad(fmt::format("{} bytes that are not a CatchUpState", bytes.size()));
  const cf::CatchUpState& s = *cf::GetCatchUpState(bytes.data());
  if (s.round() != committedRound_ || s.model_checksum() != modelChecksum_)
    return bad(fmt::format("it is of round {} (model {:016x}), the checkpoint of round {} (model {:016x})", s.round(),
                           s.model_checksum(), committedRound_, modelChecksum_));
  const auto d = static_cast<uint32_t>(model_.size());
  auto below = [&](const flatbuffers::Vector<uint32_t>* v, uint32_t limit) {
    return v == nullptr || std::all_of(v->begin(), v->end(), [&](uint32_t x) { return x < limit; });
  };

  history_.clear();
  if (s.history() != nullptr)
    for (const cf::ModelStamp* m : *s.history())
      history_.emplace_back(m->round(), m->checksum());
  if (history_.empty() || history_.back() != std::pair(committedRound_, modelChecksum_))
    history_.emplace_back(committedRound_, modelChecksum_);
  while (history_.size() > std::max<std::size_t>(1, config_.checksumHistory))
    history_.pop_front();

  const auto resumed = static_cast<uint32_t>(std::min<uint64_t>(committedRound_, UINT32_MAX));
  bool stampsKept = false;  // the undo values are of use only with the stamps they go with
  if (changedAt_.size() == d) {
    const auto* stamps = s.changed_at();
    if (stamps != nullptr && stamps->size() == d) {
      if (std::any_of(stamps->begin(), stamps->end(), [&](uint32_t r) { return r > resumed; }))
        return bad(fmt::format("a coordinate changed after round {}", resumed));
      std::copy(stamps->begin(), stamps->end(), changedAt_.begin());
      stampsKept = true;
    } else {
      std::fill(changedAt_.begin(), changedAt_.end(), resumed);  // not kept then: all may have changed
    }
  }

  previousRounds_.clear();
  if (s.previous_rounds() != nullptr) previousRounds_.assign(s.previous_rounds()->begin(), s.previous_rounds()->end());
  while (previousRounds_.size() > config_.catchUpRounds)
    previousRounds_.pop_front();

  log_.clear();
  logBytes_ = 0;
  const bool sameFormat = s.downlink() != nullptr && s.downlink()->str() == downlinkFormat();
  if (s.log() != nullptr && sameFormat) {
    for (const cf::Broadcast* e : *s.log()) {
      const std::string which = fmt::format("broadcast of round {}", e->round());
      auto payload = compression::fromWire(e->payload());
      if (!payload) return bad(which + ": " + payload.status().message());
      if (payload->count != d) return bad(fmt::format("{} is of {} values, the model {}", which, payload->count, d));
      if (!log_.empty() &&
          (e->previous_round() != log_.back().round || e->checksum_before() != log_.back().checksumAfter))
        return bad(fmt::format("{} does not follow the model of round {}", which, log_.back().round));
      LogEntry entry{e->round(),
                     e->previous_round(),
                     e->checksum_before(),
                     e->checksum_after(),
                     std::make_shared<const compression::Payload>(std::move(*payload)),
                     {},
                     {}};
      if (config_.downlinkRelativeIndices && e->indices() != nullptr) {
        if (!below(e->indices(), d)) return bad(which + ": an index beyond the model");
        entry.indices.assign(e->indices()->begin(), e->indices()->end());
        if (e->relative() != nullptr) {
          auto relative = compression::fromWire(e->relative());
          if (!relative) return bad(which + ", relative: " + relative.status().message());
          entry.relative = std::make_shared<const compression::Payload>(std::move(*relative));
        }
      }
      logBytes_ += entry.payload->byteSize();
      log_.push_back(std::move(entry));
    }
    if (!log_.empty() && (log_.back().round != committedRound_ || log_.back().checksumAfter != modelChecksum_))
      return bad(fmt::format("the log ends at round {}, not at the checkpoint's", log_.back().round));
  }
  const std::size_t denseBytes = model_.size() * sizeof(float);
  while (log_.size() > config_.catchUpRounds || (log_.size() > 1 && logBytes_ > denseBytes)) {
    logBytes_ -= log_.front().payload->byteSize();
    log_.pop_front();
  }

  undo_.clear();
  if (s.undo() != nullptr && config_.catchUpXorRounds > 0 && stampsKept && sameFormat) {
    for (const cf::Undo* u : *s.undo()) {
      if (u->indices() == nullptr || u->before() == nullptr || u->indices()->size() != u->before()->size() ||
          !below(u->indices(), d))
        return bad(fmt::format("the undo entry after round {} is malformed", u->previous_round()));
      undo_.push_back(Undo{u->previous_round(),
                           {u->indices()->begin(), u->indices()->end()},
                           {u->before()->begin(), u->before()->end()}});
    }
    while (undo_.size() > config_.catchUpXorRounds)
      undo_.pop_front();
  }

  if (auto* shared = dynamic_cast<SharedMaskTopK*>(down_.get()); shared != nullptr && s.shared_mask() != nullptr) {
    const auto* mask = s.shared_mask();
    if (!below(mask, d) || std::adjacent_find(mask->begin(), mask->end(), std::greater_equal<>()) != mask->end())
      return bad("the shared mask is not increasing indices into the model");
    shared->setMask({mask->begin(), mask->end()});
  }
  return Status::ok();
}

}  // namespace starling::coordinator
