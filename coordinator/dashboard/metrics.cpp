// The Prometheus text of the coordinator's metrics (metrics.hpp).
#include "metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace starling::coordinator {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric value(double v, MetricType type, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter)
    m.counter.value = v;
  else
    m.gauge.value = v;
  return m;
}

void single(std::vector<MetricFamily>& out, std::string name, std::string help, MetricType type, double v) {
  MetricFamily f = family(std::move(name), std::move(help), type);
  f.metric.push_back(value(v, type));
  out.push_back(std::move(f));
}

// A label value for a kind of connection error: the StatusCode's name as a Prometheus
// label value (snake_case; "io" for an operating-system or socket error).
const char* errorKind(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kMalformed:
      return "malformed";
    case StatusCode::kOutOfRange:
      return "out_of_range";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kIo:
      return "io";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kOk:
    case StatusCode::kClosed:
      break;
  }
  return "other";
}

}  // namespace

std::string metricsText(const LiveCounts& c, const ServerCounters* server) {
  std::vector<MetricFamily> out;
  const auto counter = MetricType::Counter;
  const auto gauge = MetricType::Gauge;

  MetricFamily rounds = family("starling_rounds_total", "Rounds recorded, by how they ended.", counter);
  rounds.metric.push_back(value(double(c.roundsCommitted), counter, {{"status", "committed"}}));
  rounds.metric.push_back(value(double(c.roundsAbandoned), counter, {{"status", "abandoned"}}));
  out.push_back(std::move(rounds));
  single(out, "starling_round", "The newest round assigned.", gauge, double(c.currentRound));
  single(out, "starling_committed_round", "The newest round committed.", gauge, double(c.committedRound));
  single(out, "starling_training_finished", "1 once training has ended.", gauge, c.finished ? 1 : 0);

  MetricFamily duration =
      family("starling_round_duration_seconds", "Wall time of each recorded round.", MetricType::Histogram);
  duration.metric.push_back(c.roundDuration);
  out.push_back(std::move(duration));

  MetricFamily participants = family(
      "starling_participants_total",
      "Participant rows by outcome (a straggler whose update is applied later has a late-applied row too).", counter);
  for (const auto& [outcome, n] : c.participants)
    participants.metric.push_back(value(double(n), counter, {{"outcome", outcome}}));
  out.push_back(std::move(participants));
  single(out, "starling_refusals_total", "Clients turned away at Hello (the refusals table).", counter,
         double(c.refusals));

  MetricFamily bytes =
      family("starling_bytes_total", "Model bytes of the recorded rounds: on the wire, and raw (dense fp32).", counter);
  bytes.metric.push_back(value(double(c.bytesUpWire), counter, {{"direction", "up"}, {"size", "wire"}}));
  bytes.metric.push_back(value(double(c.bytesDownWire), counter, {{"direction", "down"}, {"size", "wire"}}));
  bytes.metric.push_back(value(double(c.bytesUpRaw), counter, {{"direction", "up"}, {"size", "raw"}}));
  bytes.metric.push_back(value(double(c.bytesDownRaw), counter, {{"direction", "down"}, {"size", "raw"}}));
  out.push_back(std::move(bytes));

  MetricFamily clients = family("starling_clients_connected", "Welcomed connections, by role.", gauge);
  clients.metric.push_back(
      value(double(c.clientsByRole.count("client") ? c.clientsByRole.at("client") : 0), gauge, {{"role", "client"}}));
  clients.metric.push_back(
      value(double(c.clientsByRole.count("relay") ? c.clientsByRole.at("relay") : 0), gauge, {{"role", "relay"}}));
  out.push_back(std::move(clients));

  if (c.accuracy)
    single(out, "starling_test_accuracy", "Test accuracy of the newest evaluated round.", gauge, *c.accuracy);
  if (c.loss) single(out, "starling_test_loss", "Test loss of the newest evaluated round.", gauge, *c.loss);
  if (c.rmse) single(out, "starling_test_rmse", "Test RMSE of the newest evaluated round.", gauge, *c.rmse);
  if (c.epsilon)
    single(out, "starling_privacy_epsilon", "Epsilon spent over the committed rounds (at privacy.delta).", gauge,
           *c.epsilon);

  if (server) {
    single(out, "starling_connections_accepted_total", "TCP connections accepted.", counter,
           double(server->accepted.load()));
    MetricFamily handshakes = family("starling_tls_handshakes_total", "Mutual TLS handshakes, by result.", counter);
    handshakes.metric.push_back(value(double(server->joined.load()), counter, {{"result", "joined"}}));
    handshakes.metric.push_back(value(double(server->refused.load()), counter, {{"result", "failed"}}));
    out.push_back(std::move(handshakes));
    single(out, "starling_connections_open", "Connections open now.", gauge, double(server->active.load()));
    MetricFamily errors = family("starling_frame_errors_total",
                                 "Connections closed for a bad frame, a timeout or a protocol error, "
                                 "by kind.",
                                 counter);
    for (std::size_t k = 1; k < kStatusCodeCount; ++k) {
      const auto code = static_cast<StatusCode>(k);
      if (code == StatusCode::kClosed) continue;  // a clean goodbye is not an error
      errors.metric.push_back(value(double(server->droppedBy[k].load()), counter, {{"kind", errorKind(code)}}));
    }
    out.push_back(std::move(errors));
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

}  // namespace starling::coordinator
