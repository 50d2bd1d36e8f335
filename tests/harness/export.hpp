#pragma once
// RunExport: what starling-sim --export-dir writes for one strategy, so that a second,
// independent implementation of the algorithm (bench/reference.py) can replay the run
// from the same inputs and compare its curves with Starling's (docs/reference.md).
//
// Only full-participation runs can be replayed: every client in every round, no
// dropouts, no availability trace, uniform minibatches, fixed densities and tau, the
// plain server step. open() refuses anything else, naming the setting.
//
// Files under DIR/<strategy>/ (integers little-endian):
//   config.txt      key = value: the model, the optimizer, the compressors and densities
//   initial.model   the round-0 model, in Starling's model file format (model::Model::save)
//   shards.u32      u32 clients, then per client u32 n and n indices into the training set
//   batches.u32     per trained update: u32 round, client, steps, batch size, then
//                   steps x batch indices into the training set, in the order the steps took them
//   updates.csv     per trained update: its round, client, steps, examples, lr, uplink
//                   compressor seed and payload bytes
//   rounds.csv      per ended round: accepted updates, test accuracy and loss, payload
//                   bytes up and down (the engine's wire counts), frame bytes up and down,
//                   and the seed of its broadcast
//   model-R.model   the global model after committed round R
//
// Files are written as the run goes; a failure to write is returned as kIo.

#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

#include "sim.hpp"

namespace starling::sim {

class RunExport {
 public:
  // Checks that the strategy can be replayed (above) and writes config.txt,
  // initial.model and shards.u32 under dir/<strategy name>.
  static Result<std::unique_ptr<RunExport>> open(const std::string& dir, const Fleet& fleet, const Strategy& strategy,
                                                 const model::Model& initial);

  // The Trainer's batch log (client::TrainerOptions::batchLog) for the next update.
  std::vector<uint32_t>* batchLog() { return &batch_; }

  // After client `client` trained for `round`: writes the batch log (shard indices,
  // mapped to training-set indices) and the update's line; empties the log.
  Status recordUpdate(uint64_t round, std::size_t client, uint32_t steps, uint32_t batchSize, uint64_t examples,
                      float lr, uint64_t uplinkSeed, uint64_t payloadBytes);

  // After a round ended: its line, and the model when it committed.
  Status recordRound(const RoundRow& row, uint32_t accepted, uint64_t payloadUp, uint64_t downlinkSeed,
                     const model::Model& shape, std::span<const float> model);

 private:
  RunExport(std::string dir, const Fleet& fleet) : dir_(std::move(dir)), fleet_(fleet) {}
  std::string dir_;
  const Fleet& fleet_;
  std::vector<uint32_t> batch_;
  std::ofstream batches_, updates_, rounds_;
};

}  // namespace starling::sim
