#!/usr/bin/env python3
# The torch.nn.GRU reference for tests/model/sequence_test.cpp.
#
#   gru_reference.py [lbr0] DIR T F H WIDTH... OUTPUTS
#
# With lbr0 (Starling's gru:lbr0:, ONNX's linear_before_reset = 0, which torch.nn.GRU
# does not offer) the GRU is written out here from ONNX's equations, step by step,
# and torch's autograd differentiates it:
#   z = sigmoid(W_z x + Wb_z + R_z h + Rb_z), r = sigmoid(W_r x + Wb_r + R_r h + Rb_r)
#   n = tanh(W_h x + Wb_h + R_h (r * h) + Rb_h), h' = (1 - z) * n + z * h
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


def onnx_gru_lbr0(x, w, r, b, h):
    wb, rb = b[:3 * h], b[3 * h:]
    state = torch.zeros(x.shape[0], h, dtype=x.dtype)
    for t in range(x.shape[1]):
        gx = x[:, t, :] @ w.T + wb
        z = torch.sigmoid(gx[:, :h] + state @ r[:h].T + rb[:h])
        rg = torch.sigmoid(gx[:, h:2 * h] + state @ r[h:2 * h].T + rb[h:2 * h])
        n = torch.tanh(gx[:, 2 * h:] + (rg * state) @ r[2 * h:].T + rb[2 * h:])
        state = (1 - z) * n + z * state
    return state


def main():
    args = sys.argv[1:]
    lbr0 = args[0] == "lbr0"
    if lbr0:
        args = args[1:]
    d = args[0]
    t, f, h = (int(v) for v in args[1:4])
    widths = [int(v) for v in args[4:]]
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
    if lbr0:
        w, r, b = (v.clone().requires_grad_(True) for v in (w, r, b))
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
    if lbr0:
        z = onnx_gru_lbr0(x, w, r, b, h)
    else:
        _, hn = gru(x)
        z = hn[-1]
    for i, lin in enumerate(layers):
        z = lin(z)
        if i + 1 < len(layers):
            z = torch.relu(z)
    loss = torch.nn.functional.cross_entropy(z, y)
    loss.backward()
    if lbr0:
        grads = [w.grad.reshape(-1), r.grad.reshape(-1), b.grad]
    else:
        grads = [swap_rz(gru.weight_ih_l0.grad, h).reshape(-1), swap_rz(gru.weight_hh_l0.grad, h).reshape(-1),
                 swap_rz(gru.bias_ih_l0.grad, h), swap_rz(gru.bias_hh_l0.grad, h)]
    for lin in layers:
        grads += [lin.weight.grad.reshape(-1), lin.bias.grad]
    torch.softmax(z, dim=1).detach().numpy().astype(np.float32).tofile(d + "/out.bin")
    np.array([loss.item()], dtype=np.float32).tofile(d + "/loss.bin")
    torch.cat(grads).numpy().astype(np.float32).tofile(d + "/grad.bin")


if __name__ == "__main__":
    main()
