// The dashboard's parts: the plots, the HTML report, the live state a federation
// feeds, the /metrics text, and the HTTP port itself (plain on loopback, and the
// operators-only mutual-TLS front) while another thread keeps feeding it.
#include "dashboard/dashboard.hpp"

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "starling/coordinator/report.hpp"
#include "starling/plot/plot.hpp"

#include "dashboard/metrics.hpp"
#include "support/federation_fixture.hpp"

using namespace starling;
using namespace starling::coordinator;
using namespace starling::testing;

namespace {

RoundRecord roundRecord(uint64_t n, std::optional<double> accuracy, int64_t durationMs = 1500) {
  RoundRecord r;
  r.round = n;
  r.selected = 3;
  r.returned = 3;
  r.accepted = 3;
  r.bytesUpWire = 1000 * int64_t(n);
  r.bytesDownWire = 500;
  r.bytesUpRaw = 4000;
  r.bytesDownRaw = 4000;
  r.trainLossStart = 2.0 / double(n);
  r.startedMs = 1'700'000'000'000 + int64_t(n) * 10'000;
  r.endedMs = r.startedMs + durationMs;
  r.testAccuracy = accuracy;
  if (accuracy) r.testLoss = 1 - *accuracy;
  return r;
}

ParticipantRecord participant(uint64_t round, std::string id, ParticipantOutcome outcome, std::string reason = "") {
  ParticipantRecord p;
  p.round = round;
  p.clientId = std::move(id);
  p.outcome = outcome;
  p.reason = std::move(reason);
  return p;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// GET (or another method) over plain TCP; the whole response (the server closes).
std::string http(uint16_t port, const std::string& method, const std::string& path,
                 const std::string& host = "localhost") {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::address_v4::loopback(), port});
  const std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  asio::write(s, asio::buffer(request));
  std::string out;
  std::error_code ec;
  asio::read(s, asio::dynamic_buffer(out), ec);  // to EOF
  return out;
}

// The same over mutual TLS with `context`; "" when the handshake fails.
std::string https(uint16_t port, std::shared_ptr<const net::TlsContext> context, const std::string& path) {
  return runCoroutine([&](asio::any_io_executor ex) -> asio::awaitable<std::string> {
    asio::ip::tcp::socket s(ex);
    co_await s.async_connect({asio::ip::address_v4::loopback(), port}, asio::use_awaitable);
    auto tls = net::TlsStream::create(std::move(s), context).value();
    if (!co_await tls->handshake()) co_return std::string();
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    (void)co_await tls->writeAll(std::span(reinterpret_cast<const uint8_t*>(request.data()), request.size()));
    std::string out;
    std::array<uint8_t, 4096> buffer;
    while (true) {
      auto n = co_await tls->readSome(buffer);
      if (!n || *n == 0) break;
      out.append(reinterpret_cast<const char*>(buffer.data()), *n);
    }
    co_return out;
  });
}

}  // namespace

