#!/usr/bin/env python3
# The torch.nn.GRU reference for tests/model/sequence_test.cpp.
#
#   gru_reference.py DIR T F H WIDTH... OUTPUTS
#
# DIR holds params.bin (float32, in the layout of Starling's
# gru:<T>x<F>-<H>-<widths>-<outputs>: gru.W {1,3H,F}, gru.R {1,3H,H}, gru.B {1,6H} with
# the gates in ONNX's order z, r, h, then denseK.weight {out,in}, denseK.bias), x.bin
# (N x T x F) and y.bin (N labels). Writes out.bin (N x OUTPUTS softmax probabilities),
# loss.bin (the mean cross-entropy) and grad.bin (its gradient, in params.bin's layout).
# torch's GRU keeps the gates in the order r, z, n: the first two blocks are swapped on
# the way in and out.
import sys

import numpy as np
import torch


def swap_rz(a, h):
    return torch.cat([a[h:2 * h], a[0:h], a[2 * h:]], dim=0)


def main():
    d = sys.argv[1]
    t, f, h = (int(v) for v in sys.argv[2:5])
    widths = [int(v) for v in sys.argv[5:]]
    p = torch.tensor(np.fromfile(d + "/params.bin", dtype=np.float32), dtype=torch.float64)
    x = torch.tensor(np.fromfile(d + "/x.bin", dtype=np.float32), dtype=torch.float64).reshape(-1, t, f)
    y = torch.tensor(np.fromfile(d + "/y.bin", dtype=np.float32)).long()
    gru = torch.nn.GRU(f, h, batch_first=True).double()
    at = 0

    def take(n):
        nonlocal at
        v = p[at:at + n]
        at += n
        return v

    w = take(3 * h * f).reshape(3 * h, f)
    r = take(3 * h * h).reshape(3 * h, h)
    b = take(6 * h)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(swap_rz(w, h))
        gru.weight_hh_l0.copy_(swap_rz(r, h))
        gru.bias_ih_l0.copy_(swap_rz(b[:3 * h], h))
        gru.bias_hh_l0.copy_(swap_rz(b[3 * h:], h))
    layers = []
    n_in = h
    for n_out in widths:
        lin = torch.nn.Linear(n_in, n_out).double()
        with torch.no_grad():
            lin.weight.copy_(take(n_out * n_in).reshape(n_out, n_in))
            lin.bias.copy_(take(n_out))
        layers.append(lin)
        n_in = n_out
    assert at == p.numel(), "params.bin does not match the spec"
    _, hn = gru(x)
    z = hn[-1]
    for i, lin in enumerate(layers):
        z = lin(z)
        if i + 1 < len(layers):
            z = torch.relu(z)
    loss = torch.nn.functional.cross_entropy(z, y)
    loss.backward()
    grads = [swap_rz(gru.weight_ih_l0.grad, h).reshape(-1), swap_rz(gru.weight_hh_l0.grad, h).reshape(-1),
             swap_rz(gru.bias_ih_l0.grad, h), swap_rz(gru.bias_hh_l0.grad, h)]
    for lin in layers:
        grads += [lin.weight.grad.reshape(-1), lin.bias.grad]
    torch.softmax(z, dim=1).detach().numpy().astype(np.float32).tofile(d + "/out.bin")
    np.array([loss.item()], dtype=np.float32).tofile(d + "/loss.bin")
    torch.cat(grads).numpy().astype(np.float32).tofile(d + "/grad.bin")


if __name__ == "__main__":
    main()
