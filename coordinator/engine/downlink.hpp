#pragma once
// Downlink: the global model and what brings a client to it. It owns the decision of
// what a round's step becomes on the wire (the downlink compressor, with the server's
// error-feedback memory, GlueFL's shared mask and the model precision rounding) and of
// how a client holding an older model is caught up (the broadcast log, the current
// values of the changed coordinates, as XORs within the undo log's reach, or the dense
// model: whichever is the fewest bytes; relative indices against the broadcast the
// client last replayed). docs/coordinator.md steps 2 and 6.
//
// State: the model, its checksum and round; the server memory (EngineSnapshot::
// serverMemory); the broadcast log, the round each recent commit started from, which
// round last changed each coordinate, the XOR undo log, the recent (round, checksum)
// pairs and the shared mask, which serialize() writes as the checkpoint's catch-up
// state (coordinator/catch_up.fbs, EngineSnapshot::catchUp) and resume() reads back.
//
// Deterministic. One thread at a time (the owner's); the payloads and the dense model
// it hands out are immutable and may be read by any thread.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "starling/compression/compressor.hpp"
#include "starling/compression/error_feedback.hpp"
#include "starling/compression/payload.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/model/row_view.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

class Downlink {
 public:
  // What brings a client from the model it holds to the current one (at most one of
  // the three is set; none when it holds the current model).
  struct CatchUp {
    std::shared_ptr<const std::vector<float>> denseModel;
    std::shared_ptr<const compression::Payload> values;
    std::vector<std::shared_ptr<const compression::Payload>> broadcasts;
    // The round of the broadcast whose indices the client holds afterwards (the last
    // entry of a log replay of top-k broadcasts), the next replay's first reference.
    std::optional<uint64_t> indicesRound;
  };

  // The model of round 0. Checks the settings it uses (downlink, downlinkShared,
  // downlinkRelativeIndices, modelMantissaBits, the downlink's value format).
  static Result<std::unique_ptr<Downlink>> create(const EngineConfig& config, std::vector<float> model);
  // After create() with a checkpoint's model: the checkpoint's round, server memory
  // (empty = none kept) and catch-up state (empty = a checkpoint from before it was
  // kept: every coordinate may have changed, and clients behind it get the dense model).
  Status resume(uint64_t round, std::span<const float> serverMemory, std::span<const uint8_t> catchUp);

  std::span<const float> model() const { return model_; }
  uint64_t checksum() const { return checksum_; }
  uint64_t round() const { return round_; }  // the round that produced the model (0 = initial)
  std::span<const float> memory() const;     // the server memory; empty without error feedback

  // Whether (round, checksum) names the current model or one the engine remembers.
  bool knows(uint64_t round, uint64_t checksum) const;
  // How many commits the model is ahead of baseRound's; tooOld when baseRound is older
  // than the commits remembered (catchUpRounds).
  uint64_t commitsSince(uint64_t baseRound, uint64_t tooOld) const;
  // The fewest bytes that bring a client holding `held` (nullopt = unknown: the dense
  // model) to the current model; indicesRound: the broadcast whose indices it holds.
  CatchUp catchUp(std::optional<uint64_t> held, std::optional<uint64_t> indicesRound);
  // The same for a client that holds the view of the model (a sparse model, docs/
  // sparse.md): the current values of its view's parameters changed since `held`
  // (catch-up by value, over the view's positions), or the view's dense values when
  // those are fewer bytes, or when held is unknown or older than the engine can tell
  // (or catchUpByValue is off). Nothing when none changed.
  CatchUp viewCatchUp(std::optional<uint64_t> held, const model::RowView& view) const;

  // Compresses `step` (the server optimizer's p_s, plus the memory) at `density` and
  // applies the result q to the model as the broadcast of `round`; q is left in `sent`.
  // An error (an empty or non-finite step) leaves the model and the memory as they were.
  Status commit(std::span<const float> step, double density, uint64_t round, compression::Compressed& sent);

  // The catch-up state as a CatchUpState Flatbuffer (coordinator/catch_up.fbs).
  std::vector<uint8_t> serialize() const;

 private:
  // One broadcast: q of `round`, which took the model from previousRound to round.
  struct LogEntry {
    uint64_t round = 0;
    uint64_t previousRound = 0;
    uint64_t checksumBefore = 0;
    uint64_t checksumAfter = 0;
    std::shared_ptr<const compression::Payload> payload;
    // downlinkRelativeIndices: the broadcast's indices (top-k), and its payload with
    // them coded against the previous entry's, when that is smaller (else null).
    std::vector<uint32_t> indices;
    std::shared_ptr<const compression::Payload> relative;
  };
  // One commit of a sparse broadcast: the coordinates it changed and their values before.
  struct Undo {
    uint64_t previousRound = 0;
    std::vector<uint32_t> indices;
    std::vector<float> before;
  };

  Downlink(const EngineConfig& config, std::vector<float> model);
  // The current values of the coordinates changed after `round`, as XORs with the
  // client's when the undo log reaches back to `round` (cached per round until the
  // next commit).
  std::shared_ptr<const compression::Payload> valuesSince(uint64_t round);
  // Rounds the coordinates q changed to the model's precision, the residual into the
  // server memory.
  void roundToPrecision(const compression::Compressed& q);
  void trimLog();
  std::string format() const;
  Status restoreCatchUp(std::span<const uint8_t> bytes);

  EngineConfig config_;
  std::vector<float> model_;
  uint64_t checksum_ = 0;
  uint64_t round_ = 0;
  std::unique_ptr<compression::Compressor> compressor_;
  std::optional<compression::ErrorFeedback> memory_;
  std::deque<LogEntry> log_;  // recent broadcasts, oldest first
  std::size_t logBytes_ = 0;  // sum of the log's payload byteSize()
  // The round each of the last catchUpRounds commits started from, oldest first: how
  // stale an update is (the log may be shorter, when its bytes are capped).
  std::deque<uint64_t> previousRounds_;
  std::shared_ptr<const std::vector<float>> denseCache_;  // model_ as of round_, shared by assignments
  // Catch-up by value. changedAt_[i]: the last round whose broadcast touched
  // coordinate i (0 = none since round 0; after a resume from a checkpoint without the
  // catch-up state every entry is the resumed round). history_: the (round, checksum)
  // of the last checksumHistory committed models, oldest first. valueCache_:
  // valuesSince() by round, cleared at every commit.
  std::vector<uint32_t> changedAt_;
  // Catch-up XORs: the last catchUpXorRounds commits, oldest first; consecutive (a dense
  // broadcast or a resume empties it). xorBase_: valuesSince()'s scratch.
  std::deque<Undo> undo_;
  std::vector<float> xorBase_;
  std::deque<std::pair<uint64_t, uint64_t>> history_;
  std::map<uint64_t, std::shared_ptr<const compression::Payload>> valueCache_;
};

}  // namespace starling::coordinator
