// Rounds: recording a committed or abandoned round with its participants in one
// transaction, late refusals and evaluations of recorded rounds, and reading them back
// (docs/state.md, "Transactions").

#include <limits>
#include <string>
#include <utility>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::EncodedCheckpoint;
using store_detail::fromSql;
using store_detail::invalid;
using store_detail::readAll;
using store_detail::toSql;

namespace {

#define STARLING_ROUND_COLUMNS_V1                                                                              \
  "round, status, reason, tau, lr, density_up, density_down, selected, returned, accepted, stragglers, "       \
  "bytes_up_raw, bytes_up_wire, bytes_down_raw, bytes_down_wire, train_loss_start, test_loss, test_accuracy, " \
  "started_ms, ended_ms, model_checksum"
constexpr const char* kRoundColumns =
    STARLING_ROUND_COLUMNS_V1 ", test_top5, test_auc, test_rmse, test_mae, test_r2, epsilon";
// What a file of versions 5 to 10 (read as it is) gives for the column of version 11.
constexpr const char* kRoundColumnsV10 =
    STARLING_ROUND_COLUMNS_V1 ", test_top5, test_auc, test_rmse, test_mae, test_r2, NULL";
// What a file older than version 5 (read as it is) gives for the metrics of version 5.
constexpr const char* kRoundColumnsV4 = STARLING_ROUND_COLUMNS_V1 ", NULL, NULL, NULL, NULL, NULL, NULL";
#undef STARLING_ROUND_COLUMNS_V1

#define STARLING_PARTICIPANT_COLUMNS_V1                                                                     \
  "round, client_id, outcome, reason, assigned_ms, returned_ms, duration_ms, steps, examples, loss_start, " \
  "loss_end, bytes_up_raw, bytes_up_wire, bytes_down_wire, staleness"
constexpr const char* kParticipantColumns = STARLING_PARTICIPANT_COLUMNS_V1 ", sticky, selection_weight, wait_ms";
// What a version-1 file (read as it is) gives for the columns of versions 2 and 8.
constexpr const char* kParticipantColumnsV1 = STARLING_PARTICIPANT_COLUMNS_V1 ", 0, 1.0, 0";
// What a file of versions 2 to 7 (read as it is) gives for the column of version 8.
constexpr const char* kParticipantColumnsV7 = STARLING_PARTICIPANT_COLUMNS_V1 ", sticky, selection_weight, 0";
#undef STARLING_PARTICIPANT_COLUMNS_V1

constexpr const char* kParticipantUpdate =
    " ON CONFLICT (round, client_id, outcome) DO UPDATE SET reason = excluded.reason, "
    "assigned_ms = excluded.assigned_ms, returned_ms = excluded.returned_ms, duration_ms = excluded.duration_ms, "
    "steps = excluded.steps, examples = excluded.examples, loss_start = excluded.loss_start, "
    "loss_end = excluded.loss_end, bytes_up_raw = excluded.bytes_up_raw, bytes_up_wire = excluded.bytes_up_wire, "
    "bytes_down_wire = excluded.bytes_down_wire, staleness = excluded.staleness, sticky = excluded.sticky, "
    "selection_weight = excluded.selection_weight, wait_ms = excluded.wait_ms";

void bindParticipant(sqlite::Statement& s, const ParticipantRecord& p) {
  s.bind(1, toSql(p.round))
      .bind(2, std::string_view(p.clientId))
      .bind(3, std::string_view(participantOutcomeName(p.outcome)))
      .bind(4, std::string_view(p.reason))
      .bind(5, p.assignedMs)
      .bind(6, p.returnedMs)
      .bind(7, p.durationMs)
      .bind(8, p.steps)
      .bind(9, p.examples)
      .bind(10, p.lossStart)
      .bind(11, p.lossEnd)
      .bind(12, p.bytesUpRaw)
      .bind(13, p.bytesUpWire)
      .bind(14, p.bytesDownWire)
      .bind(15, p.staleness)
      .bind(16, int64_t{p.sticky ? 1 : 0})
      .bind(17, p.selectionWeight)
      .bind(18, p.waitMs);
}

// Every straggler, drop and refusal is recorded with its reason.
bool needsReason(ParticipantOutcome o) {
  return o == ParticipantOutcome::kStraggler || o == ParticipantOutcome::kDropped ||
         o == ParticipantOutcome::kRejected || o == ParticipantOutcome::kLateDiscarded;
}

bool isLateOutcome(ParticipantOutcome o) {
  return o == ParticipantOutcome::kLateApplied || o == ParticipantOutcome::kLateDiscarded ||
         o == ParticipantOutcome::kRejected;
}

}  // namespace

