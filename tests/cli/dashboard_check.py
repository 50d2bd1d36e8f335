#!/usr/bin/env python3
"""Checks of the coordinator's dashboard (tests/cli/dashboard_test.sh), each a subcommand
that exits 0 when what it checks holds and 1, saying why, when not:

  state URL FIELD OP VALUE       GET URL/api/state; FIELD (dotted) compared: ge, gt, eq
  wait URL FIELD VALUE SECONDS   polls until FIELD >= VALUE
  dom FILE [MIN_ROUND]           a DOM Chromium dumped: round, participants, drawn plots;
                                 prints the round number
  fuzz HOST PORT N SEED          N malformed or hostile requests, and more until two rounds were
                                 committed meanwhile; then GET /api/state still answers
  tls HOST PORT CERTS            operator-0 gets the page over mutual TLS, client-0 gets 403,
                                 no certificate and plain HTTP get nothing
"""
import html.parser
import json
import random
import socket
import ssl
import sys
import time
import urllib.request


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def field(obj, dotted):
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def state(url, name, op, value):
    _, body = get(url.rstrip("/") + "/api/state")
    v = field(json.loads(body), name)
    ok = {"ge": lambda: float(v) >= float(value), "gt": lambda: float(v) > float(value),
          "eq": lambda: str(v) == value}[op]()
    if not ok:
        print(f"  /api/state {name} = {v!r}, wanted {op} {value}")
    return ok


def wait(url, name, value, seconds):
    end = time.time() + float(seconds)
    last = None
    while time.time() < end:
        try:
            _, body = get(url.rstrip("/") + "/api/state")
            last = field(json.loads(body), name)
            if float(last) >= float(value):
                return True
        except OSError:
            pass
        time.sleep(0.2)
    print(f"  /api/state {name} = {last!r} after {seconds} s, wanted >= {value}")
    return False


class Dom(html.parser.HTMLParser):
    """The text of elements by id, the rows of each table's body, and the polylines."""

    def __init__(self):
        super().__init__()
        self.text = {}
        self.rows = {}
        self.polylines = []
        self.svgs = 0
        self.stack = []  # (tag, id)
        self.table = None
        self.in_tbody = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id")
            self.rows.setdefault(self.table, [])
        if tag == "tbody":
            self.in_tbody = True
        if tag == "tr" and self.in_tbody and self.table:
            self.rows[self.table].append([])
        if tag == "td" and self.in_tbody and self.table and self.rows[self.table]:
            self.rows[self.table][-1].append("")
        if tag == "svg":
            self.svgs += 1
        if tag == "polyline":
            self.polylines.append(a.get("points", "").strip())
        if tag not in ("polyline", "line", "rect", "br", "meta", "path"):
            self.stack.append((tag, a.get("id")))

    def handle_endtag(self, tag):
        if tag == "tbody":
            self.in_tbody = False
        if tag == "table":
            self.table = None
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        for _, i in self.stack:
            if i:
                self.text[i] = self.text.get(i, "") + data
        if self.in_tbody and self.table and self.rows[self.table] and self.rows[self.table][-1]:
            self.rows[self.table][-1][-1] += data


def dom(path, min_round="1"):
    d = Dom()
    d.feed(open(path, encoding="utf-8").read())
    problems = []
    round_text = d.text.get("round", "").strip()
    if not round_text.isdigit() or int(round_text) < int(min_round):
        problems.append(f"#round is {round_text!r}, wanted a number >= {min_round}")
    participants = d.rows.get("participants", [])
    if not any(len(r) >= 3 and r[1].startswith("client-") for r in participants):
        problems.append(f"#participants lists no client: {participants[:3]}")
    states = {r[2] for r in participants if len(r) >= 3}
    if not states & {"assigned", "returned", "accepted"}:
        problems.append(f"#participants states {states}")
    drawn = [p for p in d.polylines if len(p.split()) >= 2]
    if d.svgs < 1 or len(drawn) < 3:
        problems.append(f"plots: {d.svgs} svg, {len(drawn)} polylines with 2+ points")
    if not d.rows.get("clients"):
        problems.append("#clients lists no connected client")
    for p in problems:
        print("  " + p)
    print(f"  round {round_text}, {len(participants)} participant rows, {len(drawn)} drawn lines")
    if not problems:
        with open(path + ".round", "w") as f:
            f.write(round_text)
    return not problems


