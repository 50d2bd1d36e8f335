#!/usr/bin/python3
"""bench/reference.py: an independent PyTorch reference of Starling's training algorithm.

Reads what `starling-sim --export-dir DIR` wrote for one or more strategies (the
round-0 model, the client shards, every client's minibatch order per round, Starling's
per-round test accuracy and payload bytes) and runs the algorithm of ALGORITHMS.md
section 2 on the same inputs, written from the document, not from Starling's code:

  client k:  x <- xhat; tau steps of SGD: m <- mu m + g; x <- x - eta (m + wd x)
             p = (xhat - x) + e_k;  q_k = C_up(p);  e_k <- p - q_k
  server:    Delta = (sum_k w_k steps_k / W) sum_k (w_k / W) q_k / steps_k,
             w_k = examples trained (steps_k x b), W = sum_k w_k (examples, normalized
             by steps; with equal steps the plain weighted mean of the q_k)
             p_s = server_lr Delta + ebar;  q = C_down(p_s);  ebar <- p_s - q;  xhat <- xhat - q

Compressors: identity (fp32), fp16, top-k (exact; ties to the lowest index), rand-k
(indices from the shared seed: SplitMix64 and Floyd's algorithm, as the protocol
defines them), with fp32, fp16 or ternary values (one sign per value, one l1 scale per
256 selected values). Bytes are payload bytes from the wire encoding rules: 28 bytes
of scalar fields, indices as the smallest of Rice-coded gaps, a bitmap and LEB128
delta varints (rand-k: none, only the seed), values 4, 2 or 1/8 bytes each, 4 bytes
per ternary scale. A client that held the previous model is sent the smallest of the
dense model (4 d bytes), the last broadcast and the fp32 values of the coordinates it
changed, in that order of preference on ties.

Prints per strategy a table
  round | acc starling | acc reference | diff pt | bytes starling | bytes reference | ratio | max|dx|
(bytes: payload bytes up + down in the round; max|dx|: largest difference between the
two global models after the round), then one line per strategy and, last,
  summary: configs=N max_acc_diff_pt=X max_bytes_ratio=Y
(max over strategies and rounds; the bytes ratio is max(s/r, r/s), of the uplink and
the downlink bytes taken separately).

Usage: /usr/bin/python3 bench/reference.py EXPORT_DIR [STRATEGY ...] [--data DIR]
                                           [--double] [--weights trained|shard] [--dump DIR] [--jobs N]
--double runs the reference in float64 (to tell which float32 side drifts); --weights
shard weighs each update by its client's data set size instead of the examples it
trained (to measure what that choice of the engine changes on unequal shards).
"""
import argparse
import gzip
import math
import multiprocessing
import os
import struct
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
STREAM_RANDK = 0x72616E646B000001
SCALAR_BYTES = 1 + 4 + 4 + 1 + 1 + 1 + 4 + 4 + 8  # encoding, count, selected, formats, block, seed...
TERNARY_BLOCK = 256


# ---------------------------------------------------------------- inputs

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8)


def load_split(data_dir, prefix, dtype):
    dims, pixels = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    _, labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    n = dims[0]
    # Pixels scale by the float 1/255 (a multiplication, not a division).
    x = torch.from_numpy(pixels.reshape(n, -1).astype(np.float32)) * torch.tensor(1.0 / 255.0, dtype=torch.float32)
    return x.to(dtype), torch.from_numpy(labels.astype(np.int64))


def read_config(path):
    cfg = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.split("=", 1)
                cfg[k.strip()] = v.strip()
    return cfg


