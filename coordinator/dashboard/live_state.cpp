// What the dashboard shows (live_state.hpp).
#include "live_state.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "starling/coordinator/json.hpp"

namespace starling::coordinator {

namespace {

// Round durations: from a tenth of a second (a simulated or local round) to an hour.
const prometheus::Histogram::BucketBoundaries kDurationBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,    10,
                                                                  30,  60,   120, 300, 600, 1800, 3600};

std::string optionalMs(const std::optional<int64_t>& ms) {
  return ms ? fmt::format("{}", *ms) : "null";
}

}  // namespace

LiveState::LiveState(DashboardTask task) : task_(std::move(task)), roundSeconds_(kDurationBuckets) {}

void LiveState::noteEvaluated(std::size_t index) {
  if (!evaluatedAt_ || rounds_[index].round >= rounds_[*evaluatedAt_].round) evaluatedAt_ = index;
}

void LiveState::addRound(const RoundRecord& round) {
  rounds_.push_back(round);
  if (round.status == RoundStatus::kCommitted) {
    ++committed_;
    committedRound_ = std::max(committedRound_, round.round);
    if (round.epsilon) epsilon_ = round.epsilon;
    if (round.testLoss) noteEvaluated(rounds_.size() - 1);
  } else {
    ++abandoned_;
  }
  bytesUpWire_ += round.bytesUpWire;
  bytesDownWire_ += round.bytesDownWire;
  bytesUpRaw_ += round.bytesUpRaw;
  bytesDownRaw_ += round.bytesDownRaw;
  roundSeconds_.Observe(static_cast<double>(round.endedMs - round.startedMs) / 1000.0);
  currentRound_ = std::max(currentRound_, round.round);
  ++version_;
}

void LiveState::addParticipant(const ParticipantRecord& p) {
  ++outcomes_[participantOutcomeName(p.outcome)];
  countTrouble(trouble_, p);
}

void LiveState::seed(const ReportData& history) {
  std::lock_guard lock(mu_);
  for (const RoundRecord& r : history.rounds)
    addRound(r);
  // The report keeps only the participants that were not accepted. A round's
  // `accepted` counts the updates it applied, late ones (which have late-applied rows)
  // too: what is left are the accepted rows.
  int64_t accepted = 0;
  for (const RoundRecord& r : history.rounds)
    accepted += r.accepted;
  for (const ParticipantRecord& p : history.participants) {
    addParticipant(p);
    if (p.outcome == ParticipantOutcome::kLateApplied) --accepted;
  }
  outcomes_["accepted"] += std::max<int64_t>(0, accepted);
  refusalCount_ = static_cast<int64_t>(history.refusals.size());
  const std::size_t first = history.refusals.size() > kMaxRefusals ? history.refusals.size() - kMaxRefusals : 0;
  refusals_.assign(history.refusals.begin() + static_cast<std::ptrdiff_t>(first), history.refusals.end());
}

void LiveState::clientJoined(const std::string& id, const std::string& role, const std::string& address,
                             uint64_t examples, int64_t atMs) {
  std::lock_guard lock(mu_);
  connected_[id] = Connected{role, address, examples, atMs};
}

void LiveState::clientLeft(const std::string& id, const std::string& /*why*/, int64_t /*atMs*/) {
  std::lock_guard lock(mu_);
  connected_.erase(id);
}

void LiveState::clientRefused(const RefusalRecord& refusal) {
  std::lock_guard lock(mu_);
  ++refusalCount_;
  refusals_.push_back(refusal);
  if (refusals_.size() > kMaxRefusals) refusals_.erase(refusals_.begin());
}

void LiveState::assigned(const std::string& id, uint64_t round, int64_t atMs, int64_t deadlineMs) {
  std::lock_guard lock(mu_);
  Participant& p = inFlight_[{round, id}];
  p = Participant{"assigned", "", atMs, std::nullopt, deadlineMs, false};
  currentRound_ = std::max(currentRound_, round);
}

void LiveState::updateArrived(const std::string& id, uint64_t round, int64_t atMs) {
  std::lock_guard lock(mu_);
  auto it = inFlight_.find({round, id});
  if (it == inFlight_.end() || it->second.final) return;
  it->second.state = "returned";
  it->second.returnedMs = atMs;
}

