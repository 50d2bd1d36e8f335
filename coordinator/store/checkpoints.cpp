// Checkpoints: the model, server memory and engine state a restart resumes from, the
// engine's other model-sized vectors, their checksums, and pruning to the last
// keepCheckpoints (docs/state.md, "Durability" and "Pruning").

#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "starling/util/checksum.hpp"

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::corruptCheckpoint;
using store_detail::EncodedCheckpoint;
using store_detail::fnv1a;
using store_detail::fromSql;
using store_detail::invalid;
using store_detail::toSql;

namespace {

std::span<const unsigned char> asBytes(std::string_view s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

// Floats as little-endian IEEE-754 fp32 bytes, whatever the host's byte order.
std::vector<unsigned char> encodeFloats(std::span<const float> values) {
  std::vector<unsigned char> out(values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto bits = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b)
        out[i * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));
    }
  }
  return out;
}

std::vector<float> decodeFloats(std::span<const unsigned char> bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; ++b)
        bits |= static_cast<uint32_t>(bytes[i * 4 + b]) << (8 * b);
      out[i] = std::bit_cast<float>(bits);
    }
  }
  return out;
}

}  // namespace

namespace store_detail {

Result<EncodedCheckpoint> encodeCheckpoint(const Checkpoint& checkpoint) {
  EncodedCheckpoint encoded;
  encoded.model = encodeFloats(checkpoint.model);
  encoded.memory = encodeFloats(checkpoint.serverMemory);
  encoded.modelChecksum = checksum64(checkpoint.model);
  if (checkpoint.modelChecksum != 0 && checkpoint.modelChecksum != encoded.modelChecksum) {
    return invalid(fmt::format("the checkpoint's checksum {:#018x} does not match its model ({:#018x})",
                               checkpoint.modelChecksum, encoded.modelChecksum));
  }
  return encoded;
}

}  // namespace store_detail

Status Store::Impl::prepareCheckpointStatements() {
  STARLING_RETURN_IF_ERROR(
      prepare(&insertCheckpoint,
              "INSERT INTO checkpoints (round, model, model_checksum, server_memory, memory_checksum, engine_state, "
              "state_checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  STARLING_RETURN_IF_ERROR(prepare(
      &pruneCheckpoints,
      "DELETE FROM checkpoints WHERE round NOT IN (SELECT round FROM checkpoints ORDER BY round DESC LIMIT ?1)"));
  STARLING_RETURN_IF_ERROR(
      prepare(&latestCheckpoint,
              "SELECT round, model, model_checksum, server_memory, memory_checksum, engine_state, state_checksum "
              "FROM checkpoints ORDER BY round DESC LIMIT 1"));
  // The checkpoint_vectors table came with version 2: a version-1 file read as it is
  // has none.
  if (version >= 2) {
    STARLING_RETURN_IF_ERROR(
        prepare(&insertVector, "INSERT INTO checkpoint_vectors (round, name, data, checksum) VALUES (?1, ?2, ?3, ?4)"));
    STARLING_RETURN_IF_ERROR(
        prepare(&selectVectors, "SELECT name, data, checksum FROM checkpoint_vectors WHERE round = ?1 ORDER BY name"));
  }
  return Status::ok();
}

Status Store::Impl::writeCheckpoint(const Checkpoint& checkpoint, const EncodedCheckpoint& encoded) {
  sqlite::Statement& c = *insertCheckpoint;
  c.bind(1, toSql(checkpoint.round))
      .bindBlob(2, encoded.model)
      .bind(3, toSql(encoded.modelChecksum))
      .bindBlob(4, encoded.memory)
      .bind(5, toSql(fnv1a(encoded.memory)))
      .bindBlob(6, asBytes(checkpoint.engineState))
      .bind(7, toSql(fnv1a(asBytes(checkpoint.engineState))));
  if (Status s = c.run(); !s) return s.withContext("checkpoint");
  for (const auto& [name, values] : checkpoint.vectors) {
    const std::vector<unsigned char> bytes = encodeFloats(values);
    insertVector->bind(1, toSql(checkpoint.round)).bind(2, name).bindBlob(3, bytes).bind(4, toSql(fnv1a(bytes)));
    if (Status s = insertVector->run(); !s) return s.withContext(fmt::format("checkpoint vector '{}'", name));
  }
  STARLING_RETURN_IF_ERROR(writeCatchUp(checkpoint.round, checkpoint.catchUp));
  pruneCheckpoints->bind(1, static_cast<int64_t>(options.keepCheckpoints));
  if (Status s = pruneCheckpoints->run(); !s) return s.withContext("pruning old checkpoints");
  return Status::ok();
}

