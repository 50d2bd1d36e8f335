#pragma once
// Round-time prediction (`starling-sim predict`, docs/predict.md): seconds per round and
// time to N rounds of a federation whose devices are all like one profiled device
// (client::DeviceProfile, `starling-client --profile`).
//
// An event model of the rounds, in virtual time, with the simulator's link costs
// (transferMicros: each message on its client's link plus its latency, the
// coordinator's link carrying one transfer at a time each way) and the profile's
// measured compute: a client's round is its run (tau steps of the batch, the run's
// overhead), its compression and its encoding, and applying the broadcasts its
// assignment carries (catch-up), plus loading its data in its first round; each message costs both ends
// wireCpuSecondsPerByte of CPU per byte (the coordinator's network threads, beside everything else); the coordinator's
// strand takes one thing at a time, in arrival order: it decodes each update and, at each commit, makes the broadcast;
// an evaluation of the committed model, when asked, runs on a thread of its own beside the next round, one at a time:
// at a commit the strand waits for the previous evaluation before it starts the next,
// sends the next assignments and takes the next update (updates arriving meanwhile
// wait, and so do their clients). A commit's record on disk (storeSeconds) holds the
// strand too, without a core.
//
// Compute: without `cores`, every client is its own device (a core each) and so is the
// coordinator. With `cores` (a federation on one machine, as bench-federation runs it),
// every job of the federation (clients' rounds, the coordinator's work) is in one group
// that shares the cores equally with `backgroundLoad` other busy groups, as Linux
// schedules sessions (autogroups): the group gets min(jobs, cores / (1 + background))
// cores, split equally among its jobs.
//
// Sync rounds select ceil(K x over-selection) clients (in turn), close at the K-th
// update or the deadline; the next round starts when the commit's work is done.
// Overlap (Local-SGD): a client starts its next round's steps when it sends an update;
// its next update leaves when both the steps and the assignment are there. Async
// (FedBuff): at most `concurrency` clients in flight; a client is free again once the
// strand has taken its update, and is assigned at once unless its last assignment was
// from the model still current (then at the next server step); every `buffer` updates
// are a server step (a round).
//
// Deterministic and single-threaded.

#include <cstdint>
#include <string>
#include <vector>

#include "starling/client/profile.hpp"
#include "starling/util/status.hpp"

namespace starling::sim {

struct PredictFleet {
  uint32_t clients = 10;  // N
  uint32_t perRound = 0;  // K, clients per round (0 = N)
  double overSelection = 1.0;
  double deadlineS = 0;  // a sync round closes here with what arrived (0 = no deadline)
  uint32_t tau = 1;
  int batch = 32;
  double uplinkMbps = 1000, downlinkMbps = 1000, latencyMs = 0;  // each client's link
  double coordinatorMbps = 0;                                    // the coordinator's link, each way (0 = unlimited)
  // CPU seconds per byte of a message at each end (TLS encryption or decryption,
  // framing), for the sender and the receiver; 0 = free.
  double wireCpuSecondsPerByte = 0;
  double cores = 0;           // 0: every client on its own device
  double backgroundLoad = 0;  // other runnable processes on those cores
  bool overlap = false;
  bool async = false;
  uint32_t concurrency = 0;  // async: clients in flight (0 = N)
  uint32_t buffer = 5;       // async: updates per server step
  uint64_t rounds = 10;
  uint32_t evalExamples = 0;  // the coordinator evaluates this many examples ...
  uint32_t evalEvery = 1;     // ... every this many rounds
  // The coordinator's record of a committed round (its SQLite transaction with the
  // checkpoint, durable before the next assignments leave: bench-store measures it),
  // wall seconds on the strand after the commit's CPU; mostly waiting for the disk, so
  // it takes no core.
  double storeSeconds = 0;
};

struct Prediction {
  double secondsPerRound = 0;  // (end of the last round - start of the first) / rounds
  double secondsToRounds = 0;  // from the first assignment to the end of round `rounds`
  // Per round, on average: a selected client's compute (its run, compression,
  // encoding) as the device measured it, and the wall time it took under sharing; the
  // transfers of one client; the coordinator's work at a commit (before the next
  // assignments leave).
  double clientComputeS = 0, clientWallS = 0, transferS = 0, commitS = 0;
  std::vector<double> roundEnds;  // seconds
};

// kInvalidArgument naming the setting that is out of range.
Result<Prediction> predict(const client::DeviceProfile& profile, const PredictFleet& fleet);

}  // namespace starling::sim
