// Participant with deferred data: it joins before its data has loaded, keeps the
// connection answered while the loader runs, and trains once the data is there.
#include "starling/client/participant.hpp"

#include <fmt/format.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "starling/wire/capabilities.hpp"
#include "starling/wire/messages.hpp"

#include "data/temp_files.hpp"
#include "support/running_federation.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

// A one-client federation of mlp:2-4-2 for `rounds` rounds, on its own threads.
class SmallFederation : public RunningFederation {
 public:
  SmallFederation(const Pki& pki, uint64_t rounds)
      : RunningFederation(pki, smallEngine(rounds, 1, 10, 0.1), smallTask("deferred-data", "mlp:2-4-2", 4)) {}
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

struct HelloOutcome {
  std::optional<wire::fb::ErrorCode> code;  // the Error frame the coordinator answered with, if any
  std::string message;
  bool closed = false;  // the coordinator then closed the connection
};

// Connects as `id`, sends a Hello listing `capabilities`, and reports the answer.
// (GCC 12 under -fsanitize=address reports this coroutine's frame as mismatched
// new/delete, a false positive: meson.build turns that warning off for those builds.)
asio::awaitable<HelloOutcome> sayHello(asio::any_io_executor ex, net::Endpoint endpoint,
                                       std::shared_ptr<const net::TlsContext> tls, std::string id,
                                       std::vector<std::string> capabilities) {
  HelloOutcome o;
  auto conn = co_await net::connect(ex, endpoint, tls, {});
  if (!conn) co_return o;
  const wire::Frame helloFrame = wire::encode(wire::HelloMsg{id, std::move(capabilities), 64, "", 0, 0, {}, 0});
  Status sent = co_await conn->send(helloFrame.bytes());
  if (!sent) co_return o;
  auto reply = co_await conn->receive();
  if (reply && reply->type() == wire::fb::Body::Error) {
    auto err = wire::parseError(*reply);
    if (!err) co_return o;
    o.code = err->code;
    o.message = err->message;
    reply = co_await conn->receive();
  }
  o.closed = !reply && reply.status().code() == StatusCode::kClosed;
  co_return o;
}

HelloOutcome helloWith(const RunningFederation& fed, const Pki& pki, const std::string& id,
                       const std::vector<std::string>& capabilities) {
  auto tls = pki.clientContext(pki.client(id));
  return runCoroutine(
      [&](asio::any_io_executor ex) { return sayHello(std::move(ex), fed.endpoint(), tls, id, capabilities); });
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

namespace {

// n random 28x28 images with labels i % 10, as Fashion-MNIST's test split in dir.
void writeTestSplit(const data::test::TempDir& dir, uint32_t n) {
  auto header = [](std::vector<uint8_t>& out, uint8_t dims, std::initializer_list<uint32_t> sizes) {
    // (Byte by byte: GCC 12 misreports inserting a 4-byte list as an overflow.)
    for (uint8_t byte : {uint8_t(0), uint8_t(0), uint8_t(8), dims})
      out.push_back(byte);
    for (uint32_t v : sizes)
      for (int shift = 24; shift >= 0; shift -= 8)
        out.push_back(static_cast<uint8_t>(v >> shift));
  };
  std::vector<uint8_t> images, labels;
  header(images, 3, {n, 28, 28});
  header(labels, 1, {n});
  std::mt19937 rng(7);
  for (uint32_t i = 0; i < n * 784; ++i)
    images.push_back(static_cast<uint8_t>(rng()));
  for (uint32_t i = 0; i < n; ++i)
    labels.push_back(static_cast<uint8_t>(i % 10));
  dir.write("t10k-images-idx3-ubyte", images);
  dir.write("t10k-labels-idx1-ubyte", labels);
}

}  // namespace

TEST_CASE("the coordinator evaluates every committed round on a worker and reports them in order",
          "[participant][evaluation]") {
  data::test::TempDir dir;
  writeTestSplit(dir, 64);
  coordinator::TaskConfig task = smallTask("evaluated", "mlp:784-8-10", 8);
  task.testData = dir.file("");
  Pki pki;
  RunningFederation fed(pki, smallEngine(5, 1, 4, 0.05), task);

  std::vector<float> x(64 * 784);
  std::vector<int32_t> y(64);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : x)
    v = u(rng);
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<int32_t>(i % 10);
  auto shard = data::Dataset::fromFloats(std::move(x), std::move(y), 784, 10).value();
  client::ParticipantOptions o;
  o.coordinator = fed.endpoint();
  o.id = "client-0";
  o.giveUpAfter = 10s;
  client::Participant p(shard, o, std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>()));
  Status st = runParticipant(p, pki, pki.client("client-0"));
  INFO(st.message());
  REQUIRE(st.isOk());
  REQUIRE(p.stats().roundsTrained == 5);