void LiveState::verdict(const std::string& id, uint64_t round, bool accepted, const std::string& reason) {
  std::lock_guard lock(mu_);
  auto it = inFlight_.find({round, id});
  if (it == inFlight_.end()) return;
  if (it->second.final && accepted) return;  // the round's record already said so
  it->second.state = accepted ? "accepted" : "rejected";
  it->second.reason = reason;
  it->second.final = it->second.final || !accepted;
}

void LiveState::roundRecorded(const RoundRecord& round, const std::vector<ParticipantRecord>& participants) {
  std::lock_guard lock(mu_);
  addRound(round);
  for (const ParticipantRecord& p : participants) {
    addParticipant(p);
    auto it = inFlight_.find({p.round, p.clientId});
    if (it == inFlight_.end()) continue;
    it->second.state = participantOutcomeName(p.outcome);
    it->second.reason = p.reason;
    if (p.returnedMs) it->second.returnedMs = p.returnedMs;
    it->second.final = true;
  }
  // What the page lists: the rounds still open and the newest recorded one. Rows the
  // records never closed (an update the engine renumbered) go with the oldest rounds
  // once there are more than kMaxRows.
  std::erase_if(inFlight_, [&](const auto& entry) { return entry.second.final && entry.first.first < round.round; });
  while (inFlight_.size() > kMaxRows)
    inFlight_.erase(inFlight_.begin());
}

void LiveState::evaluated(uint64_t round, const EvaluationRecord& e) {
  std::lock_guard lock(mu_);
  for (auto it = rounds_.rbegin(); it != rounds_.rend(); ++it)
    if (it->round == round && it->status == RoundStatus::kCommitted) {
      noteEvaluated(static_cast<std::size_t>(rounds_.rend() - it) - 1);
      it->testLoss = e.loss;
      it->testAccuracy = e.accuracy;
      it->testTop5 = e.top5;
      it->testAuc = e.auc;
      it->testRmse = e.rmse;
      it->testMae = e.mae;
      it->testR2 = e.r2;
      ++version_;
      return;
    }
}

void LiveState::finished(const std::string& why) {
  std::lock_guard lock(mu_);
  finished_ = why.empty() ? "finished" : why;
}

LiveCounts LiveState::counts() const {
  std::lock_guard lock(mu_);
  LiveCounts c;
  c.currentRound = currentRound_;
  c.roundsCommitted = committed_;
  c.roundsAbandoned = abandoned_;
  c.committedRound = committedRound_;
  if (evaluatedAt_) {
    const RoundRecord& e = rounds_[*evaluatedAt_];
    c.accuracy = e.testAccuracy;
    c.loss = e.testLoss;
    c.rmse = e.testRmse;
  }
  c.epsilon = epsilon_;
  c.bytesUpWire = bytesUpWire_;
  c.bytesDownWire = bytesDownWire_;
  c.bytesUpRaw = bytesUpRaw_;
  c.bytesDownRaw = bytesDownRaw_;
  c.participants = outcomes_;
  c.refusals = refusalCount_;
  c.clientsConnected = connected_.size();
  for (const auto& [id, client] : connected_)
    ++c.clientsByRole[client.role];
  c.finished = !finished_.empty();
  c.roundDuration = roundSeconds_.Collect();
  return c;
}

std::pair<std::string, uint64_t> LiveState::plotsSvg() const {
  std::lock_guard lock(mu_);
  if (plotsVersion_ != version_) {
    plots_ = plot::figureSvg(roundsFigure(rounds_));
    plotsVersion_ = version_;
  }
  return {plots_, version_};
}

