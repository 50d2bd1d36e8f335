// The `starling` Python module's native part (pybind11): a client over the C API
// (libstarling-client, as any application embeds it), the simulator, and a coordinator
// database read through the store. python/starling/__init__.py is the public face.

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "starling/coordinator/config.hpp"
#include "starling/coordinator/report.hpp"
#include "starling/coordinator/store.hpp"

#include "sim.hpp"
#include "sim_config.hpp"
#include "starling_client.h"

namespace py = pybind11;

namespace {

using namespace starling;

// Raised for every failure the library reports; .code is the STARLING_ERR_* value.
class StarlingError : public std::runtime_error {
 public:
  StarlingError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// A client of a real coordinator: starling_client_* behind a Python class. Data comes
// from NumPy arrays (copied by the library) or files; run() releases the GIL, so
// another Python thread can call stop() or read stats() and state while it trains.
// The C API's owner-thread calls (set_data*, model, data_size, run) are refused while
// a run() is in progress, rather than racing it.
class Client {
 public:
  Client(const std::string& coordinator, const std::string& ca, const std::string& cert, const std::string& key,
         const std::optional<std::string>& clientId, uint64_t seed, const std::optional<std::string>& serverName,
         uint32_t giveUpAfterMs, const std::string& logLevel) {
    starling_client_config config;
    starling_client_config_init(&config);
    config.coordinator = coordinator.c_str();
    config.ca_file = ca.c_str();
    config.cert_file = cert.c_str();
    config.key_file = key.c_str();
    config.client_id = clientId ? clientId->c_str() : nullptr;
    config.server_name = serverName ? serverName->c_str() : nullptr;
    config.seed = seed;
    if (giveUpAfterMs > 0) config.give_up_after_ms = giveUpAfterMs;
    static const std::map<std::string, int> kLevels = {{"trace", STARLING_LOG_TRACE}, {"debug", STARLING_LOG_DEBUG},
                                                       {"info", STARLING_LOG_INFO},   {"warn", STARLING_LOG_WARN},
                                                       {"error", STARLING_LOG_ERROR}, {"off", STARLING_LOG_OFF}};
    auto level = kLevels.find(logLevel);
    if (level == kLevels.end())
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT,
                          "log_level '" + logLevel + "': one of trace, debug, info, warn, error, off");
    config.log_level = level->second;
    starling_client* made = nullptr;
    const int rc = starling_client_create(&config, &made);
    if (rc != STARLING_OK) {
      std::string message = made ? starling_client_last_error(made) : "starling_client_create failed";
      starling_client_destroy(made);
      throw StarlingError(rc, message);
    }
    client_ = made;
  }
  ~Client() { starling_client_destroy(client_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Classification: features (n, d) as float32 (or anything NumPy converts to it), or
  // uint8 scaled by `scale`; labels (n,) class numbers.
  void setData(const py::array& features, const py::array& labels, int numClasses, float scale) {
    auto y = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(labels);
    if (!y || y.ndim() != 1) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "labels: a 1-d array of class numbers");
    const auto [count, dim] = shape(features, y.shape(0));
    if (numClasses <= 0) {  // the largest label + 1, as set_data_idx infers it
      const int32_t* labelData = y.data();
      numClasses = count == 0 ? 0 : *std::max_element(labelData, labelData + count) + 1;
    }
    int rc;
    // notRunning() right before each C call: the conversions above may run Python code,
    // during which another thread could start run().
    if (py::isinstance<py::array_t<uint8_t>>(features)) {
      auto x = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(features);
      notRunning("set_data");
      rc = starling_client_set_data_u8(client_, x.data(), y.data(), count, dim, numClasses, scale);
    } else {
      auto x = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(features);
      if (!x) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "features: not convertible to float32");
      if (scale != 1.0f)
        throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "scale applies to uint8 features only; scale the floats");
      notRunning("set_data");
      rc = starling_client_set_data_f32(client_, x.data(), y.data(), count, dim, numClasses);
    }
    check(rc);
  }

