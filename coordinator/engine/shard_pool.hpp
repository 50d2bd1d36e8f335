#pragma once
// ShardPool: a fixed set of worker threads that, with the calling thread, run the
// engine's per-shard work (docs/coordinator.md "Shards"). run() hands out tasks
// 0..n-1, each to exactly one thread, and returns once all are done: to its caller
// the pool is a plain function call, and the engine stays single-threaded to its own
// callers.
//
// Threading: run() is called by one thread at a time (the engine's owner); the
// workers are started by the constructor and joined by the destructor. Tasks must
// touch disjoint data or only read shared data; run() orders everything a task wrote
// before its return (a mutex hand-off), and everything written before the call
// before the tasks.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace starling::coordinator {

class ShardPool {
 public:
  explicit ShardPool(uint32_t workers);
  ~ShardPool();
  ShardPool(const ShardPool&) = delete;
  ShardPool& operator=(const ShardPool&) = delete;

  uint32_t workers() const { return static_cast<uint32_t>(threads_.size()); }
  // Runs task(i) for every i in [0, tasks), each once, on the workers and the calling
  // thread; returns when every one has returned. A task must not throw.
  void run(uint32_t tasks, const std::function<void(uint32_t)>& task);

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;  // a run began, or the pool stops
  std::condition_variable done_;  // the last task of a run finished
  const std::function<void(uint32_t)>* task_ = nullptr;
  uint32_t tasks_ = 0;     // of the current run (0: none)
  uint32_t next_ = 0;      // the next task to hand out
  uint32_t finished_ = 0;  // tasks of the current run that returned
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace starling::coordinator
