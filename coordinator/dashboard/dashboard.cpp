// The dashboard's HTTP port (dashboard.hpp).
#include "dashboard.hpp"

#include <civetweb.h>
#include <fmt/format.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/address.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstring>

#include "starling/net/certificates.hpp"

#include "metrics.hpp"
#include "page.hpp"

namespace starling::coordinator {

namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

int64_t wallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    default:
      return "Error";
  }
}

// One complete response; the connection closes after it (civetweb's keep-alive is off).
int respond(mg_connection* conn, int status, std::string_view type, std::string_view body, bool head) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\n"
            "Content-Type: %.*s\r\n"
            "Content-Length: %zu\r\n"
            "Cache-Control: no-store\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'\r\n"
            "Connection: close\r\n\r\n",
            status, reasonPhrase(status), static_cast<int>(type.size()), type.data(), body.size());
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
  return status;
}

// civetweb's own messages (a request it could not parse, a socket error) at debug.
int civetwebLog(const mg_connection* conn, const char* message) {
  const mg_context* ctx = conn ? mg_get_context(conn) : nullptr;
  auto* log = ctx ? static_cast<spdlog::logger*>(mg_get_user_data(ctx)) : nullptr;
  if (log) log->debug("dashboard http: {}", message);
  return 1;  // handled: not to stderr
}

}  // namespace

bool isLoopback(const std::string& host) {
  if (host == "localhost") return true;
  std::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

Dashboard::Dashboard(asio::io_context& io, DashboardOptions options, std::shared_ptr<const LiveState> state,
                     const ServerCounters* server, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      state_(std::move(state)),
      server_(server),
      log_(std::move(log)),
      acceptor_(asio::make_strand(io)) {}

void Dashboard::Registered::usePort(uint16_t port) const {
  std::lock_guard lock(self_.mu_);
  self_.frontPorts_.insert(port);
  port_ = port;
}

Dashboard::Registered::~Registered() {
  std::lock_guard lock(self_.mu_);
  self_.relays_.erase(relay_);
  if (port_) self_.frontPorts_.erase(*port_);
}

Dashboard::~Dashboard() {
  stop();
}

Result<std::unique_ptr<Dashboard>> Dashboard::start(asio::io_context& io, DashboardOptions options,
                                                    std::shared_ptr<const LiveState> state,
                                                    const ServerCounters* server, std::shared_ptr<spdlog::logger> log) {
  const bool tls = options.tls != nullptr;
  if (!tls && !isLoopback(options.listen.host))
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("server.http {}: beyond a loopback address the dashboard is served only over TLS to "
                              "operator certificates (server.http-tls = auto or on)",
                              options.listen.toString()));
  std::unique_ptr<Dashboard> d(new Dashboard(io, std::move(options), std::move(state), server, std::move(log)));
  mg_init_library(0);
  // civetweb listens on the operators' address itself in plain HTTP, or on a loopback
  // port of its own behind the TLS front.
  const std::string listen =
      tls ? std::string("127.0.0.1:0")
          : (d->options_.listen.host.find(':') != std::string::npos ? "[" + d->options_.listen.host + "]"
                                                                    : d->options_.listen.host) +
                fmt::format(":{}", d->options_.listen.port);
  const std::string threads = fmt::format("{}", std::max(1u, d->options_.threads));
  const char* config[] = {"listening_ports", listen.c_str(),      "num_threads", threads.c_str(), "request_timeout_ms",
                          "10000",           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  callbacks.log_message = civetwebLog;
  d->http_ = mg_start(&callbacks, d->log_.get(), config);
  if (!d->http_)
    return Status(StatusCode::kIo, fmt::format("cannot serve the dashboard on {}: the address is in use or invalid",
                                               tls ? listen : d->options_.listen.toString()));
  mg_set_request_handler(d->http_, "/", &Dashboard::handle, d.get());
  mg_server_port ports[2];
  if (mg_get_server_ports(d->http_, 2, ports) < 1)
    return Status(StatusCode::kInternal, "the dashboard's HTTP server reports no port");
  d->httpPort_ = static_cast<uint16_t>(ports[0].port);
  d->port_ = d->httpPort_;
  if (tls) {
    if (Status st = d->startFront(); !st) return st;
    d->log_->info("dashboard on https://{}:{}/ (mutual TLS: operator certificates only), /metrics beside it",
                  d->options_.listen.host, d->port_);
  } else {
    d->log_->info("dashboard on http://{}:{}/ (this machine only), /metrics beside it", d->options_.listen.host,
                  d->port_);
  }
  return d;
}

void Dashboard::stop() {
  if (stopping_.exchange(true)) return;
  // On the acceptor's strand, where its accept loop runs.
  if (front_)
    asio::post(acceptor_.get_executor(), [this] {
      std::error_code ec;
      acceptor_.close(ec);
    });
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : relays_)
      if (auto tls = weak.lock()) asio::post(tls->executor(), [tls] { tls->close(); });
    relays_.clear();
  }
  if (http_) {
    mg_stop(http_);
    http_ = nullptr;
  }
}

