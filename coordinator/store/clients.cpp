// Clients: the rows the coordinator keeps of the clients it has seen, and the clients
// it refused at Hello (docs/state.md, "Schema").

#include <string>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::invalid;
using store_detail::readAll;

namespace {

constexpr const char* kClientColumns =
    "id, cert_fingerprint, first_seen_ms, last_seen_ms, examples, speed_examples_per_s, reliability, "
    "rounds_assigned, rounds_returned";

// A known client's row takes every column but first_seen_ms from the new record.
constexpr const char* kClientUpdate =
    " ON CONFLICT (id) DO UPDATE SET cert_fingerprint = excluded.cert_fingerprint, "
    "last_seen_ms = excluded.last_seen_ms, examples = excluded.examples, "
    "speed_examples_per_s = excluded.speed_examples_per_s, reliability = excluded.reliability, "
    "rounds_assigned = excluded.rounds_assigned, rounds_returned = excluded.rounds_returned";

void bindClient(sqlite::Statement& s, const ClientRecord& c) {
  s.bind(1, std::string_view(c.id))
      .bind(2, std::string_view(c.certFingerprint))
      .bind(3, c.firstSeenMs)
      .bind(4, c.lastSeenMs)
      .bind(5, c.examples)
      .bind(6, c.speedExamplesPerS)
      .bind(7, c.reliability)
      .bind(8, c.roundsAssigned)
      .bind(9, c.roundsReturned);
}

}  // namespace

Status Store::Impl::prepareClientStatements() {
  STARLING_RETURN_IF_ERROR(
      prepare(&upsertClient, fmt::format("INSERT INTO clients ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9){}",
                                         kClientColumns, kClientUpdate)));
  STARLING_RETURN_IF_ERROR(prepare(&clientExists, "SELECT 1 FROM clients WHERE id = ?1"));
  STARLING_RETURN_IF_ERROR(prepare(&selectClients, fmt::format("SELECT {} FROM clients ORDER BY id", kClientColumns)));
  // The refusals table came with version 3: an older file read as it is has none.
  if (version >= 3) {
    STARLING_RETURN_IF_ERROR(
        prepare(&insertRefusal, "INSERT INTO refusals (client_id, peer, at_ms, reason) VALUES (?1, ?2, ?3, ?4)"));
    STARLING_RETURN_IF_ERROR(
        prepare(&selectRefusals, "SELECT client_id, peer, at_ms, reason FROM refusals ORDER BY id"));
  }
  return Status::ok();
}

Status Store::Impl::writeClient(const ClientRecord& client) {
  bindClient(*upsertClient, client);
  return upsertClient->run();
}

Result<bool> Store::Impl::clientKnown(std::string_view clientId) {
  clientExists->bind(1, clientId);
  Result<bool> known = clientExists->step();
  if (!known) return known.status();
  clientExists->reset();
  return *known;
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

}  // namespace starling::coordinator