TEST_CASE("plots: axes, log scale and escaping", "[dashboard][plot]") {
  plot::Figure figure;
  plot::Panel panel;
  panel.title = "accuracy <vs> bytes & time";
  panel.logX = true;
  panel.yFormat = plot::YFormat::kPercent;
  panel.reference = 0.85;
  panel.series.push_back({"a", {{0, 0.5}, {-3, 0.6}, {1e5, 0.7}, {1e7, 0.8}}});
  panel.series.push_back({"b", {}});
  figure.panels.push_back(panel);
  figure.legend = {"<script>"};
  const std::string svg = plot::figureSvg(figure);
  CHECK(svg.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0) == 0);
  CHECK(svg.find("accuracy &lt;vs&gt; bytes &amp; time") != std::string::npos);
  CHECK(svg.find("&lt;script&gt;") != std::string::npos);
  CHECK(svg.find("<script>") == std::string::npos);
  // Decades 1e5 .. 1e7 labelled; x <= 0 left out of a log axis: two points drawn.
  CHECK(svg.find(">1e5<") != std::string::npos);
  CHECK(svg.find(">1e7<") != std::string::npos);
  const auto line = svg.find("<polyline fill='none' stroke='#1f77b4'");
  REQUIRE(line != std::string::npos);
  const auto points = svg.substr(svg.find("points='", line) + 8);
  CHECK(count(points.substr(0, points.find('\'')), ",") == 2);
  // The percent axis spans tenths around the data and the target, dashed target line.
  CHECK(svg.find(">70%<") != std::string::npos);
  CHECK(svg.find(">90%<") != std::string::npos);
  CHECK(svg.find("stroke-dasharray") != std::string::npos);
  // 5,000 points are drawn through 1,000 of them and the last.
  plot::Figure many;
  many.panels.push_back(plot::Panel{});
  many.panels[0].series.push_back({"n", {}});
  for (int i = 0; i < 5000; ++i)
    many.panels[0].series[0].points.emplace_back(i, i % 7);
  const std::string long_ = plot::figureSvg(many);
  const auto at = long_.find("points='") + 8;
  CHECK(count(long_.substr(at, long_.find('\'', at) - at), ",") == 1001);
  CHECK(plot::humanBytes(512) == "512 B");
  CHECK(plot::humanBytes(3.5 * 1024 * 1024) == "3.5 MiB");
}

TEST_CASE("report --html: plots, troubled clients by count, text escaped, no script", "[dashboard][report]") {
  ReportData data;
  data.rounds = {roundRecord(1, 0.5), roundRecord(2, std::nullopt), roundRecord(3, 0.7)};
  data.rounds[1].status = RoundStatus::kAbandoned;
  data.rounds[1].reason = "deadline <passed>";
  data.participants = {participant(1, "client-2", ParticipantOutcome::kStraggler, "deadline passed"),
                       participant(2, "client-<b>", ParticipantOutcome::kRejected, "norm & more"),
                       participant(3, "client-2", ParticipantOutcome::kDropped, "left")};
  data.refusals = {RefusalRecord{"operator-0", "127.0.0.1:1", 1'700'000'000'000, "role 'operator'"}};
  const std::vector<ClientTrouble> trouble = troubleByClient(data.participants);
  REQUIRE(trouble.size() == 2);
  CHECK(trouble[0].clientId == "client-2");
  CHECK(trouble[0].stragglers == 1);
  CHECK(trouble[0].dropped == 1);
  CHECK(trouble[0].lastRound == 3);
  CHECK(trouble[0].lastOutcome == "dropped");

  const std::string page = formatHtml(data, "run <1>");
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("client-&lt;b&gt;") != std::string::npos);
  CHECK(page.find("norm &amp; more") != std::string::npos);
  CHECK(page.find("deadline &lt;passed&gt;") != std::string::npos);
  CHECK(page.find("run &lt;1&gt;") != std::string::npos);
  CHECK(page.find("operator-0") != std::string::npos);
  CHECK(count(page, "<svg") == 1);
  // Two evaluated committed rounds: the accuracy lines have two points each.
  const plot::Figure figure = roundsFigure(data.rounds);
  REQUIRE(figure.panels.size() == 8);  // no privacy panel without epsilon
  CHECK(figure.panels[0].series[0].points.size() == 2);
  CHECK(figure.panels[0].series[0].points[1] == std::pair<double, double>{3, 0.7});
  // Bytes are cumulative over every round, the abandoned one too.
  CHECK(figure.panels[1].series[0].points[1].first == 1500.0 + 2500.0 + 3500.0);
  // The abandoned round's duration is its own series.
  CHECK(figure.panels[6].series[1].points.size() == 1);
  CHECK(figure.panels[4].series[0].points[1] == std::pair<double, double>{7500.0, 1 - 0.7});
  // Seconds from the first round's start (a span under two minutes): round 3 ended
  // 20 s + 1.5 s after round 1 started.
  CHECK(figure.panels[2].series[0].points[1].first == Approx(21.5));
  CHECK(figure.panels[2].xLabel == "seconds since the first round started");
  data.rounds[2].epsilon = 1.5;
  CHECK(roundsFigure(data.rounds).panels.size() == 9);
}

