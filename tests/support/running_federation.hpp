#pragma once
// Test support: a coordinator Federation of one task behind a real Server on
// 127.0.0.1 (port 0), with an in-memory store (or the database file `db`, for a test
// that reads it back), on an io_context run by `threads` threads of its own (as the
// daemon runs it: connections on their strands, rounds on the federation's). Used by
// the suites that drive real clients against it (client, capi), which ThreadSanitizer
// runs too.

#include <spdlog/logger.h>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "starling/coordinator/federation.hpp"
#include "starling/coordinator/server.hpp"
#include "starling/coordinator/store.hpp"

#include "support/federation_fixture.hpp"

namespace starling::testing {

// The engine of a small test federation: every one of `clients` in every round,
// a 20 s deadline, tau steps at learning rate lr.
inline coordinator::EngineConfig smallEngine(uint64_t rounds, uint32_t clients, uint32_t tau, double lr) {
  coordinator::EngineConfig e;
  e.rounds = rounds;
  e.clientsPerRound = clients;
  e.overSelection = 1.0;
  e.minClients = clients;
  e.deadlineMs = 20'000;
  e.tau = tau;
  e.lr = lr;
  return e;
}

inline coordinator::TaskConfig smallTask(std::string name, std::string model, int batchSize) {
  coordinator::TaskConfig t;
  t.name = std::move(name);
  t.model = std::move(model);
  t.batchSize = batchSize;
  return t;
}

class RunningFederation {
 public:
  RunningFederation(const Pki& pki, const coordinator::EngineConfig& engine, const coordinator::TaskConfig& task,
                    int threads = 3, const std::string& db = ":memory:", bool holdForUpstream = false)
      : io_(threads), sink_(std::make_shared<CaptureSink>()) {
    log_ = std::make_shared<spdlog::logger>("coordinator", sink_);
    log_->set_level(spdlog::level::debug);
    federation_ =
        coordinator::Federation::create(io_, engine, task, coordinator::Store::open(db).value(), log_).value();
    if (holdForUpstream) federation_->holdForUpstream();  // a relay's: rounds wait for trainLocalRounds()
    coordinator::ServerOptions options;
    options.listen = {"127.0.0.1", 0};
    options.task = task.name;
    options.modelSpec = task.model;
    auto tls = net::TlsContext::create(net::TlsRole::kServer, pki.serverIdentity()).value();
    server_ = std::make_unique<coordinator::Server>(io_, tls, options, log_, federation_);
    federation_->onFinished([this](const Status&) { server_->stop(); });
    port_ = server_->start().value();
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] { io_.run(); });
  }
  RunningFederation(const RunningFederation&) = delete;
  RunningFederation& operator=(const RunningFederation&) = delete;
  ~RunningFederation() {
    // Abandons a round in flight (and its deadline timer), then stops the server.
    federation_->shutdown("the test is over");
    asio::post(io_, [this] { server_->stop(); });
    for (auto& t : threads_)
      t.join();
    if (std::getenv("STARLING_TEST_LOG") != nullptr)
      std::fprintf(stderr, "--- coordinator log ---\n%s", sink_->all().c_str());
  }

  net::Endpoint endpoint() const { return {"127.0.0.1", port_}; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  CaptureSink& log() { return *sink_; }
  coordinator::Federation& federation() { return *federation_; }

 private:
  asio::io_context io_;
  std::shared_ptr<CaptureSink> sink_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<coordinator::Federation> federation_;
  std::unique_ptr<coordinator::Server> server_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace starling::testing
