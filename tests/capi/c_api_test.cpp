// The C API (starling_client.h) against a real coordinator — Server plus Federation
// on 127.0.0.1 with an in-memory store — running on its own thread in this process.

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "starling/compression/row_set.hpp"
#include "starling/coordinator/store.hpp"
#include "starling/model/model.hpp"

#include "starling_client.h"
#include "support/running_federation.hpp"
#include "support/sparse_data.hpp"

extern "C" int starling_capi_c_check(void);

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kDim = 4;
constexpr int kClasses = 3;

// Three well-separated Gaussian clusters in 4 dimensions: example i has class i % 3.
struct Clusters {
  std::vector<float> x;
  std::vector<int32_t> y;
  explicit Clusters(std::size_t n, uint64_t seed) : x(n * kDim), y(n) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (std::size_t i = 0; i < n; ++i) {
      y[i] = static_cast<int32_t>(i % kClasses);
      for (std::size_t j = 0; j < kDim; ++j)
        x[i * kDim + j] = (j == static_cast<std::size_t>(y[i]) ? 2.0f : 0.0f) + noise(rng);
    }
  }
};

int fillFromClusters(void* user, size_t index, float* features, int32_t* label) {
  const auto* c = static_cast<const Clusters*>(user);
  std::memcpy(features, c->x.data() + index * kDim, kDim * sizeof(float));
  *label = c->y[index];
  return 0;
}

// A coordinator running a Federation of the capi-test task on threads of its own.
class Coordinator : public RunningFederation {
 public:
  Coordinator(const Pki& pki, const coordinator::EngineConfig& engine)
      : RunningFederation(pki, engine, smallTask("capi-test", "mlp:4-8-3", 8)) {}
  Coordinator(const Pki& pki, const coordinator::EngineConfig& engine, const coordinator::TaskConfig& task)
      : RunningFederation(pki, engine, task) {}
};

// y = 1.5 a - 2 b + 0.5 c + 0.7 + small noise, the rows of a CSV file or arrays.
struct Regression {
  std::vector<float> x, y;
  explicit Regression(std::size_t n, uint64_t seed) : x(n * 3), y(n) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::normal_distribution<float> noise(0.0f, 0.05f);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < 3; ++j)
        x[i * 3 + j] = u(rng);
      y[i] = 1.5f * x[i * 3] - 2.0f * x[i * 3 + 1] + 0.5f * x[i * 3 + 2] + 0.7f + noise(rng);
    }
  }
  void writeCsv(const std::string& path) const {
    std::ofstream out(path);
    out << "a,b,\"c, the third\",target\n";
    for (std::size_t i = 0; i < y.size(); ++i)
      out << x[i * 3] << ',' << x[i * 3 + 1] << ',' << x[i * 3 + 2] << ',' << y[i] << '\n';
  }
};

coordinator::EngineConfig smallFederation(uint64_t rounds, uint32_t clients) {
  return smallEngine(rounds, clients, 20, 0.1);
}

// Log lines a client sent to its callback.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  bool contains(const std::string& text) {
    std::lock_guard lock(mu);
    for (const auto& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& l : lines)
      out += l + "\n";
    return out;
  }
};

void collect(void* user, int /*level*/, const char* line) {
  auto* l = static_cast<Lines*>(user);
  std::lock_guard lock(l->mu);
  l->lines.emplace_back(line);
}

// Owns a starling_client; configured with PEM text issued by the test CA.
struct Client {
  starling_client* c = nullptr;
  net::KeyPair kp;
  Lines lines;
  Client(const Pki& pki, const std::string& id, const std::string& coordinatorAddress) : kp(pki.client(id)) {
    starling_client_config config;
    starling_client_config_init(&config);
    config.coordinator = coordinatorAddress.c_str();
    config.server_name = "localhost";
    config.ca_pem = pki.ca.certPem.c_str();
    config.cert_pem = kp.certPem.c_str();
    config.key_pem = kp.keyPem.c_str();
    config.client_id = id.c_str();
    config.seed = 7;
    config.handshake_timeout_ms = 3000;
    config.backoff_initial_ms = 50;
    config.backoff_max_ms = 200;
    config.log = collect;
    config.log_level = STARLING_LOG_DEBUG;
    config.log_user = &lines;
    int rc = starling_client_create(&config, &c);
    INFO(starling_client_last_error(c));
    REQUIRE(rc == STARLING_OK);
  }
  ~Client() { starling_client_destroy(c); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
};

// A free port on 127.0.0.1 with nothing listening (bound, then released).
std::string deadAddress() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto port = a.local_endpoint().port();
  a.close();
  return "127.0.0.1:" + std::to_string(port);
}

// Runs the clients to the end, each on a thread of its own; all must finish cleanly.
// A run that has not ended after `limit` is stopped and the test fails with what the
// clients and the coordinator logged, rather than hanging until the suite's timeout.
void runAll(const std::vector<Client*>& clients, RunningFederation& coord, std::chrono::seconds limit = 60s) {
  std::vector<int> rcs(clients.size(), -1);
  std::mutex mu;
  std::condition_variable cv;
  std::size_t running = clients.size();
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < clients.size(); ++i)
    threads.emplace_back([&, i] {
      rcs[i] = starling_client_run(clients[i]->c);
      std::lock_guard lock(mu);
      --running;
      cv.notify_all();
    });
  bool ended;
  {
    std::unique_lock lock(mu);
    ended = cv.wait_for(lock, limit, [&] { return running == 0; });
  }
  if (!ended)
    for (Client* cl : clients)
      starling_client_stop(cl->c);
  for (auto& t : threads)
    t.join();
  if (!ended) {
    std::string logs;
    for (std::size_t i = 0; i < clients.size(); ++i)
      logs += "--- client " + std::to_string(i) + " ---\n" + clients[i]->lines.all();
    FAIL_CHECK("the clients had not finished after " << limit.count() << " s\n"
                                                     << logs << "--- coordinator ---\n"
                                                     << coord.log().all());
  }
  for (std::size_t i = 0; i < clients.size(); ++i) {
    INFO("client " << i << ": " << starling_client_last_error(clients[i]->c));
    REQUIRE(rcs[i] == STARLING_OK);
  }
}