const char* roundStatusName(RoundStatus status) {
  switch (status) {
    case RoundStatus::kCommitted:
      return "committed";
    case RoundStatus::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

Status Store::Impl::prepareRoundStatements() {
  const std::string participantInsert = fmt::format(
      "INSERT INTO participants ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "?14, ?15, ?16, ?17, ?18)",
      kParticipantColumns);
  const char* participantColumns = version >= 8   ? kParticipantColumns
                                   : version >= 2 ? kParticipantColumnsV7
                                                  : kParticipantColumnsV1;
  STARLING_RETURN_IF_ERROR(prepare(&roundStatus, "SELECT status FROM rounds WHERE round = ?1"));
  // A file older than version 5 read as it is lacks the metrics' columns: it is never
  // written (writable()).
  // Nor a file older than version 11 (its rounds lack epsilon).
  if (version >= 11)
    STARLING_RETURN_IF_ERROR(prepare(
        &insertRound, fmt::format("INSERT INTO rounds ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                                  "?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
                                  kRoundColumns)));
  if (version >= 5) {
    STARLING_RETURN_IF_ERROR(
        prepare(&setEvaluation,
                "UPDATE rounds SET test_loss = ?2, test_accuracy = ?3, test_top5 = ?4, test_auc = ?5, test_rmse = ?6, "
                "test_mae = ?7, test_r2 = ?8 WHERE round = ?1 AND status = 'committed' RETURNING round"));
  }
  STARLING_RETURN_IF_ERROR(prepare(&lastRound, "SELECT max(round) FROM rounds"));
  STARLING_RETURN_IF_ERROR(
      prepare(&selectRounds, fmt::format("SELECT {} FROM rounds ORDER BY round", version >= 11  ? kRoundColumns
                                                                                 : version >= 5 ? kRoundColumnsV10
                                                                                                : kRoundColumnsV4)));
  STARLING_RETURN_IF_ERROR(
      prepare(&selectParticipants,
              fmt::format("SELECT {} FROM participants ORDER BY round, client_id, outcome", participantColumns)));
  STARLING_RETURN_IF_ERROR(prepare(
      &selectParticipantsOfRound,
      fmt::format("SELECT {} FROM participants WHERE round = ?1 ORDER BY client_id, outcome", participantColumns)));
  // A file older than version 8 read as it is lacks the participants' wait_ms (and a
  // version-1 file their sticky columns): it is never written (writable()).
  if (version >= 8) {
    STARLING_RETURN_IF_ERROR(prepare(&insertParticipant, participantInsert));
    STARLING_RETURN_IF_ERROR(prepare(&upsertParticipant, participantInsert + kParticipantUpdate));
  }
  return Status::ok();
}

Status Store::commitRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                          const Checkpoint& checkpoint, std::span<const ClientRecord> clients) {
  if (record.status != RoundStatus::kCommitted) {
    return invalid(fmt::format("commitRound: round {} is marked {}; use recordAbandonedRound", record.round,
                               roundStatusName(record.status)));
  }
  if (checkpoint.round != record.round) {
    return invalid(
        fmt::format("commitRound: the checkpoint is of round {} but the round is {}", checkpoint.round, record.round));
  }
  return recordRound(record, participants, &checkpoint, clients);
}

