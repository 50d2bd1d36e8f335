// The C API of starling_client.h over client::Participant.
//
// A starling_client owns its TLS context, logger, data set and (after a run) the
// Participant of that run. run() makes a fresh io_context and Participant on the
// caller's thread and runs them to completion. Other threads see the client only
// through stop(), state() and get_stats(): they touch `shared_` under `mu_`, and
// the run publishes its statistics there from its own thread (a periodic timer on
// the run's io_context copies Participant::stats(), which only that thread writes).
//
// Background training (ShadowSync, client/shadow_sync.hpp) runs the same federation
// on a thread of its own (`sync`), with a ShadowSync as the Participant's local work.
// That thread writes only what is under `mu` (state, stats, its outcome) and the
// Participant it owns while it runs; the owner thread reaches the live model through
// the ShadowSync, whose own lock guards it.
//
// No exception crosses the C boundary: every entry point catches and reports
// STARLING_ERR_INTERNAL with the exception's message.

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "starling/client/participant.hpp"
#include "starling/client/shadow_sync.hpp"
#include "starling/data/dataset.hpp"
#include "starling/data/load.hpp"
#include "starling/data/loaders.hpp"
#include "starling/net/connection.hpp"
#include "starling/net/tls_context.hpp"
#include "starling/util/log.hpp"

#include "starling_client.h"

namespace {

using namespace starling;

constexpr std::chrono::milliseconds kStatsPeriod{100};
constexpr uint32_t kMaxRowBucket = 1u << 30;  // as starling-client --sparse-rows
constexpr const char* kVersion = STARLING_VERSION;

// Forwards log lines to the application's callback. spdlog serializes calls through
// the sink's mutex, so the callback is never entered twice at once.
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  CallbackSink(starling_log_fn fn, void* user) : fn_(fn), user_(user) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string line(msg.payload.data(), msg.payload.size());
    int level = static_cast<int>(msg.level);
    if (msg.level == spdlog::level::critical) level = STARLING_LOG_ERROR;
    fn_(user_, level, line.c_str());
  }
  void flush_() override {}

 private:
  starling_log_fn fn_;
  void* user_;
};

int codeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return STARLING_OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnsupported:
      return STARLING_ERR_INVALID_ARGUMENT;
    case StatusCode::kMalformed:
      return STARLING_ERR_MALFORMED;
    case StatusCode::kNotFound:
      return STARLING_ERR_NOT_FOUND;
    case StatusCode::kUnauthenticated:
      return STARLING_ERR_UNAUTHENTICATED;
    case StatusCode::kTimeout:
    case StatusCode::kClosed:
    case StatusCode::kIo:
      return STARLING_ERR_IO;
    case StatusCode::kInternal:
      return STARLING_ERR_INTERNAL;
  }
  return STARLING_ERR_INTERNAL;
}

starling_client_stats toC(const client::ParticipantStats& s) {
  starling_client_stats c{};
  c.rounds_trained = s.roundsTrained;
  c.rounds_accepted = s.roundsAccepted;
  c.rounds_rejected = s.roundsRejected;
  c.connections = s.connections;
  c.resyncs = s.resyncs;
  c.bytes_up = s.bytesUp;
  c.bytes_down = s.bytesDown;
  c.held_round = s.heldRound;
  c.model_checksum = s.checksum;
  c.last_loss = s.lastLoss;
  return c;
}

// The PEM text of one credential: the inline text when given, else the file's contents.
// The error names the file and the reason, e.g. "cannot read 'c.crt': No such file or directory".
Result<std::string> pemOf(const char* pem, const char* file, const char* what) {
  if (pem != nullptr) return std::string(pem);
  if (file == nullptr)
    return Status(StatusCode::kInvalidArgument,
                  std::string("the configuration gives neither ") + what + "_file nor " + what + "_pem");
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    return Status(
        err == ENOENT ? StatusCode::kNotFound : StatusCode::kIo,
        std::string("cannot read '") + file + "' (" + what + "): " + (err != 0 ? std::strerror(err) : "cannot open"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIo, std::string("cannot read '") + file + "' (" + what + ")");
  return text.str();
}

}  // namespace

