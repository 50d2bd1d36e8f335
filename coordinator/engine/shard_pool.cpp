#include "shard_pool.hpp"

namespace starling::coordinator {

ShardPool::ShardPool(uint32_t workers) {
  threads_.reserve(workers);
  for (uint32_t i = 0; i < workers; ++i)
    threads_.emplace_back([this] { work(); });
}

ShardPool::~ShardPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_)
    t.join();
}

void ShardPool::run(uint32_t tasks, const std::function<void(uint32_t)>& task) {
  std::unique_lock lock(mutex_);
  task_ = &task;
  tasks_ = tasks;
  next_ = 0;
  finished_ = 0;
  lock.unlock();
  wake_.notify_all();
  lock.lock();
  // The caller takes tasks too: with S - 1 workers, S tasks run at once.
  while (next_ < tasks_) {
    const uint32_t i = next_++;
    lock.unlock();
    task(i);
    lock.lock();
    ++finished_;
  }
  done_.wait(lock, [this] { return finished_ == tasks_; });
  tasks_ = next_ = finished_ = 0;
  task_ = nullptr;
}

void ShardPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || next_ < tasks_; });
    if (stop_) return;
    const uint32_t i = next_++;
    const std::function<void(uint32_t)>* task = task_;
    lock.unlock();
    (*task)(i);
    lock.lock();
    if (++finished_ == tasks_) done_.notify_one();
  }
}

}  // namespace starling::coordinator