  // Regression: features (n, d), targets (n,) real numbers.
  void setTargets(const py::array& features, const py::array& targets) {
    auto t = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(targets);
    if (!t || t.ndim() != 1) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "targets: a 1-d array of numbers");
    const auto [count, dim] = shape(features, t.shape(0));
    auto x = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(features);
    if (!x) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "features: not convertible to float32");
    notRunning("set_targets");
    check(starling_client_set_data_f32_targets(client_, x.data(), t.data(), count, dim));
  }

  void setDataFile(const std::optional<std::string>& path, const std::optional<std::string>& format,
                   const std::optional<std::string>& label, const std::optional<std::string>& task, uint32_t shardIndex,
                   uint32_t shardCount, const std::optional<std::string>& partition, uint64_t partitionSeed) {
    starling_client_data_options options;
    starling_client_data_options_init(&options);
    options.format = format ? format->c_str() : nullptr;
    options.label = label ? label->c_str() : nullptr;
    options.task = task ? task->c_str() : nullptr;
    options.shard_index = shardIndex;
    options.shard_count = shardCount;
    options.partition = partition ? partition->c_str() : nullptr;
    options.partition_seed = partitionSeed;
    notRunning("set_data_file");
    check(starling_client_set_data_file_ex(client_, path ? path->c_str() : nullptr, &options));
  }

  std::size_t dataSize() const {
    notRunning("data_size");
    return starling_client_data_size(client_);
  }

  void run() {
    notRunning("run");
    running_ = true;
    int rc;
    {
      py::gil_scoped_release release;
      rc = starling_client_run(client_);
    }
    running_ = false;
    check(rc);
  }

  void stop() { starling_client_stop(client_); }

  std::string state() const {
    switch (starling_client_state(client_)) {
      case STARLING_STATE_IDLE:
        return "idle";
      case STARLING_STATE_CONNECTING:
        return "connecting";
      case STARLING_STATE_TRAINING:
        return "training";
      case STARLING_STATE_DONE:
        return "done";
      default:
        return "failed";
    }
  }

  py::dict stats() const {
    starling_client_stats s{};
    check(starling_client_get_stats(client_, &s));
    py::dict d;
    d["rounds_trained"] = s.rounds_trained;
    d["rounds_accepted"] = s.rounds_accepted;
    d["rounds_rejected"] = s.rounds_rejected;
    d["connections"] = s.connections;
    d["resyncs"] = s.resyncs;
    d["bytes_up"] = s.bytes_up;
    d["bytes_down"] = s.bytes_down;
    d["held_round"] = s.held_round;
    d["model_checksum"] = s.model_checksum;
    d["last_loss"] = s.last_loss;
    return d;
  }

  py::array_t<float> model() {
    notRunning("model");
    std::size_t count = 0;
    check(starling_client_get_model(client_, nullptr, 0, &count));
    py::array_t<float> out(static_cast<py::ssize_t>(count));
    check(starling_client_get_model(client_, out.mutable_data(), count, &count));
    return out;
  }

 private:
  // (count, feature_dim) of a 2-d features array whose rows match `rows`.
  static std::pair<std::size_t, std::size_t> shape(const py::array& features, py::ssize_t rows) {
    if (features.ndim() != 2)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT,
                          "features: a 2-d array (examples, features), not " + std::to_string(features.ndim()) + "-d");
    if (features.shape(0) != rows)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "features has " + std::to_string(features.shape(0)) +
                                                             " rows but the labels " + std::to_string(rows));
    return {static_cast<std::size_t>(features.shape(0)), static_cast<std::size_t>(features.shape(1))};
  }
  void check(int rc) const {
    if (rc != STARLING_OK) throw StarlingError(rc, starling_client_last_error(client_));
  }
  // Called with the GIL held, as run() sets and clears running_: no other lock needed.
  void notRunning(const char* what) const {
    if (running_)
      throw StarlingError(STARLING_ERR_STATE,
                          std::string(what) + ": not while run() is in progress (stop() it, or wait for it)");
  }

  starling_client* client_ = nullptr;
  bool running_ = false;
};