struct starling_client {
  // Set by create; read-only afterwards.
  bool usable = false;
  std::shared_ptr<const net::TlsContext> tls;
  // What made tls and the servers, for starling_client_set_tls_resumption().
  std::string coordinators, serverName;
  net::TlsIdentity identity;
  client::ParticipantOptions options;
  std::shared_ptr<spdlog::logger> log;

  // Owner thread only (and, while it runs, `participant` and `placeholder` the
  // background thread's).
  std::string error;
  std::optional<data::Dataset> dataset;
  std::unique_ptr<client::Participant> participant;  // of the last run, kept for get_model()
  bool running = false;
  std::thread sync;                          // background training's thread, until joined
  std::optional<data::Dataset> placeholder;  // the background Participant's shard (the data stay with the app)

  // Shared with stop(), state(), get_stats() and get_background_stats(), under mu.
  mutable std::mutex mu;
  int state = STARLING_STATE_IDLE;
  starling_client_stats stats{};
  asio::io_context* io = nullptr;  // the run's loop while run() is in progress
  bool stopRequested = false;
  std::shared_ptr<client::ShadowSync> shadow;  // background training's, from start to the next start
  bool syncRunning = false;
  int syncCode = STARLING_OK;  // how the background thread ended
  std::string syncError;

  int fail(int code, std::string message) {
    error = std::move(message);
    return code;
  }
  int fail(const Status& st) { return fail(codeFor(st.code()), st.message()); }
  void setState(int s) {
    std::lock_guard lock(mu);
    state = s;
  }
  void publish(const client::ParticipantStats& s) {
    std::lock_guard lock(mu);
    stats = toC(s);
    if (state == STARLING_STATE_CONNECTING && s.connections > 0) state = STARLING_STATE_TRAINING;
  }
};

