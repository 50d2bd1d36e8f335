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

import json
import os

from ._starling import Client, Error, version
from ._starling import report_json as _report_json
from ._starling import simulate as _simulate

__all__ = ["Client", "Error", "read_database", "simulate", "version"]


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