// Thrown through the simulator from a round's callback to end the run early.
struct StopRun {};

py::object optional(const std::optional<double>& v) {
  return v ? py::cast(*v) : py::none();
}

py::dict roundDict(const std::string& strategy, const sim::RoundRow& r) {
  py::dict d;
  d["strategy"] = strategy;
  d["round"] = r.round;
  d["committed"] = r.committed;
  d["virtual_seconds"] = r.virtualSeconds;
  d["bytes_up"] = r.bytesUp;
  d["bytes_down"] = r.bytesDown;
  d["total_bytes"] = r.totalBytes;
  d["model_checksum"] = r.modelChecksum;
  d["accuracy"] = optional(r.accuracy);
  d["test_loss"] = optional(r.testLoss);
  d["auc"] = optional(r.auc);
  d["rmse"] = optional(r.rmse);
  d["r2"] = optional(r.r2);
  d["epsilon"] = optional(r.epsilon);
  d["train_loss"] = r.trainLoss;
  d["tau"] = r.tau;
  d["uplink_density"] = r.uplinkDensity;
  d["downlink_density"] = r.downlinkDensity;
  d["selected"] = r.selected;
  d["participants"] = r.participants;
  d["stragglers"] = r.stragglers;
  d["dropped"] = r.dropped;
  return d;
}

// A Python value as a flag's text: True/False as true/false, the rest as str().
std::string flagValue(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  return py::str(v).cast<std::string>();
}

// starling-sim from Python: settings are starling-sim's flags without their dashes
// (clients=100, model="mlp:784-64-10", uplink_density=0.05); config a TOML file as
// --config reads it. Returns every ended round of every strategy, in order.
py::list simulate(const std::optional<std::string>& config, const py::dict& settings,
                  const std::optional<std::vector<std::string>>& only, const py::object& onRound) {
  std::vector<std::string> args = {"starling-sim"};
  CLI::App app{"starling.simulate"};
  coordinator::DaemonConfig base;
  sim::SimSettings simSettings;
  coordinator::ConfigBinder binder(app, base);
  sim::bindSimSettings(binder, simSettings);
  for (auto item : settings) {
    const std::string name = py::str(item.first).cast<std::string>();
    std::string flag = "--" + name;
    for (char& c : flag)
      if (c == '_') c = '-';
    if (app.get_option_no_throw(flag) == nullptr)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "unknown setting '" + name + "': starling-sim has no " + flag +
                                                             " (starling-sim --help lists them)");
    args.push_back(flag);
    args.push_back(flagValue(item.second));
  }
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, std::string("settings: ") + e.what());
  }
  std::vector<sim::Strategy> strategies;
  if (config) {
    if (Status st = sim::loadConfig(*config, binder, base, strategies); !st)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, st.message());
  } else {
    if (Status st = coordinator::ConfigBinder::validate(base); !st)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, st.message());
    strategies.push_back(sim::strategyOf("default", base));
  }
  if (only && only->empty())
    throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "only: no strategy named (None runs them all)");
  if (Status st = sim::chooseStrategies(strategies, only.value_or(std::vector<std::string>{})); !st)
    throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, "only: " + st.message());
  if (Status st = sim::checkSameData(strategies); !st) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, st.message());
  const sim::Strategy first = strategies.front();
  simSettings.testData = first.task.testData;
  Result<sim::Fleet> fleet = [&] {
    py::gil_scoped_release release;
    return sim::Fleet::create(simSettings, first.task.model, coordinator::dataOptions(first.task, false),
                              first.task.huberDelta);
  }();
  if (!fleet) throw StarlingError(STARLING_ERR_INVALID_ARGUMENT, fleet.status().message());
  py::list rounds;
  for (auto& strategy : strategies)
    strategy.task.model = fleet->modelSpec();
  for (const auto& strategy : strategies) {
    // The rounds are built with the GIL released; each is handed to Python (a list
    // entry, and on_round when given) with the GIL held. An exception from on_round, or
    // a signal (Ctrl-C), ends the run there: it unwinds the simulator as StopRun and is
    // raised again here as itself.
    std::optional<py::error_already_set> pythonError;
    auto each = [&](const sim::RoundRow& r) {
      py::gil_scoped_acquire hold;
      py::dict d = roundDict(strategy.name, r);
      rounds.append(d);
      try {
        if (!onRound.is_none()) onRound(d);
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      } catch (py::error_already_set& e) {
        pythonError = std::move(e);
        throw StopRun{};
      }
    };
    std::optional<Result<sim::StrategyResult>> result;
    try {
      py::gil_scoped_release release;
      result.emplace(sim::runStrategy(*fleet, strategy, each));
    } catch (const StopRun&) {
    }
    if (pythonError) throw std::move(*pythonError);
    if (!result || !*result)
      throw StarlingError(STARLING_ERR_INVALID_ARGUMENT,
                          "strategy '" + strategy.name + "': " + (result ? result->status().message() : "stopped"));
  }
  return rounds;
}

