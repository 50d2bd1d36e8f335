"""Starling from Python: a federated-training client that trains on NumPy arrays and
joins a real coordinator over mutual TLS, the simulator, and a coordinator's database.

    import starling
    client = starling.Client.from_certs("127.0.0.1:7443", "certs", "client-0")
    client.set_data(images, labels, num_classes=10, scale=1 / 255)
    client.run()                      # returns when the coordinator says training is complete
    rounds = starling.simulate(clients=100, rounds=20, model="mlp:784-64-10")
    report = starling.read_database("starling.db")

Failures raise starling.Error, whose .code is the C API's STARLING_ERR_* value.
"""

import gzip
import json
import os

from ._starling import Client, Error, version
from ._starling import report_json as _report_json
from ._starling import simulate as _simulate

__all__ = ["Client", "Error", "read_database", "read_idx", "simulate", "version"]


def _from_certs(cls, coordinator, certs, client_id, **options):
    """A client with the credentials `starling-coordinator init` wrote to `certs` for
    `client_id`: certs/ca.crt, certs/CLIENT_ID.crt and certs/CLIENT_ID.key."""
    certs = os.fspath(certs)
    return cls(coordinator, ca=os.path.join(certs, "ca.crt"),
               cert=os.path.join(certs, client_id + ".crt"),
               key=os.path.join(certs, client_id + ".key"), client_id=client_id, **options)


Client.from_certs = classmethod(_from_certs)


def simulate(config=None, *, only=None, on_round=None, **settings):
    """Runs starling-sim's strategies and returns their ended rounds as a list of dicts
    (strategy, round, committed, virtual_seconds, total_bytes, accuracy, ...).

    config: a TOML file as `starling-sim --config` reads it (its [[strategy]] tables
    each run); settings: starling-sim's flags without their dashes, underscores for
    hyphens (clients=100, rounds=20, uplink_density=0.05), overriding the file;
    only: the names of the strategies to run; on_round: called with each round's dict
    as it ends (progress)."""
    return _simulate(None if config is None else os.fspath(config), settings, only, on_round)


def read_database(path):
    """A coordinator's SQLite database as `starling-coordinator report --format json`
    shows it: a dict with the task, "rounds" (one dict each) and the totals. Read-only:
    safe while the coordinator runs."""
    return json.loads(_report_json(os.fspath(path)))


def read_idx(path):
    """An IDX file (the MNIST and Fashion-MNIST format, gzipped or not) as a NumPy array
    of its shape, e.g. (60000, 28, 28) uint8 images or (60000,) labels."""
    import numpy as np

    path = os.fspath(path)
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise _malformed(f"{path}: not an IDX file (bad magic)")
    types = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in types:
        raise _malformed(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    dtype = np.dtype(types[raw[2]])
    count = int(np.prod(shape)) if shape else 1
    if len(raw) < 4 + 4 * dims + count * dtype.itemsize:
        raise _malformed(f"{path}: truncated: {shape} needs {count * dtype.itemsize} bytes of data")
    return np.frombuffer(raw, dtype=dtype, count=count, offset=4 + 4 * dims).reshape(shape)


def _malformed(message):
    """starling.Error with the C API's code for a file that does not parse."""
    error = Error(message)
    error.code = 4  # STARLING_ERR_MALFORMED
    return error
