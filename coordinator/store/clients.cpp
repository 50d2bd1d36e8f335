// Clients: the rows the coordinator keeps of the clients it has seen, and the clients
// it refused at Hello (docs/state.md, "Schema").

#include <functional>
#include <map>
#include <string>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::invalid;
using store_detail::readAll;

namespace {

constexpr const char* kClientColumns =
    "id, cert_fingerprint, first_seen_ms, last_seen_ms, examples, speed_examples_per_s, reliability, "
    "rounds_assigned, rounds_returned";
// Version 9's (written always: a file opened for writing is at the latest version).
constexpr const char* kClientRowColumns = ", row_set, row_bucket";

// A known client's row takes what its Hello says from the new record, and keeps
// first_seen_ms and the figures the store computes.
constexpr const char* kClientUpdate =
    " ON CONFLICT (id) DO UPDATE SET cert_fingerprint = excluded.cert_fingerprint, "
    "last_seen_ms = excluded.last_seen_ms, examples = excluded.examples";
constexpr const char* kClientRowUpdate = ", row_set = excluded.row_set, row_bucket = excluded.row_bucket";

// The weight of the newest value in the figures' exponentially weighted averages.
constexpr double kNewestWeight = 0.5;

double weighted(double average, double newest) {
  return (1 - kNewestWeight) * average + kNewestWeight * newest;
}

// A client's computed columns, as read and written by updateClientFigures.
struct Figures {
  double speedExamplesPerS = 0;
  double reliability = 1;
  int64_t roundsAssigned = 0;
  int64_t roundsReturned = 0;
};

// Folds one participant row of round `round` into its client's figures (ClientRecord
// says what counts).
void fold(Figures& f, uint64_t round, const ParticipantRecord& p) {
  const bool late = p.outcome == ParticipantOutcome::kLateApplied || p.outcome == ParticipantOutcome::kLateDiscarded;
  const bool missed = p.outcome == ParticipantOutcome::kStraggler || p.outcome == ParticipantOutcome::kDropped;
  if (p.round == round && !late) {
    ++f.roundsAssigned;
    if (!missed) ++f.roundsReturned;
    f.reliability = weighted(f.reliability, missed ? 0.0 : 1.0);
  }
  if (!missed && p.returnedMs && p.durationMs > 0) {
    const double speed = static_cast<double>(p.examples) * 1000.0 / static_cast<double>(p.durationMs);
    f.speedExamplesPerS = f.speedExamplesPerS > 0 ? weighted(f.speedExamplesPerS, speed) : speed;
  }
}

// withRows: the statement has version 9's row set columns (?10, ?11).
void bindClient(sqlite::Statement& s, const ClientRecord& c, bool withRows) {
  s.bind(1, std::string_view(c.id))
      .bind(2, std::string_view(c.certFingerprint))
      .bind(3, c.firstSeenMs)
      .bind(4, c.lastSeenMs)
      .bind(5, c.examples)
      .bind(6, c.speedExamplesPerS)
      .bind(7, c.reliability)
      .bind(8, c.roundsAssigned)
      .bind(9, c.roundsReturned);
  if (!withRows) return;
  if (c.rowSet.empty())
    s.bindNull(10);
  else
    s.bindBlob(10, std::span<const unsigned char>(c.rowSet.data(), c.rowSet.size()));
  s.bind(11, static_cast<int64_t>(c.rowBucket));
}

}  // namespace

Status Store::Impl::prepareClientStatements() {
  STARLING_RETURN_IF_ERROR(prepare(
      &upsertClient, version >= 9
                         ? fmt::format("INSERT INTO clients ({}{}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                                       "?11){}{}",
                                       kClientColumns, kClientRowColumns, kClientUpdate, kClientRowUpdate)
                         // (an older file read as it is: never run, writes are refused)
                         : fmt::format("INSERT INTO clients ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9){}",
                                       kClientColumns, kClientUpdate)));
  STARLING_RETURN_IF_ERROR(prepare(&clientExists, "SELECT 1 FROM clients WHERE id = ?1"));
  STARLING_RETURN_IF_ERROR(
      prepare(&selectClientFigures,
              "SELECT speed_examples_per_s, reliability, rounds_assigned, rounds_returned FROM clients WHERE id = ?1"));
  STARLING_RETURN_IF_ERROR(prepare(&updateClientFigures,
                                   "UPDATE clients SET speed_examples_per_s = ?2, reliability = ?3, "
                                   "rounds_assigned = ?4, rounds_returned = ?5 WHERE id = ?1"));
  // The row sets came with version 9: an older file read as it is has none.
  STARLING_RETURN_IF_ERROR(prepare(&selectClients, fmt::format("SELECT {}{} FROM clients ORDER BY id", kClientColumns,
                                                               version >= 9 ? kClientRowColumns : "")));
  // The refusals table came with version 3: an older file read as it is has none.
  if (version >= 3) {
    STARLING_RETURN_IF_ERROR(
        prepare(&insertRefusal, "INSERT INTO refusals (client_id, peer, at_ms, reason) VALUES (?1, ?2, ?3, ?4)"));
    STARLING_RETURN_IF_ERROR(
        prepare(&selectRefusals, "SELECT client_id, peer, at_ms, reason FROM refusals ORDER BY id"));
  }
  if (version >= 10) {
    STARLING_RETURN_IF_ERROR(prepare(&insertPlacement,
                                     "INSERT OR REPLACE INTO placements (version, round, source, clients, relays, "
                                     "partition_s, rows_before, rows_after) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    STARLING_RETURN_IF_ERROR(prepare(&selectPlacements,
                                     "SELECT version, round, source, clients, relays, partition_s, rows_before, "
                                     "rows_after FROM placements ORDER BY version"));
  }
  return Status::ok();
}