def read_model_file(path):
    """Starling's model file: magic, u32 version, u32 spec length, spec, u64 count, floats, u64 checksum."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"STRLMDL\0":
        raise ValueError(path + ": not a Starling model file")
    version, spec_len = struct.unpack_from("<II", data, 8)
    if version != 1:
        raise ValueError(path + ": model file version %d" % version)
    spec = data[16:16 + spec_len].decode()
    count, = struct.unpack_from("<Q", data, 16 + spec_len)
    params = np.frombuffer(data, dtype="<f4", count=count, offset=24 + spec_len).copy()
    return spec, params


def read_shards(path):
    a = np.fromfile(path, dtype="<u4")
    n = int(a[0])
    shards, pos = [], 1
    for _ in range(n):
        size = int(a[pos])
        shards.append(a[pos + 1:pos + 1 + size].astype(np.int64))
        pos += 1 + size
    return shards


def read_batches(path):
    """{(round, client): (steps, b, indices as a steps x b array)}"""
    a = np.fromfile(path, dtype="<u4")
    out, pos = {}, 0
    while pos < len(a):
        rnd, client, steps, b = (int(v) for v in a[pos:pos + 4])
        pos += 4
        out[(rnd, client)] = (steps, b, a[pos:pos + steps * b].astype(np.int64).reshape(steps, b))
        pos += steps * b
    return out


def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        return [dict(zip(header, line.strip().split(","))) for line in f if line.strip()]


# ---------------------------------------------------------------- the model

def mlp_layers(spec):
    """mlp:784-200-200-10 -> [(in, out), ...]; the flat layout is weight {out, in} then bias, per layer."""
    if not spec.startswith("mlp:"):
        raise ValueError("the reference implements mlp specs only, not " + spec)
    sizes = [int(s) for s in spec[4:].split("-")]
    return list(zip(sizes[:-1], sizes[1:]))


class Mlp:
    """Dense layers with ReLU between them, softmax cross-entropy; explicit backward pass."""

    def __init__(self, spec, dtype):
        self.layers = mlp_layers(spec)
        self.size = sum(o * i + o for i, o in self.layers)
        self.dtype = dtype

    def views(self, flat):
        out, off = [], 0
        for i, o in self.layers:
            w = flat[off:off + o * i].view(o, i)
            off += o * i
            out.append((w, flat[off:off + o]))
            off += o
        return out

    def logits(self, flat, x):
        h = x
        params = self.views(flat)
        for j, (w, b) in enumerate(params):
            h = torch.addmm(b, h, w.t())
            if j + 1 < len(params):
                h = torch.relu(h)
        return h

    def grad(self, params, x, y, grads):
        """Writes the gradient of mean_i CE(x_i, y_i) into grads (views() of a flat buffer, like params)."""
        acts = [x]
        h = x
        for j, (w, b) in enumerate(params):
            h = torch.addmm(b, h, w.t())
            if j + 1 < len(params):
                h = torch.relu(h)
            acts.append(h)
        n = x.shape[0]
        dz = torch.softmax(acts[-1], dim=1)
        dz.scatter_add_(1, y.view(-1, 1), torch.full((n, 1), -1.0, dtype=dz.dtype))
        dz.div_(n)
        for j in range(len(params) - 1, -1, -1):
            gw, gb = grads[j]
            torch.mm(dz.t(), acts[j], out=gw)
            torch.sum(dz, dim=0, out=gb)
            if j > 0:
                dz = torch.mm(dz, params[j][0]).mul_(acts[j] > 0)

    def accuracy(self, flat, x, y):
        correct = 0
        for s in range(0, x.shape[0], 1000):
            correct += int((self.logits(flat, x[s:s + 1000]).argmax(dim=1) == y[s:s + 1000]).sum())
        return correct / x.shape[0]


# ---------------------------------------------------------------- compressors and wire sizes

def selected_count(d, density):
    k = math.floor(density * d + 0.5)  # round half away from zero (positive)
    return int(min(max(k, 1), d))


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def randk_indices(seed, d, k):
    """The protocol's rand-k index set: Floyd's algorithm over SplitMix64 (Lemire's multiply-shift)."""
    state = mix64(seed ^ STREAM_RANDK)
    taken = set()
    for j in range(d - k, d):
        state = (state + GOLDEN) & MASK64
        t = (mix64(state) * (j + 1)) >> 64
        taken.add(j if t in taken else t)
    return np.array(sorted(taken), dtype=np.int64)


def topk_indices(p, k):
    """The k largest |p_i|, ties to the lowest indices, in increasing index order."""
    mag = p.abs()
    if k >= mag.numel():
        return torch.arange(mag.numel())
    threshold = torch.topk(mag, k, sorted=True).values[k - 1]
    above = torch.nonzero(mag > threshold).flatten()
    ties = torch.nonzero(mag == threshold).flatten()[:k - above.numel()]
    return torch.sort(torch.cat([above, ties])).values


def rice_bits(gaps, r):
    return int(np.sum((gaps >> r) + 1 + r))


def index_bytes(idx, d):
    """Bytes of top-k indices: Rice-coded gaps, a bitmap or delta varints, whichever the encoder picks."""
    idx = np.asarray(idx, dtype=np.int64)
    gaps = np.diff(idx, prepend=-1) - 1  # first index, then index - previous - 1
    deltas = np.diff(idx, prepend=0)
    deltas[0] = idx[0]
    varint = int(np.sum(1 + (deltas >= 1 << 7) + (deltas >= 1 << 14) + (deltas >= 1 << 21) + (deltas >= 1 << 28)))
    bitmap = (d + 7) // 8
    mean_gap = d / len(idx)
    centre = min(max(int(math.log2(max(1.0, mean_gap * 0.6931471805599453))), 0), 24)
    best = rice_bits(gaps, centre)
    for r in range(max(0, centre - 2), min(24, centre + 2) + 1):
        best = min(best, rice_bits(gaps, r))
    rice = 1 + (best + 7) // 8
    if rice < varint and rice < bitmap:
        return rice
    return bitmap if bitmap < varint else varint


class Sent:
    """C(v): the dense tensor it stands for, its indices (None = dense) and its payload bytes."""

    def __init__(self, dense, idx, nbytes):
        self.dense, self.idx, self.nbytes = dense, idx, nbytes


def compress(name, p, density, seed, values):
    """values: fp32, fp16 or ternary (top-k only)."""
    d = p.numel()
    if name == "identity":
        return Sent(p.clone(), None, SCALAR_BYTES + 4 * d)
    if name == "fp16":
        return Sent(p.half().to(p.dtype), None, SCALAR_BYTES + 2 * d)
    k = selected_count(d, density)
    if name in ("topk", "topk-sampled"):  # the sampled threshold selects the same k
        idx = topk_indices(p, k)
        nbytes = SCALAR_BYTES + index_bytes(idx.numpy(), d)
    elif name == "randk":
        idx = torch.from_numpy(randk_indices(seed, d, k))
        nbytes = SCALAR_BYTES
    else:
        raise ValueError("the reference has no compressor " + name)
    v = p[idx].clone()
    if values == "ternary":
        blocks = (k + TERNARY_BLOCK - 1) // TERNARY_BLOCK
        pad = torch.zeros(blocks * TERNARY_BLOCK, dtype=torch.float64)
        pad[:k] = v.double().abs()
        scales = (pad.view(blocks, TERNARY_BLOCK).sum(dim=1) /
                  torch.tensor([min(TERNARY_BLOCK, k - b * TERNARY_BLOCK) for b in range(blocks)],
                               dtype=torch.float64)).float().to(p.dtype)
        s = scales.repeat_interleave(TERNARY_BLOCK)[:k]
        v = torch.where(torch.signbit(v), -s, s)
        nbytes += (k + 7) // 8 + 4 * blocks
    elif values == "fp16":
        v = v.half().to(p.dtype)
        nbytes += 2 * k
    else:
        nbytes += 4 * k
    dense = torch.zeros_like(p)
    dense[idx] = v
    return Sent(dense, idx, nbytes)


def catch_up_bytes(last, d):
    """Payload bytes for a client one broadcast behind: dense model, the broadcast, or the changed values."""
    best = 4 * d
    if last.nbytes < best:
        best = last.nbytes
    if last.idx is not None:
        values = SCALAR_BYTES + index_bytes(last.idx.numpy(), d) + 4 * last.idx.numel()
        best = min(best, values)
    return best


# ---------------------------------------------------------------- the run

def value_format(cfg, link):
    if cfg[link + "_ternary"] == "1":
        return "ternary"
    return "fp16" if cfg["fp16_values"] == "1" else "fp32"


def replay(export, data, dtype, weights="trained", dump=None):
    cfg = read_config(os.path.join(export, "config.txt"))
    spec, x0 = read_model_file(os.path.join(export, "initial.model"))
    model = Mlp(spec, dtype)
    assert model.size == len(x0), "the model file does not fit the spec"
    d = model.size
    shards = read_shards(os.path.join(export, "shards.u32"))
    batches = read_batches(os.path.join(export, "batches.u32"))
    updates = read_csv(os.path.join(export, "updates.csv"))
    rounds = read_csv(os.path.join(export, "rounds.csv"))
    xtr, ytr, xte, yte = data
    mu, wd = float(cfg["momentum"]), float(cfg["weight_decay"])
    server_lr = float(cfg["server_lr"])
    ef = cfg["error_feedback"] == "1"
    up_name, down_name = cfg["uplink"], cfg["downlink"]
    up_density, down_density = float(cfg["uplink_density"]), float(cfg["downlink_density"])
    up_values, down_values = value_format(cfg, "uplink"), value_format(cfg, "downlink")

    xhat = torch.from_numpy(x0).to(dtype)
    client_memory = {}
    server_memory = torch.zeros(d, dtype=dtype)
    last_broadcast = None
    grad = torch.zeros(d, dtype=dtype)
    rows = []
    for row in rounds:
        rnd = int(row["round"])
        mine = [u for u in updates if int(u["round"]) == rnd]
        up_bytes = 0
        down_bytes = 0 if last_broadcast is None else len(mine) * catch_up_bytes(last_broadcast, d)
        weight_sum, step_sum = 0.0, 0.0
        aggregate = torch.zeros(d, dtype=dtype)
        for u in sorted(mine, key=lambda u: int(u["client"])):
            client = int(u["client"])
            steps, b, order = batches[(rnd, client)]
            lr = float(np.float32(u["lr"]))
            x = xhat.clone()
            m = torch.zeros(d, dtype=dtype)
            params, grads = model.views(x), model.views(grad)  # x and grad change in place
            order_t = torch.from_numpy(order)
            for s in range(steps):
                idx = order_t[s]
                model.grad(params, xtr[idx], ytr[idx], grads)
                if mu != 0:
                    m.mul_(mu).add_(grad)
                else:
                    m.copy_(grad)
                x.sub_((m + wd * x) * lr if wd != 0 else m * lr)
            p = xhat - x
            if ef:
                p = p + client_memory.get(client, torch.zeros(d, dtype=dtype))
            q = compress(up_name, p, up_density, int(u["uplink_seed"]), up_values)
            if ef:
                client_memory[client] = p - q.dense
            up_bytes += q.nbytes
            # The engine's weight: the examples the update reports (trained: steps x b);
            # "shard" weighs by the client's data set size instead (FedAvg's n_k).
            w = float(u["examples"]) if weights == "trained" else float(len(shards[client]))
            weight_sum += w
            step_sum += w * steps
            aggregate.add_(q.dense * (w / steps))
        if weight_sum > 0:
            aggregate.mul_(step_sum / (weight_sum * weight_sum))
        aggregate.mul_(server_lr)
        ps = aggregate + server_memory if ef else aggregate
        qs = compress(down_name, ps, down_density, int(row["downlink_seed"]), down_values)
        if ef:
            server_memory = ps - qs.dense
        xhat = xhat - qs.dense
        last_broadcast = qs
        if dump:
            os.makedirs(dump, exist_ok=True)
            np.save(os.path.join(dump, "%s-model-%d.npy" % (os.path.basename(export.rstrip("/")), rnd)),
                    xhat.double().numpy())
        acc = model.accuracy(xhat, xte, yte)
        dx = float("nan")
        path = os.path.join(export, "model-%d.model" % rnd)
        if os.path.exists(path):
            dx = float((torch.from_numpy(read_model_file(path)[1]).double() - xhat.double()).abs().max())
        rows.append({
            "round": rnd,
            "acc_s": float(row["accuracy"]) if row["accuracy"] else float("nan"),
            "acc_r": acc,
            "up_s": int(row["payload_up"]), "down_s": int(row["payload_down"]),
            "up_r": up_bytes, "down_r": down_bytes,
            "dx": dx,
            "accepted": int(row["accepted"]), "updates": len(mine),
        })
    return cfg, rows


_SHARED = {}  # the data set, inherited by forked workers


def _replay_shared(export):
    torch.set_num_threads(1)
    return replay(export, _SHARED["data"], _SHARED["dtype"], _SHARED["weights"], _SHARED["dump"])


def ratio(a, b):
    if a == b:
        return 1.0
    if a == 0 or b == 0:
        return float("inf")
    return max(a / b, b / a)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", help="starling-sim --export-dir directory")
    parser.add_argument("strategies", nargs="*", help="strategies to replay (default: every one exported)")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--double", action="store_true", help="run the reference in float64")
    parser.add_argument("--weights", choices=("trained", "shard"), default="trained",
                        help="update weights: examples trained (steps x b, as Starling's engine) or shard size")
    parser.add_argument("--dump", help="save the reference's global model after each round here (.npy)")
    parser.add_argument("--jobs", type=int, default=2, help="strategies replayed at once (one thread each)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dtype = torch.float64 if args.double else torch.float32
    names = args.strategies or sorted(n for n in os.listdir(args.export)
                                      if os.path.exists(os.path.join(args.export, n, "config.txt")))
    xtr, ytr = load_split(args.data, "train", dtype)
    xte, yte = load_split(args.data, "t10k", dtype)
    _SHARED.update(data=(xtr, ytr, xte, yte), dtype=dtype, weights=args.weights, dump=args.dump)
    jobs = [os.path.join(args.export, n) for n in names]
    if args.jobs > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(min(args.jobs, len(jobs))) as pool:
            results = pool.map(_replay_shared, jobs, chunksize=1)
    else:
        results = [_replay_shared(j) for j in jobs]
    max_acc, max_bytes, lines = 0.0, 1.0, []
    for name, (cfg, rows) in zip(names, results):
        print("== %s: uplink %s %s, downlink %s %s, fp16 %s, ternary %s/%s, tau %s, lr %s, server lr %s, "
              "error feedback %s" % (name, cfg["uplink"], cfg["uplink_density"], cfg["downlink"],
                                     cfg["downlink_density"], cfg["fp16_values"], cfg["uplink_ternary"],
                                     cfg["downlink_ternary"], cfg["tau"], cfg["lr"], cfg["server_lr"],
                                     cfg["error_feedback"]))
        print("%5s | %12s | %13s | %7s | %14s | %15s | %8s | %9s" % (
            "round", "acc starling", "acc reference", "diff pt", "bytes starling", "bytes reference", "ratio",
            "max|dx|"))
        acc_diff, bytes_ratio = 0.0, 1.0
        for r in rows:
            diff = 100.0 * (r["acc_r"] - r["acc_s"])
            total = ratio(r["up_s"] + r["down_s"], r["up_r"] + r["down_r"])
            acc_diff = max(acc_diff, abs(diff))
            bytes_ratio = max(bytes_ratio, total, ratio(r["up_s"], r["up_r"]), ratio(r["down_s"], r["down_r"]))
            note = "" if r["accepted"] == r["updates"] else "  (Starling accepted %d of %d updates)" % (
                r["accepted"], r["updates"])
            print("%5d | %11.2f%% | %12.2f%% | %+7.2f | %14d | %15d | %8.5f | %9.2e%s" % (
                r["round"], 100 * r["acc_s"], 100 * r["acc_r"], diff, r["up_s"] + r["down_s"],
                r["up_r"] + r["down_r"], total, r["dx"], note))
        line = "%s: rounds=%d max_acc_diff_pt=%.2f max_bytes_ratio=%.5f final_dx=%.2e" % (
            name, len(rows), acc_diff, bytes_ratio, rows[-1]["dx"] if rows else float("nan"))
        print(line + "\n")
        lines.append(line)
        max_acc, max_bytes = max(max_acc, acc_diff), max(max_bytes, bytes_ratio)
    for line in lines:
        print(line)
    print("summary: configs=%d max_acc_diff_pt=%.2f max_bytes_ratio=%.5f" % (len(names), max_acc, max_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