void runBoth(Client& a, Client& b, Coordinator& coord, std::chrono::seconds limit = 60s) {
  runAll({&a, &b}, coord, limit);
}

}  // namespace

TEST_CASE("the C header compiles as C99 and behaves from C", "[capi]") {
  CHECK(starling_capi_c_check() == 0);
}

TEST_CASE("two embedded clients train a federation to completion through the C API", "[capi][federation]") {
  Pki pki;
  Coordinator coord(pki, smallFederation(3, 2));
  Clusters dataA(300, 1), dataB(240, 2);
  Client a(pki, "client-0", coord.address());
  Client b(pki, "client-1", coord.address());
  // One client gives its data through the callback, the other through arrays.
  REQUIRE(starling_client_set_data_callback(a.c, dataA.y.size(), kDim, kClasses, fillFromClusters, &dataA) ==
          STARLING_OK);
  REQUIRE(starling_client_set_data_f32(b.c, dataB.x.data(), dataB.y.data(), dataB.y.size(), kDim, kClasses) ==
          STARLING_OK);
  CHECK(starling_client_data_size(a.c) == 300);
  CHECK(starling_client_data_size(b.c) == 240);
  CHECK(starling_client_state(a.c) == STARLING_STATE_IDLE);

  runBoth(a, b, coord);
  for (Client* cl : {&a, &b}) {
    CHECK(starling_client_state(cl->c) == STARLING_STATE_DONE);
    starling_client_stats s;
    REQUIRE(starling_client_get_stats(cl->c, &s) == STARLING_OK);
    CHECK(s.rounds_trained == 3);
    CHECK(s.rounds_accepted == 3);
    CHECK(s.rounds_rejected == 0);
    CHECK(s.connections >= 1);
    CHECK(s.bytes_up > 0);
    CHECK(s.bytes_down > 0);
    CHECK(s.held_round == 2);  // the last assignment was based on round 2
    CHECK(std::isfinite(s.last_loss));
    CHECK(s.last_loss < std::log(3.0));  // below chance: it learned something
    size_t n = 0;
    REQUIRE(starling_client_get_model(cl->c, nullptr, 0, &n) == STARLING_OK);
    CHECK(n == 4 * 8 + 8 + 8 * 3 + 3);
    std::vector<float> model(n);
    REQUIRE(starling_client_get_model(cl->c, model.data(), model.size(), &n) == STARLING_OK);
    CHECK(cl->lines.contains("joined task 'capi-test'"));
    CHECK(cl->lines.contains("training complete"));
  }
}

TEST_CASE("clients round replayed broadcasts to the model's precision and apply XOR catch-ups bit for bit",
          "[capi][federation][catchup]") {
  Pki pki;
  auto engine = smallFederation(10, 1);
  engine.minClients = 2;  // one of the two a round: the other misses it and catches up
  engine.downlink = "topk";
  engine.downlinkDensity = 0.2;
  engine.modelMantissaBits = 8;
  engine.catchUpXorRounds = 20;
  SECTION("from the broadcast log") {
    engine.catchUpByValue = false;
  }
  SECTION("by value, as XORs") {}
  Coordinator coord(pki, engine);
  Clusters dataA(300, 1), dataB(240, 2);
  Client a(pki, "client-0", coord.address());
  Client b(pki, "client-1", coord.address());
  REQUIRE(starling_client_set_data_f32(a.c, dataA.x.data(), dataA.y.data(), dataA.y.size(), kDim, kClasses) ==
          STARLING_OK);
  REQUIRE(starling_client_set_data_f32(b.c, dataB.x.data(), dataB.y.data(), dataB.y.size(), kDim, kClasses) ==
          STARLING_OK);
  runBoth(a, b, coord);
  uint64_t trained = 0;
  for (Client* cl : {&a, &b}) {
    starling_client_stats s;
    REQUIRE(starling_client_get_stats(cl->c, &s) == STARLING_OK);
    trained += s.rounds_trained;
    CHECK(s.resyncs == 0);  // every catch-up matched the coordinator's checksum
    CHECK_FALSE(cl->lines.contains("checksum mismatch"));
  }
  CHECK(trained == 10);
}