namespace {

// Runs body, turning an escaping exception into STARLING_ERR_INTERNAL.
template <typename Body>
int guarded(starling_client* c, Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    if (c == nullptr) return STARLING_ERR_INTERNAL;
    try {
      return c->fail(STARLING_ERR_INTERNAL, "out of memory");
    } catch (...) {
      return STARLING_ERR_INTERNAL;
    }
  } catch (const std::exception& e) {
    if (c == nullptr) return STARLING_ERR_INTERNAL;
    try {
      return c->fail(STARLING_ERR_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
      return STARLING_ERR_INTERNAL;
    }
  } catch (...) {
    return c != nullptr ? c->fail(STARLING_ERR_INTERNAL, "internal error: unknown exception") : STARLING_ERR_INTERNAL;
  }
}

// Checks that the client can take owner-thread calls that change it.
int checkIdle(starling_client* c) {
  if (!c->usable) return c->fail(STARLING_ERR_STATE, "this client failed to be created: " + c->error);
  if (c->running) return c->fail(STARLING_ERR_STATE, "not while starling_client_run() is in progress");
  if (c->sync.joinable())
    return c->fail(STARLING_ERR_STATE,
                   "not while background training is in progress (starling_client_join_background() first)");
  return STARLING_OK;
}

// The coordinator list and TLS context from the client's addresses, identity and these
// options (at create, and again when resumption is switched).
int useServers(starling_client* c, const net::TlsOptions& tlsOptions) {
  auto servers = client::serverList(c->coordinators, c->identity, c->serverName, tlsOptions);
  if (!servers) return c->fail(servers.status().withContext("coordinator"));
  c->tls = std::move(servers->tls);
  c->options.coordinator = servers->first;
  c->options.alternates = std::move(servers->alternates);
  return STARLING_OK;
}

// How a federation run ended: a STARLING_* code and, unless STARLING_OK, why.
struct Outcome {
  int code = STARLING_OK;
  std::string message;
};

// Runs the federation over `shard` with `options` to its end on the calling thread (the
// owner's for run(), the background thread for ShadowSync): state, stats and the loop
// go through `mu`; the client's other fields are not touched but `participant`.
Outcome runFederation(starling_client* client, const data::Dataset& shard, client::ParticipantOptions options) {
  client->participant.reset();
  client->participant = std::make_unique<client::Participant>(shard, std::move(options), client->log);
  // The loop's pending handlers (and the Participant's suspended coroutine frames)
  // are destroyed with it, before the Participant they refer to.
  asio::io_context io(1);
  {
    std::lock_guard lock(client->mu);
    if (client->stopRequested) {
      client->stopRequested = false;
      client->state = STARLING_STATE_IDLE;
      return {STARLING_ERR_STOPPED, "stopped by starling_client_stop() before it started"};
    }
    client->io = &io;
    client->state = STARLING_STATE_CONNECTING;
    client->stats = starling_client_stats{};
  }
  struct Reset {
    starling_client* c;
    ~Reset() {
      std::lock_guard lock(c->mu);
      c->io = nullptr;
      c->stopRequested = false;
    }
  } reset{client};

  client::Participant& participant = *client->participant;
  std::optional<Status> outcome;
  std::exception_ptr error;
  bool finished = false;
  asio::steady_timer ticker(io);
  std::function<void()> tick = [&] {
    client->publish(participant.stats());
    ticker.expires_after(kStatsPeriod);
    ticker.async_wait([&](const std::error_code& ec) {
      // cancel() cannot recall a wait that has already completed and is queued to
      // run: without the flag, that handler would re-arm the timer and keep io.run()
      // from ever returning once the run has finished.
      if (!ec && !finished) tick();
    });
  };
  tick();

  asio::co_spawn(io, participant.run(io.get_executor(), client->tls), [&](std::exception_ptr e, Status st) {
    error = e;
    outcome.emplace(std::move(st));
    finished = true;
    ticker.cancel();
  });
  io.run();
  client->publish(participant.stats());
  if (error) std::rethrow_exception(error);

  bool stopped = !outcome;  // io.run() returned without the coroutine finishing: stop() was called
  if (!stopped) {
    // Background training's wait for steps ends with kClosed on a stop.
    std::lock_guard lock(client->mu);
    stopped = client->stopRequested && !outcome->isOk();
  }
  if (stopped) {
    client->setState(STARLING_STATE_IDLE);
    return {STARLING_ERR_STOPPED, "stopped by starling_client_stop()"};
  }
  if (!*outcome) {
    client->setState(STARLING_STATE_FAILED);
    // The Participant reports a task it cannot train as kInvalidArgument.
    int code = outcome->code() == StatusCode::kInvalidArgument ? STARLING_ERR_TASK : codeFor(outcome->code());
    return {code, outcome->message()};
  }
  client->setState(STARLING_STATE_DONE);
  return {};
}

int setData(starling_client* c, Result<data::Dataset> ds, const char* what) {
  if (!ds) return c->fail(ds.status().withContext(what));
  c->participant.reset();  // it borrows the old data set
  c->dataset.emplace(std::move(*ds));
  c->error.clear();
  return STARLING_OK;
}

// Background training's ShadowSync, or null (before any start_background).
std::shared_ptr<client::ShadowSync> shadowOf(const starling_client* c) {
  std::lock_guard lock(c->mu);
  return c->shadow;
}

int checkArrays(starling_client* c, const void* features, const int32_t* labels, size_t count, size_t dim,
                int numClasses) {
  if (count > 0 && (features == nullptr || labels == nullptr))
    return c->fail(STARLING_ERR_INVALID_ARGUMENT, "features and labels must not be NULL");
  if (count == 0) return c->fail(STARLING_ERR_INVALID_ARGUMENT, "the data set is empty (count is 0)");
  if (dim == 0) return c->fail(STARLING_ERR_INVALID_ARGUMENT, "feature_dim must be at least 1");
  if (numClasses < 2) return c->fail(STARLING_ERR_INVALID_ARGUMENT, "num_classes must be at least 2");
  if (count > SIZE_MAX / dim / sizeof(float))
    return c->fail(STARLING_ERR_INVALID_ARGUMENT, "count * feature_dim is too large");
  return STARLING_OK;
}

}  // namespace

extern "C" {

void starling_client_config_init(starling_client_config* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof *config);
  config->handshake_timeout_ms = 10'000;
  config->backoff_initial_ms = 200;
  config->backoff_max_ms = 5'000;
  config->give_up_after_ms = 300'000;
  config->log_level = STARLING_LOG_INFO;
}