// A coordinator database's report (starling-coordinator report --format json), as text;
// __init__.py parses it.
std::string reportJson(const std::string& path) {
  if (!std::filesystem::exists(path)) throw StarlingError(STARLING_ERR_NOT_FOUND, "no database '" + path + "'");
  coordinator::StoreOptions options;
  options.readOnly = true;
  auto store = coordinator::Store::open(path, options);
  if (!store) throw StarlingError(STARLING_ERR_MALFORMED, store.status().message());
  auto data = coordinator::loadReport(**store);
  if (!data) throw StarlingError(STARLING_ERR_MALFORMED, data.status().message());
  return coordinator::formatReport(*data, coordinator::ReportFormat::kJson);
}

}  // namespace

PYBIND11_MODULE(_starling, m) {
  m.doc() = "Starling's native part: the C API client, the simulator and the coordinator's store";
  // starling.Error(message) with .code, the STARLING_ERR_* value (starling_client.h).
  static py::exception<StarlingError> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StarlingError& e) {
      py::object instance = py::handle(error.ptr())(e.what());  // an instance of the class
      instance.attr("code") = e.code();
      PyErr_SetObject(error.ptr(), instance.ptr());
    }
  });
  m.attr("version") = starling_client_version();

  py::class_<Client>(m, "Client")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::optional<std::string>&, uint64_t, const std::optional<std::string>&, uint32_t,
                    const std::string&>(),
           py::arg("coordinator"), py::arg("ca"), py::arg("cert"), py::arg("key"), py::arg("client_id") = py::none(),
           py::arg("seed") = 0, py::arg("server_name") = py::none(), py::arg("give_up_after_ms") = 0,
           py::arg("log_level") = "info")
      .def("set_data", &Client::setData, py::arg("features"), py::arg("labels"), py::arg("num_classes") = 0,
           py::arg("scale") = 1.0f)
      .def("set_targets", &Client::setTargets, py::arg("features"), py::arg("targets"))
      .def("set_data_file", &Client::setDataFile, py::arg("path"), py::arg("format") = py::none(),
           py::arg("label") = py::none(), py::arg("task") = py::none(), py::arg("shard_index") = 0,
           py::arg("shard_count") = 0, py::arg("partition") = py::none(), py::arg("partition_seed") = 1)
      .def_property_readonly("data_size", &Client::dataSize)
      .def("run", &Client::run)
      .def("stop", &Client::stop)
      .def_property_readonly("state", &Client::state)
      .def("stats", &Client::stats)
      .def("model", &Client::model);

  m.def("simulate", &simulate, py::arg("config") = py::none(), py::arg("settings") = py::dict(),
        py::arg("only") = py::none(), py::arg("on_round") = py::none());
  m.def("report_json", &reportJson, py::arg("path"));
}
