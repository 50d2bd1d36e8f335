#pragma once
// ScoutWorker: the table proposal's scouts on a thread of their own
// (SamplerOptions::scoutThread; docs/model.md, "Scouts on a second thread").
//
// The Sampler hands it, step by step, a credit of examples to score and, every few
// steps, a copy of the model's parameters. The thread sweeps the data set in order from
// a given start, forwards the credited examples in chunks on its own copy of the model
// with the latest parameters it was given, and queues (example, score) pairs that the
// Sampler takes at its next step. So the scouts' forward pass leaves the training
// thread; their scores are computed with parameters a few steps old, and which step
// takes them depends on timing: runs are no longer repeatable bit for bit.
//
// Ownership and threads: owned by one Sampler and called from its (one) thread; the
// worker thread is started by the constructor and joined by the destructor. The
// Dataset is borrowed and must outlive the worker (it is only read).

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

namespace starling::client {

class ScoutWorker {
 public:
  ScoutWorker(const data::Dataset& dataset, const model::Model& model, std::size_t start);
  ~ScoutWorker();
  ScoutWorker(const ScoutWorker&) = delete;
  ScoutWorker& operator=(const ScoutWorker&) = delete;

  // Adds `examples` to the examples the thread may score (at most the data set's size or
  // one chunk, whichever is larger), and when params is not empty
  // makes it the parameters of its next chunks (copied).
  void post(std::size_t examples, std::span<const float> params);
  // Appends the (example, score) pairs scored since the last call to out.
  void take(std::vector<std::pair<uint32_t, float>>& out);

 private:
  void run();

  const data::Dataset* dataset_;
  model::Model model_;  // the thread's own copy
  std::size_t next_;    // the sweep's next example (thread only)
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<float> staged_;                     // parameters posted and not yet taken (guarded)
  bool fresh_ = false;                            // staged_ is newer than model_ (guarded)
  std::size_t credit_ = 0;                        // examples the thread may still score (guarded)
  bool stop_ = false;                             // (guarded)
  std::vector<std::pair<uint32_t, float>> done_;  // scored, not yet taken (guarded)
  std::thread thread_;
};

}  // namespace starling::client