int Dashboard::handle(mg_connection* conn, void* self) {
  return static_cast<Dashboard*>(self)->serve(conn);
}

// Behind the TLS front, civetweb's loopback port answers only the front's own
// connections: a request from any other local process is refused without a word of
// the state. In plain mode, a Host header that names neither an IP address nor
// localhost is refused (a page of another site reaching this port through DNS
// rebinding names its own host).
bool Dashboard::admitted(const mg_request_info* request) {
  if (front_) {
    std::lock_guard lock(mu_);
    return std::string_view(request->remote_addr) == "127.0.0.1" &&
           frontPorts_.contains(static_cast<uint16_t>(request->remote_port));
  }
  const char* host = nullptr;
  for (int i = 0; i < request->num_headers; ++i)
    if (request->http_headers[i].name && mg_strcasecmp(request->http_headers[i].name, "Host") == 0)
      host = request->http_headers[i].value;
  if (!host) return true;  // HTTP/1.0 without Host: not a browser's request
  std::string name(host);
  if (!name.empty() && name.front() == '[') {
    name = name.substr(1, name.find(']') - 1);
  } else if (const auto colon = name.rfind(':'); colon != std::string::npos) {
    name.resize(colon);
  }
  std::error_code ec;
  (void)asio::ip::make_address(name, ec);
  return !ec || name == "localhost";
}

int Dashboard::serve(mg_connection* conn) {
  ++counters_.requests;
  const mg_request_info* request = mg_get_request_info(conn);
  if (!admitted(request)) {
    ++counters_.refusedPeers;
    return respond(conn, 403, "text/plain", "403 Forbidden: not through the dashboard's front door\n", false);
  }
  const std::string_view method = request->request_method ? request->request_method : "";
  const std::string_view uri = request->local_uri ? request->local_uri : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) return respond(conn, 405, "text/plain", "only GET and HEAD\n", false);
  if (uri == "/" || uri == "/index.html") return respond(conn, 200, "text/html; charset=utf-8", dashboardPage(), head);
  if (uri == "/dashboard.js") return respond(conn, 200, "text/javascript", dashboardScript(), head);
  if (uri == "/api/state") return respond(conn, 200, "application/json", state_->stateJson(wallMs()), head);
  if (uri == "/api/plots.svg") return respond(conn, 200, "image/svg+xml", state_->plotsSvg().first, head);
  if (uri == "/metrics")
    return respond(conn, 200, "text/plain; version=0.0.4; charset=utf-8", metricsText(state_->counts(), server_), head);
  return respond(conn, 404, "text/plain", "not found\n", head);
}