def fuzz(host, port, n, seed):
    rng = random.Random(int(seed))
    paths = ["/", "/api/state", "/metrics", "/api/plots.svg", "/dashboard.js", "/../../etc/passwd",
             "/%00", "/" + "a" * 9000, "/api/state?x=" + "%" * 300, "//", "/index.html/.."]
    methods = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "CONNECT", "TRACE", "G\x00T", "BREW", ""]
    sent = answered = 0
    committed = lambda: json.loads(get(f"http://{host}:{port}/api/state")[1])["rounds_committed"]
    before = committed()
    end = time.time() + 120
    k = -1
    # At least N requests, and on until two rounds were committed meanwhile.
    while True:
        k += 1
        if k >= int(n) and k % 50 == 0 and (committed() >= before + 2 or time.time() > end):
            break
        kind = k % 6
        if kind == 0:  # random bytes
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
        elif kind == 1:  # a request line of random method and path, random headers
            lines = [f"{rng.choice(methods)} {rng.choice(paths)} HTTP/1.{rng.randint(0, 9)}"]
            for _ in range(rng.randint(0, 40)):
                lines.append(f"X-{rng.randint(0, 1 << 30)}: " + "v" * rng.randint(0, 500))
            data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        elif kind == 2:  # a body that claims more than it sends
            data = b"POST /api/state HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 100
        elif kind == 3:  # chunked nonsense
            data = b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + b"\xff" * 50
        elif kind == 4:  # a request cut short
            full = b"GET /api/state HTTP/1.1\r\nHost: localhost\r\n\r\n"
            data = full[: rng.randint(1, len(full) - 1)]
        else:  # a huge header
            data = b"GET / HTTP/1.1\r\nCookie: " + b"c" * rng.randint(10000, 70000) + b"\r\n\r\n"
        try:
            with socket.create_connection((host, int(port)), timeout=2) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                sent += 1
                try:
                    if s.recv(64):
                        answered += 1
                except OSError:
                    pass
        except OSError:
            pass
    status, body = get(f"http://{host}:{port}/api/state")
    after = json.loads(body)["rounds_committed"]
    print(f"  {sent} hostile requests sent, {answered} answered; /api/state afterwards: {status}; "
          f"rounds committed meanwhile: {before} -> {after}")
    if after < before + 2:
        print("  fewer than two rounds were committed while the requests came: they did not overlap training")
    return status == 200 and sent >= int(n) // 2 and after >= before + 2


def tls(host, port, certs):
    def context(name):
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        c.load_verify_locations(f"{certs}/ca.crt")
        c.check_hostname = False  # the coordinator's certificate names localhost and 127.0.0.1
        if name:
            c.load_cert_chain(f"{certs}/{name}.crt", f"{certs}/{name}.key")
        return c

    def request(name, path):
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with context(name).wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                return data

    problems = []
    page = request("operator-0", "/api/state")
    head, _, body = page.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or "round" not in json.loads(body):
        problems.append(f"operator-0 /api/state: {head[:60]!r}")
    metrics = request("operator-0", "/metrics")
    if b"starling_rounds_total" not in metrics:
        problems.append("operator-0 /metrics has no starling_rounds_total")
    refused = request("client-0", "/api/state")
    if not refused.startswith(b"HTTP/1.1 403") or b"operator" not in refused:
        problems.append(f"client-0 was not refused: {refused[:80]!r}")
    try:
        request(None, "/api/state")
        problems.append("a peer without a certificate got an answer")
    except (ssl.SSLError, OSError):
        pass
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"GET /api/state HTTP/1.1\r\nHost: localhost\r\n\r\n")
            if b"HTTP/1.1 200" in s.recv(4096):
                problems.append("plain HTTP got the state from the TLS port")
    except OSError:
        pass
    for p in problems:
        print("  " + p)
    first_line = lambda data: data.split(b"\r\n")[0].decode("latin-1")
    print(f"  operator: {first_line(head)}; client-0: {first_line(refused)}")
    return not problems


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    ok = {"state": state, "wait": wait, "dom": dom, "fuzz": fuzz, "tls": tls}[command](*args)
    sys.exit(0 if ok else 1)