  // Every round's line carries its accuracy, rounds in order, all logged before the
  // client was told that training is complete (so before it returned).
  const std::string log = fed.log().all();
  std::size_t at = 0;
  for (int r = 1; r <= 5; ++r) {
    const std::size_t line = log.find(fmt::format("round {:>3} committed: accuracy ", r), at);
    INFO(log);
    REQUIRE(line != std::string::npos);
    at = line;
  }
  CHECK(waitFor(fed.log(), "training complete", 5s));
}

TEST_CASE("a client lacking a capability the task needs is refused at Hello, by name", "[participant][capabilities]") {
  Pki pki;
  auto engine = smallEngine(1, 1, 10, 0.1);
  engine.uplink = "topk";
  engine.uplinkDensity = 0.5;
  engine.downlink = "topk";
  engine.downlinkDensity = 0.5;
  engine.uplinkTernary = true;
  engine.downlinkTernary = true;
  engine.catchUpXorRounds = 10;
  engine.modelMantissaBits = 10;
  engine.downlinkRelativeIndices = true;
  const auto task = smallTask("capabilities", "mlp:2-4-2", 4);
  const auto required = coordinator::requiredCapabilities(engine, task);
  CHECK(wire::missingCapabilities(required, {"ternary-values"}) ==
        std::vector<std::string>{"rice-indices", "catch-up-values", "xor-values", "model-precision", "relative-indices",
                                 "initialize"});
  data::test::TempDir dir;
  const std::string db = dir.file("federation.db");
  RunningFederation fed(pki, engine, task, 3, db);

  // An older client: it lists only what the first protocol had.
  const HelloOutcome out = helloWith(fed, pki, "client-1", {"topk", "fp16"});
  REQUIRE(out.code.has_value());
  CHECK(*out.code == wire::fb::ErrorCode::Unsupported);
  for (const char* name : {"rice-indices", "ternary-values", "catch-up-values", "xor-values", "model-precision",
                           "relative-indices", "initialize"})
    CHECK_THAT(out.message, Catch::Contains(name));
  CHECK(out.closed);
  CHECK(fed.log().contains("refused client-1"));
  CHECK_FALSE(fed.log().contains("client-1 joined"));
  CHECK_FALSE(fed.log().contains("recording the refusal"));  // recorded without a hitch

  // The store holds the refusal (recorded before the client was told), read through a
  // second, read-only connection while the coordinator runs.
  coordinator::StoreOptions ro;
  ro.readOnly = true;
  {
    auto reader = coordinator::Store::open(db, ro);
    INFO(reader.status().toString());
    REQUIRE(reader.isOk());
    auto refusals = (*reader)->refusals();
    REQUIRE(refusals.isOk());
    REQUIRE(refusals->size() == 1);
    const coordinator::RefusalRecord& r = refusals->front();
    CHECK(r.clientId == "client-1");
    CHECK_THAT(r.peer, Catch::StartsWith("127.0.0.1:"));
    CHECK(r.reason == out.message);
    for (const char* name : {"rice-indices", "ternary-values", "catch-up-values", "xor-values", "model-precision",
                             "relative-indices", "initialize"})
      CHECK_THAT(r.reason, Catch::Contains(name));
    const int64_t nowMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    CHECK(r.atMs > nowMs - 600'000);  // wall-clock time, not the steady clock
    CHECK(r.atMs <= nowMs + 1'000);
    auto clients = (*reader)->clients();
    REQUIRE(clients.isOk());
    CHECK(clients->empty());  // a refused client is not recorded as a client
  }

  // This build's client has them all: it joins and trains the round.
  auto log = std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>());
  client::ParticipantOptions o;
  o.coordinator = fed.endpoint();
  o.id = "client-0";
  o.giveUpAfter = 10s;
  const data::Dataset shard = halves(64);
  client::Participant p(shard, o, log);
  Status st = runParticipant(p, pki, pki.client("client-0"));
  INFO(st.message());
  REQUIRE(st.isOk());
  CHECK(p.stats().roundsTrained == 1);
}

TEST_CASE("clients that miss rounds replay relative broadcasts, the first against their last replay's indices",
          "[participant][relative]") {
  // One of three clients a round, a top-k downlink with GlueFL's shared mask: the
  // others miss rounds and are caught up from the log, coded relative to the previous
  // broadcast (a client that had a replay before gets its first tensor relative too).
  auto engine = smallEngine(12, 1, 4, 0.05);
  engine.minClients = 3;
  engine.downlink = "topk";
  engine.downlinkDensity = 0.05;
  engine.downlinkShared = 0.8;
  engine.downlinkRelativeIndices = true;
  engine.catchUpByValue = false;
  engine.deadlineMs = 5'000;  // a client that fails its catch-up costs one deadline, not 20 s
  Pki pki;
  RunningFederation fed(pki, engine, smallTask("relative", "mlp:784-8-10", 8));

  constexpr int kClients = 3;
  std::vector<data::Dataset> shards;
  std::vector<std::shared_ptr<CaptureSink>> sinks;
  std::vector<std::unique_ptr<client::Participant>> participants;
  std::vector<net::KeyPair> keys;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < kClients; ++i) {
    std::vector<float> x(64 * 784);
    std::vector<int32_t> y(64);
    for (float& v : x)
      v = u(rng);
    for (std::size_t j = 0; j < y.size(); ++j)
      y[j] = static_cast<int32_t>((j + static_cast<std::size_t>(i)) % 10);
    shards.push_back(data::Dataset::fromFloats(std::move(x), std::move(y), 784, 10).value());
  }
  for (int i = 0; i < kClients; ++i) {
    const std::string id = fmt::format("client-{}", i);
    client::ParticipantOptions o;
    o.coordinator = fed.endpoint();
    o.id = id;
    o.giveUpAfter = 10s;
    sinks.push_back(std::make_shared<CaptureSink>());
    participants.push_back(
        std::make_unique<client::Participant>(shards[i], o, std::make_shared<spdlog::logger>(id, sinks.back())));
    keys.push_back(pki.client(id));
  }
  std::vector<Status> results(kClients, Status(StatusCode::kInternal, "did not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] { results[i] = runParticipant(*participants[i], pki, keys[i]); });
  for (auto& t : threads)
    t.join();

  uint64_t trained = 0;
  std::string logs;
  for (int i = 0; i < kClients; ++i) {
    INFO(results[i].message());
    CHECK(results[i].isOk());
    CHECK(participants[i]->stats().connections == 1);
    trained += participants[i]->stats().roundsTrained;
    logs += sinks[i]->all();
  }
  INFO(logs);
  CHECK(trained >= 12);
  CHECK_THAT(logs, Catch::Contains("with relative indices (the first against the last replay's)"));
  CHECK_FALSE(logs.find("checksum mismatch") != std::string::npos);
  CHECK_FALSE(fed.log().contains("reports:"));  // no client said its model was out of sync
}

TEST_CASE("overlap: clients train between rounds on a worker thread and the task completes", "[participant][overlap]") {
  Pki pki;
  coordinator::TaskConfig task = smallTask("overlap", "mlp:2-4-2", 4);
  task.overlap = 0.2f;
  task.overlapMomentum = 0.3f;
  coordinator::EngineConfig engine = smallEngine(6, 2, 20, 0.1);
  engine.uplink = "topk";
  engine.uplinkDensity = 0.5;
  RunningFederation fed(pki, engine, task);
  const data::Dataset shard = halves(64);
  // client-1 is 3x slower: its worker thread waits after the steps too.
  const auto make = [&](int i) {
    client::ParticipantOptions o;
    o.coordinator = fed.endpoint();
    o.id = fmt::format("client-{}", i);
    o.giveUpAfter = 10s;
    o.slowdown = 1.0 + 2.0 * i;
    return std::make_unique<client::Participant>(
        shard, o, std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>()));
  };
  std::unique_ptr<client::Participant> clients[2] = {make(0), make(1)};
  Status results[2];
  std::thread other([&] { results[1] = runParticipant(*clients[1], pki, pki.client("client-1")); });
  results[0] = runParticipant(*clients[0], pki, pki.client("client-0"));
  other.join();
  for (int i = 0; i < 2; ++i) {
    INFO("client " << i << ": " << results[i].message());
    REQUIRE(results[i].isOk());
    CHECK(clients[i]->stats().roundsTrained == 6);
    CHECK(clients[i]->stats().roundsAccepted == 6);
    // Round 1 trains in the foreground; every later one was trained before it came.
    CHECK(clients[i]->stats().roundsOverlapped == 5);
  }
}
