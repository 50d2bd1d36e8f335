#!/usr/bin/python3
"""bench/train_torch.py: the PyTorch baseline that bench-train runs as a subprocess.

Runs the same local SGD as Starling's Trainer on Fashion-MNIST with the MLP
784-200-200-10 (ReLU, softmax cross-entropy, SGD with momentum 0.9), one thread,
uniform minibatches drawn with replacement, and prints one line per batch size:

    torch b=32 steps=2000 seconds=1.234 ex_per_s=51864.1

or, when torch cannot be imported, the single line "torch: not installed" (exit 0).
Run it with Debian's interpreter (/usr/bin/python3) and python3-torch.
"""
import argparse
import gzip
import os
import struct
import sys
import time

# One thread, also inside OpenBLAS and OpenMP (set before torch is imported): with
# idle threads spinning on a loaded 2-core machine the baseline loses up to half.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batches", default="32,64")
    parser.add_argument("--examples", type=int, default=64000,
                        help="examples per timed run (steps = examples / batch)")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError:
        print("torch: not installed")
        return 0
    torch.set_num_threads(1)
    torch.manual_seed(1)
    dims, pixels = read_idx(args.data + "/train-images-idx3-ubyte.gz")
    _, labels = read_idx(args.data + "/train-labels-idx1-ubyte.gz")
    n = dims[0]
    x = torch.from_numpy(np.frombuffer(pixels, dtype=np.uint8).reshape(n, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(np.frombuffer(labels, dtype=np.uint8).astype(np.int64))
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 200), torch.nn.ReLU(),
        torch.nn.Linear(200, 200), torch.nn.ReLU(),
        torch.nn.Linear(200, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run(b, steps):
        for _ in range(steps):
            idx = torch.randint(0, n, (b,))
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()

    for b in [int(s) for s in args.batches.split(",")]:
        steps = max(1, args.examples // b)
        run(b, 50)  # warm-up
        start = time.perf_counter()
        run(b, steps)
        seconds = time.perf_counter() - start
        print("torch b=%d steps=%d seconds=%.3f ex_per_s=%.1f" % (b, steps, seconds, steps * b / seconds))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