Result<std::optional<Checkpoint>> Store::latestCheckpoint() {
  Impl& d = *impl_;
  const std::string context = fmt::format("reading the latest checkpoint from '{}'", d.path);
  sqlite::Statement& s = *d.latestCheckpoint;
  Result<bool> row = s.step();
  if (!row) return row.status().withContext(context);
  if (!*row) return std::optional<Checkpoint>();
  Checkpoint cp;
  cp.round = fromSql(s.int64(0));
  const std::span<const unsigned char> model = s.blob(1);
  const uint64_t modelSum = fromSql(s.int64(2));
  const std::span<const unsigned char> memory = s.blob(3);
  const uint64_t memorySum = fromSql(s.int64(4));
  const std::span<const unsigned char> state = s.blob(5);
  const uint64_t stateSum = fromSql(s.int64(6));
  auto corrupt = [&](std::string_view what, uint64_t stored, uint64_t computed) {
    return corruptCheckpoint(context, cp.round, what, stored, computed);
  };
  Status bad;
  if (model.size() % sizeof(float) != 0 || memory.size() % sizeof(float) != 0) {
    bad = Status(StatusCode::kMalformed,
                 fmt::format("{}: checkpoint of round {} is corrupt: a float blob of {} or {} bytes", context, cp.round,
                             model.size(), memory.size()));
  } else if (const uint64_t sum = checksum64(decodeFloats(model)); sum != modelSum) {
    bad = corrupt("model", modelSum, sum);
  } else if (fnv1a(memory) != memorySum) {
    bad = corrupt("server memory", memorySum, fnv1a(memory));
  } else if (fnv1a(state) != stateSum) {
    bad = corrupt("engine state", stateSum, fnv1a(state));
  } else {
    cp.model = decodeFloats(model);
    cp.serverMemory = decodeFloats(memory);
    cp.engineState.assign(reinterpret_cast<const char*>(state.data()), state.size());
    cp.modelChecksum = modelSum;
  }
  s.reset();
  if (!bad.isOk()) return bad;
  if (d.selectVectors) {
    sqlite::Statement& v = *d.selectVectors;
    v.bind(1, toSql(cp.round));
    while (true) {
      Result<bool> more = v.step();
      if (!more) {
        v.reset();
        return more.status().withContext(context);
      }
      if (!*more) break;
      std::string name(v.text(0));
      const std::span<const unsigned char> data = v.blob(1);
      const uint64_t stored = fromSql(v.int64(2));
      if (data.size() % sizeof(float) != 0) {
        bad = Status(StatusCode::kMalformed,
                     fmt::format("{}: checkpoint of round {} is corrupt: vector '{}' is a float blob of {} bytes",
                                 context, cp.round, name, data.size()));
        break;
      }
      if (fnv1a(data) != stored) {
        bad = corrupt(fmt::format("vector '{}'", name), stored, fnv1a(data));
        break;
      }
      cp.vectors.emplace(std::move(name), decodeFloats(data));
    }
    v.reset();
    if (!bad.isOk()) return bad;
  }
  STARLING_RETURN_IF_ERROR(d.readCatchUp(cp, context));
  return std::optional<Checkpoint>(std::move(cp));
}

}  // namespace starling::coordinator