Status Store::recordAbandonedRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                                   std::span<const ClientRecord> clients) {
  if (record.status != RoundStatus::kAbandoned) {
    return invalid(
        fmt::format("recordAbandonedRound: round {} is marked {}", record.round, roundStatusName(record.status)));
  }
  return recordRound(record, participants, nullptr, clients);
}

Status Store::recordRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                          const Checkpoint* checkpoint, std::span<const ClientRecord> clients) {
  Impl& d = *impl_;
  const std::string verb = checkpoint != nullptr ? "committing" : "recording abandoned";
  const std::string context = fmt::format("{} round {} to '{}'", verb, record.round, d.path);
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("{}: {}; the round was not recorded", context, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);

  // Checks that need no database, before any write.
  if (record.round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return fail(invalid("the round number does not fit in 63 bits"));
  }
  if (record.status == RoundStatus::kAbandoned && record.reason.empty()) {
    return fail(invalid("an abandoned round needs a reason"));
  }
  for (const ParticipantRecord& p : participants) {
    if (needsReason(p.outcome) && p.reason.empty()) {
      return fail(invalid(
          fmt::format("participant '{}' is {} without a reason", p.clientId, participantOutcomeName(p.outcome))));
    }
    if (p.round > record.round || (p.round < record.round && !isLateOutcome(p.outcome))) {
      return fail(
          invalid(fmt::format("participant '{}' is {} in round {}: only late-applied, late-discarded "
                              "and rejected rows may name an earlier round",
                              p.clientId, participantOutcomeName(p.outcome), p.round)));
    }
  }
  EncodedCheckpoint encoded;
  if (checkpoint != nullptr) {
    Result<EncodedCheckpoint> e = store_detail::encodeCheckpoint(*checkpoint);
    if (!e) return fail(e.status());
    encoded = std::move(*e);
  }

  auto stage = [&](std::string_view name) {
    if (d.options.faultHook) d.options.faultHook(name);
  };
  sqlite::Transaction tx(*d.db);
  if (Status s = tx.begin(); !s) return fail(s);

  Result<bool> last = d.lastRound->step();
  if (!last) return fail(last.status());
  if (*last && !d.lastRound->isNull(0)) {
    const uint64_t lastRound = fromSql(d.lastRound->int64(0));
    d.lastRound->reset();
    if (record.round <= lastRound) {
      return fail(invalid(fmt::format("round numbers must increase, and round {} is already recorded", lastRound)));
    }
  } else {
    d.lastRound->reset();
  }

  for (const ClientRecord& c : clients) {
    if (Status s = d.writeClient(c); !s) return fail(s.withContext(fmt::format("client '{}'", c.id)));
  }

  stage("clients");

  RoundRecord stored = record;
  if (checkpoint != nullptr && stored.modelChecksum == 0) stored.modelChecksum = encoded.modelChecksum;
  sqlite::Statement& r = *d.insertRound;
  r.bind(1, toSql(stored.round))
      .bind(2, std::string_view(roundStatusName(stored.status)))
      .bind(3, std::string_view(stored.reason))
      .bind(4, stored.tau)
      .bind(5, stored.lr)
      .bind(6, stored.density)
      .bind(7, stored.densityDown)
      .bind(8, stored.selected)
      .bind(9, stored.returned)
      .bind(10, stored.accepted)
      .bind(11, stored.stragglers)
      .bind(12, stored.bytesUpRaw)
      .bind(13, stored.bytesUpWire)
      .bind(14, stored.bytesDownRaw)
      .bind(15, stored.bytesDownWire)
      .bind(16, stored.trainLossStart)
      .bind(17, stored.testLoss)
      .bind(18, stored.testAccuracy)
      .bind(19, stored.startedMs)
      .bind(20, stored.endedMs)
      .bind(21, toSql(stored.modelChecksum))
      .bind(22, stored.testTop5)
      .bind(23, stored.testAuc)
      .bind(24, stored.testRmse)
      .bind(25, stored.testMae)
      .bind(26, stored.testR2)
      .bind(27, stored.epsilon);
  if (Status s = r.run(); !s) return fail(s);
  stage("round");

  for (const ParticipantRecord& p : participants) {
    // A clear message for the mistake a foreign key would only call "failed".
    Result<bool> known = d.clientKnown(p.clientId);
    if (!known) return fail(known.status());
    if (!*known) return fail(invalid(fmt::format("participant '{}' is not a known client", p.clientId)));
    if (p.round < record.round) {
      d.roundStatus->bind(1, toSql(p.round));
      Result<bool> recorded = d.roundStatus->step();
      if (!recorded) return fail(recorded.status());
      d.roundStatus->reset();
      if (!*recorded) {
        return fail(
            invalid(fmt::format("participant '{}' names round {}, which was never recorded", p.clientId, p.round)));
      }
    }
    sqlite::Statement& s = p.round == record.round ? *d.insertParticipant : *d.upsertParticipant;
    bindParticipant(s, p);
    if (Status st = s.run(); !st) {
      return fail(st.withContext(fmt::format("participant '{}' ({})", p.clientId, participantOutcomeName(p.outcome))));
    }
  }

  if (Status s = d.updateFigures(record.round, participants); !s) return fail(s);
  stage("participants");

  if (checkpoint != nullptr) {
    if (Status s = d.writeCheckpoint(*checkpoint, encoded); !s) return fail(s);
    stage("checkpoint");
  }
  stage("before-commit");
  if (d.testHook) d.testHook(checkpoint != nullptr ? "commit-round:mid" : "abandon-round:mid");

  if (Status s = tx.commit(); !s) return fail(s);
  return Status::ok();
}