TEST_CASE("stop() from another thread makes run() return while it waits on the coordinator", "[capi][stop]") {
  Pki pki;
  // Rounds need two clients; only one comes, so it joins and waits.
  Coordinator coord(pki, smallFederation(3, 2));
  Clusters data(60, 3);
  Client a(pki, "client-0", coord.address());
  REQUIRE(starling_client_set_data_callback(a.c, data.y.size(), kDim, kClasses, fillFromClusters, &data) ==
          STARLING_OK);
  std::atomic<int> rc{-1};
  std::thread t([&] { rc = starling_client_run(a.c); });
  auto until = std::chrono::steady_clock::now() + 5s;
  while (starling_client_state(a.c) != STARLING_STATE_TRAINING && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  CHECK(starling_client_state(a.c) == STARLING_STATE_TRAINING);
  auto stoppedAt = std::chrono::steady_clock::now();
  starling_client_stop(a.c);
  t.join();
  CHECK(std::chrono::steady_clock::now() - stoppedAt < 1s);
  CHECK(rc == STARLING_ERR_STOPPED);
  CHECK(starling_client_state(a.c) == STARLING_STATE_IDLE);
  CHECK(std::string(starling_client_last_error(a.c)).find("stopped") != std::string::npos);
  starling_client_stats s;
  REQUIRE(starling_client_get_stats(a.c, &s) == STARLING_OK);
  CHECK(s.connections == 1);
  CHECK(s.rounds_trained == 0);
}

TEST_CASE("stop() also ends a run that keeps failing to connect, and a stop before run() is not lost", "[capi][stop]") {
  Pki pki;
  Clusters data(30, 4);
  Client a(pki, "client-0", deadAddress());
  REQUIRE(starling_client_set_data_f32(a.c, data.x.data(), data.y.data(), data.y.size(), kDim, kClasses) ==
          STARLING_OK);
  SECTION("while reconnecting") {
    std::atomic<int> rc{-1};
    std::thread t([&] { rc = starling_client_run(a.c); });
    std::this_thread::sleep_for(300ms);
    CHECK(starling_client_state(a.c) == STARLING_STATE_CONNECTING);
    starling_client_stop(a.c);
    t.join();
    CHECK(rc == STARLING_ERR_STOPPED);
  }
  SECTION("before run()") {
    starling_client_stop(a.c);
    CHECK(starling_client_run(a.c) == STARLING_ERR_STOPPED);
  }
}

TEST_CASE("the C API refuses what it cannot use, saying why", "[capi][errors]") {
  Pki pki;
  auto kp = pki.client("client-0");
  starling_client_config config;
  starling_client_config_init(&config);
  config.coordinator = "127.0.0.1:1";
  config.ca_pem = pki.ca.certPem.c_str();
  config.cert_pem = kp.certPem.c_str();
  config.key_pem = kp.keyPem.c_str();
  config.log_level = STARLING_LOG_OFF;
  starling_client* c = nullptr;

  SECTION("a missing certificate file: the message names it") {
    config.cert_pem = nullptr;
    config.cert_file = "/nonexistent/dir/client-9.crt";
    CHECK(starling_client_create(&config, &c) == STARLING_ERR_NOT_FOUND);
    REQUIRE(c != nullptr);
    CHECK_THAT(starling_client_last_error(c), Catch::Contains("/nonexistent/dir/client-9.crt"));
    CHECK(starling_client_state(c) == STARLING_STATE_FAILED);
    CHECK(starling_client_run(c) == STARLING_ERR_STATE);
  }
  SECTION("a key that does not parse") {
    config.key_pem = "not a key";
    CHECK(starling_client_create(&config, &c) != STARLING_OK);
    CHECK(std::strlen(starling_client_last_error(c)) > 0);
  }
  SECTION("a malformed coordinator address") {
    config.coordinator = "no-port-here";
    CHECK(starling_client_create(&config, &c) == STARLING_ERR_INVALID_ARGUMENT);
    CHECK_THAT(starling_client_last_error(c), Catch::Contains("coordinator"));
  }
  SECTION("run() without data") {
    REQUIRE(starling_client_create(&config, &c) == STARLING_OK);
    CHECK(starling_client_run(c) == STARLING_ERR_STATE);
    CHECK_THAT(starling_client_last_error(c), Catch::Contains("no training data"));
    CHECK(starling_client_state(c) == STARLING_STATE_IDLE);
  }
  SECTION("bad data arguments, and a callback that fails, keep the previous data") {
    REQUIRE(starling_client_create(&config, &c) == STARLING_OK);
    Clusters data(10, 5);
    REQUIRE(starling_client_set_data_f32(c, data.x.data(), data.y.data(), 10, kDim, kClasses) == STARLING_OK);
    CHECK(starling_client_set_data_f32(c, nullptr, data.y.data(), 10, kDim, kClasses) == STARLING_ERR_INVALID_ARGUMENT);
    data.y[3] = 7;  // beyond num_classes
    CHECK(starling_client_set_data_f32(c, data.x.data(), data.y.data(), 10, kDim, kClasses) != STARLING_OK);
    auto failing = [](void*, size_t index, float*, int32_t* label) -> int {
      *label = 0;
      return index == 4 ? 42 : 0;
    };
    CHECK(starling_client_set_data_callback(c, 10, kDim, kClasses, failing, nullptr) == STARLING_ERR_CALLBACK);
    CHECK_THAT(starling_client_last_error(c), Catch::Contains("returned 42 for example 4"));
    CHECK(starling_client_data_size(c) == 10);
    size_t n = 0;
    CHECK(starling_client_get_model(c, nullptr, 0, &n) == STARLING_ERR_STATE);
  }
  SECTION("IDX files that are missing") {
    REQUIRE(starling_client_create(&config, &c) == STARLING_OK);
    CHECK(starling_client_set_data_idx(c, "/nonexistent/images-idx3", "/nonexistent/labels-idx1", 10) ==
          STARLING_ERR_NOT_FOUND);
    CHECK_THAT(starling_client_last_error(c), Catch::Contains("/nonexistent/images-idx3"));
  }
  starling_client_destroy(c);
}

TEST_CASE("a regression trains through the C API from a CSV file and from target arrays", "[capi][regression]") {
  Pki pki;
  coordinator::TaskConfig task = smallTask("capi-regression", "linear:3-1/mse", 16);
  task.kind = "regression";
  Coordinator coord(pki, smallEngine(8, 2, 30, 0.1), task);
  Client a(pki, "client-0", coord.address());
  Client b(pki, "client-1", coord.address());
  const auto path = (std::filesystem::temp_directory_path() / "starling-capi-regression.csv").string();
  Regression(400, 1).writeCsv(path);
  REQUIRE(starling_client_set_data_file(a.c, path.c_str(), nullptr, "target", "regression") == STARLING_OK);
  CHECK(starling_client_data_size(a.c) == 400);
  const Regression arrays(300, 2);
  REQUIRE(starling_client_set_data_f32_targets(b.c, arrays.x.data(), arrays.y.data(), 300, 3) == STARLING_OK);
  runBoth(a, b, coord);
  std::vector<float> model(4);
  size_t n = 0;
  REQUIRE(starling_client_get_model(a.c, model.data(), model.size(), &n) == STARLING_OK);
  REQUIRE(n == 4);  // dense0.weight {1, 3}, then dense0.bias
  CHECK(model[0] == Approx(1.5f).margin(0.1));
  CHECK(model[1] == Approx(-2.0f).margin(0.1));
  CHECK(model[2] == Approx(0.5f).margin(0.1));
  CHECK(model[3] == Approx(0.7f).margin(0.1));
  std::filesystem::remove(path);
}

TEST_CASE("set_data_file refuses a bad file, format or task, naming what is wrong", "[capi][errors]") {
  Pki pki;
  Client a(pki, "client-0", deadAddress());
  const auto path = (std::filesystem::temp_directory_path() / "starling-capi-bad.csv").string();
  {
    std::ofstream out(path);
    out << "a,b,label\n1,2,0\n3,x,1\n";
  }
  CHECK(starling_client_set_data_file(a.c, path.c_str(), "csv", nullptr, nullptr) != STARLING_OK);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains(path + ":3"));
  CHECK(starling_client_set_data_file(a.c, path.c_str(), "parquet", nullptr, nullptr) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("parquet"));
  CHECK(starling_client_set_data_file(a.c, path.c_str(), nullptr, nullptr, "ranking") == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("ranking"));
  CHECK(starling_client_data_size(a.c) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a client whose data does not fit the coordinator's model fails with STARLING_ERR_TASK", "[capi][task]") {
  Pki pki;
  Coordinator coord(pki, smallFederation(1, 1));
  Client a(pki, "client-0", coord.address());
  std::vector<float> x(20 * 5, 0.5f);  // 5 features; the task's model takes 4
  std::vector<int32_t> y(20, 1);
  REQUIRE(starling_client_set_data_f32(a.c, x.data(), y.data(), 20, 5, kClasses) == STARLING_OK);
  CHECK(starling_client_run(a.c) == STARLING_ERR_TASK);
  CHECK(starling_client_state(a.c) == STARLING_STATE_FAILED);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("cannot train"));
}