Status Store::Impl::writeClient(const ClientRecord& client) {
  bindClient(*upsertClient, client, version >= 9);
  return upsertClient->run();
}

Result<bool> Store::Impl::clientKnown(std::string_view clientId) {
  clientExists->bind(1, clientId);
  Result<bool> known = clientExists->step();
  if (!known) return known.status();
  clientExists->reset();
  return *known;
}

Status Store::Impl::updateFigures(uint64_t round, std::span<const ParticipantRecord> participants) {
  std::map<std::string, Figures, std::less<>> figures;
  for (const ParticipantRecord& p : participants) {
    auto it = figures.find(p.clientId);
    if (it == figures.end()) {
      selectClientFigures->bind(1, std::string_view(p.clientId));
      Result<bool> row = selectClientFigures->step();
      if (!row) return row.status().withContext(fmt::format("client '{}'", p.clientId));
      if (!*row) return invalid(fmt::format("participant '{}' is not a known client", p.clientId));
      Figures f{selectClientFigures->real(0), selectClientFigures->real(1), selectClientFigures->int64(2),
                selectClientFigures->int64(3)};
      selectClientFigures->reset();
      it = figures.emplace(p.clientId, f).first;
    }
    fold(it->second, round, p);
  }
  for (const auto& [id, f] : figures) {
    updateClientFigures->bind(1, std::string_view(id))
        .bind(2, f.speedExamplesPerS)
        .bind(3, f.reliability)
        .bind(4, f.roundsAssigned)
        .bind(5, f.roundsReturned);
    if (Status s = updateClientFigures->run(); !s) return s.withContext(fmt::format("figures of client '{}'", id));
  }
  return Status::ok();
}

Status Store::recordRefusal(const RefusalRecord& refusal) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("recording the refusal of client '{}' in '{}': {}", refusal.clientId, d.path,
                                        s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  if (refusal.reason.empty()) return fail(invalid("a refusal needs a reason"));
  // A single statement is its own transaction.
  d.insertRefusal->bind(1, std::string_view(refusal.clientId))
      .bind(2, std::string_view(refusal.peer))
      .bind(3, refusal.atMs)
      .bind(4, std::string_view(refusal.reason));
  if (Status s = d.insertRefusal->run(); !s) return fail(s);
  return Status::ok();
}

Status Store::upsertClient(const ClientRecord& client) {
  Impl& d = *impl_;
  // A single statement is its own transaction.
  if (Status s = d.writeClient(client); !s) {
    return s.withContext(fmt::format("recording client '{}' in '{}'", client.id, d.path));
  }
  return Status::ok();
}

Result<std::vector<ClientRecord>> Store::clients() {
  Impl& d = *impl_;
  return readAll<ClientRecord>(*d.selectClients, d.path, "clients", [](sqlite::Statement& s) {
    ClientRecord c;
    c.id = s.text(0);
    c.certFingerprint = s.text(1);
    c.firstSeenMs = s.int64(2);
    c.lastSeenMs = s.int64(3);
    c.examples = s.int64(4);
    c.speedExamplesPerS = s.real(5);
    c.reliability = s.real(6);
    c.roundsAssigned = s.int64(7);
    c.roundsReturned = s.int64(8);
    if (s.columns() > 9) {
      const auto bytes = s.blob(9);
      c.rowSet.assign(bytes.begin(), bytes.end());
      c.rowBucket = static_cast<uint32_t>(s.int64(10));
    }
    return c;
  });
}

Result<std::vector<RefusalRecord>> Store::refusals() {
  Impl& d = *impl_;
  if (!d.selectRefusals) return std::vector<RefusalRecord>{};  // a file older than version 3, read as it is
  return readAll<RefusalRecord>(*d.selectRefusals, d.path, "refusals", [](sqlite::Statement& s) {
    RefusalRecord r;
    r.clientId = s.text(0);
    r.peer = s.text(1);
    r.atMs = s.int64(2);
    r.reason = s.text(3);
    return r;
  });
}

Status Store::recordPlacement(const PlacementRecord& p) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("recording placement version {} in '{}': {}", p.version, d.path, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  if (p.version == 0) return fail(invalid("a placement's version starts at 1"));
  if (p.source != "file" && p.source != "drift")
    return fail(invalid(fmt::format("a placement comes from 'file' or 'drift', not '{}'", p.source)));
  d.insertPlacement->bind(1, static_cast<int64_t>(p.version))
      .bind(2, static_cast<int64_t>(p.round))
      .bind(3, std::string_view(p.source))
      .bind(4, p.clients)
      .bind(5, p.relays)
      .bind(6, p.partitionSeconds)
      .bind(7, p.rowsBefore)
      .bind(8, p.rowsAfter);
  if (Status s = d.insertPlacement->run(); !s) return fail(s);
  return Status::ok();
}

Result<std::vector<PlacementRecord>> Store::placements() {
  Impl& d = *impl_;
  if (!d.selectPlacements) return std::vector<PlacementRecord>{};  // a file older than version 10, read as it is
  return readAll<PlacementRecord>(*d.selectPlacements, d.path, "placements", [](sqlite::Statement& s) {
    PlacementRecord r;
    r.version = static_cast<uint64_t>(s.int64(0));
    r.round = static_cast<uint64_t>(s.int64(1));
    r.source = s.text(2);
    r.clients = s.int64(3);
    r.relays = s.int64(4);
    if (!s.isNull(5)) r.partitionSeconds = s.real(5);
    if (!s.isNull(6)) r.rowsBefore = s.int64(6);
    if (!s.isNull(7)) r.rowsAfter = s.int64(7);
    return r;
  });
}

}  // namespace starling::coordinator