Status Store::recordRejection(const ParticipantRecord& participant) {
  Impl& d = *impl_;
  const std::string context =
      fmt::format("recording the {} update of client '{}' for round {} in '{}'",
                  participantOutcomeName(participant.outcome), participant.clientId, participant.round, d.path);
  auto fail = [&](const Status& s) { return Status(s.code(), fmt::format("{}: {}", context, s.message())); };
  if (Status w = d.writable(); !w) return fail(w);
  if (participant.outcome != ParticipantOutcome::kRejected &&
      participant.outcome != ParticipantOutcome::kLateDiscarded) {
    return fail(invalid("only rejected and late-discarded updates are recorded outside a round"));
  }
  if (participant.reason.empty()) return fail(invalid("a refusal needs a reason"));
  if (participant.round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return fail(invalid("the round number does not fit in 63 bits"));
  }
  sqlite::Transaction tx(*d.db);
  if (Status s = tx.begin(); !s) return fail(s);
  d.roundStatus->bind(1, toSql(participant.round));
  Result<bool> recorded = d.roundStatus->step();
  if (!recorded) return fail(recorded.status());
  d.roundStatus->reset();
  if (!*recorded) return fail(invalid("the round was never recorded"));
  Result<bool> known = d.clientKnown(participant.clientId);
  if (!known) return fail(known.status());
  if (!*known) return fail(invalid("the client is not known"));
  bindParticipant(*d.upsertParticipant, participant);
  if (Status s = d.upsertParticipant->run(); !s) return fail(s);
  if (Status s = tx.commit(); !s) return fail(s);
  return Status::ok();
}

