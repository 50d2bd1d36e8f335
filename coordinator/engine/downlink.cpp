#include "downlink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "starling/compression/fp16.hpp"
#include "starling/compression/precision.hpp"
#include "starling/compression/topk.hpp"
#include "starling/compression/wire_codec.hpp"
#include "starling/util/checksum.hpp"

#include "catch_up_generated.h"

namespace starling::coordinator {
namespace {

bool isSparse(const compression::Compressed& q) {
  return q.encoding == compression::Encoding::kTopK || q.encoding == compression::Encoding::kRandK;
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

Result<std::unique_ptr<Downlink>> Downlink::create(const EngineConfig& c, std::vector<float> model) {
  if (model.empty()) return Status(StatusCode::kInvalidArgument, "the initial model is empty");
  if (c.modelMantissaBits == 0 || c.modelMantissaBits > compression::kFp32MantissaBits)
    return Status(StatusCode::kInvalidArgument, "model mantissa bits must be in [1, 23]");
  auto isTopK = [](const std::string& name) { return name == "topk" || name == "topk-sampled"; };
  if (c.downlinkTernary && !isTopK(c.downlink))
    return Status(StatusCode::kInvalidArgument, "ternary values need a topk or topk-sampled compressor on that link");
  std::unique_ptr<Downlink> d(new Downlink(c, std::move(model)));
  auto compressor = compression::makeCompressor(
      c.downlink, compression::linkOptions(c.fp16Values, c.downlinkTernary, c.errorFeedback, c.qsgdLevels));
  if (!compressor) return compressor.status().withContext("downlink compressor");
  d->compressor_ = std::move(*compressor);
  if (c.downlinkShared > 0) {
    if (!(c.downlinkShared < 1) || !isTopK(c.downlink))
      return Status(StatusCode::kInvalidArgument,
                    "a downlink shared mask needs a topk downlink and a fraction in [0, 1)");
    d->compressor_ = std::make_unique<SharedMaskTopK>(compression::sparseValueFormat(c.fp16Values, c.downlinkTernary),
                                                      c.downlinkShared);
  }
  if (c.downlinkRelativeIndices && !isTopK(c.downlink))
    return Status(StatusCode::kInvalidArgument, "relative downlink indices need a topk or topk-sampled downlink");
  if (c.errorFeedback) {
    compression::ErrorFeedbackOptions eo;
    eo.maxErrorRatio = c.downlinkErrorCap;
    auto mem = compression::ErrorFeedback::create(d->model_.size(), eo);
    if (!mem) return mem.status();
    d->memory_.emplace(std::move(*mem));
  }
  return d;
}

Downlink::Downlink(const EngineConfig& config, std::vector<float> model)
    : config_(config), model_(std::move(model)), checksum_(checksum64(model_)) {
  changedAt_.assign(config_.catchUpByValue ? model_.size() : 0, 0);
  history_.assign(1, {round_, checksum_});
}

Status Downlink::resume(uint64_t round, std::span<const float> serverMemory, std::span<const uint8_t> catchUp) {
  if (serverMemory.size() != model_.size() && !serverMemory.empty())
    return Status(StatusCode::kMalformed, "checkpoint's server memory and model differ in size");
  round_ = round;
  if (memory_ && !serverMemory.empty()) STARLING_RETURN_IF_ERROR(memory_->restore(serverMemory));
  if (!catchUp.empty()) return restoreCatchUp(catchUp);
  // A checkpoint without its catch-up state: which coordinates changed before it is
  // not known, so all of them may have (a client behind it gets the dense model).
  std::fill(changedAt_.begin(), changedAt_.end(), static_cast<uint32_t>(std::min<uint64_t>(round_, UINT32_MAX)));
  history_.assign(1, {round_, checksum_});
  return Status::ok();
}

std::span<const float> Downlink::memory() const {
  return memory_ ? memory_->memory() : std::span<const float>();
}

bool Downlink::knows(uint64_t round, uint64_t checksum) const {
  if (round == round_ && checksum == checksum_) return true;
  for (const auto& [r, sum] : history_)
    if (r == round && sum == checksum) return true;
  for (const auto& entry : log_)
    if ((entry.round == round && entry.checksumAfter == checksum) ||
        (entry.previousRound == round && entry.checksumBefore == checksum))
      return true;
  return false;
}

uint64_t Downlink::commitsSince(uint64_t baseRound, uint64_t tooOld) const {
  if (baseRound == round_) return 0;
  auto first = std::find(previousRounds_.begin(), previousRounds_.end(), baseRound);
  if (first == previousRounds_.end()) return tooOld;
  return static_cast<uint64_t>(std::distance(first, previousRounds_.end()));
}

std::shared_ptr<const compression::Payload> Downlink::valuesSince(uint64_t round) {
  if (changedAt_.size() != model_.size() || round_ > UINT32_MAX) return nullptr;
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

Downlink::CatchUp Downlink::catchUp(std::optional<uint64_t> held, std::optional<uint64_t> indicesRound) {
  // Whichever is the fewest bytes: the dense model, the broadcasts since the client's
  // round (a client that missed a few dense broadcasts would otherwise download several
  // models' worth), or the current values of the coordinates they touched.
  CatchUp out;
  enum class Via { kDense, kLog, kValues } via = Via::kDense;
  std::size_t best = model_.size() * sizeof(float);
  auto first = log_.end();
  std::shared_ptr<const compression::Payload> values;
  // An entry's relative form is decodable when the client holds the indices it is
  // coded against: those of the entry before it in the same replay, or for the first,
  // those of the broadcast before it (indicesRound).
  auto sent = [&](std::deque<LogEntry>::const_iterator e) {
    const bool referenced = e != first || (indicesRound && *indicesRound == e->previousRound);
    return e->relative && referenced ? e->relative : e->payload;
  };
  if (held) {
    // The log is a chain (each entry starts where the previous one ended): it can
    // bring the client forward if some entry starts at the model it holds.
    first = std::find_if(log_.begin(), log_.end(), [&](const LogEntry& e) { return e.previousRound == *held; });
    if (first != log_.end()) {
      std::size_t logBytes = 0;
      for (auto e = first; e != log_.end(); ++e)
        logBytes += sent(e)->byteSize();
      if (logBytes < best) {
        best = logBytes;
        via = Via::kLog;
      }
    }
    if (config_.catchUpByValue) values = valuesSince(*held);
    if (values && values->byteSize() < best) {
      best = values->byteSize();
      via = Via::kValues;
    }
  }
  switch (via) {
    case Via::kLog:
      for (auto e = first; e != log_.end(); ++e)
        out.broadcasts.push_back(sent(e));
      // The client keeps the last one's indices: the next replay's first reference.
      if (log_.back().payload->encoding == compression::Encoding::kTopK) out.indicesRound = log_.back().round;
      break;
    case Via::kValues:
      out.values = std::move(values);
      break;
    case Via::kDense:
      if (!denseCache_) denseCache_ = std::make_shared<const std::vector<float>>(model_);
      out.denseModel = denseCache_;
      break;
  }
  return out;
}

Downlink::CatchUp Downlink::viewCatchUp(std::optional<uint64_t> held, const model::RowView& view) const {
  CatchUp out;
  const std::size_t denseBytes = view.size() * sizeof(float);
  // changedAt_ names the last round that changed each coordinate (after a resume
  // without the catch-up state, the resumed round: everything may have changed).
  if (held && config_.catchUpByValue && changedAt_.size() == model_.size() && round_ <= UINT32_MAX) {
    compression::Compressed c;
    c.encoding = compression::Encoding::kTopK;
    c.valueFormat = compression::ValueFormat::kFp32;
    c.count = static_cast<uint32_t>(view.size());
    uint32_t p = 0;
    for (const model::ParamRange& r : view.ranges())
      for (std::size_t i = r.offset; i < r.offset + r.count; ++i, ++p)
        if (changedAt_[i] > *held) {
          c.indices.push_back(p);
          c.values.push_back(model_[i]);
        }
    if (c.indices.empty()) return out;
    auto payload = std::make_shared<compression::Payload>();
    if (compression::encode(c, *payload) && payload->byteSize() < denseBytes) {
      out.values = std::move(payload);
      return out;
    }
  }
  out.denseModel = std::make_shared<const std::vector<float>>(view.gather(model_));
  return out;
}

Status Downlink::commit(std::span<const float> step, double density, uint64_t round, compression::Compressed& q) {
  // Server-side compression of the broadcast, with its own error feedback.
  const compression::CompressParams params{density, config_.seed * 0x100000001b3ull + round};
  Status st = memory_ ? memory_->compress(step, *compressor_, params, q) : compressor_->compress(step, params, q);
  if (st && memory_) st = memory_->commit();
  if (!st) return st;
  auto payload = std::make_shared<compression::Payload>();
  (void)compression::encode(q, *payload);
  if (config_.catchUpXorRounds > 0 && changedAt_.size() == model_.size()) {
    if (isSparse(q)) {
      Undo& u = undo_.emplace_back();
      u.previousRound = round_;
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
  const uint64_t before = checksum_;
  checksum_ = checksum64(model_);
  if (changedAt_.size() == model_.size()) {
    const auto stamp = static_cast<uint32_t>(std::min<uint64_t>(round, UINT32_MAX));
    if (isSparse(q)) {
      for (uint32_t i : q.indices)
        changedAt_[i] = stamp;
    } else {
      std::fill(changedAt_.begin(), changedAt_.end(), stamp);
    }
  }
  valueCache_.clear();
  history_.emplace_back(round, checksum_);
  while (history_.size() > std::max<std::size_t>(1, config_.checksumHistory))
    history_.pop_front();
  LogEntry& entry = log_.emplace_back(LogEntry{round, round_, before, checksum_, payload, {}, {}});
  if (config_.downlinkRelativeIndices && q.encoding == compression::Encoding::kTopK) {
    entry.indices = q.indices;
    // Against the previous broadcast's indices, when it is logged, top-k and smaller.
    if (log_.size() > 1) {
      const LogEntry& previous = log_[log_.size() - 2];
      auto relative = std::make_shared<compression::Payload>();
      if (previous.round == round_ && previous.payload->encoding == compression::Encoding::kTopK &&
          compression::encodeRelative(q, previous.indices, *relative) && relative->byteSize() < payload->byteSize())
        entry.relative = std::move(relative);
    }
  }
  previousRounds_.push_back(round_);
  while (previousRounds_.size() > config_.catchUpRounds)
    previousRounds_.pop_front();
  logBytes_ += payload->byteSize();
  trimLog();
  round_ = round;
  denseCache_.reset();
  return Status::ok();
}

// A client that catches up receives every entry from its round on; once the log holds
// more bytes than the dense model, the oldest entry is worth less than the dense copy a
// client that far behind gets instead (with uncompressed broadcasts, one entry is
// already the model's size).
void Downlink::trimLog() {
  const std::size_t denseBytes = model_.size() * sizeof(float);
  while (log_.size() > config_.catchUpRounds || (log_.size() > 1 && logBytes_ > denseBytes)) {
    logBytes_ -= log_.front().payload->byteSize();
    log_.pop_front();
  }
}

void Downlink::roundToPrecision(const compression::Compressed& q) {
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

std::vector<uint8_t> Downlink::serialize() const {
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
  const auto* shared = dynamic_cast<const SharedMaskTopK*>(compressor_.get());
  const std::string downlink = format();
  auto root = cf::CreateCatchUpStateDirect(b, round_, checksum_, downlink.c_str(), &history, &changedAt_, &previous,
                                           &log, &undo, shared != nullptr ? &shared->mask() : nullptr);
  b.Finish(root, cf::CatchUpStateIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

// What a broadcast's bytes, a replay's rounding and the next broadcast's relative coding
// depend on: a log or undo values kept under another format are of no use to the
// clients of this one.
std::string Downlink::format() const {
  return fmt::format("{} values {} mantissa {} relative {}", config_.downlink,
                     static_cast<int>(compression::sparseValueFormat(config_.fp16Values, config_.downlinkTernary)),
                     config_.modelMantissaBits, config_.downlinkRelativeIndices);
}

// Takes what the configuration still uses: a smaller catchUpRounds, catchUpXorRounds or
// checksumHistory keeps the newest entries; the broadcast log and the undo values
// kept under another downlink format (format()), and whatever the
// configuration no longer keeps, are dropped.
Status Downlink::restoreCatchUp(std::span<const uint8_t> bytes) {
  namespace cf = coordinator::fb;
  auto bad = [](const std::string& what) {
    return Status(StatusCode::kMalformed, "checkpoint's catch-up state: " + what);
  };
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), 64, std::numeric_limits<uint32_t>::max());
  if (!cf::VerifyCatchUpStateBuffer(verifier))  // (checks the size before the identifier)
    return bad(fmt::format("{} bytes that are not a CatchUpState", bytes.size()));
  const cf::CatchUpState& s = *cf::GetCatchUpState(bytes.data());
  if (s.round() != round_ || s.model_checksum() != checksum_)
    return bad(fmt::format("it is of round {} (model {:016x}), the checkpoint of round {} (model {:016x})", s.round(),
                           s.model_checksum(), round_, checksum_));
  const auto d = static_cast<uint32_t>(model_.size());
  auto below = [&](const flatbuffers::Vector<uint32_t>* v, uint32_t limit) {
    return v == nullptr || std::all_of(v->begin(), v->end(), [&](uint32_t x) { return x < limit; });
  };

  history_.clear();
  if (s.history() != nullptr)
    for (const cf::ModelStamp* m : *s.history())
      history_.emplace_back(m->round(), m->checksum());
  if (history_.empty() || history_.back() != std::pair(round_, checksum_)) history_.emplace_back(round_, checksum_);
  while (history_.size() > std::max<std::size_t>(1, config_.checksumHistory))
    history_.pop_front();

  const auto resumed = static_cast<uint32_t>(std::min<uint64_t>(round_, UINT32_MAX));
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
  const bool sameFormat = s.downlink() != nullptr && s.downlink()->str() == format();
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
    if (!log_.empty() && (log_.back().round != round_ || log_.back().checksumAfter != checksum_))
      return bad(fmt::format("the log ends at round {}, not at the checkpoint's", log_.back().round));
  }
  trimLog();

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

  auto* shared = dynamic_cast<SharedMaskTopK*>(compressor_.get());
  if (shared != nullptr && s.shared_mask() != nullptr) {
    const auto* mask = s.shared_mask();
    if (!below(mask, d) || std::adjacent_find(mask->begin(), mask->end(), std::greater_equal<>()) != mask->end())
      return bad("the shared mask is not increasing indices into the model");
    shared->setMask({mask->begin(), mask->end()});
  }
  return Status::ok();
}

}  // namespace starling::coordinator
