#include "starling/wire/messages.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <cctype>

#include "starling/compression/wire_codec.hpp"
#include "starling/wire/capabilities.hpp"

namespace starling::wire {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

std::string str(const flatbuffers::String* s) {
  return s != nullptr ? s->str() : std::string();
}

template <typename T>
Result<const T*> bodyOf(const Message& m, const char* name) {
  const T* body = m.as<T>();
  if (body == nullptr) return Status(StatusCode::kMalformed, fmt::format("expected {}, got {}", name, m.typeName()));
  return body;
}

// out <- a view of t, or nothing when t is absent.
Status assignView(const fb::CompressedTensor* t, std::optional<compression::PayloadView>& out) {
  out.reset();
  if (t == nullptr) return Status::ok();
  auto v = compression::viewWire(t);
  if (!v) return v.status();
  out = *v;
  return Status::ok();
}

Offset<fb::CompressedTensor> optionalTensor(FlatBufferBuilder& b, const std::optional<compression::PayloadView>& p) {
  return p ? compression::toWire(b, *p) : 0;
}

// Bytes of the tensors of a message, so that its builder allocates once.
std::size_t sizeOf(const std::optional<compression::PayloadView>& p) {
  return p ? p->byteSize() + 64 : 0;
}

}  // namespace

std::string hostPlatform() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  std::string s = fmt::format("{}-{}", u.sysname, u.machine);
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

HelloMsg clientHello(std::string clientId, uint64_t numExamples, uint64_t lastRound, uint64_t modelChecksum) {
  HelloMsg h;
  h.clientId = std::move(clientId);
  h.capabilities.assign(kClientCapabilities.begin(), kClientCapabilities.end());
  h.numExamples = numExamples;
  h.platform = hostPlatform();
  h.lastRound = lastRound;
  h.modelChecksum = modelChecksum;
  return h;
}

compression::PayloadView denseView(std::span<const float> values) {
  static_assert(FLATBUFFERS_LITTLEENDIAN, "dense fp32 values are written as they are in memory");
  compression::PayloadView p;
  p.encoding = compression::Encoding::kDense32;
  p.count = static_cast<uint32_t>(values.size());
  p.selected = p.count;
  p.valueFormat = compression::ValueFormat::kFp32;
  p.values = {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()};
  return p;
}

// ---- encode --------------------------------------------------------------------

Frame encode(const HelloMsg& m) {
  FlatBufferBuilder b(256);
  std::vector<Offset<flatbuffers::String>> caps;
  for (const std::string& c : m.capabilities)
    caps.push_back(b.CreateString(c));
  return finishFrame(b, fb::CreateHelloDirect(b, m.clientId.c_str(), &caps, m.numExamples, m.platform.c_str(),
                                              m.lastRound, m.modelChecksum, m.rowSet.empty() ? nullptr : &m.rowSet,
                                              m.rowBucket, m.listen.empty() ? nullptr : m.listen.c_str()));
}