TEST_CASE("set_data_file_ex: the CLI's CSV options, a shard and a partition", "[capi][data-options]") {
  Pki pki;
  Client a(pki, "client-0", deadAddress());
  const auto dir = std::filesystem::temp_directory_path() / "starling-capi-options";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "per-client");
  const std::string path = (dir / "users.csv").string();
  {
    std::ofstream out(path);
    out << "user,city,x,label\n";
    for (int i = 0; i < 30; ++i)
      out << "u" << i % 3 << ',' << (i % 2 ? "Oslo" : "Lima") << ',' << i << ',' << i % 2 << '\n';
  }
  starling_client_data_options o;
  starling_client_data_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.header == -1);
  CHECK(o.categorical_buckets == 16);

  SECTION("categorical columns over hashed buckets, the group column not a feature, one shard") {
    o.categorical = "city";
    o.categorical_buckets = 4;
    o.partition = "by-column:user";
    o.shard_index = 1;
    o.shard_count = 3;
    REQUIRE(starling_client_set_data_file_ex(a.c, path.c_str(), &o) == STARLING_OK);
    CHECK(starling_client_data_size(a.c) == 10);  // one user's 10 rows
    // Without naming city categorical, the text is refused, naming the option.
    starling_client_data_options plain;
    starling_client_data_options_init(&plain);
    CHECK(starling_client_set_data_file_ex(a.c, path.c_str(), &plain) != STARLING_OK);
    CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("categorical"));
  }
  SECTION("header forced off: the names row is data and fails") {
    o.categorical = "city";
    o.header = 0;
    CHECK(starling_client_set_data_file_ex(a.c, path.c_str(), &o) != STARLING_OK);
    o.header = 3;
    CHECK(starling_client_set_data_file_ex(a.c, path.c_str(), &o) == STARLING_ERR_INVALID_ARGUMENT);
    CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("options.header is 3"));
  }
  SECTION("files:DIR: shard I is the I-th file, with no path") {
    std::ofstream(dir / "per-client" / "a.csv") << "x,label\n1,0\n2,1\n";
    std::ofstream(dir / "per-client" / "b.csv") << "x,label\n1,0\n2,1\n3,1\n";
    const std::string partition = "files:" + (dir / "per-client").string();
    o.partition = partition.c_str();
    o.shard_index = 1;
    o.shard_count = 2;
    REQUIRE(starling_client_set_data_file_ex(a.c, nullptr, &o) == STARLING_OK);
    CHECK(starling_client_data_size(a.c) == 3);
    o.shard_count = 3;
    CHECK(starling_client_set_data_file_ex(a.c, nullptr, &o) == STARLING_ERR_INVALID_ARGUMENT);
    CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("2 data files for 3 clients"));
  }
  SECTION("a memory limit and a struct from another version are refused") {
    o.memory_limit_bytes = 100;
    CHECK(starling_client_set_data_file_ex(a.c, path.c_str(), &o) != STARLING_OK);
    CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("over the limit of 100 bytes"));
    o.memory_limit_bytes = 0;
    o.struct_size = 8;
    CHECK(starling_client_set_data_file_ex(a.c, path.c_str(), &o) == STARLING_ERR_INVALID_ARGUMENT);
    CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("struct_size"));
  }
  std::filesystem::remove_all(dir);
}

// ---- background training (ShadowSync) ----------------------------------------------

namespace {

// The app's side of background training: its own loop of minibatches of `data` on the
// calling thread, until the background thread has ended (or `limit`). Like an app with a
// budget of compute, it makes at most kStepsPerMix steps between two global models
// mixed in (more than the round's tau, 20, so every round gets its steps): a step of
// this model takes microseconds, and unpaced, the steps a round saw went with the
// machine's load (3814 once, on a CI machine compiling beside the test: client-0's
// loss went to 0 on its own data, the next global model's was 829 on the round's, and
// the test's accuracy bound failed).
struct AppLoop {
  static constexpr uint64_t kStepsPerMix = 200;
  uint64_t steps = 0, again = 0, paused = 0;
  int failures = 0;
  bool timedOut = false;
  void run(Client& cl, const Clusters& data, std::chrono::seconds limit = 60s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<std::size_t> pick(0, data.y.size() - 1);
    constexpr std::size_t kBatch = 16;
    std::vector<float> x(kBatch * kDim);
    std::vector<int32_t> y(kBatch);
    uint64_t mixes = 0, sinceMix = 0;
    for (;;) {
      const int state = starling_client_state(cl.c);
      if (state != STARLING_STATE_CONNECTING && state != STARLING_STATE_TRAINING) break;
      if (std::chrono::steady_clock::now() > until) {
        timedOut = true;
        starling_client_stop(cl.c);
        break;
      }
      starling_client_background_stats bs;
      if (starling_client_get_background_stats(cl.c, &bs) == STARLING_OK && bs.mixes != mixes) {
        mixes = bs.mixes;
        sinceMix = 0;
      }
      if (sinceMix >= kStepsPerMix) {
        ++paused;
        std::this_thread::sleep_for(1ms);
        continue;
      }
      for (std::size_t i = 0; i < kBatch; ++i) {
        const std::size_t k = pick(rng);
        std::memcpy(x.data() + i * kDim, data.x.data() + k * kDim, kDim * sizeof(float));
        y[i] = data.y[k];
      }
      float loss = 0;
      const int rc = starling_client_train_step(cl.c, x.data(), y.data(), kBatch, &loss);
      if (rc == STARLING_OK) {
        ++steps;
        ++sinceMix;
      } else if (rc == STARLING_ERR_AGAIN) {
        ++again;
        std::this_thread::sleep_for(1ms);
      } else {
        ++failures;
      }
    }
  }
};

// The accuracy of `params` (the capi-test task's mlp:4-8-3) on `data`.
double accuracyOf(const std::vector<float>& params, const Clusters& data) {
  auto m = model::Model::fromSpec("mlp:4-8-3").value();
  REQUIRE(m.setParams(params).isOk());
  const std::span<const float> p = m.forward(data.x.data(), static_cast<int>(data.y.size()));
  std::size_t right = 0;
  for (std::size_t i = 0; i < data.y.size(); ++i) {
    const float* row = p.data() + i * kClasses;
    right += static_cast<std::size_t>(std::max_element(row, row + kClasses) - row) == std::size_t(data.y[i]) ? 1 : 0;
  }
  return double(right) / double(data.y.size());
}

// Calls `call` until it returns something else than STARLING_ERR_AGAIN (the first
// round has brought the model), for at most ~10 s; returns its last result.
template <typename Call>
int untilModel(Call call) {
  int rc = STARLING_ERR_AGAIN;
  for (int i = 0; i < 5000 && rc == STARLING_ERR_AGAIN; ++i) {
    rc = call();
    if (rc == STARLING_ERR_AGAIN) std::this_thread::sleep_for(2ms);
  }
  return rc;
}

starling_client_background_config backgroundConfig(int variant) {
  starling_client_background_config bg;
  starling_client_background_config_init(&bg);
  bg.variant = variant;
  bg.feature_dim = kDim;
  bg.num_classes = kClasses;
  bg.num_examples = 300;
  return bg;
}

}  // namespace