int starling_client_create(const starling_client_config* config, starling_client** out) {
  if (out == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  starling_client* c = new (std::nothrow) starling_client;
  if (c == nullptr) return STARLING_ERR_INTERNAL;
  *out = c;
  c->state = STARLING_STATE_FAILED;
  return guarded(c, [&]() -> int {
    if (config == nullptr) return c->fail(STARLING_ERR_INVALID_ARGUMENT, "the configuration is NULL");
    if (config->coordinator == nullptr)
      return c->fail(STARLING_ERR_INVALID_ARGUMENT, "the configuration gives no coordinator (HOST:PORT)");
    const std::string id = config->client_id != nullptr ? config->client_id : "client";

    if (config->log != nullptr) {
      c->log = std::make_shared<spdlog::logger>(id, std::make_shared<CallbackSink>(config->log, config->log_user));
    } else {
      auto log = makeLogger(id, "info");
      if (!log) return c->fail(log.status());
      c->log = std::move(*log);
    }
    if (config->log_level < STARLING_LOG_TRACE || config->log_level > STARLING_LOG_OFF)
      return c->fail(STARLING_ERR_INVALID_ARGUMENT,
                     "log_level must be a STARLING_LOG_* value, not " + std::to_string(config->log_level));
    c->log->set_level(static_cast<spdlog::level::level_enum>(config->log_level));

    auto ca = pemOf(config->ca_pem, config->ca_file, "ca");
    if (!ca) return c->fail(ca.status());
    auto cert = pemOf(config->cert_pem, config->cert_file, "cert");
    if (!cert) return c->fail(cert.status());
    auto key = pemOf(config->key_pem, config->key_file, "key");
    if (!key) return c->fail(key.status());
    c->coordinators = config->coordinator;
    c->serverName = config->server_name != nullptr ? config->server_name : "";
    c->identity = {std::move(*ca), std::move(*cert), std::move(*key), {}};
    if (int rc = useServers(c, net::TlsOptions{}); rc != STARLING_OK) return rc;
    c->options.id = id;
    c->options.seed = config->seed;
    c->options.limits.handshakeTimeout = std::chrono::milliseconds(config->handshake_timeout_ms);
    if (config->backoff_initial_ms > 0)
      c->options.backoffInitial = std::chrono::milliseconds(config->backoff_initial_ms);
    if (config->backoff_max_ms > 0) c->options.backoffMax = std::chrono::milliseconds(config->backoff_max_ms);
    if (config->give_up_after_ms > 0) c->options.giveUpAfter = std::chrono::milliseconds(config->give_up_after_ms);
    if (c->options.backoffMax < c->options.backoffInitial) c->options.backoffMax = c->options.backoffInitial;
    c->usable = true;
    c->state = STARLING_STATE_IDLE;
    return STARLING_OK;
  });
}

void starling_client_destroy(starling_client* client) {
  if (client == nullptr) return;
  if (client->sync.joinable()) {
    starling_client_stop(client);
    client->sync.join();
  }
  // The Participant borrows the data set and the logger: it goes first.
  client->participant.reset();
  delete client;
}

const char* starling_client_last_error(const starling_client* client) {
  if (client == nullptr) return "no client (NULL handle, or out of memory when creating it)";
  return client->error.c_str();
}

const char* starling_client_version(void) {
  return kVersion;
}

int starling_client_set_data_u8(starling_client* client, const uint8_t* features, const int32_t* labels, size_t count,
                                size_t feature_dim, int num_classes, float scale) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (int rc = checkArrays(client, features, labels, count, feature_dim, num_classes); rc != STARLING_OK) return rc;
    if (!std::isfinite(scale) || scale == 0.0f)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT, "scale must be finite and non-zero");
    std::vector<uint8_t> x(features, features + count * feature_dim);
    std::vector<int32_t> y(labels, labels + count);
    return setData(client, data::Dataset::fromBytes(std::move(x), std::move(y), feature_dim, num_classes, scale),
                   "the data arrays");
  });
}

