// The round engine's catch-up state (coordinator/catch_up.fbs), kept with each
// checkpoint as one opaque blob with its own checksum (table checkpoint_catch_up,
// schema version 4; docs/state.md, "Resume").

#include <string>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::corruptCheckpoint;
using store_detail::fnv1a;
using store_detail::fromSql;
using store_detail::toSql;

Status Store::Impl::prepareCatchUpStatements() {
  // The table came with version 4: an older file read as it is has none.
  if (version < 4) return Status::ok();
  STARLING_RETURN_IF_ERROR(
      prepare(&insertCatchUp, "INSERT INTO checkpoint_catch_up (round, data, checksum) VALUES (?1, ?2, ?3)"));
  return prepare(&selectCatchUp, "SELECT data, checksum FROM checkpoint_catch_up WHERE round = ?1");
}

Status Store::Impl::writeCatchUp(uint64_t round, std::span<const uint8_t> state) {
  if (state.empty()) return Status::ok();
  const std::span<const unsigned char> bytes(state);
  insertCatchUp->bind(1, toSql(round)).bindBlob(2, bytes).bind(3, toSql(fnv1a(bytes)));
  if (Status s = insertCatchUp->run(); !s) return s.withContext("checkpoint catch-up state");
  return Status::ok();
}

Status Store::Impl::readCatchUp(Checkpoint& cp, std::string_view context) {
  if (!selectCatchUp) return Status::ok();
  sqlite::Statement& c = *selectCatchUp;
  c.bind(1, toSql(cp.round));
  Result<bool> found = c.step();
  if (!found) {
    c.reset();
    return found.status().withContext(std::string(context));
  }
  Status bad;
  if (*found) {
    const std::span<const unsigned char> data = c.blob(0);
    const uint64_t stored = fromSql(c.int64(1));
    if (fnv1a(data) != stored)
      bad = corruptCheckpoint(context, cp.round, "catch-up state", stored, fnv1a(data));
    else
      cp.catchUp.assign(data.begin(), data.end());
  }
  c.reset();
  return bad;
}

}  // namespace starling::coordinator