TEST_CASE("background training: the apps' threads train while the library syncs, S-EASGD and S-MA",
          "[capi][background]") {
  Pki pki;
  constexpr uint64_t kRounds = 4;
  Coordinator coord(pki, smallFederation(kRounds, 2));
  Clusters dataA(300, 1), dataB(300, 2), test(600, 3);
  Client a(pki, "client-0", coord.address());
  Client b(pki, "client-1", coord.address());
  starling_client_background_config bgA = backgroundConfig(STARLING_SYNC_EASGD);
  starling_client_background_config bgB = backgroundConfig(STARLING_SYNC_MA);
  // Not before the model is there: the app's thread is told to try again, at once.
  size_t n = 0;
  REQUIRE(starling_client_start_background(a.c, &bgA) == STARLING_OK);
  REQUIRE(starling_client_start_background(b.c, &bgB) == STARLING_OK);
  CHECK(starling_client_start_background(a.c, &bgA) == STARLING_ERR_STATE);
  CHECK(starling_client_run(a.c) == STARLING_ERR_STATE);

  AppLoop loopA, loopB;
  std::thread appB([&] { loopB.run(b, dataB); });
  loopA.run(a, dataA);
  appB.join();
  REQUIRE_FALSE(loopA.timedOut);
  REQUIRE_FALSE(loopB.timedOut);
  for (Client* cl : {&a, &b}) {
    INFO(cl->lines.all() << "--- coordinator ---\n" << coord.log().all());
    REQUIRE(starling_client_join_background(cl->c) == STARLING_OK);
    CHECK(starling_client_state(cl->c) == STARLING_STATE_DONE);
    starling_client_stats s;
    REQUIRE(starling_client_get_stats(cl->c, &s) == STARLING_OK);
    CHECK(s.rounds_trained == kRounds);
    CHECK(s.rounds_accepted == kRounds);
    starling_client_background_stats bs;
    REQUIRE(starling_client_get_background_stats(cl->c, &bs) == STARLING_OK);
    CHECK(bs.running == 0);
    CHECK(bs.sync_status == STARLING_OK);
    CHECK(bs.rounds_synced == kRounds);
    CHECK(bs.mixes == kRounds);
    CHECK(bs.steps >= kRounds * 20);  // at least tau steps a round
    CHECK(std::isfinite(bs.last_loss));
    CHECK(cl->lines.contains("training complete"));
    // The live model: copied, and it has learned the clusters.
    REQUIRE(starling_client_get_model(cl->c, nullptr, 0, &n) == STARLING_OK);
    REQUIRE(n == 4 * 8 + 8 + 8 * 3 + 3);
    std::vector<float> model(n);
    REQUIRE(starling_client_get_model(cl->c, model.data(), model.size(), &n) == STARLING_OK);
    const double accuracy = accuracyOf(model, test);
    // Chance is 1/3. The live model is the app's, mid-training (0.84 once, before the
    // app's loop was paced, on a fresh-clone CI run with a sanitizer build compiling
    // beside it; above 0.9 when idle).
    CHECK(accuracy > 0.75);
  }
  CHECK(loopA.failures == 0);
  CHECK(loopB.failures == 0);
  CHECK(loopA.steps > 0);
  CHECK(coord.log().contains("client-0"));
}

TEST_CASE("background training: stop() ends it while it waits for the app's steps", "[capi][background][stop]") {
  Pki pki;
  Coordinator coord(pki, smallFederation(3, 1));
  Client a(pki, "client-0", coord.address());
  starling_client_background_config bg = backgroundConfig(STARLING_SYNC_EASGD);
  REQUIRE(starling_client_start_background(a.c, &bg) == STARLING_OK);
  // No steps: once the first round has come, the background thread waits for them.
  size_t n = 0;
  std::vector<float> model(100);
  REQUIRE(untilModel([&] { return starling_client_get_model(a.c, model.data(), model.size(), &n); }) == STARLING_OK);
  const auto started = std::chrono::steady_clock::now();
  std::thread stopper([&] { starling_client_stop(a.c); });
  CHECK(starling_client_join_background(a.c) == STARLING_ERR_STOPPED);
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(starling_client_state(a.c) == STARLING_STATE_IDLE);
  // The model stays readable and trainable (no longer synchronized).
  CHECK(starling_client_get_model(a.c, model.data(), model.size(), &n) == STARLING_OK);
  Clusters data(16, 4);
  float loss = -1;
  CHECK(starling_client_train_step(a.c, data.x.data(), data.y.data(), 16, &loss) == STARLING_OK);
  CHECK(loss > 0);
  // The same client then trains the rest of the task in the foreground, and get_model()
  // is that run's global model again.
  Clusters own(200, 7);
  REQUIRE(starling_client_set_data_f32(a.c, own.x.data(), own.y.data(), own.y.size(), kDim, kClasses) == STARLING_OK);
  INFO(a.lines.all());
  REQUIRE(starling_client_run(a.c) == STARLING_OK);
  CHECK(starling_client_train_step(a.c, data.x.data(), data.y.data(), 16, &loss) == STARLING_ERR_STATE);
  std::vector<float> global(n);
  REQUIRE(starling_client_get_model(a.c, global.data(), global.size(), &n) == STARLING_OK);
  CHECK_FALSE(std::equal(global.begin(), global.end(), model.begin()));
}