int starling_client_set_data_f32(starling_client* client, const float* features, const int32_t* labels, size_t count,
                                 size_t feature_dim, int num_classes) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (int rc = checkArrays(client, features, labels, count, feature_dim, num_classes); rc != STARLING_OK) return rc;
    std::vector<float> x(features, features + count * feature_dim);
    std::vector<int32_t> y(labels, labels + count);
    return setData(client, data::Dataset::fromFloats(std::move(x), std::move(y), feature_dim, num_classes),
                   "the data arrays");
  });
}

int starling_client_set_data_f32_targets(starling_client* client, const float* features, const float* targets,
                                         size_t count, size_t feature_dim) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (targets == nullptr && count > 0)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT, "features and targets must not be NULL");
    // Two classes stand in for checkArrays' class check: a regression has none.
    static const int32_t kSentinel = 0;
    if (int rc = checkArrays(client, features, &kSentinel, count, feature_dim, 2); rc != STARLING_OK) return rc;
    std::vector<float> x(features, features + count * feature_dim);
    std::vector<float> t(targets, targets + count);
    return setData(client, data::Dataset::fromFloatTargets(std::move(x), std::move(t), feature_dim), "the data arrays");
  });
}

void starling_client_data_options_init(starling_client_data_options* options) {
  if (options == nullptr) return;
  *options = starling_client_data_options{};
  options->struct_size = sizeof(starling_client_data_options);
  options->header = -1;
  options->categorical_buckets = 16;
  options->partition_seed = 1;
}

int starling_client_set_data_file(starling_client* client, const char* path, const char* format, const char* label,
                                  const char* task) {
  starling_client_data_options options;
  starling_client_data_options_init(&options);
  options.format = format;
  options.label = label;
  options.task = task;
  return starling_client_set_data_file_ex(client, path, &options);
}

int starling_client_set_data_file_ex(starling_client* client, const char* path,
                                     const starling_client_data_options* given) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    starling_client_data_options o;
    starling_client_data_options_init(&o);
    if (given != nullptr) {
      // This version's struct is the only one so far; later ones append fields.
      if (given->struct_size != sizeof(starling_client_data_options))
        return client->fail(STARLING_ERR_INVALID_ARGUMENT, "options.struct_size is " +
                                                               std::to_string(given->struct_size) + ", not " +
                                                               std::to_string(sizeof(starling_client_data_options)) +
                                                               " (call starling_client_data_options_init first)");
      o = *given;
    }
    const std::string partition = o.partition == nullptr ? "iid" : o.partition;
    const bool files = !data::filesDirOf(partition).empty();
    if (path == nullptr && !files) return client->fail(STARLING_ERR_INVALID_ARGUMENT, "path must not be NULL");
    data::DataOptions options;
    const std::string formatName = o.format == nullptr ? "auto" : o.format;
    const auto parsedFormat = data::parseDataFormat(formatName);
    if (!parsedFormat)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT,
                          "format '" + formatName + "' is not one of auto, csv, libsvm, npy, npz, idx");
    options.format = *parsedFormat;
    const std::string taskName = o.task == nullptr ? "classification" : o.task;
    const auto kind = data::parseTaskKind(taskName);
    if (!kind)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT,
                          "task '" + taskName + "' is not one of classification, binary, regression");
    options.task = *kind;
    options.label = o.label == nullptr ? "" : o.label;
    if (o.header < -1 || o.header > 1)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT,
                          "options.header is " + std::to_string(o.header) + ", not -1 (detect), 0 or 1");
    if (o.header >= 0) options.header = o.header == 1;
    if (o.categorical != nullptr) options.categorical = data::splitList(o.categorical);
    if (o.categorical_buckets < 1 || o.categorical_buckets > (1u << 20))
      return client->fail(
          STARLING_ERR_INVALID_ARGUMENT,
          "options.categorical_buckets is " + std::to_string(o.categorical_buckets) + ", not in 1 .. 1048576");
    options.categoricalBuckets = o.categorical_buckets;
    options.memoryLimitBytes = static_cast<std::size_t>(o.memory_limit_bytes);
    return setData(client,
                   data::loadDataShard(path == nullptr ? "" : path, options, o.shard_index, o.shard_count, partition,
                                       o.partition_seed),
                   "the data file");
  });
}