std::string LiveState::stateJson(int64_t nowMs) const {
  std::lock_guard lock(mu_);
  const RoundRecord* last = rounds_.empty() ? nullptr : &rounds_.back();
  const RoundRecord* evaluated = evaluatedAt_ ? &rounds_[*evaluatedAt_] : nullptr;
  const std::string lastRound = last ? JsonObject()
                                           .unum("round", last->round)
                                           .str("status", roundStatusName(last->status))
                                           .str("reason", last->reason)
                                           .num("selected", last->selected)
                                           .num("accepted", last->accepted)
                                           .num("stragglers", last->stragglers)
                                           .num("bytes_up_wire", last->bytesUpWire)
                                           .num("bytes_down_wire", last->bytesDownWire)
                                           .num("duration_ms", last->endedMs - last->startedMs)
                                           .real("train_loss", last->trainLossStart)
                                           .add("epsilon", jsonNumberOrInfinity(last->epsilon))
                                           .done()
                                     : std::string("null");
  const std::string evaluation = evaluated ? JsonObject()
                                                 .unum("round", evaluated->round)
                                                 .real("accuracy", evaluated->testAccuracy)
                                                 .real("loss", evaluated->testLoss)
                                                 .real("auc", evaluated->testAuc)
                                                 .real("rmse", evaluated->testRmse)
                                                 .real("r2", evaluated->testR2)
                                                 .done()
                                           : std::string("null");
  std::string participants = "[";
  bool first = true;
  std::size_t listed = 0;
  for (auto it = inFlight_.rbegin(); it != inFlight_.rend() && listed++ < kMaxListed; ++it) {
    const auto& [key, p] = *it;
    participants += (first ? "" : ", ") + JsonObject()
                                              .unum("round", key.first)
                                              .str("client", key.second)
                                              .str("state", p.state)
                                              .str("reason", p.reason)
                                              .num("assigned_ms", p.assignedMs)
                                              .add("returned_ms", optionalMs(p.returnedMs))
                                              .num("deadline_ms", p.deadlineMs)
                                              .done();
    first = false;
  }
  participants += "]";
  std::string clients = "{\"connected\": " + fmt::format("{}", connected_.size()) + ", \"list\": [";
  std::size_t n = 0;
  for (const auto& [id, c] : connected_) {
    if (n == kMaxListed) break;
    clients += (n++ == 0 ? "" : ", ") + JsonObject()
                                            .str("id", id)
                                            .str("role", c.role)
                                            .str("address", c.address)
                                            .unum("examples", c.examples)
                                            .num("since_ms", c.sinceMs)
                                            .done();
  }
  const std::vector<ClientTrouble> troubled = mostTroubled(trouble_, kMaxListed);
  clients += "]}";
  std::string stragglers = "{\"clients\": " + fmt::format("{}", trouble_.size()) + ", \"list\": [";
  for (std::size_t i = 0; i < troubled.size(); ++i) {
    const ClientTrouble& c = troubled[i];
    stragglers += (i == 0 ? "" : ", ") + JsonObject()
                                             .str("client", c.clientId)
                                             .num("straggler", c.stragglers)
                                             .num("dropped", c.dropped)
                                             .num("rejected", c.rejected)
                                             .num("late_applied", c.lateApplied)
                                             .num("late_discarded", c.lateDiscarded)
                                             .unum("last_round", c.lastRound)
                                             .str("last_outcome", c.lastOutcome)
                                             .str("last_reason", c.lastReason)
                                             .done();
  }
  stragglers += "]}";
  std::string refused = "{\"total\": " + fmt::format("{}", refusalCount_) + ", \"recent\": [";
  for (std::size_t i = refusals_.size(); i-- > 0;) {
    refused += (i + 1 == refusals_.size() ? "" : ", ") + refusalJson(refusals_[i]);
  }
  refused += "]}";
  return JsonObject()
      .add("task", JsonObject()
                       .str("name", task_.name)
                       .str("model", task_.model)
                       .str("kind", task_.kind)
                       .str("mode", task_.mode)
                       .unum("rounds", task_.rounds)
                       .unum("clients_per_round", task_.clientsPerRound)
                       .boolean("privacy", task_.privacy)
                       .str("database", task_.database)
                       .done())
      .num("now_ms", nowMs)
      .str("status", !finished_.empty()   ? "finished"
                     : currentRound_ == 0 ? "waiting"
                                          : "training")
      .str("finished", finished_)
      .unum("round", currentRound_)
      .num("rounds_committed", committed_)
      .num("rounds_abandoned", abandoned_)
      .unum("plots_version", version_)
      .add("last_round", lastRound)
      .add("evaluation", evaluation)
      .add("participants", participants)
      .add("clients", clients)
      .add("stragglers", stragglers)
      .add("refused", refused)
      .done();
}

}  // namespace starling::coordinator
