// Participant with deferred data: it joins before its data has loaded, keeps the
// connection answered while the loader runs, and trains once the data is there.
#include "starling/client/participant.hpp"

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/running_federation.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

// A one-client federation of mlp:2-4-2 for `rounds` rounds, on its own thread.
class SmallFederation : public RunningFederation {
 public:
  SmallFederation(const Pki& pki, uint64_t rounds) : RunningFederation(pki, engine(rounds), task()) {}

 private:
  static coordinator::EngineConfig engine(uint64_t rounds) {
    coordinator::EngineConfig e;
    e.rounds = rounds;
    e.clientsPerRound = 1;
    e.overSelection = 1.0;
    e.minClients = 1;
    e.deadlineMs = 20'000;
    e.tau = 10;
    e.lr = 0.1;
    return e;
  }
  static coordinator::TaskConfig task() {
    coordinator::TaskConfig t;
    t.name = "deferred-data";
    t.model = "mlp:2-4-2";
    t.batchSize = 4;
    return t;
  }
};

// n examples of two classes on either side of the line x0 = x1.
data::Dataset halves(std::size_t n) {
  std::vector<float> x(n * 2);
  std::vector<int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    y[i] = static_cast<int32_t>(i % 2);
    x[2 * i] = y[i] == 0 ? 1.0f : -1.0f;
    x[2 * i + 1] = static_cast<float>(i % 7) * 0.1f;
  }
  return data::Dataset::fromFloats(std::move(x), std::move(y), 2, 2).value();
}

bool waitFor(CaptureSink& sink, const std::string& text, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!sink.contains(text) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  return sink.contains(text);
}

Status runParticipant(client::Participant& p, const Pki& pki, const net::KeyPair& kp) {
  asio::io_context io(1);
  Status out(StatusCode::kInternal, "did not finish");
  asio::co_spawn(io, p.run(io.get_executor(), pki.clientContext(kp)), [&](std::exception_ptr e, Status st) {
    if (e) std::rethrow_exception(e);
    out = std::move(st);
  });
  io.run();
  return out;
}

client::ParticipantOptions optionsFor(const SmallFederation& f) {
  client::ParticipantOptions o;
  o.coordinator = f.endpoint();
  o.id = "client-0";
  o.giveUpAfter = 10s;
  return o;
}

}  // namespace

TEST_CASE("a client with deferred data joins before its data loads, then trains", "[participant]") {
  Pki pki;
  SmallFederation fed(pki, 2);
  auto kp = pki.client("client-0");
  bool joinedFirst = false;
  client::DeferredData deferred;
  deferred.numExamples = 64;
  deferred.load = [&] {
    // The coordinator counts the client (with the announced number) while this runs.
    joinedFirst = waitFor(fed.log(), "(64 examples", 5s);
    return Result<data::Dataset>(halves(64));
  };
  auto log = std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>());
  client::Participant p(std::move(deferred), optionsFor(fed), log);
  Status st = runParticipant(p, pki, kp);
  INFO(st.message());
  REQUIRE(st.isOk());
  CHECK(joinedFirst);
  CHECK(p.stats().roundsTrained == 2);
  CHECK(p.stats().connections == 1);
}

TEST_CASE("deferred data that does not match the announced count ends the run", "[participant]") {
  Pki pki;
  SmallFederation fed(pki, 2);
  auto kp = pki.client("client-0");
  client::DeferredData deferred;
  deferred.numExamples = 100;
  deferred.load = [] { return Result<data::Dataset>(halves(50)); };
  auto log = std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>());
  client::Participant p(std::move(deferred), optionsFor(fed), log);
  Status st = runParticipant(p, pki, kp);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("50 examples loaded, 100 announced"));
  CHECK(p.stats().connections == 1);  // not retried
  CHECK(p.stats().roundsTrained == 0);
}