int starling_client_set_data_callback(starling_client* client, size_t count, size_t feature_dim, int num_classes,
                                      starling_fill_fn fill, void* user) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (fill == nullptr) return client->fail(STARLING_ERR_INVALID_ARGUMENT, "the fill callback is NULL");
    // Any non-NULL pointer passes checkArrays' NULL test; the arrays are ours.
    static const int32_t kSentinel = 0;
    if (int rc = checkArrays(client, &kSentinel, &kSentinel, count, feature_dim, num_classes); rc != STARLING_OK)
      return rc;
    std::vector<float> x(count * feature_dim);
    std::vector<int32_t> y(count);
    for (size_t i = 0; i < count; ++i) {
      if (int rc = fill(user, i, x.data() + i * feature_dim, &y[i]); rc != 0)
        return client->fail(STARLING_ERR_CALLBACK,
                            "the fill callback returned " + std::to_string(rc) + " for example " + std::to_string(i));
    }
    return setData(client, data::Dataset::fromFloats(std::move(x), std::move(y), feature_dim, num_classes),
                   "the examples from the fill callback");
  });
}

int starling_client_set_data_idx(starling_client* client, const char* images_path, const char* labels_path,
                                 int num_classes) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (images_path == nullptr || labels_path == nullptr)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT, "images_path and labels_path must not be NULL");
    if (num_classes < 0) return client->fail(STARLING_ERR_INVALID_ARGUMENT, "num_classes must be 0 (infer) or more");
    auto ds = data::loadIdx(images_path, labels_path, num_classes);
    if (!ds) return client->fail(ds.status());
    return setData(client, std::move(ds), "IDX files");
  });
}

size_t starling_client_data_size(const starling_client* client) {
  return client != nullptr && client->dataset ? client->dataset->size() : 0;
}

int starling_client_run(starling_client* client) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (!client->dataset)
      return client->fail(STARLING_ERR_STATE, "no training data: call a starling_client_set_data_* function first");
    {
      std::lock_guard lock(client->mu);
      client->shadow.reset();  // get_model() is this run's again
    }
    client->running = true;
    struct Reset {
      bool& running;
      ~Reset() { running = false; }
    } reset{client->running};
    Outcome outcome = runFederation(client, *client->dataset, client->options);
    if (outcome.code != STARLING_OK) return client->fail(outcome.code, std::move(outcome.message));
    client->error.clear();
    return STARLING_OK;
  });
}

void starling_client_stop(starling_client* client) {
  if (client == nullptr) return;
  std::lock_guard lock(client->mu);
  client->stopRequested = true;
  if (client->io != nullptr) client->io->stop();
  // (Lock order: the client's, then the ShadowSync's; it never takes the client's.)
  if (client->shadow && client->syncRunning) client->shadow->stop();
}

int starling_client_state(const starling_client* client) {
  if (client == nullptr) return STARLING_STATE_FAILED;
  std::lock_guard lock(client->mu);
  return client->state;
}

int starling_client_get_stats(const starling_client* client, starling_client_stats* out) {
  if (client == nullptr || out == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  std::lock_guard lock(client->mu);
  *out = client->stats;
  return STARLING_OK;
}

int starling_client_get_model(starling_client* client, float* out, size_t capacity, size_t* count) {
  if (client == nullptr || count == nullptr || (out == nullptr && capacity > 0)) return STARLING_ERR_INVALID_ARGUMENT;
  starling_client* c = client;
  return guarded(c, [&]() -> int {
    if (c->running) return c->fail(STARLING_ERR_STATE, "not while starling_client_run() is in progress");
    if (std::shared_ptr<client::ShadowSync> shadow = shadowOf(c)) {
      const std::size_t n = shadow->copyModel({out, out == nullptr ? 0 : capacity});
      if (n == 0) return c->fail(STARLING_ERR_AGAIN, "no model yet: background training has not had its first round");
      *count = n;
      return STARLING_OK;
    }
    if (!c->participant) return c->fail(STARLING_ERR_STATE, "no model yet: run the client first");
    auto model = c->participant->model();
    *count = model.size();
    std::copy_n(model.begin(), std::min(capacity, model.size()), out);
    return STARLING_OK;
  });
}

int starling_client_set_tls_resumption(starling_client* client, int enabled) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    net::TlsOptions tlsOptions;
    tlsOptions.resumption = enabled != 0;
    if (int rc = useServers(client, tlsOptions); rc != STARLING_OK) return rc;
    client->error.clear();
    return STARLING_OK;
  });
}