namespace {

std::vector<Offset<fb::CategoryValues>> categoryValues(FlatBufferBuilder& b,
                                                       const std::vector<CategoryValuesMsg>& columns) {
  std::vector<Offset<fb::CategoryValues>> out;
  out.reserve(columns.size());
  for (const auto& c : columns) {
    const auto values = b.CreateVectorOfStrings(c.values);
    const auto counts = c.counts.empty() ? 0 : b.CreateVector(c.counts);
    out.push_back(fb::CreateCategoryValues(b, b.CreateString(c.column), values, counts));
  }
  return out;
}

// kMalformed unless every column has a name and, when withCounts, one count per value.
Result<std::vector<CategoryValuesMsg>> parseCategoryValues(
    const flatbuffers::Vector<Offset<fb::CategoryValues>>* columns, bool withCounts, std::string_view where) {
  std::vector<CategoryValuesMsg> out;
  if (!columns) return out;
  for (const fb::CategoryValues* c : *columns) {
    CategoryValuesMsg v;
    if (c->column()) v.column = c->column()->str();
    if (v.column.empty())
      return Status(StatusCode::kMalformed, fmt::format("{}: a categorical column without a name", where));
    if (const auto* values = c->values())
      for (const auto* s : *values)
        v.values.push_back(s ? s->str() : std::string());
    if (const auto* counts = c->counts()) v.counts.assign(counts->begin(), counts->end());
    if (withCounts ? v.counts.size() != v.values.size() : !v.counts.empty())
      return Status(StatusCode::kMalformed, fmt::format("{}: column '{}' has {} values and {} counts", where, v.column,
                                                        v.values.size(), v.counts.size()));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

Frame encode(const WelcomeMsg& m) {
  FlatBufferBuilder b(512 + sizeOf(m.model) + (m.featureMean.size() + m.featureStd.size()) * sizeof(double));
  Offset<fb::HyperParameters> hyper;
  if (const auto& h = m.hyper)
    hyper = fb::CreateHyperParameters(b, h->lr, h->momentum, h->weightDecay, h->batchSize, h->tau, h->clipNorm,
                                      h->prioritySampling, h->seed, h->proxMu, h->overlap, h->overlapMomentum);
  Offset<fb::CompressionSettings> comp;
  if (const auto& c = m.compression)
    comp = fb::CreateCompressionSettingsDirect(b, c->uplink.c_str(), c->uplinkDensity, c->downlink.c_str(),
                                               c->downlinkDensity, c->errorFeedback, c->fp16Values, c->errorCap,
                                               c->uplinkTernary, c->modelMantissaBits, c->qsgdLevels, c->memoryDecay,
                                               c->memoryResetAfter, c->updateClipNorm, c->updateNoiseStd);
  const auto model = optionalTensor(b, m.model);
  const auto vocabulary = categoryValues(b, m.categoricalVocabulary);
  return finishFrame(
      b, fb::CreateWelcomeDirect(b, m.clientId.c_str(), m.task.c_str(), m.modelSpec.c_str(), hyper, comp, m.round,
                                 model, m.modelChecksum, m.heartbeatMs, m.lastAcceptedRound, m.rounds, m.initSeed,
                                 &m.heldRounds, m.acceptedRounds ? &*m.acceptedRounds : nullptr,
                                 m.featureMean.empty() ? nullptr : &m.featureMean,
                                 m.featureStd.empty() ? nullptr : &m.featureStd, m.featureCentre,
                                 vocabulary.empty() ? nullptr : &vocabulary, m.sparseRows));
}

Frame encode(const RoundAssignMsg& m) {
  std::size_t bytes = 256 + sizeOf(m.model) + sizeOf(m.values);
  for (const auto& p : m.broadcast)
    bytes += p.byteSize() + 64;
  FlatBufferBuilder b(bytes);
  std::vector<Offset<fb::CompressedTensor>> broadcast;
  broadcast.reserve(m.broadcast.size());
  for (const auto& p : m.broadcast)
    broadcast.push_back(compression::toWire(b, p));
  const auto model = optionalTensor(b, m.model);
  const auto values = optionalTensor(b, m.values);
  std::vector<Offset<fb::PlacedClient>> placed;
  placed.reserve(m.placement.size());
  for (const PlacedClientMsg& p : m.placement)
    placed.push_back(fb::CreatePlacedClientDirect(b, p.client.c_str(), p.relay.c_str(), p.address.c_str()));
  return finishFrame(b, fb::CreateRoundAssignDirect(b, m.round, m.baseRound, m.tau, m.lr, m.density, m.deadlineMs,
                                                    &broadcast, m.baseChecksum, model, values, m.evaluate, m.batchScale,
                                                    placed.empty() ? nullptr : &placed, m.placementVersion));
}

Frame encode(const UpdateMsg& m) {
  FlatBufferBuilder b(256 + sizeOf(m.delta) + m.evalStats.size() * sizeof(double));
  const auto delta = optionalTensor(b, m.delta);
  const auto stats = m.evalStats.empty() ? 0 : b.CreateVector(m.evalStats);
  Offset<flatbuffers::Vector<Offset<fb::MemberRows>>> members = 0;
  if (m.members) {
    std::vector<Offset<fb::MemberRows>> list;
    list.reserve(m.members->size());
    for (const MemberRowsMsg& r : *m.members)
      list.push_back(fb::CreateMemberRowsDirect(b, r.client.c_str(), &r.rowSet, r.rowBucket));
    members = b.CreateVector(list);
  }
  return finishFrame(b, fb::CreateUpdate(b, m.round, m.baseRound, m.examples, m.steps, m.lossStart, m.lossEnd, delta,
                                         m.durationMs, stats, members));
}

Frame encode(const RoundResultMsg& m) {
  FlatBufferBuilder b(128 + m.reason.size());
  return finishFrame(b, fb::CreateRoundResultDirect(b, m.round, m.accepted, m.reason.c_str()));
}

Frame encode(const HeartbeatMsg& m) {
  FlatBufferBuilder b(64);
  return finishFrame(b, fb::CreateHeartbeat(b, m.sentMs));
}

Frame encode(const ByeMsg& m) {
  FlatBufferBuilder b(64 + m.reason.size());
  return finishFrame(
      b, fb::CreateByeDirect(b, m.reason.c_str(), m.done, m.redirect.empty() ? nullptr : m.redirect.c_str()));
}

Frame encode(const ErrorMsg& m) {
  FlatBufferBuilder b(64 + m.message.size());
  return finishFrame(b, fb::CreateErrorDirect(b, m.code, m.message.c_str()));
}

Frame encode(const StatsRequestMsg& m) {
  FlatBufferBuilder b(64);
  return finishFrame(b, fb::CreateStatsRequest(b, m.deadlineMs, m.categories));
}

Frame encode(const FeatureStatsMsg& m) {
  FlatBufferBuilder b(128 + (m.count.size() + m.sum.size() + m.sumSquares.size()) * sizeof(double));
  const auto categories = categoryValues(b, m.categories);
  return finishFrame(b, fb::CreateFeatureStatsDirect(b, m.examples, &m.count, &m.sum, &m.sumSquares, m.sparse,
                                                     categories.empty() ? nullptr : &categories));
}

// ---- parse ---------------------------------------------------------------------

Result<HelloMsg> parseHello(const Message& m) {
  auto hBody = bodyOf<fb::Hello>(m, "Hello");
  if (!hBody) return hBody.status();
  const fb::Hello* h = *hBody;
  HelloMsg out;
  out.clientId = str(h->client_id());
  if (h->capabilities() != nullptr)
    for (const auto* c : *h->capabilities())
      out.capabilities.push_back(str(c));
  out.numExamples = h->num_examples();
  out.platform = str(h->platform());
  out.lastRound = h->last_round();
  out.modelChecksum = h->model_checksum();
  if (const auto* rows = h->row_set()) out.rowSet.assign(rows->begin(), rows->end());
  out.rowBucket = h->row_bucket();
  out.listen = str(h->listen());
  if (!out.rowSet.empty() && out.rowBucket == 0)
    return Status(StatusCode::kMalformed, "Hello has a row set without its bucket size (row_bucket 0)");
  return out;
}

Result<WelcomeMsg> parseWelcome(const Message& m) {
  auto wBody = bodyOf<fb::Welcome>(m, "Welcome");
  if (!wBody) return wBody.status();
  const fb::Welcome* w = *wBody;
  WelcomeMsg out;
  out.clientId = str(w->client_id());
  out.task = str(w->task());
  out.modelSpec = str(w->model_spec());
  if (const auto* h = w->hyper())
    out.hyper = HyperParameters{h->lr(),      h->momentum(),  h->weight_decay(),      h->batch_size(),
                                h->tau(),     h->clip_norm(), h->priority_sampling(), h->seed(),
                                h->prox_mu(), h->overlap(),   h->overlap_momentum()};
  if (const auto* c = w->compression())
    out.compression =
        CompressionSettings{str(c->uplink()),         c->uplink_density(),  str(c->downlink()), c->downlink_density(),
                            c->error_feedback(),      c->fp16_values(),     c->error_cap(),     c->uplink_ternary(),
                            c->model_mantissa_bits(), c->qsgd_levels(),     c->memory_decay(),  c->memory_reset_after(),
                            c->update_clip_norm(),    c->update_noise_std()};
  out.round = w->round();
  if (Status st = assignView(w->model(), out.model); !st) return st;
  out.modelChecksum = w->model_checksum();
  out.heartbeatMs = w->heartbeat_ms();
  out.lastAcceptedRound = w->last_accepted_round();
  out.rounds = w->rounds();
  out.initSeed = w->init_seed();
  if (const auto* held = w->held_rounds()) out.heldRounds.assign(held->begin(), held->end());
  if (const auto* accepted = w->accepted_rounds())
    out.acceptedRounds = std::vector<uint64_t>(accepted->begin(), accepted->end());
  if (const auto* mean = w->feature_mean()) out.featureMean.assign(mean->begin(), mean->end());
  if (const auto* sd = w->feature_std()) out.featureStd.assign(sd->begin(), sd->end());
  out.featureCentre = w->feature_centre();
  if (out.featureMean.size() != out.featureStd.size())
    return Status(StatusCode::kMalformed, fmt::format("Welcome has {} feature means and {} standard deviations",
                                                      out.featureMean.size(), out.featureStd.size()));
  auto vocabulary = parseCategoryValues(w->categorical_vocabulary(), false, "Welcome");
  if (!vocabulary) return vocabulary.status();
  out.categoricalVocabulary = std::move(*vocabulary);
  out.sparseRows = w->sparse_rows();
  return out;
}

Result<RoundAssignMsg> parseRoundAssign(const Message& m) {
  auto aBody = bodyOf<fb::RoundAssign>(m, "RoundAssign");
  if (!aBody) return aBody.status();
  const fb::RoundAssign* a = *aBody;
  RoundAssignMsg out;
  out.round = a->round();
  out.baseRound = a->base_round();
  out.tau = a->tau();
  out.lr = a->lr();
  out.density = a->density();
  out.deadlineMs = a->deadline_ms();
  if (const auto* log = a->broadcast()) {
    out.broadcast.reserve(log->size());
    for (flatbuffers::uoffset_t j = 0; j < log->size(); ++j) {
      auto v = compression::viewWire(log->Get(j));
      if (!v) return v.status().withContext(fmt::format("RoundAssign broadcast {} of {}", j + 1, log->size()));
      out.broadcast.push_back(*v);
    }
  }
  out.baseChecksum = a->base_checksum();
  if (Status st = assignView(a->model(), out.model); !st) return st;
  if (Status st = assignView(a->values(), out.values); !st) return st;
  out.evaluate = a->evaluate();
  out.batchScale = a->batch_scale();
  out.placementVersion = a->placement_version();
  if (const auto* placed = a->placement())
    for (const fb::PlacedClient* p : *placed) {
      PlacedClientMsg c{str(p->client()), str(p->relay()), str(p->address())};
      if (c.client.empty() || c.relay.empty() || c.address.empty())
        return Status(StatusCode::kMalformed, "RoundAssign places a client without a name, relay or address");
      out.placement.push_back(std::move(c));
    }
  if (!(out.batchScale > 0) || !std::isfinite(out.batchScale))
    return Status(StatusCode::kMalformed,
                  fmt::format("RoundAssign batch_scale {} is not a positive number", out.batchScale));
  return out;
}

Result<UpdateMsg> parseUpdate(const Message& m) {
  auto uBody = bodyOf<fb::Update>(m, "Update");
  if (!uBody) return uBody.status();
  const fb::Update* u = *uBody;
  UpdateMsg out;
  out.round = u->round();
  out.baseRound = u->base_round();
  out.examples = u->examples();
  out.steps = u->steps();
  out.lossStart = u->loss_start();
  out.lossEnd = u->loss_end();
  if (Status st = assignView(u->delta(), out.delta); !st) return st;
  out.durationMs = u->duration_ms();
  if (const auto* stats = u->eval_stats()) out.evalStats.assign(stats->begin(), stats->end());
  if (const auto* members = u->members()) {
    out.members.emplace();
    for (const fb::MemberRows* r : *members) {
      if (r == nullptr) return Status(StatusCode::kMalformed, "Update: a null entry in members");
      MemberRowsMsg msg{str(r->client()), {}, r->row_bucket()};
      if (const auto* bytes = r->row_set()) msg.rowSet.assign(bytes->begin(), bytes->end());
      out.members->push_back(std::move(msg));
    }
  }
  return out;
}

Result<RoundResultMsg> parseRoundResult(const Message& m) {
  auto rBody = bodyOf<fb::RoundResult>(m, "RoundResult");
  if (!rBody) return rBody.status();
  const fb::RoundResult* r = *rBody;
  return RoundResultMsg{r->round(), r->accepted(), str(r->reason())};
}

Result<HeartbeatMsg> parseHeartbeat(const Message& m) {
  auto hBody = bodyOf<fb::Heartbeat>(m, "Heartbeat");
  if (!hBody) return hBody.status();
  const fb::Heartbeat* h = *hBody;
  return HeartbeatMsg{h->sent_ms()};
}

Result<ByeMsg> parseBye(const Message& m) {
  auto byeBody = bodyOf<fb::Bye>(m, "Bye");
  if (!byeBody) return byeBody.status();
  const fb::Bye* bye = *byeBody;
  return ByeMsg{str(bye->reason()), bye->done(), str(bye->redirect())};
}

Result<ErrorMsg> parseError(const Message& m) {
  auto eBody = bodyOf<fb::Error>(m, "Error");
  if (!eBody) return eBody.status();
  const fb::Error* e = *eBody;
  return ErrorMsg{e->code(), str(e->message())};
}

Result<StatsRequestMsg> parseStatsRequest(const Message& m) {
  auto body = bodyOf<fb::StatsRequest>(m, "StatsRequest");
  if (!body) return body.status();
  return StatsRequestMsg{(*body)->deadline_ms(), (*body)->categories()};
}

Result<FeatureStatsMsg> parseFeatureStats(const Message& m) {
  auto body = bodyOf<fb::FeatureStats>(m, "FeatureStats");
  if (!body) return body.status();
  const fb::FeatureStats* f = *body;
  FeatureStatsMsg out;
  out.examples = f->examples();
  if (const auto* v = f->count()) out.count.assign(v->begin(), v->end());
  if (const auto* v = f->sum()) out.sum.assign(v->begin(), v->end());
  if (const auto* v = f->sum_squares()) out.sumSquares.assign(v->begin(), v->end());
  out.sparse = f->sparse();
  auto categories = parseCategoryValues(f->categories(), true, "FeatureStats");
  if (!categories) return categories.status();
  out.categories = std::move(*categories);
  return out;
}

}  // namespace starling::wire