TEST_CASE("background training refuses what it cannot use, saying why", "[capi][background][errors]") {
  Pki pki;
  Coordinator coord(pki, smallFederation(2, 1));
  Client a(pki, "client-0", coord.address());
  Clusters data(16, 5);
  CHECK(starling_client_train_step(a.c, data.x.data(), data.y.data(), 16, nullptr) == STARLING_ERR_STATE);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("start_background"));
  CHECK(starling_client_join_background(a.c) == STARLING_ERR_STATE);
  CHECK(starling_client_start_background(a.c, nullptr) == STARLING_ERR_INVALID_ARGUMENT);
  starling_client_background_config bg = backgroundConfig(STARLING_SYNC_EASGD);
  bg.alpha = 1.5f;
  CHECK(starling_client_start_background(a.c, &bg) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("alpha"));
  bg = backgroundConfig(7);
  CHECK(starling_client_start_background(a.c, &bg) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("variant 7"));
  bg = backgroundConfig(STARLING_SYNC_MA);
  bg.struct_size = 8;
  CHECK(starling_client_start_background(a.c, &bg) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("struct_size"));

  // Examples of 5 features for a model of 4: the background thread ends with TASK.
  bg = backgroundConfig(STARLING_SYNC_MA);
  bg.feature_dim = 5;
  REQUIRE(starling_client_start_background(a.c, &bg) == STARLING_OK);
  CHECK(starling_client_join_background(a.c) == STARLING_ERR_TASK);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("5 features"));
  CHECK(starling_client_state(a.c) == STARLING_STATE_FAILED);
  starling_client_background_stats bs;
  REQUIRE(starling_client_get_background_stats(a.c, &bs) == STARLING_OK);
  CHECK(bs.sync_status == STARLING_ERR_TASK);
  CHECK_THAT(std::string(bs.last_error), Catch::Contains("5 features"));
  CHECK(starling_client_train_step(a.c, data.x.data(), data.y.data(), 16, nullptr) == STARLING_ERR_AGAIN);
}

TEST_CASE("background training: a label out of range is refused before the step", "[capi][background][errors]") {
  Pki pki;
  Coordinator coord(pki, smallFederation(2, 1));
  Client a(pki, "client-0", coord.address());
  starling_client_background_config bg = backgroundConfig(STARLING_SYNC_EASGD);
  REQUIRE(starling_client_start_background(a.c, &bg) == STARLING_OK);
  Clusters data(16, 6);
  data.y[3] = 3;
  CHECK(untilModel([&] { return starling_client_train_step(a.c, data.x.data(), data.y.data(), 16, nullptr); }) ==
        STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("label 3 of example 3"));
  starling_client_stop(a.c);
  CHECK(starling_client_join_background(a.c) == STARLING_ERR_STOPPED);
}

// ---- sparse rows ---------------------------------------------------------------------

namespace {

constexpr std::size_t kSparseDim = 600;
constexpr int kSparseClasses = 3;

// Sparse examples (tests/support/sparse_data.hpp: 5 of 60 evenly spaced features and
// their neighbours, the rest zeros) as the row-major float arrays an app holds.
struct SparseArrays {
  std::vector<float> x;
  std::vector<int32_t> y;
  SparseArrays(std::size_t n, uint64_t seed) : x(n * kSparseDim), y(n) {
    const data::Dataset d = test::sparseData(n, kSparseDim, 60, 5, kSparseClasses, seed);
    std::vector<uint32_t> all(n);
    for (uint32_t i = 0; i < n; ++i)
      all[i] = i;
    d.gather(all, x);
    std::copy(d.labels().begin(), d.labels().end(), y.begin());
  }
  // The rows a client offering buckets of `bucket` rows covers, from the arrays: every
  // row of each bucket holding a feature with a non-zero value in some example.
  std::vector<uint32_t> covered(uint32_t bucket) const {
    std::vector<bool> touched(kSparseDim / bucket + 1, false);
    for (std::size_t k = 0; k < x.size(); ++k)
      if (x[k] != 0.0f) touched[(k % kSparseDim) / bucket] = true;
    std::vector<uint32_t> rows;
    for (uint32_t j = 0; j < kSparseDim; ++j)
      if (touched[j / bucket]) rows.push_back(j);
    return rows;
  }
  // A LIBSVM file of the examples: 1-based indices, 0-based classes. The first line ends
  // in the width marker `600:0` (a zero: it touches no row), so the loader infers 600
  // features.
  void writeLibsvm(const std::string& path) const {
    std::ofstream out(path);
    for (std::size_t i = 0; i < y.size(); ++i) {
      out << y[i];
      for (std::size_t j = 0; j < kSparseDim; ++j)
        if (const float v = x[i * kSparseDim + j]; v != 0.0f) out << ' ' << j + 1 << ':' << v;
      if (i == 0) out << ' ' << kSparseDim << ":0";
      out << '\n';
    }
  }
};

std::vector<uint32_t> sparseRowsOf(Client& cl) {
  size_t n = 0;
  REQUIRE(starling_client_get_sparse_rows(cl.c, nullptr, 0, &n) == STARLING_OK);
  std::vector<uint32_t> rows(n);
  REQUIRE(starling_client_get_sparse_rows(cl.c, rows.data(), rows.size(), &n) == STARLING_OK);
  return rows;
}

std::vector<float> modelOf(Client& cl) {
  size_t n = 0;
  REQUIRE(starling_client_get_model(cl.c, nullptr, 0, &n) == STARLING_OK);
  std::vector<float> model(n);
  REQUIRE(starling_client_get_model(cl.c, model.data(), model.size(), &n) == STARLING_OK);
  return model;
}

}  // namespace

