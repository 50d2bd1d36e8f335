#pragma once
// A device profile (`starling-client --profile OUT.json`): what one round costs this
// device for one task, measured with the device's own parts (the Trainer, the task's
// uplink compressor with error feedback, the payload codec). `starling-sim predict`
// reads it to predict seconds per round for a federation of such devices
// (docs/predict.md).
//
// The JSON is one flat object; every figure carries its unit in its key name:
//   {"format": "starling-profile", "version": 1, "model": "mlp:784-200-200-10", "params": 199210,
//    "uplink": "topk-sampled", "uplink_density": 0.072, ..., "repeats": 5,
//    "steps": [{"batch": 32, "step_seconds": 0.0011}, ...], "run_overhead_seconds": ...,
//    "compress_seconds": ..., "encode_seconds": ..., "decode_seconds": ...,
//    "update_bytes": ..., "broadcast_bytes": ..., "broadcast_compress_seconds": ..., "catch_up_seconds": ...,
//    "eval_seconds_per_example": ..., "load_seconds": ...}
// Times are medians over `repeats` runs, in CPU seconds of the profiling process: what
// the work costs one core of this device, the same as wall time on an idle device and
// unaffected by other processes sharing its cores.
//
// Threads: none of its own; not synchronized.

#include <cstdint>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/data/task_kind.hpp"
#include "starling/util/status.hpp"

namespace starling::client {

// The task a profile is for: the model and the compression of both links, as a
// coordinator's Welcome (and its engine's downlink) would set them.
struct ProfileTask {
  std::string model;                                      // a model spec; short forms are completed from the data
  data::TaskKind kind = data::TaskKind::kClassification;  // how the labels are read
  std::string uplink = "identity";
  double uplinkDensity = 1.0;
  bool uplinkTernary = false;
  std::string downlink = "identity";
  double downlinkDensity = 1.0;
  bool downlinkTernary = false;
  bool fp16Values = false;
  bool errorFeedback = false;
  float lr = 0.05f;
  float momentum = 0.0f;
};

struct ProfileOptions {
  std::vector<int> batchSizes = {16, 32, 64, 128};
  int steps = 50;           // local steps per timed run (the step time is over these)
  int repeats = 5;          // runs per figure; each figure is their median
  int evalExamples = 2000;  // at most this many examples evaluated for the evaluation time
};

struct StepTime {
  int batch = 0;
  double stepSeconds = 0;  // one local step (forward, backward, update) of `batch` examples
};

struct DeviceProfile {
  ProfileTask task;  // task.model is the resolved spec
  uint64_t params = 0;
  int repeats = 0;
  std::vector<StepTime> steps;  // increasing batch sizes
  // Trainer::run's cost besides its steps (the loss probe at the start and the end).
  double runOverheadSeconds = 0;
  double compressSeconds = 0;           // the uplink compressor with error feedback (when the task uses it)
  double encodeSeconds = 0;             // the update's payload encoding
  double decodeSeconds = 0;             // decoding it again, as the coordinator does
  uint64_t updateBytes = 0;             // the update's payload (Payload::byteSize)
  uint64_t broadcastBytes = 0;          // one round's broadcast payload (the downlink compressor on a difference)
  double broadcastCompressSeconds = 0;  // making it (the coordinator's work per round)
  // Applying one broadcast on the device: decoding it, adding it to the model and the
  // model's checksum (a client's catch-up per broadcast it missed).
  double catchUpSeconds = 0;
  double evalSecondsPerExample = 0;  // model evaluation (the coordinator's test set, per example)
  // Loading the device's examples as the client does (a client loads them after it has
  // joined, so in a federation that starts at once this overlaps its first round). Set
  // by whoever loads the data (starling-client --profile); measureProfile() leaves it 0.
  double loadSeconds = 0;

  // Seconds of `tau` local steps of minibatch `batch` plus a run's overhead: the step
  // time of the nearest profiled batch sizes, interpolated linearly in the batch size
  // (extrapolated from the two nearest beyond the profiled range).
  double trainSeconds(int tau, int batch) const;
};

// Measures `task` on `data` (the device's examples). kInvalidArgument when the model
// does not fit the data or a compressor is unknown.
Result<DeviceProfile> measureProfile(const ProfileTask& task, const data::Dataset& data, const ProfileOptions& options);

std::string profileToJson(const DeviceProfile& profile);
// kMalformed naming `origin` (a file name), the line and what is wrong.
Result<DeviceProfile> profileFromJson(const std::string& text, const std::string& origin);
Status writeProfile(const DeviceProfile& profile, const std::string& path);
Result<DeviceProfile> readProfile(const std::string& path);

}  // namespace starling::client