Status Store::recordEvaluation(uint64_t round, const EvaluationRecord& e) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(),
                  fmt::format("recording the evaluation of round {} in '{}': {}", round, d.path, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  if (round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return fail(invalid("the round number does not fit in 63 bits"));
  // A single statement is its own transaction.
  d.setEvaluation->bind(1, toSql(round))
      .bind(2, e.loss)
      .bind(3, e.accuracy)
      .bind(4, e.top5)
      .bind(5, e.auc)
      .bind(6, e.rmse)
      .bind(7, e.mae)
      .bind(8, e.r2);
  Result<bool> updated = d.setEvaluation->step();
  d.setEvaluation->reset();
  if (!updated) return fail(updated.status());
  if (!*updated) return fail(invalid("no committed round has that number"));
  return Status::ok();
}

Result<std::optional<uint64_t>> Store::lastRecordedRound() {
  Impl& d = *impl_;
  Result<bool> row = d.lastRound->step();
  if (!row) return row.status().withContext(fmt::format("reading rounds from '{}'", d.path));
  std::optional<uint64_t> last;
  if (*row && !d.lastRound->isNull(0)) last = fromSql(d.lastRound->int64(0));
  d.lastRound->reset();
  return last;
}

Result<std::vector<RoundRecord>> Store::rounds() {
  Impl& d = *impl_;
  return readAll<RoundRecord>(*d.selectRounds, d.path, "rounds", [](sqlite::Statement& s) {
    RoundRecord r;
    r.round = fromSql(s.int64(0));
    r.status = s.text(1) == "abandoned" ? RoundStatus::kAbandoned : RoundStatus::kCommitted;
    r.reason = s.text(2);
    r.tau = s.int64(3);
    r.lr = s.real(4);
    r.density = s.real(5);
    r.densityDown = s.real(6);
    r.selected = s.int64(7);
    r.returned = s.int64(8);
    r.accepted = s.int64(9);
    r.stragglers = s.int64(10);
    r.bytesUpRaw = s.int64(11);
    r.bytesUpWire = s.int64(12);
    r.bytesDownRaw = s.int64(13);
    r.bytesDownWire = s.int64(14);
    r.trainLossStart = s.real(15);
    r.testLoss = s.optionalReal(16);
    r.testAccuracy = s.optionalReal(17);
    r.startedMs = s.int64(18);
    r.endedMs = s.int64(19);
    r.modelChecksum = fromSql(s.int64(20));
    r.testTop5 = s.optionalReal(21);
    r.testAuc = s.optionalReal(22);
    r.testRmse = s.optionalReal(23);
    r.testMae = s.optionalReal(24);
    r.testR2 = s.optionalReal(25);
    r.epsilon = s.optionalReal(26);
    return r;
  });
}

Result<std::vector<ParticipantRecord>> Store::participants(std::optional<uint64_t> round) {
  Impl& d = *impl_;
  sqlite::Statement& s = round ? *d.selectParticipantsOfRound : *d.selectParticipants;
  if (round) s.bind(1, toSql(*round));
  std::vector<ParticipantRecord> out;
  while (true) {
    Result<bool> row = s.step();
    if (!row) return row.status().withContext(fmt::format("reading participants from '{}'", d.path));
    if (!*row) break;
    ParticipantRecord p;
    p.round = fromSql(s.int64(0));
    p.clientId = s.text(1);
    const std::string outcome = s.text(2);
    const std::optional<ParticipantOutcome> parsed = parseParticipantOutcome(outcome);
    if (!parsed) {
      s.reset();
      return Status(StatusCode::kMalformed,
                    fmt::format("reading participants from '{}': unknown outcome '{}'", d.path, outcome));
    }
    p.outcome = *parsed;
    p.reason = s.text(3);
    p.assignedMs = s.int64(4);
    p.returnedMs = s.optionalInt64(5);
    p.durationMs = s.int64(6);
    p.steps = s.int64(7);
    p.examples = s.int64(8);
    p.lossStart = s.real(9);
    p.lossEnd = s.real(10);
    p.bytesUpRaw = s.int64(11);
    p.bytesUpWire = s.int64(12);
    p.bytesDownWire = s.int64(13);
    p.staleness = s.int64(14);
    p.sticky = s.int64(15) != 0;
    p.selectionWeight = s.real(16);
    p.waitMs = s.int64(17);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace starling::coordinator
