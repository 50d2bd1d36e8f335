#!/usr/bin/python3
"""bench/privacy.py BUILD_DIR [--rounds R] [--jobs J] [--keep DIR]

Differential privacy and robust aggregation on the simulator (docs/privacy.md): a
Fashion-MNIST MLP (mlp:784-200-200-10) trained by a population of 10,000 clients (six
examples each, IID), 100 a round.

1. The accountant against published values: `starling-sim privacy --order` beside the
   figures published with TensorFlow Privacy's accountant and Abadi et al.'s 1.26.
2. Accuracy against epsilon (delta 1e-5): epsilon in {inf, 8, 3, 1}, each noise
   multiplier found by `starling-sim privacy --target-epsilon` for R rounds of Poisson
   sampling at q = 0.01; without compression and with top-k 1% fp16 uplinks under error
   feedback. epsilon = inf is the non-private run (no clipping, no noise).
3. Where the noise is added, at epsilon 8 (dense): fixed-size sampling (K = 100 of the
   10,000, q = 0.01, replace-one) with central noise and with distributed noise (each
   client adds its share); and FedBuff (mode async, buffer 100, 130 training at once,
   max staleness 10), accounted per client without amplification, its noise set so
   that each client can afford ASYNC_UPDATES updates within the budget, which then ends
   training.
4. Robust aggregation: 20% of the clients attack (sign-flip x4, scale x10, Gaussian noise
   of 1000 x the update's norm, label flipping), each under mean, median, trimmed mean
   (beta 0.25) and multi-Krum (f = 25); and the clean run under each rule.

A run's accuracy is the mean of its last three evaluations (every 5 rounds); a run whose
model diverged (NaN) counts at chance, 10%. Every
strategy is an independent starling-sim process, J at a time. Prints the tables and
  summary: acc_eps8_drop_pt=... acc_eps3_drop_pt=... robust_worst_drop_pt=...
           mean_under_attack_acc=... accountant_max_rel_err=...
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BASE = """
[task]
model = "mlp:784-200-200-10"
rounds = {rounds}
clients-per-round = 100
over-selection = 1.0
min-clients = 10000
deadline-ms = 600000
max-staleness = 0
max-norm-ratio = 0
seed = 1

[train]
lr = 0.1
tau = 5
batch-size = 6

[compression]
uplink = "identity"
downlink = "identity"
error-feedback = false

[eval]
eval-every = 5

