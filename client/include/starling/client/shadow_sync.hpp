#pragma once
// ShadowSync: the app trains, the library synchronizes in the background
// (ALGORITHMS.md section 8; docs/embedding.md, "Training in the background").
//
// The app owns its training loop and calls step() with its own minibatches: one SGD
// step on the live model x, with the task's model, momentum, weight decay, clipping and
// the last assignment's learning rate. A Participant on a thread of the library runs
// the federation with ShadowSync as its local work (ParticipantOptions::onWelcome and
// localWork, the path a relay uses): there is no second protocol. For each assignment,
// once the Learner holds its base x_c (the global model), work()
//   1. mixes x_c into x: S-EASGD x <- x - alpha (x - x_c); S-MA x <- x_c + (x - s),
//      s the snapshot the last update was made from (the steps the app made while that
//      update was in flight are kept);
//   2. waits for the app's tau steps since the mix, or for the round's time budget;
//   3. takes a snapshot s of x and hands it to Learner::submit(), which compresses
//      s - x_c with the uplink error-feedback memory (S-EASGD: Submitted::kCarried, as x
//      still carries what earlier uplinks left unsent; S-MA: kFromBase).
// A round in which the app made no step sends nothing (kTimeout: the Participant says
// goodbye and joins again, as a relay does).
//
// Memory, d the model's parameters (4 bytes each): x and its gradient (the Model), the
// momentum (when the task has any) and the snapshot s here; the Learner's global model
// x_c (the anchor the mix pulls towards), its scratch difference and the uplink memory
// (with error feedback). Against the foreground client, whose Trainer holds x, the
// gradient and the momentum too, the cost of training in the background is the snapshot.
//
// Threads. step(), copyModel() and ready() are called by the app's thread (one at a
// time); welcome(), work() by the Participant's; stop() and stats() by any. The one lock,
// mu_, guards x and the counters: step() holds it for one step, the sync thread for a
// copy or a mix of d floats, never across network I/O or the wait for steps. So the app
// waits at most for one O(d) pass; the sync thread waits at most one step.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "starling/client/learner.hpp"
#include "starling/model/model.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::client {

enum class SyncVariant {
  kEasgd,  // S-EASGD: elastic pull towards the global model
  kMa,     // S-MA: the global model replaces x, plus the steps made since the snapshot
};

struct ShadowSyncOptions {
  SyncVariant variant = SyncVariant::kEasgd;
  // S-EASGD's elastic coefficient, in (0, 1]. ShadowSync's paper and EASGD's use
  // moving rates of this order; 0.5 weighs the local and the global model equally.
  float alpha = 0.5f;
  // A round's longest wait for the app's tau steps; 0: 90% of the round's deadline (no
  // deadline: until the steps are made or stop()). The shorter of the two when both are set.
  std::chrono::milliseconds maxWait{0};
  // The app's examples: feature_dim floats each, labels 0 .. numClasses - 1. The task's
  // model must take featureDim inputs and have numClasses outputs (binary: 2 classes and a
  // logistic head).
  std::size_t featureDim = 0;
  int numClasses = 0;
};

struct ShadowSyncStats {
  uint64_t steps = 0;        // steps the app made
  uint64_t syncs = 0;        // updates made from a snapshot
  uint64_t emptyRounds = 0;  // rounds without a step: nothing sent
  uint64_t mixes = 0;        // global models mixed into x
  double lastLoss = 0;       // the loss of the app's last step
  // Steps that found the lock taken (by the sync thread's copy or mix), and the
  // longest such wait: what the app's thread paid for the synchronization.
  uint64_t lockWaits = 0;
  std::chrono::nanoseconds longestLockWait{0};
  std::string lastError;  // the last thing that kept a round from sending ("" = none)
};

// The mixes, on plain spans (the unit tests hold them against a NumPy computation).
// S-EASGD: x <- x - alpha (x - center).
void mixElastic(std::span<float> x, std::span<const float> center, float alpha);
// S-MA: x <- center + (x - snapshot).
void mixAverage(std::span<float> x, std::span<const float> center, std::span<const float> snapshot);

class ShadowSync {
 public:
  // kInvalidArgument for an alpha outside (0, 1] or a feature_dim / numClasses of 0 / < 2.
  static Result<std::unique_ptr<ShadowSync>> create(const ShadowSyncOptions& options);

  // Sync thread (ParticipantOptions::onWelcome): the task's model and optimizer. A
  // reconnect to the same task keeps x; another task is refused (kInvalidArgument), as
  // are tasks the app's examples cannot train: a model of other inputs or outputs, a
  // regression, feature scaling or categorical columns (the library never sees the data).
  Status welcome(const wire::WelcomeMsg& welcome);
  // Sync thread (ParticipantOptions::localWork): steps 1-3 of the file comment.
  Result<LocalUpdate> work(Learner& learner, const wire::RoundAssignMsg& assign);
  // Any thread: work() returns at once (kClosed), and does from then on.
  void stop();

  // App thread: whether the model is there (the first assignment has come).
  bool ready() const;
  // App thread: one step on n examples (features n x featureDim, labels n), returning its
  // loss. kInvalidArgument for a label out of range; kClosed before ready() (no model).
  Result<double> step(const float* features, const int32_t* labels, std::size_t n);
  // App thread: copies x (up to out.size() floats); returns its size (0 before ready()).
  std::size_t copyModel(std::span<float> out) const;

  ShadowSyncStats stats() const;
  // The snapshot the last update was made from: the sync thread's (tests read it after
  // work() has returned).
  std::span<const float> snapshot() const { return snapshot_; }

 private:
  explicit ShadowSync(const ShadowSyncOptions& options) : options_(options) {}

  const ShadowSyncOptions options_;
  // Set by welcome() (sync thread) before the first assignment; read-only afterwards
  // except under mu_.
  std::string spec_;
  float momentum_ = 0, weightDecay_ = 0, clipNorm_ = 0;

  mutable std::mutex mu_;
  std::condition_variable stepped_;     // a step was made, or stop()
  std::optional<model::Model> model_;   // x: its params (under mu_)
  std::vector<float> grad_, velocity_;  // step()'s, under mu_
  std::vector<float> yScratch_;         // step()'s labels as floats
  std::vector<float> snapshot_;         // s: sync thread only (written under mu_)
  float lr_ = 0;                        // the last assignment's
  uint64_t stepsSinceMix_ = 0;
  uint64_t examplesSinceMix_ = 0;
  double lossAtMix_ = 0;  // the first step's loss after the mix (the update's lossStart)
  bool stopped_ = false;
  ShadowSyncStats stats_;
};

}  // namespace starling::client