TEST_CASE("live state: a round's participants from assignment to record, history, counts", "[dashboard][live]") {
  LiveState live(DashboardTask{"t", "mlp:4-2", "classification", "sync", 10, 2, false, "x.db"});
  ReportData history;
  history.rounds = {roundRecord(1, 0.6)};
  history.participants = {participant(1, "client-9", ParticipantOutcome::kStraggler, "deadline passed")};
  live.seed(history);
  CHECK(live.stateJson(0).find("\"status\": \"waiting\"") == std::string::npos);  // round 1 is history

  live.clientJoined("client-0", "client", "127.0.0.1:5", 100, 1);
  live.clientJoined("client-1", "client", "127.0.0.1:6", 200, 1);
  live.assigned("client-0", 2, 10, 1000);
  live.assigned("client-1", 2, 10, 1000);
  std::string s = live.stateJson(20);
  CHECK(s.find("\"round\": 2") != std::string::npos);
  CHECK(count(s, "\"state\": \"assigned\"") == 2);
  CHECK(s.find("\"connected\": 2") != std::string::npos);

  live.updateArrived("client-0", 2, 30);
  live.verdict("client-1", 2, false, "norm too large");
  s = live.stateJson(40);
  CHECK(s.find("\"state\": \"returned\"") != std::string::npos);
  CHECK(s.find("\"reason\": \"norm too large\"") != std::string::npos);

  RoundRecord r2 = roundRecord(2, std::nullopt);
  live.roundRecorded(r2, {participant(2, "client-0", ParticipantOutcome::kAccepted),
                          participant(2, "client-1", ParticipantOutcome::kRejected, "norm too large")});
  live.evaluated(2, EvaluationRecord{0.3, 0.75, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
  live.clientLeft("client-1", "closed", 50);
  live.clientRefused(RefusalRecord{"operator-0", "127.0.0.1:7", 60, "no training"});
  s = live.stateJson(70);
  CHECK(s.find("\"rounds_committed\": 2") != std::string::npos);
  CHECK(s.find("\"accuracy\": 0.75") != std::string::npos);
  CHECK(s.find("\"connected\": 1") != std::string::npos);
  CHECK(s.find("\"total\": 1") != std::string::npos);
  CHECK(s.find("\"client_id\": \"operator-0\", \"peer\": \"127.0.0.1:7\"") != std::string::npos);
  CHECK(s.find("\"client\": \"client-9\"") != std::string::npos);  // troubled, from the history

  const LiveCounts c = live.counts();
  CHECK(c.roundsCommitted == 2);
  CHECK(c.committedRound == 2);
  CHECK(c.participants.at("accepted") == 3 + 1);  // round 1's three, round 2's one
  CHECK(c.participants.at("rejected") == 1);
  CHECK(c.participants.at("straggler") == 1);
  CHECK(c.accuracy == 0.75);
  CHECK(c.bytesUpWire == 1000 + 2000);
  CHECK(c.roundDuration.histogram.sample_count == 2);
  CHECK(c.roundDuration.histogram.sample_sum == Approx(3.0));

  const auto [svg, version] = live.plotsSvg();
  CHECK(svg.find("<polyline") != std::string::npos);
  live.finished("training complete");
  CHECK(live.stateJson(80).find("\"status\": \"finished\"") != std::string::npos);
  CHECK(live.plotsSvg().second == version);  // nothing new to draw
}

TEST_CASE("metrics: the Prometheus text names every family once, counts by label", "[dashboard][metrics]") {
  LiveState live(DashboardTask{});
  live.roundRecorded(roundRecord(1, 0.5, 400), {participant(1, "a", ParticipantOutcome::kAccepted)});
  RoundRecord abandoned = roundRecord(2, std::nullopt, 7000);
  abandoned.status = RoundStatus::kAbandoned;
  live.roundRecorded(abandoned, {participant(2, "a", ParticipantOutcome::kStraggler, "deadline passed")});
  ServerCounters server;
  server.accepted = 5;
  server.joined = 4;
  server.refused = 1;
  server.drop(StatusCode::kMalformed);
  server.drop(StatusCode::kMalformed);
  server.drop(StatusCode::kTimeout);
  const std::string text = metricsText(live.counts(), &server);
  CHECK(text.find("starling_rounds_total{status=\"committed\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_rounds_total{status=\"abandoned\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_participants_total{outcome=\"straggler\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_frame_errors_total{kind=\"malformed\"} 2\n") != std::string::npos);
  CHECK(text.find("starling_frame_errors_total{kind=\"timeout\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_tls_handshakes_total{result=\"failed\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_round_duration_seconds_bucket{le=\"0.5\"} 1\n") != std::string::npos);
  CHECK(text.find("starling_round_duration_seconds_bucket{le=\"10\"} 2\n") != std::string::npos);
  CHECK(text.find("starling_round_duration_seconds_count 2\n") != std::string::npos);
  CHECK(text.find("starling_test_accuracy 0.5\n") != std::string::npos);
  CHECK(text.find("starling_privacy_epsilon") == std::string::npos);  // no privacy, no epsilon
  CHECK(count(text, "# TYPE starling_rounds_total counter") == 1);
  // A private task: epsilon spent after the newest committed round.
  RoundRecord privateRound = roundRecord(3, std::nullopt);
  privateRound.epsilon = 1.5;
  live.roundRecorded(privateRound, {});
  CHECK(metricsText(live.counts(), &server).find("starling_privacy_epsilon 1.5\n") != std::string::npos);
  // Without the server's counters, no connection metrics.
  CHECK(metricsText(live.counts(), nullptr).find("starling_tls_handshakes_total") == std::string::npos);
}

TEST_CASE("the dashboard's port serves the page, the state and /metrics while a federation feeds it",
          "[dashboard][http]") {
  CHECK(isLoopback("127.0.0.1"));
  CHECK(isLoopback("127.8.9.1"));
  CHECK(isLoopback("::1"));
  CHECK(isLoopback("localhost"));
  CHECK_FALSE(isLoopback("0.0.0.0"));
  CHECK_FALSE(isLoopback("10.1.2.3"));

  auto live = std::make_shared<LiveState>(DashboardTask{"t", "m", "classification", "sync", 0, 3, false, "d"});
  asio::io_context io;
  auto log = std::make_shared<spdlog::logger>("dashboard", std::make_shared<CaptureSink>());
  ServerCounters server;

  // Plain HTTP beyond loopback is refused.
  DashboardOptions open;
  open.listen = {"0.0.0.0", 0};
  auto refused = Dashboard::start(io, open, live, &server, log);
  REQUIRE_FALSE(refused);
  CHECK(refused.status().message().find("only over TLS") != std::string::npos);

  auto d = Dashboard::start(io, DashboardOptions{}, live, &server, log).value();
  // A federation's strand feeding the state while the HTTP threads read it.
  std::atomic<bool> stop{false};
  std::thread feeder([&] {
    for (uint64_t r = 1; !stop; ++r) {
      live->assigned("client-0", r, 0, 100);
      live->updateArrived("client-0", r, 1);
      live->roundRecorded(roundRecord(r, 0.5), {participant(r, "client-0", ParticipantOutcome::kAccepted)});
      live->evaluated(r, EvaluationRecord{0.5, 0.5, {}, {}, {}, {}, {}});
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (int i = 0; i < 20; ++i) {
    const std::string state = http(d->port(), "GET", "/api/state");
    REQUIRE(state.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(state.find("application/json") != std::string::npos);
    CHECK(state.back() == '}');
    CHECK(http(d->port(), "GET", "/api/plots.svg").find("</svg>") != std::string::npos);
  }
  stop = true;
  feeder.join();
  const std::string page = http(d->port(), "GET", "/");
  CHECK(page.find("<script src=\"/dashboard.js\">") != std::string::npos);
  CHECK(page.find("Content-Security-Policy") != std::string::npos);
  CHECK(http(d->port(), "GET", "/dashboard.js").find("function poll()") != std::string::npos);
  CHECK(http(d->port(), "GET", "/metrics").find("starling_rounds_total{status=\"committed\"}") != std::string::npos);
  CHECK(http(d->port(), "GET", "/nothing").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http(d->port(), "POST", "/api/state").rfind("HTTP/1.1 405", 0) == 0);
  // A page of another site that reached this port by DNS rebinding names its own host.
  CHECK(http(d->port(), "GET", "/api/state", "attacker.example").rfind("HTTP/1.1 403", 0) == 0);
  CHECK(http(d->port(), "GET", "/api/state", "127.0.0.1:" + std::to_string(d->port())).rfind("HTTP/1.1 200", 0) == 0);
  CHECK(http(d->port(), "GET", "/api/state", "[::1]:8080").rfind("HTTP/1.1 200", 0) == 0);
  const std::string head = http(d->port(), "HEAD", "/api/state");
  CHECK(head.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(head.find("\"task\"") == std::string::npos);  // headers only
  CHECK(d->counters().requests == 49);
  CHECK(d->counters().refusedPeers == 1);
  d->stop();
}

TEST_CASE("beyond loopback: mutual TLS, operator certificates only", "[dashboard][http][tls]") {
  Pki pki;
  const net::KeyPair op = net::issueCertificate(pki.ca, {net::CertificateKind::kOperator,
                                                         "operator-0",
                                                         {},
                                                         Pki::now() - std::chrono::hours(1),
                                                         Pki::now() + std::chrono::hours(1)})
                              .value();
  auto live = std::make_shared<LiveState>(DashboardTask{});
  live->roundRecorded(roundRecord(1, 0.5), {});
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  std::thread runner2([&] { io.run(); });  // the front's connections on two threads, as in the daemon
  auto log = std::make_shared<spdlog::logger>("dashboard", std::make_shared<CaptureSink>());
  DashboardOptions options;
  options.tls = net::TlsContext::create(net::TlsRole::kServer, pki.serverIdentity()).value();
  auto d = Dashboard::start(io, options, live, nullptr, log).value();

  const std::string served = https(d->port(), pki.clientContext(op), "/api/state");
  CHECK(served.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(served.find("\"rounds_committed\": 1") != std::string::npos);
  const std::string forbidden = https(d->port(), pki.clientContext(pki.client("client-0")), "/api/state");
  CHECK(forbidden.rfind("HTTP/1.1 403", 0) == 0);
  CHECK(forbidden.find("role 'client'") != std::string::npos);
  CHECK(forbidden.find("\"task\"") == std::string::npos);
  // A certificate of another CA does not get through the handshake.
  Pki other;
  const net::KeyPair stranger = net::issueCertificate(other.ca, {net::CertificateKind::kOperator,
                                                                 "operator-0",
                                                                 {},
                                                                 Pki::now() - std::chrono::hours(1),
                                                                 Pki::now() + std::chrono::hours(1)})
                                    .value();
  auto strangerContext =
      net::TlsContext::create(net::TlsRole::kClient,
                              net::TlsIdentity{pki.ca.certPem, stranger.certPem, stranger.keyPem, {}}, "localhost")
          .value();
  CHECK(https(d->port(), strangerContext, "/api/state").find("\"task\"") == std::string::npos);
  // The front counts the failure once its side of the handshake has ended.
  for (int i = 0; i < 200 && d->counters().failedHandshakes == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(d->counters().failedHandshakes == 1);
  // Plain HTTP to the TLS port gets nothing of the state.
  CHECK(http(d->port(), "GET", "/api/state").find("\"task\"") == std::string::npos);
  CHECK(d->counters().refusedPeers == 1);
  // Nor does a local process that finds civetweb's own loopback port.
  REQUIRE(d->httpPort() != d->port());
  const std::string behind = http(d->httpPort(), "GET", "/api/state");
  CHECK(behind.rfind("HTTP/1.1 403", 0) == 0);
  CHECK(behind.find("\"task\"") == std::string::npos);
  // The operator is served again: its connection's port is the front's while it lasts.
  CHECK(https(d->port(), pki.clientContext(op), "/metrics").find("starling_rounds_total") != std::string::npos);
  d->stop();
  work.reset();
  runner.join();
  runner2.join();
}
