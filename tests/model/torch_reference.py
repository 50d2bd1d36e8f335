"""PyTorch reference for the cnn layers: reads a case file written by torch_test.cpp
(spec, parameters, batch, and what Starling computed), rebuilds the network in torch
from the spec, and compares the training pass's loss and gradient, the running
statistics after it, and the evaluation pass's probabilities. Exits 1 on a mismatch,
2 when torch is missing."""
import math
import re
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit(2)


def token_float(s):
    return -float(s[1:]) if s.startswith("n") else float(s)


def build(spec):
    body = spec.split("/")[0]
    _, rest = body.split(":", 1)
    tokens = rest.split("-")
    dims = [int(d) for d in tokens[0].split("x")]
    one_d = len(dims) == 2
    channels, shape = dims[0], dims[1:]
    layers, flat, width = [], False, 0
    conv = nn.Conv1d if one_d else nn.Conv2d
    for i, t in enumerate(tokens[1:]):
        last = i == len(tokens) - 2
        if last or t[0] == "f":
            if not flat:
                layers.append(nn.Flatten())
                flat, width = True, channels * math.prod(shape)
            n = int(t if last else t[1:])
            layers.append(nn.Linear(width, n))
            width = n
            if not last:
                layers.append(nn.ReLU())
        elif t == "r":
            layers.append(nn.ReLU())
        elif t == "t":
            layers.append(nn.Tanh())
        elif t == "sg":
            layers.append(nn.Sigmoid())
        elif t.startswith("lr"):
            layers.append(nn.LeakyReLU(token_float(t[2:])))
        elif t.startswith("clip"):
            lo, hi = t[4:].split("_")
            layers.append(nn.Hardtanh(token_float(lo), token_float(hi)))
        elif t == "g":
            layers.append(nn.AdaptiveAvgPool1d(1) if one_d else nn.AdaptiveAvgPool2d(1))
            shape = [1] * len(shape)
        elif t == "b" or t.startswith("be"):
            eps = 1e-5 if t == "b" else token_float(t[2:])
            n = width if flat else channels
            bn = nn.BatchNorm1d if (flat or one_d) else nn.BatchNorm2d
            layers.append(bn(n, eps=eps, momentum=0.1))
        elif t[0] in "pa":
            s = int(t[1:])
            if t[0] == "p":
                layers.append(nn.MaxPool1d(s) if one_d else nn.MaxPool2d(s))
            else:
                layers.append(nn.AvgPool1d(s) if one_d else nn.AvgPool2d(s))
            shape = [x // s for x in shape]
        elif t[0] == "c":
            m = re.fullmatch(r"c(\d+)k(\d+)(?:s(\d+))?(?:z(\d+))?(l)?", t)
            f, k = int(m[1]), int(m[2])
            s, p = int(m[3] or 1), int(m[4] or 0)
            layers.append(conv(channels, f, k, stride=s, padding=p))
            shape = [(x + 2 * p - k) // s + 1 for x in shape]
            channels = f
            if not m[5]:
                layers.append(nn.ReLU())
        else:
            raise ValueError("token " + t)
    return nn.Sequential(*layers), dims


def tensors(net):
    """The model's tensors in Starling's layout order."""
    out = []
    for m in net:
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            out += [m.weight, m.bias]
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            out += [m.weight, m.bias, m.running_mean, m.running_var]
    return out


def main():
    lines = {}
    with open(sys.argv[1]) as f:
        for line in f:
            key, _, rest = line.partition(" ")
            lines[key] = rest.strip()
    spec = lines["spec"]
    vec = lambda k: torch.tensor([float(v) for v in lines[k].split()], dtype=torch.float32)
    net, dims = build(spec)
    params = vec("params")
    at = 0
    with torch.no_grad():
        for t in tensors(net):
            t.copy_(params[at:at + t.numel()].reshape(t.shape))
            at += t.numel()
    assert at == params.numel(), (at, params.numel())
    x = vec("x").reshape([-1] + dims)
    y = vec("y").long()
    net.train()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    grad = torch.cat([
        (t.grad if t.grad is not None else torch.zeros_like(t)).reshape(-1) for t in tensors(net)
    ])
    after = torch.cat([t.detach().reshape(-1) for t in tensors(net)])
    net.eval()
    with torch.no_grad():
        probs = F.softmax(net(x), dim=1).reshape(-1)

    ok = True

    def compare(what, got, want, tol):
        nonlocal ok
        d = (got - want).abs()
        bad = d > tol * (1 + want.abs())
        print(f"{spec} {what}: max |diff| {d.max().item():.3g}")
        if bad.any():
            ok = False
            i = int(bad.nonzero()[0][0])
            print(f"  MISMATCH at {i}: starling {got[i].item()} torch {want[i].item()}")

    compare("loss", torch.tensor([float(lines["loss"])]), loss.detach().reshape(1), 1e-5)
    compare("gradient", vec("grad"), grad, 1e-4)
    compare("parameters after the step (running statistics)", vec("after"), after, 1e-5)
    compare("evaluation probabilities", vec("probs"), probs, 1e-5)
    sys.exit(0 if ok else 1)


main()