[sim]
clients = 10000
partition = "iid"
test-examples = 0
device-gflops = 2.0
speed-spread = 1.0
dropout = 0.0
attack = "{attack}"
attackers = {attackers}
"""

COMPRESSED = ('compression = { uplink = "topk", uplink-density = 0.01, fp16-values = true, '
              'error-feedback = true }')
RULES = {
    "mean": 'task = { aggregation = "mean" }',
    "median": 'task = { aggregation = "median" }',
    "trimmed-mean": 'task = { aggregation = "trimmed-mean", trim-fraction = 0.25 }',
    "multi-krum": 'task = { aggregation = "multi-krum", krum-faulty = 25 }',
}
ATTACKS = ["sign-flip", "scale", "noise:1000", "label-flip"]
EPSILONS = [8, 3, 1]
ASYNC_UPDATES = 2
RATE = 0.01
DELTA = 1e-5

# Published values (TensorFlow Privacy's accountant tests, tensorflow_privacy/privacy/
# analysis/rdp_accountant_test.py; Abadi et al. 2016, section 3.1) and the
# `starling-sim privacy` flags that compute ours. "rdp" compares rdp_at_order, "eps" epsilon.
PUBLISHED = [
    ("RDP, 10 rounds q=0.1 sigma=2, order 5", "rdp", 0.07737,
     ["--sampling-rate", "0.1", "--rounds", "10", "--noise-multiplier", "2", "--order", "5"]),
    ("RDP, 50 rounds q=0.01 sigma=2.5, order 5", "rdp", 0.00218075,
     ["--sampling-rate", "0.01", "--rounds", "50", "--noise-multiplier", "2.5", "--order", "5"]),
    ("RDP, 50 rounds q=0.01 sigma=2.5, order 50", "rdp", 0.023846,
     ["--sampling-rate", "0.01", "--rounds", "50", "--noise-multiplier", "2.5", "--order", "50"]),
    ("RDP, 50 rounds q=0.01 sigma=2.5, order 100", "rdp", 167.416307,
     ["--sampling-rate", "0.01", "--rounds", "50", "--noise-multiplier", "2.5", "--order", "100"]),
    ("RDP without replacement, 50 rounds q=0.01 sigma=2.5, order 50", "rdp", 9.8474e-2,
     ["--sampling", "fixed", "--sampling-rate", "0.01", "--rounds", "50", "--noise-multiplier", "5", "--order",
      "50"]),
    ("RDP without replacement, 50 rounds q=0.01 sigma=2.5, order 1024", "rdp", 3.8656e3,
     ["--sampling", "fixed", "--sampling-rate", "0.01", "--rounds", "50", "--noise-multiplier", "5", "--order",
      "1024"]),
    ("epsilon, DP-SGD MNIST q=0.01 sigma=4 10,000 steps (Abadi et al.)", "eps", 1.26,
     ["--sampling-rate", "0.01", "--rounds", "10000", "--noise-multiplier", "4"]),
]


def line_values(text):
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def privacy(sim, args):
    out = subprocess.run([sim, "privacy", *args], check=True, capture_output=True, text=True).stdout
    return line_values(out)


def accountant(sim):
    rows, worst = [], 0.0
    for name, kind, published, args in PUBLISHED:
        v = privacy(sim, args)
        ours = float(v["rdp_at_order"] if kind == "rdp" else v["epsilon"])
        # Abadi et al. give two decimals: ours is compared at that precision's half-unit.
        err = abs(ours - published) / published
        if kind == "eps":
            err = max(0.0, abs(ours - published) - 0.005) / published
        worst = max(worst, err)
        rows.append((name, published, ours, err))
    return rows, worst


def run_strategy(sim, workdir, label, toml, quiet=True):
    """Runs one starling-sim config; returns (label, rows of its CSV, seconds). A run
    whose model diverged (a client's update holds NaN: the attack won) gives None for
    its rows. A finished run in a kept directory (--keep) is read, not run again."""
    cfg = os.path.join(workdir, label + ".toml")
    out = os.path.join(workdir, label)
    start = time.time()
    if os.path.exists(os.path.join(out, "diverged")):
        return label, None, 0.0
    if not os.path.exists(os.path.join(out, "summary.txt")) or open(cfg).read() != toml:
        with open(cfg, "w") as f:
            f.write(toml)
        proc = subprocess.run([sim, "--config", cfg, "--out", out, "--quiet"], capture_output=True, text=True)
        if proc.returncode != 0:
            if "NaN" in proc.stderr:
                os.makedirs(out, exist_ok=True)
                with open(os.path.join(out, "diverged"), "w") as f:
                    f.write(proc.stderr)
                return label, None, time.time() - start
            raise RuntimeError(f"{label}: starling-sim failed:\n{proc.stderr[-2000:]}")
    csvs = [p for p in os.listdir(out) if p.endswith(".csv")]
    with open(os.path.join(out, csvs[0])) as f:
        rows = list(csv.DictReader(f))
    return label, rows, time.time() - start


# A diverged model (None) is counted at chance level: ten classes.
CHANCE = 0.10


def final_accuracy(rows):
    if rows is None:
        return CHANCE
    acc = [float(r["accuracy"]) for r in rows if r["accuracy"]]
    tail = acc[-3:]
    return sum(tail) / len(tail) if tail else float("nan")


def last_epsilon(rows):
    for r in reversed(rows or []):
        if r.get("epsilon"):
            return r["epsilon"]
    return "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    sim = os.path.join(a.build, "tests/harness/starling-sim")
    workdir = a.keep or tempfile.mkdtemp(prefix="starling-privacy-")
    os.makedirs(workdir, exist_ok=True)

    rows, acc_err = accountant(sim)
    print("Accountant against published values")
    print(f"  {'value':66} {'published':>12} {'Starling':>14} {'rel err':>9}")
    for name, published, ours, err in rows:
        print(f"  {name:66} {published:12.6g} {ours:14.9g} {err:9.2e}")
    print(flush=True)

    sigmas = {}
    for eps in EPSILONS:
        v = privacy(sim, ["--sampling-rate", str(RATE), "--rounds", str(a.rounds), "--delta", str(DELTA),
                          "--target-epsilon", str(eps)])
        sigmas[eps] = float(v["noise_multiplier"])

    sigma_fixed = float(privacy(sim, ["--sampling", "fixed", "--sampling-rate", str(RATE), "--rounds", str(a.rounds),
                                      "--delta", str(DELTA), "--target-epsilon", "8"])["noise_multiplier"])
    sigma_async = float(privacy(sim, ["--sampling", "individual", "--rounds", str(ASYNC_UPDATES), "--delta",
                                      str(DELTA), "--target-epsilon", "8"])["noise_multiplier"])

    jobs = []
    base_clean = BASE.format(rounds=a.rounds, attack="none", attackers=0)
    for placement in ["central", "distributed"]:
        jobs.append((f"fixed-{placement}-eps-8", base_clean + "\n[[strategy]]\nname = \"run\"\n" +
                     f'privacy = {{ update-clip-norm = 1.0, noise-multiplier = {sigma_fixed}, delta = {DELTA}, '
                     f'noise = "{placement}" }}\n'))
    jobs.append(("fedbuff-eps-8", base_clean + "\n[[strategy]]\nname = \"run\"\n" +
                 'task = { mode = "async", concurrency = 130, max-staleness = 10 }\n' +
                 f'privacy = {{ update-clip-norm = 1.0, noise-multiplier = {sigma_async}, delta = {DELTA}, '
                 f'target-epsilon = 8 }}\n'))
    for comp in ["dense", "topk"]:
        extra = ("\n" + COMPRESSED + "\n") if comp == "topk" else "\n"
        jobs.append((f"{comp}-eps-inf", base_clean + "\n[[strategy]]\nname = \"run\"" + extra))
        for eps in EPSILONS:
            jobs.append((f"{comp}-eps-{eps}", base_clean + "\n[[strategy]]\nname = \"run\"" + extra +
                         f'task = {{ sampling = "poisson", sampling-rate = {RATE} }}\n'
                         f'privacy = {{ update-clip-norm = 1.0, noise-multiplier = {sigmas[eps]}, '
                         f'delta = {DELTA} }}\n'))
    for attack in ["none"] + ATTACKS:
        base = BASE.format(rounds=a.rounds, attack=attack, attackers=0.2 if attack != "none" else 0)
        for rule, setting in RULES.items():
            if attack == "none" and rule == "mean":
                continue  # the clean mean is dense-eps-inf
            label = f"attack-{attack.split(':')[0]}-{rule}"
            jobs.append((label, base + f"\n[[strategy]]\nname = \"run\"\n{setting}\n"))

    print(f"{len(jobs)} simulator runs of {a.rounds} rounds, {a.jobs} at a time (in {workdir})", file=sys.stderr)
    results, done = {}, 0
    started = time.time()
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for label, rows_, seconds in pool.map(lambda j: run_strategy(sim, workdir, *j), jobs):
            results[label] = rows_
            done += 1
            status = "diverged (NaN), counted at chance" if rows_ is None else f"{100 * final_accuracy(rows_):.2f}%"
            print(f"  [{done}/{len(jobs)}] {label}: {status} in {seconds:.0f} s "
                  f"({time.time() - started:.0f} s so far)", file=sys.stderr, flush=True)

    acc = {k: 100 * final_accuracy(v) for k, v in results.items()}
    print(f"Accuracy against epsilon (delta {DELTA}; q = {RATE}, {a.rounds} rounds, clip norm 1)")
    print(f"  {'epsilon':>8} {'sigma':>7} {'dense':>8} {'top-k 1%':>9} {'eps spent':>10}")
    print(f"  {'inf':>8} {'-':>7} {acc['dense-eps-inf']:7.2f}% {acc['topk-eps-inf']:8.2f}% {'-':>10}")
    for eps in EPSILONS:
        print(f"  {eps:>8} {sigmas[eps]:7.3g} {acc[f'dense-eps-{eps}']:7.2f}% {acc[f'topk-eps-{eps}']:8.2f}% "
              f"{last_epsilon(results[f'dense-eps-{eps}']):>10}")
    print()
    print("Where the noise is added, at epsilon 8 (dense; steps: the server steps committed)")
    print(f"  {'setting':34} {'sigma':>7} {'accuracy':>9} {'eps spent':>10} {'steps':>6}")
    placements = [("poisson q=0.01, central", sigmas[8], "dense-eps-8"),
                  ("fixed K=100 of 10,000, central", sigma_fixed, "fixed-central-eps-8"),
                  ("fixed K=100 of 10,000, distributed", sigma_fixed, "fixed-distributed-eps-8"),
                  (f"FedBuff, per client ({ASYNC_UPDATES} updates)", sigma_async, "fedbuff-eps-8")]
    for name, sigma, label in placements:
        print(f"  {name:34} {sigma:7.3g} {acc[label]:8.2f}% {last_epsilon(results[label]):>10} "
              f"{len(results[label] or []):>6}")
    print()
    print("Accuracy under 20% attackers (clean: no attackers)")
    print(f"  {'attack':12} " + " ".join(f"{r:>13}" for r in RULES))
    clean = acc["dense-eps-inf"]
    table = {"none": {r: (clean if r == "mean" else acc[f"attack-none-{r}"]) for r in RULES}}
    for attack in ATTACKS:
        name = attack.split(":")[0]
        table[attack] = {r: acc[f"attack-{name}-{r}"] for r in RULES}
    for attack, by_rule in table.items():
        print(f"  {attack.split(':')[0] if attack != 'none' else 'clean':12} " +
              " ".join(f"{by_rule[r]:12.2f}%" for r in RULES))
    worst_drop = max(clean - max(table[at][r] for r in RULES if r != "mean") for at in ATTACKS)
    mean_under_attack = min(table[at]["mean"] for at in ATTACKS)
    print()
    print(f"summary: acc_eps8_drop_pt={acc['dense-eps-inf'] - acc['dense-eps-8']:.2f} "
          f"acc_eps3_drop_pt={acc['dense-eps-inf'] - acc['dense-eps-3']:.2f} "
          f"robust_worst_drop_pt={worst_drop:.2f} mean_under_attack_acc={mean_under_attack / 100:.4f} "
          f"accountant_max_rel_err={acc_err:.2e}")
    if not a.keep:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
