// A relay's downstream federation (starling-relay): held until the upstream model
// arrives, then local rounds with real clients over mutual TLS, then the model they
// produced handed back; the end of the upstream's task reaches the clients.
#include <fmt/format.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "starling/client/participant.hpp"
#include "starling/model/model.hpp"
#include "starling/util/checksum.hpp"

#include "support/running_federation.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

// n examples of two classes on either side of the line x0 = x1, shifted by `seed`.
data::Dataset halves(std::size_t n, int seed) {
  std::vector<float> x(n * 2);
  std::vector<int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    y[i] = static_cast<int32_t>(i % 2);
    x[2 * i] = y[i] == 0 ? 1.0f : -1.0f;
    x[2 * i + 1] = static_cast<float>((i + seed) % 7) * 0.1f;
  }
  return data::Dataset::fromFloats(std::move(x), std::move(y), 2, 2).value();
}

// Runs trainLocalRounds and waits for its callback.
Result<coordinator::LocalRounds> localRounds(RunningFederation& fed, std::vector<float> model, uint32_t rounds) {
  auto done = std::make_shared<std::promise<Result<coordinator::LocalRounds>>>();
  auto got = done->get_future();
  fed.federation().trainLocalRounds(std::move(model), rounds, std::nullopt,
                                    [done](Result<coordinator::LocalRounds> r) { done->set_value(std::move(r)); });
  if (got.wait_for(30s) != std::future_status::ready)
    return Status(StatusCode::kTimeout, "the local rounds did not end within 30 s");
  return got.get();
}

}  // namespace

TEST_CASE("a relay's federation holds for the upstream model, trains local rounds and hands back their model",
          "[relay]") {
  Pki pki;
  RunningFederation fed(pki, smallEngine(1'000'000, 2, 5, 0.1), smallTask("relay-rounds", "mlp:2-4-2", 4), 3,
                        ":memory:", true);
  std::vector<data::Dataset> shards;
  for (int i = 0; i < 2; ++i)
    shards.push_back(halves(64, i));
  std::vector<std::unique_ptr<client::Participant>> participants;
  std::vector<Status> results(2, Status(StatusCode::kInternal, "did not finish"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    client::ParticipantOptions o;
    o.coordinator = fed.endpoint();
    o.id = fmt::format("client-{}", i);
    o.giveUpAfter = 10s;
    participants.push_back(std::make_unique<client::Participant>(
        shards[i], o, std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>())));
  }
  for (int i = 0; i < 2; ++i) {
    auto tls = pki.clientContext(pki.client(fmt::format("client-{}", i)));
    threads.emplace_back([&, i, tls] {
      asio::io_context io(1);
      asio::co_spawn(io, participants[i]->run(io.get_executor(), tls), [&, i](std::exception_ptr e, Status st) {
        results[i] = e ? Status(StatusCode::kInternal, "exception") : std::move(st);
      });
      io.run();
    });
  }
  auto joined = [&] {
    for (int i = 0; i < 200 && !(fed.log().contains("client-0 joined") && fed.log().contains("client-1 joined")); ++i)
      std::this_thread::sleep_for(10ms);
    return fed.log().contains("client-0 joined") && fed.log().contains("client-1 joined");
  };
  REQUIRE(joined());
  std::this_thread::sleep_for(300ms);  // held: both idle, no round starts

  // The upstream's model: the task's round-0 model, moved.
  auto spec = model::Model::fromSpec("mlp:2-4-2").value();
  spec.initialize(1);
  std::vector<float> upstream(spec.params().begin(), spec.params().end());
  for (std::size_t i = 0; i < upstream.size(); ++i)
    upstream[i] += 0.01f * static_cast<float>(i % 5);

  auto first = localRounds(fed, upstream, 2);
  INFO(first.status().message());
  REQUIRE(first.isOk());
  CHECK(first->rounds == 2);
  CHECK(first->steps == 10);  // 2 rounds of 5 steps
  CHECK(first->examples > 0);
  CHECK(first->lossEnd < first->lossStart);
  REQUIRE(first->model.size() == upstream.size());
  CHECK(first->model != upstream);
  CHECK(checksum64(first->model) == checksum64(fed.federation().engine().model()));

  // The next exchange: the "coordinator's" model is the one the relay sent, moved again.
  std::vector<float> next = first->model;
  next[0] += 0.5f;
  auto second = localRounds(fed, next, 1);
  REQUIRE(second.isOk());
  CHECK(second->rounds == 1);
  CHECK(fed.federation().engine().commits() == 5);  // adopt, 2 rounds, adopt, 1 round

  // A model of another size is refused, and nothing runs.
  auto wrong = localRounds(fed, std::vector<float>(3, 0.f), 1);
  REQUIRE_FALSE(wrong.isOk());
  CHECK_THAT(wrong.status().message(), Catch::Contains("3 parameters"));

  fed.federation().complete();
  for (auto& t : threads)
    t.join();
  for (int i = 0; i < 2; ++i) {
    INFO(results[i].message());
    CHECK(results[i].isOk());
    // Exactly the 3 local rounds: none while held.
    CHECK(participants[i]->stats().roundsTrained == 3);
  }
}

TEST_CASE("a client's server list: the first address, then alternates with their own expected host names",
          "[relay][servers]") {
  Pki pki;
  const net::TlsIdentity identity = pki.clientIdentity(pki.client("client-0"));
  auto list = client::serverList("127.0.0.1:7444, 127.0.0.1:7445,relay-1.example:7444", identity, "");
  INFO(list.status().message());
  REQUIRE(list.isOk());
  CHECK(list->first.host == "127.0.0.1");
  CHECK(list->first.port == 7444);
  REQUIRE(list->tls != nullptr);
  REQUIRE(list->alternates.size() == 2);
  CHECK(list->alternates[0].endpoint.port == 7445);
  CHECK(list->alternates[0].tls == nullptr);  // the same host: the first's context
  CHECK(list->alternates[1].endpoint.host == "relay-1.example");
  CHECK(list->alternates[1].tls != nullptr);  // another host: its own expected name

  auto named = client::serverList("a.example:1,b.example:2", identity, "relays.example");
  REQUIRE(named.isOk());
  REQUIRE(named->alternates.size() == 1);
  CHECK(named->alternates[0].tls == nullptr);  // --server-name: one name for all

  auto single = client::serverList("127.0.0.1:7443", identity, "");
  REQUIRE(single.isOk());
  CHECK(single->alternates.empty());

  CHECK_FALSE(client::serverList("", identity, "").isOk());
  CHECK_FALSE(client::serverList(" , ", identity, "").isOk());
  auto bad = client::serverList("127.0.0.1:7443,nowhere", identity, "");
  REQUIRE_FALSE(bad.isOk());
  CHECK_THAT(bad.status().message(), Catch::Contains("nowhere"));
}
