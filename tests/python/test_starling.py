"""The `starling` Python module against the real parts: a starling-coordinator process
over mutual TLS, starling-client processes beside the Python clients, starling-sim's
CSV, and the coordinator's SQLite database.

meson test runs this with PYTHONPATH=build/python and the binaries in
STARLING_COORDINATOR, STARLING_CLIENT and STARLING_SIM."""

import csv
import json
import os
import re
import subprocess
import threading
import time

import numpy as np
import pytest

import starling

COORDINATOR = os.environ.get("STARLING_COORDINATOR", "")
CLIENT = os.environ.get("STARLING_CLIENT", "")
SIM = os.environ.get("STARLING_SIM", "")
DATA = os.environ.get("STARLING_DATA", "/usr/share/datasets/fashion-mnist")
have_data = os.path.exists(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
needs_data = pytest.mark.skipif(not have_data, reason=f"no Fashion-MNIST in {DATA} (dataset-fashion-mnist)")


@pytest.fixture(scope="module")
def fashion():
    images = starling.read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    labels = starling.read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int32)
    return images, labels


class Coordinator:
    """A starling-coordinator process on 127.0.0.1 with certificates for `clients`."""

    def __init__(self, work, clients, *args):
        self.work = work
        self.certs = os.path.join(work, "certs")
        self.db = os.path.join(work, "starling.db")
        if not os.path.exists(self.certs):
            subprocess.run([COORDINATOR, "init", "--out", self.certs, "--clients", str(clients)], check=True,
                           stdout=subprocess.DEVNULL)
        self.log = open(os.path.join(work, "coordinator.log"), "w")
        self.proc = subprocess.Popen([COORDINATOR, "run", "--certs", self.certs, "--listen", "127.0.0.1:0", "--db",
                                      self.db, *args], stdout=self.log, stderr=subprocess.STDOUT)
        self.address = None
        for _ in range(400):
            text = open(self.log.name).read()
            m = re.search(r"listening on (127\.0\.0\.1:[0-9]+)", text)
            if m:
                self.address = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("the coordinator did not start:\n" + open(self.log.name).read())

    def wait(self, timeout=300):
        return self.proc.wait(timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# The demo's data and model, shorter: two clients, the training set split in two.
TASK = ["--model", "mlp:784-64-10", "--clients-per-round", "2", "--rounds", "15", "--tau", "40", "--lr", "0.05",
        "--uplink", "topk", "--uplink-density", "0.1", "--downlink", "topk", "--downlink-density", "0.1",
        "--deadline-ms", "60000"]


def last_accuracy(report):
    values = [r["test_accuracy"] for r in report["rounds"] if r.get("test_accuracy") is not None]
    return values[-1]


@needs_data
def test_python_clients_train_like_starling_client(tmp_path, fashion):
    images, labels = fashion
    # Python: two clients in threads of this process, each on half of the training set
    # as NumPy arrays (run() releases the GIL).
    py_work = tmp_path / "python"
    py_work.mkdir()
    coord = Coordinator(str(py_work), 2, *TASK, "--test-data", DATA)
    try:
        clients = []
        for i in range(2):
            c = starling.Client.from_certs(coord.address, coord.certs, f"client-{i}", seed=i, log_level="warn")
            c.set_data(images[i::2], labels[i::2], num_classes=10, scale=1 / 255)
            assert c.data_size == len(labels[i::2])
            clients.append(c)
        errors = []

        def run(c):
            try:
                c.run()
            except starling.Error as e:
                errors.append(e)

        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors
        assert coord.wait() == 0
        for c in clients:
            assert c.state == "done"
            s = c.stats()
            assert s["rounds_accepted"] == 15
            assert s["held_round"] >= 14
            model = c.model()
            assert model.dtype == np.float32 and model.shape == (784 * 64 + 64 + 64 * 10 + 10,)
    finally:
        coord.close()
    py_report = starling.read_database(coord.db)

    # starling-client: the same task, two processes on halves of the same data.
    cli_work = tmp_path / "cli"
    cli_work.mkdir()
    coord = Coordinator(str(cli_work), 2, *TASK, "--test-data", DATA)
    try:
        procs = [subprocess.Popen([CLIENT, "--coordinator", coord.address, "--certs", coord.certs, "--id",
                                   f"client-{i}", "--data", DATA, "--shard", f"{i}/2", "--seed", str(i)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
        assert coord.wait() == 0
        assert [p.wait(60) for p in procs] == [0, 0]
    finally:
        coord.close()
    cli_report = starling.read_database(coord.db)

    py_acc, cli_acc = last_accuracy(py_report), last_accuracy(cli_report)
    print(f"test accuracy after 15 rounds: Python clients {py_acc:.4f}, starling-client {cli_acc:.4f}")
    assert sum(r["status"] == "committed" for r in py_report["rounds"]) == 15
    assert py_acc > 0.75  # chance is 0.1
    assert abs(py_acc - cli_acc) < 0.02


@needs_data
def test_read_database_is_the_reports_json(tmp_path, fashion):
    images, labels = fashion
    coord = Coordinator(str(tmp_path), 1, "--model", "linear:784-10", "--clients-per-round", "1", "--rounds", "2",
                        "--tau", "10", "--test-data", DATA)
    try:
        c = starling.Client.from_certs(coord.address, coord.certs, "client-0", log_level="warn")
        c.set_data(images[:2000], labels[:2000], num_classes=10, scale=1 / 255)
        c.run()
        assert coord.wait() == 0
    finally:
        coord.close()
    report = starling.read_database(coord.db)
    printed = json.loads(subprocess.run([COORDINATOR, "report", "--db", coord.db, "--format", "json"], check=True,
                                        capture_output=True, text=True).stdout)
    assert report == printed
    assert [r["round"] for r in report["rounds"] if r["status"] == "committed"] == [1, 2]
    assert all(re.fullmatch(r"0x[0-9a-f]{16}", r["model_checksum"]) for r in report["rounds"])


def test_read_database_refuses_what_is_not_one(tmp_path):
    with pytest.raises(starling.Error, match="no database"):
        starling.read_database(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(starling.Error):
        starling.read_database(junk)


SIM_SETTINGS = dict(clients=20, rounds=3, model="mlp:784-16-10", train_examples=3000, test_examples=500,
                    clients_per_round=5, tau=5, seed=3)


@needs_data
def test_simulate_returns_the_rounds_starling_sim_writes(tmp_path):
    seen = []
    rounds = starling.simulate(on_round=lambda r: seen.append(r["round"]), **SIM_SETTINGS)
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert seen == [1, 2, 3]
    assert all(r["strategy"] == "default" and r["committed"] for r in rounds)
    assert rounds[-1]["accuracy"] is not None and 0.1 < rounds[-1]["accuracy"] <= 1
    assert rounds[-1]["total_bytes"] > rounds[0]["total_bytes"] > 0
    # The same settings through the binary: the same models, round by round.
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SIM_SETTINGS.items()]
    subprocess.run([SIM, "--out", str(tmp_path), "--quiet", *flags], check=True, stdout=subprocess.DEVNULL)
    with open(tmp_path / "default.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["model_checksum"], 16) for r in rows] == [r["model_checksum"] for r in rounds]


def test_simulate_refuses_bad_settings_naming_them():
    with pytest.raises(starling.Error, match="no-such-setting"):
        starling.simulate(no_such_setting=1)
    with pytest.raises(starling.Error, match="tau"):
        starling.simulate(tau="many")


@needs_data
def test_an_on_round_that_raises_ends_the_run_with_its_exception():
    seen = []

    def boom(r):
        seen.append(r["round"])
        raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        starling.simulate(on_round=boom, **SIM_SETTINGS)
    assert seen == [1]  # the run ended at the first round


def test_simulate_refuses_an_empty_only():
    with pytest.raises(starling.Error, match="only"):
        starling.simulate(only=[])


def test_owner_calls_are_refused_while_run_is_in_progress(tmp_path):
    subprocess.run([COORDINATOR, "init", "--out", str(tmp_path), "--clients", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    c = starling.Client.from_certs("127.0.0.1:1", tmp_path, "client-0", log_level="off")
    c.set_data(np.zeros((4, 3), dtype=np.float32), np.array([0, 1, 0, 1], dtype=np.int32))
    outcome = []

    def run():
        try:
            c.run()
            outcome.append(None)
        except starling.Error as e:
            outcome.append(e.code)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while c.state != "connecting" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.state == "connecting"
    for call in (lambda: c.set_data(np.zeros((2, 3)), np.array([0, 1])), c.model, lambda: c.data_size, c.run):
        with pytest.raises(starling.Error) as e:
            call()
        assert e.value.code == 6 and "in progress" in str(e.value)
    assert c.stats()["rounds_trained"] == 0  # stats and state may be read meanwhile
    c.stop()
    t.join(10)
    assert not t.is_alive()
    assert outcome == [7]  # STARLING_ERR_STOPPED


def test_client_refuses_what_it_cannot_use(tmp_path):
    with pytest.raises(starling.Error) as e:
        starling.Client("127.0.0.1:1", ca=str(tmp_path / "ca.crt"), cert=str(tmp_path / "c.crt"),
                        key=str(tmp_path / "c.key"))
    assert e.value.code in (2, 3)  # STARLING_ERR_NOT_FOUND or IO: the files are missing
    assert "ca.crt" in str(e.value)


def test_set_data_checks_shapes(tmp_path):
    subprocess.run([COORDINATOR, "init", "--out", str(tmp_path), "--clients", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    c = starling.Client.from_certs("127.0.0.1:1", tmp_path, "client-0")
    with pytest.raises(starling.Error, match="2-d"):
        c.set_data(np.zeros(10, dtype=np.float32), np.zeros(10, dtype=np.int32))
    with pytest.raises(starling.Error, match="rows"):
        c.set_data(np.zeros((10, 3), dtype=np.float32), np.zeros(9, dtype=np.int32))
    c.set_data(np.zeros((10, 3)), np.arange(10) % 2)  # float64 and int64: converted
    assert c.data_size == 10
    c.set_targets(np.ones((4, 2)), np.arange(4.0))
    assert c.data_size == 4
    with pytest.raises(starling.Error) as e:
        c.model()  # before any run
    assert e.value.code == 6  # STARLING_ERR_STATE


def test_stop_from_another_thread_ends_run(tmp_path):
    subprocess.run([COORDINATOR, "init", "--out", str(tmp_path), "--clients", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    # Nothing listens on port 1: run() keeps reconnecting until stop().
    c = starling.Client.from_certs("127.0.0.1:1", tmp_path, "client-0", log_level="off")
    c.set_data(np.zeros((4, 3), dtype=np.float32), np.array([0, 1, 0, 1], dtype=np.int32))
    threading.Timer(0.5, c.stop).start()
    started = time.monotonic()
    with pytest.raises(starling.Error) as e:
        c.run()
    assert e.value.code == 7  # STARLING_ERR_STOPPED
    assert time.monotonic() - started < 10


def test_read_idx_reads_and_refuses(tmp_path):
    good = tmp_path / "x.idx"
    good.write_bytes(bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(6)))
    assert starling.read_idx(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    (tmp_path / "short.idx").write_bytes(bytes([0, 0, 0x08, 1, 0, 0, 0, 9, 1, 2]))
    with pytest.raises(starling.Error, match="truncated") as e:
        starling.read_idx(tmp_path / "short.idx")
    assert e.value.code == 4
    (tmp_path / "bad.idx").write_bytes(b"PK\x03\x04 not idx")
    with pytest.raises(starling.Error, match="bad magic"):
        starling.read_idx(tmp_path / "bad.idx")