int starling_client_set_sparse_rows(starling_client* client, uint32_t bucket) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (bucket > kMaxRowBucket)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT, "a sparse-rows bucket of " + std::to_string(bucket) +
                                                             " rows is over the limit of " +
                                                             std::to_string(kMaxRowBucket) + " (0 turns it off)");
    client->options.rowBucket = bucket;
    client->error.clear();
    return STARLING_OK;
  });
}

int starling_client_get_sparse_rows(starling_client* client, uint32_t* out, size_t capacity, size_t* count) {
  if (client == nullptr || count == nullptr || (out == nullptr && capacity > 0)) return STARLING_ERR_INVALID_ARGUMENT;
  starling_client* c = client;
  return guarded(c, [&]() -> int {
    if (c->running) return c->fail(STARLING_ERR_STATE, "not while starling_client_run() is in progress");
    if (shadowOf(c)) {  // background training trains the whole model
      *count = 0;
      return STARLING_OK;
    }
    if (!c->participant) return c->fail(STARLING_ERR_STATE, "no model yet: run the client first");
    const std::span<const uint32_t> rows = c->participant->compactRows();
    *count = rows.size();
    std::copy_n(rows.begin(), std::min(capacity, rows.size()), out);
    return STARLING_OK;
  });
}

void starling_client_background_config_init(starling_client_background_config* config) {
  if (config == nullptr) return;
  *config = starling_client_background_config{};
  config->struct_size = sizeof(starling_client_background_config);
  config->variant = STARLING_SYNC_EASGD;
  config->alpha = 0.5f;
}

int starling_client_start_background(starling_client* client, const starling_client_background_config* config) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (int rc = checkIdle(client); rc != STARLING_OK) return rc;
    if (client->options.rowBucket > 0)
      return client->fail(STARLING_ERR_STATE,
                          "background training cannot offer sparse rows: the app's examples never reach the library, "
                          "so it cannot tell which rows they touch (starling_client_set_sparse_rows(client, 0) first)");
    if (config == nullptr) return client->fail(STARLING_ERR_INVALID_ARGUMENT, "the background configuration is NULL");
    // This version's struct is the only one so far; later ones append fields.
    if (config->struct_size != sizeof(starling_client_background_config))
      return client->fail(STARLING_ERR_INVALID_ARGUMENT, "config.struct_size is " +
                                                             std::to_string(config->struct_size) + ", not " +
                                                             std::to_string(sizeof(starling_client_background_config)) +
                                                             " (call starling_client_background_config_init first)");
    client::ShadowSyncOptions so;
    if (config->variant != STARLING_SYNC_EASGD && config->variant != STARLING_SYNC_MA)
      return client->fail(STARLING_ERR_INVALID_ARGUMENT,
                          "variant " + std::to_string(config->variant) +
                              " is neither STARLING_SYNC_EASGD (0) nor STARLING_SYNC_MA (1)");
    so.variant = config->variant == STARLING_SYNC_MA ? client::SyncVariant::kMa : client::SyncVariant::kEasgd;
    so.alpha = config->alpha;
    so.featureDim = config->feature_dim;
    so.numClasses = config->num_classes;
    so.maxWait = std::chrono::milliseconds(config->max_wait_ms);
    auto made = client::ShadowSync::create(so);
    if (!made) return client->fail(made.status().withContext("the background configuration"));
    std::shared_ptr<client::ShadowSync> shadow = std::move(*made);

    // The Participant wants a shard; the app's data never reach the library. One
    // example stands in for them, and Hello announces the app's count.
    auto one = data::Dataset::fromFloats(std::vector<float>(config->feature_dim, 0.0f), {0}, config->feature_dim,
                                         config->num_classes);
    if (!one) return client->fail(one.status());
    client->participant.reset();  // it borrows the old placeholder
    client->placeholder.emplace(std::move(*one));
    client::ParticipantOptions options = client->options;
    options.announcedExamples = config->num_examples;
    options.onWelcome = [shadow](const wire::WelcomeMsg& w) { return shadow->welcome(w); };
    options.localWork = [shadow](client::Learner& learner, const wire::RoundAssignMsg& a) {
      return shadow->work(learner, a);
    };
    {
      std::lock_guard lock(client->mu);
      client->shadow = shadow;
      client->syncRunning = true;
      client->syncCode = STARLING_OK;
      client->syncError.clear();
      client->state = STARLING_STATE_CONNECTING;
    }
    client->participant.reset();
    client->sync = std::thread([client, options = std::move(options)]() mutable {
      Outcome outcome;
      try {
        outcome = runFederation(client, *client->placeholder, std::move(options));
      } catch (const std::exception& e) {
        outcome = {STARLING_ERR_INTERNAL, std::string("internal error: ") + e.what()};
      } catch (...) {
        outcome = {STARLING_ERR_INTERNAL, "internal error: unknown exception"};
      }
      if (outcome.code != STARLING_OK && outcome.code != STARLING_ERR_STOPPED)
        client->log->error("background training ended: {}", outcome.message);
      std::lock_guard lock(client->mu);
      if (outcome.code == STARLING_ERR_INTERNAL) client->state = STARLING_STATE_FAILED;
      client->syncRunning = false;
      client->syncCode = outcome.code;
      client->syncError = std::move(outcome.message);
    });
    client->error.clear();
    return STARLING_OK;
  });
}

