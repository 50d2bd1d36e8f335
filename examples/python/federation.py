#!/usr/bin/env python3
"""Starling from Python, notebook-style: run each `# %%` cell in Jupyter or VS Code, or
the whole file with

    PYTHONPATH=build-release/python python3 examples/python/federation.py

It starts a real coordinator (starling-coordinator, over mutual TLS on 127.0.0.1),
trains two Python clients on Fashion-MNIST held as NumPy arrays, reads the
coordinator's database, and then asks the simulator what the same task would cost
with 100 devices and two compression strategies. docs/python.md explains the API.
"""

# %% Where things are: the built binaries (or the installed ones) and the data.
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np

import starling

BUILD = os.environ.get("STARLING_BUILD", "build-release")
COORDINATOR = shutil.which("starling-coordinator") or f"{BUILD}/coordinator/starling-coordinator"
DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
work = tempfile.mkdtemp(prefix="starling-python-")
print("starling", starling.version, "| working in", work)


# %% The data: IDX files read into NumPy, split between two clients.
images = starling.read_idx(f"{DATA}/train-images-idx3-ubyte.gz").reshape(-1, 784)
labels = starling.read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int32)
print("training set:", images.shape, "classes:", np.bincount(labels))

# %% A coordinator: certificates, then the daemon with a small task.
subprocess.run([COORDINATOR, "init", "--out", f"{work}/certs", "--clients", "2"], check=True,
               stdout=subprocess.DEVNULL)
log = open(f"{work}/coordinator.log", "w")
coordinator = subprocess.Popen(
    [COORDINATOR, "run", "--certs", f"{work}/certs", "--listen", "127.0.0.1:0", "--db", f"{work}/starling.db",
     "--model", "mlp:784-64-10", "--rounds", "8", "--clients-per-round", "2", "--tau", "40", "--lr", "0.05",
     "--uplink", "topk", "--uplink-density", "0.1", "--downlink", "topk", "--downlink-density", "0.1",
     "--test-data", DATA], stdout=log, stderr=subprocess.STDOUT)
while not (m := re.search(r"listening on (\S+:\d+)", open(log.name).read())):
    if coordinator.poll() is not None:
        raise SystemExit("the coordinator did not start:\n" + open(log.name).read())
    time.sleep(0.05)
address = m.group(1)
print("coordinator at", address)

# %% Two clients, each on half of the data; run() blocks (without the GIL) until the
# coordinator says training is complete, so each gets a thread.
clients = []
for i in range(2):
    client = starling.Client.from_certs(address, f"{work}/certs", f"client-{i}", seed=i, log_level="warn")
    client.set_data(images[i::2], labels[i::2], num_classes=10, scale=1 / 255)
    clients.append(client)
threads = [threading.Thread(target=c.run) for c in clients]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    print("  client-0:", clients[0].state, clients[0].stats()["rounds_accepted"], "rounds accepted", end="\r")
    time.sleep(0.5)
print()
coordinator.wait()
print("client-0:", clients[0].stats())
model = clients[0].model()  # the global model's parameters, float32
print("model parameters:", model.shape)

# %% The coordinator's database: every round, its traffic and test accuracy.
report = starling.read_database(f"{work}/starling.db")
for r in report["rounds"]:
    accuracy = "-" if r["test_accuracy"] is None else f"{r['test_accuracy']:.4f}"
    print(f"round {r['round']:2d} {r['status']:9s} accuracy {accuracy:6s} "
          f"bytes up {r['bytes_up_wire']:8d} down {r['bytes_down_wire']:8d}")

# %% The simulator: the same model on 100 virtual devices, top-k at two densities.
for density in (0.01, 0.1):
    rounds = starling.simulate(clients=100, clients_per_round=10, rounds=10, model="mlp:784-64-10", tau=40,
                               train_examples=20000, test_examples=2000, uplink="topk",
                               uplink_density=density, downlink="topk", downlink_density=density)
    last = rounds[-1]
    print(f"density {density}: accuracy {last['accuracy']:.4f} after {last['round']} rounds, "
          f"{last['total_bytes'] / 1e6:.2f} MB, {last['virtual_seconds']:.0f} virtual seconds")