TEST_CASE("sparse rows: clients offer their rows in buckets, train the compact model and the coordinator takes it",
          "[capi][sparse-rows]") {
  Pki pki;
  constexpr uint64_t kRounds = 3;
  const auto dir = std::filesystem::temp_directory_path() / "starling-capi-sparse-rows";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "federation.db").string();
  RunningFederation coord(pki, smallEngine(kRounds, 3, 10, 0.5),
                          smallTask("capi-sparse", "linear:600-" + std::to_string(kSparseClasses), 8), 3, db);
  const SparseArrays data0(200, 1), data1(200, 2), data2(200, 3);
  Client a(pki, "client-0", coord.address());
  Client b(pki, "client-1", coord.address());
  Client d(pki, "client-2", coord.address());
  // client-0: a LIBSVM file, its rows themselves; client-1: float arrays, buckets of 4
  // rows; client-2: the whole model.
  const std::string path = (dir / "client-0.libsvm").string();
  data0.writeLibsvm(path);
  REQUIRE(starling_client_set_data_file(a.c, path.c_str(), nullptr, nullptr, nullptr) == STARLING_OK);
  REQUIRE(starling_client_set_sparse_rows(a.c, 1) == STARLING_OK);
  REQUIRE(starling_client_set_data_f32(b.c, data1.x.data(), data1.y.data(), data1.y.size(), kSparseDim,
                                       kSparseClasses) == STARLING_OK);
  REQUIRE(starling_client_set_sparse_rows(b.c, 4) == STARLING_OK);
  REQUIRE(starling_client_set_data_f32(d.c, data2.x.data(), data2.y.data(), data2.y.size(), kSparseDim,
                                       kSparseClasses) == STARLING_OK);
  // client-2 also without TLS resumption: its servers and TLS context are made again.
  REQUIRE(starling_client_set_tls_resumption(d.c, 0) == STARLING_OK);

  runAll({&a, &b, &d}, coord);
  INFO("--- coordinator ---\n" << coord.log().all());
  starling_client_stats s[3];
  Client* clients[3] = {&a, &b, &d};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(starling_client_get_stats(clients[i]->c, &s[i]) == STARLING_OK);
    CHECK(s[i].rounds_trained == kRounds);
    CHECK(s[i].rounds_accepted == kRounds);
    CHECK(s[i].held_round == kRounds - 1);
    CHECK(s[i].last_loss < std::log(3.0));  // below chance: it learned something
  }

  // The rows each offered, as the test computes them from the data it gave.
  const std::vector<uint32_t> rows0 = data0.covered(1), rows1 = data1.covered(4);
  CHECK(rows0.size() > 50);
  CHECK(rows0.size() < kSparseDim / 2);
  CHECK(rows1.size() > rows0.size());
  CHECK(rows1.size() < kSparseDim);
  CHECK(rows1.size() % 4 == 0);  // whole buckets of 4 (600 is a multiple of 4)
  CHECK(sparseRowsOf(a) == rows0);
  CHECK(sparseRowsOf(b) == rows1);
  CHECK(sparseRowsOf(d).empty());
  CHECK(a.lines.contains("offering " + std::to_string(rows0.size()) + " rows in buckets of 1"));
  CHECK(b.lines.contains("offering " + std::to_string(rows1.size()) + " rows in buckets of 4"));
  CHECK(a.lines.contains("training the compact model linear:" + std::to_string(rows0.size()) + "-3"));
  CHECK(coord.log().contains("client-0 trains the compact model of " + std::to_string(rows0.size()) + " rows"));
  CHECK(coord.log().contains("client-1 trains the compact model of " + std::to_string(rows1.size()) + " rows"));
  CHECK_FALSE(coord.log().contains("client-2 trains the compact model"));

  // The compact models are the whole model at their rows: linear:N-3 holds W {3, N}
  // then the bias, so W'[o][k] = W[o][rows[k]]. Every client holds the same round.
  const std::vector<float> full = modelOf(d);
  REQUIRE(full.size() == kSparseDim * 3 + 3);
  for (Client* cl : {&a, &b}) {
    const std::vector<uint32_t> rows = sparseRowsOf(*cl);
    const std::vector<float> compact = modelOf(*cl);
    REQUIRE(compact.size() == rows.size() * 3 + 3);
    std::size_t differ = 0;
    for (std::size_t o = 0; o < 3; ++o) {
      for (std::size_t k = 0; k < rows.size(); ++k)
        differ += compact[o * rows.size() + k] != full[o * kSparseDim + rows[k]] ? 1 : 0;
      differ += compact[3 * rows.size() + o] != full[3 * kSparseDim + o] ? 1 : 0;
    }
    CHECK(differ == 0);
  }
  // The whole model moved to client-2, the rows' parameters to client-0 (measured:
  // 6,880 bytes of RoundAssign against 14,816 over the three rounds).
  CHECK(s[0].bytes_down * 3 < s[2].bytes_down * 2);

  // The coordinator recorded each offer (clients.row_set, clients.row_bucket).
  coordinator::StoreOptions ro;
  ro.readOnly = true;
  auto reader = coordinator::Store::open(db, ro);
  REQUIRE(reader.isOk());
  auto records = (*reader)->clients();
  REQUIRE(records.isOk());
  REQUIRE(records->size() == 3);
  for (const coordinator::ClientRecord& r : *records) {
    INFO(r.id);
    if (r.id == "client-2") {
      CHECK(r.rowSet.empty());
      CHECK(r.rowBucket == 0);
      continue;
    }
    const uint32_t bucket = r.id == "client-0" ? 1 : 4;
    CHECK(r.rowBucket == bucket);
    auto buckets = compression::decodeRowSet(r.rowSet, static_cast<uint32_t>((kSparseDim + bucket - 1) / bucket));
    REQUIRE(buckets.isOk());
    std::vector<uint32_t> expected;
    for (uint32_t j : r.id == "client-0" ? rows0 : rows1)
      if (expected.empty() || expected.back() != j / bucket) expected.push_back(j / bucket);
    CHECK(std::vector<uint32_t>(buckets->rows().begin(), buckets->rows().end()) == expected);
  }
  reader->reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("sparse rows the coordinator does not take: the client trains the whole model and says so",
          "[capi][sparse-rows]") {
  Pki pki;
  coordinator::TaskConfig task = smallTask("capi-sparse-off", "linear:600-3", 8);
  task.sparseRows = false;
  Coordinator coord(pki, smallEngine(2, 1, 10, 0.5), task);
  const SparseArrays data(100, 4);
  Client a(pki, "client-0", coord.address());
  REQUIRE(starling_client_set_data_f32(a.c, data.x.data(), data.y.data(), data.y.size(), kSparseDim, kSparseClasses) ==
          STARLING_OK);
  REQUIRE(starling_client_set_sparse_rows(a.c, 4) == STARLING_OK);
  const int rc = starling_client_run(a.c);
  INFO(a.lines.all() << "--- coordinator ---\n" << coord.log().all());
  REQUIRE(rc == STARLING_OK);
  starling_client_stats s;
  REQUIRE(starling_client_get_stats(a.c, &s) == STARLING_OK);
  CHECK(s.rounds_accepted == 2);
  CHECK(sparseRowsOf(a).empty());
  CHECK(modelOf(a).size() == kSparseDim * 3 + 3);
  CHECK(a.lines.contains("the coordinator did not take the " + std::to_string(data.covered(4).size()) +
                         " rows this client offered: training the whole model linear:600-3"));
  CHECK(coord.log().contains("client-0 offered its rows; it trains the whole model: train.sparse-rows is off"));
}