int starling_client_train_step(starling_client* client, const float* features, const int32_t* labels, size_t n,
                               float* loss_out) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    std::shared_ptr<client::ShadowSync> shadow = shadowOf(client);
    if (!shadow)
      return client->fail(STARLING_ERR_STATE, "no background training: call starling_client_start_background() first");
    auto loss = shadow->step(features, labels, n);
    if (!loss) {
      if (loss.status().code() == StatusCode::kClosed) return client->fail(STARLING_ERR_AGAIN, loss.status().message());
      return client->fail(loss.status());
    }
    if (loss_out != nullptr) *loss_out = static_cast<float>(*loss);
    return STARLING_OK;
  });
}

int starling_client_join_background(starling_client* client) {
  if (client == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  return guarded(client, [&]() -> int {
    if (!client->sync.joinable()) return client->fail(STARLING_ERR_STATE, "no background training in progress to join");
    client->sync.join();
    int code = STARLING_OK;
    std::string message;
    {
      std::lock_guard lock(client->mu);
      code = client->syncCode;
      message = client->syncError;
    }
    if (code != STARLING_OK) return client->fail(code, std::move(message));
    client->error.clear();
    return STARLING_OK;
  });
}

int starling_client_get_background_stats(const starling_client* client, starling_client_background_stats* out) {
  if (client == nullptr || out == nullptr) return STARLING_ERR_INVALID_ARGUMENT;
  try {
    std::lock_guard lock(client->mu);
    *out = starling_client_background_stats{};
    std::string error;
    if (client->shadow) {
      const client::ShadowSyncStats s = client->shadow->stats();
      out->steps = s.steps;
      out->rounds_synced = s.syncs;
      out->rounds_empty = s.emptyRounds;
      out->mixes = s.mixes;
      out->last_loss = s.lastLoss;
      out->lock_waits = s.lockWaits;
      out->longest_lock_wait_us =
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(s.longestLockWait).count());
      error = s.lastError;
    }
    out->running = client->syncRunning ? 1 : 0;
    out->sync_status = client->syncCode;
    if (!client->syncError.empty()) error = client->syncError;
    std::snprintf(out->last_error, sizeof out->last_error, "%s", error.c_str());
    return STARLING_OK;
  } catch (...) {
    return STARLING_ERR_INTERNAL;
  }
}

}  // extern "C"