Status Dashboard::startFront() {
  auto port = listenOn(acceptor_, options_.listen, 64);
  if (!port) return port.status().withContext("server.http");
  port_ = *port;
  front_ = true;
  asio::co_spawn(acceptor_.get_executor(), acceptLoop(), asio::detached);
  return Status::ok();
}

asio::awaitable<void> Dashboard::acceptLoop() {
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), kAsTuple);
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) break;
      continue;
    }
    auto executor = socket.get_executor();
    asio::co_spawn(executor, relay(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Dashboard::relay(asio::ip::tcp::socket socket) {
  auto made = net::TlsStream::create(std::move(socket), options_.tls);
  if (!made) co_return;
  std::shared_ptr<net::TlsStream> tls = std::move(*made);
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) co_return;
    if (relays_.size() >= options_.maxConnections) {
      log_->warn("dashboard: refusing a connection from {}: {} open (the limit)", tls->peer().address, relays_.size());
      co_return;  // the socket closes with the stream
    }
    id = nextRelay_++;
    relays_.emplace(id, tls);
  }
  const Registered registered(*this, id);
  tls->expiresAfter(options_.handshakeTimeout);
  if (Status st = co_await tls->handshake(); !st) {
    ++counters_.failedHandshakes;
    log_->info("dashboard: refused {}: {}", tls->peer().address, st.message());
    tls->close();
    co_return;
  }
  const net::PeerIdentity peer = tls->peer();
  if (net::roleFromOu(peer.role, net::Role::kClient) != net::Role::kOperator) {
    ++counters_.refusedPeers;
    const std::string body = fmt::format(
        "403 Forbidden: the certificate of {} states the role '{}'; the dashboard is for operator certificates "
        "(starling-coordinator init --operators N)\n",
        peer.commonName, peer.role.empty() ? "client" : peer.role);
    const std::string response = fmt::format(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n"
        "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
    log_->warn("dashboard: refused {} from {}: not an operator (role '{}')", peer.commonName, peer.address, peer.role);
    (void)co_await tls->writeAll(std::span(reinterpret_cast<const uint8_t*>(response.data()), response.size()));
    co_await tls->shutdown();
    tls->close();
    co_return;
  }
  auto upstream = std::make_shared<asio::ip::tcp::socket>(tls->executor());
  auto [ec] = co_await upstream->async_connect({asio::ip::address_v4::loopback(), httpPort_}, kAsTuple);
  if (ec) {
    log_->warn("dashboard: cannot reach the HTTP server on port {}: {}", httpPort_, ec.message());
    tls->close();
    co_return;
  }
  // civetweb serves this connection's requests: its port is the front's until it closes.
  std::error_code portError;
  const uint16_t localPort = upstream->local_endpoint(portError).port();
  if (portError) co_return;
  registered.usePort(localPort);
  // Operator -> civetweb, beside civetweb -> operator below; whichever ends first ends
  // the other (civetweb closes after each response).
  asio::co_spawn(
      tls->executor(),
      [tls, upstream, idle = options_.idleTimeout]() -> asio::awaitable<void> {
        std::array<uint8_t, 16 * 1024> buffer;
        while (true) {
          tls->expiresAfter(idle);
          auto n = co_await tls->readSome(buffer);
          if (!n || *n == 0) break;
          auto [wec, written] = co_await asio::async_write(*upstream, asio::buffer(buffer.data(), *n), kAsTuple);
          if (wec) break;
        }
        std::error_code ignored;
        upstream->shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      },
      asio::detached);
  std::array<uint8_t, 16 * 1024> buffer;
  while (true) {
    auto [rec, n] = co_await upstream->async_read_some(asio::buffer(buffer), kAsTuple);
    if (rec || n == 0) break;
    if (Status st = co_await tls->writeAll(std::span<const uint8_t>(buffer.data(), n)); !st) break;
  }
  co_await tls->shutdown();
  tls->close();
  std::error_code ignored;
  upstream->close(ignored);
}

}  // namespace starling::coordinator