TEST_CASE("sparse rows over data that does not fit the model, or touches no feature, fail with STARLING_ERR_TASK",
          "[capi][sparse-rows][task]") {
  Pki pki;
  Coordinator coord(pki, smallEngine(1, 1, 10, 0.5), smallTask("capi-sparse-task", "linear:600-3", 8));
  Client a(pki, "client-0", coord.address());
  REQUIRE(starling_client_set_sparse_rows(a.c, 1) == STARLING_OK);
  std::size_t dim = kSparseDim;
  std::string why;
  std::vector<float> x;
  SECTION("601 features for a model of 600") {
    dim = kSparseDim + 1;
    x.assign(20 * dim, 0.0f);
    for (std::size_t i = 0; i < 20; ++i)
      x[i * dim + i] = 1.0f;
    why = "601 features";
  }
  SECTION("no non-zero value: nothing to offer") {
    x.assign(20 * dim, 0.0f);
    why = "touches no feature";
  }
  std::vector<int32_t> y(20, 1);
  REQUIRE(starling_client_set_data_f32(a.c, x.data(), y.data(), 20, dim, kSparseClasses) == STARLING_OK);
  CHECK(starling_client_run(a.c) == STARLING_ERR_TASK);
  CHECK(starling_client_state(a.c) == STARLING_STATE_FAILED);
  INFO(a.lines.all());
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains(why));
}

TEST_CASE("set_sparse_rows and get_sparse_rows refuse what they cannot do, saying why", "[capi][sparse-rows][errors]") {
  Pki pki;
  size_t n = 0;
  uint32_t rows[4];
  CHECK(starling_client_set_sparse_rows(nullptr, 1) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK(starling_client_get_sparse_rows(nullptr, rows, 4, &n) == STARLING_ERR_INVALID_ARGUMENT);
  Client a(pki, "client-0", deadAddress());
  CHECK(starling_client_set_sparse_rows(a.c, (1u << 30) + 1) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("bucket of 1073741825 rows"));
  CHECK(starling_client_set_sparse_rows(a.c, 1u << 30) == STARLING_OK);
  CHECK(std::string(starling_client_last_error(a.c)).empty());
  CHECK(starling_client_get_sparse_rows(a.c, nullptr, 4, &n) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK(starling_client_get_sparse_rows(a.c, rows, 4, nullptr) == STARLING_ERR_INVALID_ARGUMENT);
  CHECK(starling_client_get_sparse_rows(a.c, rows, 4, &n) == STARLING_ERR_STATE);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("run the client first"));

  // Background training cannot offer rows: refused while they are on, and they cannot
  // be turned on while it runs.
  starling_client_background_config bg = backgroundConfig(STARLING_SYNC_EASGD);
  CHECK(starling_client_start_background(a.c, &bg) == STARLING_ERR_STATE);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("cannot offer sparse rows"));
  REQUIRE(starling_client_set_sparse_rows(a.c, 0) == STARLING_OK);
  REQUIRE(starling_client_start_background(a.c, &bg) == STARLING_OK);
  CHECK(starling_client_set_sparse_rows(a.c, 4) == STARLING_ERR_STATE);
  CHECK_THAT(starling_client_last_error(a.c), Catch::Contains("not while background training"));
  CHECK(starling_client_get_sparse_rows(a.c, rows, 4, &n) == STARLING_OK);
  CHECK(n == 0);  // the live model is the whole model
  starling_client_stop(a.c);
  CHECK(starling_client_join_background(a.c) == STARLING_ERR_STOPPED);
  CHECK(starling_client_set_sparse_rows(a.c, 4) == STARLING_OK);

  // A client that failed to be created only explains itself.
  auto kp = pki.client("client-1");
  starling_client_config config;
  starling_client_config_init(&config);
  config.coordinator = "127.0.0.1:1";
  config.ca_pem = pki.ca.certPem.c_str();
  config.cert_pem = kp.certPem.c_str();
  config.key_pem = "not a key";
  config.log_level = STARLING_LOG_OFF;
  starling_client* broken = nullptr;
  REQUIRE(starling_client_create(&config, &broken) != STARLING_OK);
  CHECK(starling_client_set_sparse_rows(broken, 1) == STARLING_ERR_STATE);
  CHECK_THAT(starling_client_last_error(broken), Catch::Contains("failed to be created"));
  starling_client_destroy(broken);
}
