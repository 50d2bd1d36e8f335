#!/usr/bin/env python3
"""GRU and embedding-bag ONNX files for tests/onnx/onnx_seq_test.cpp (torch, onnx, numpy).

  onnx_seq_models.py make DIR
      writes DIR/NAME.onnx, DIR/NAME.x.bin (float32, the examples as Starling reads them:
      N x T x F step-major for a GRU, N x V token counts for an embedding bag) and
      DIR/NAME.ref.bin (float32, what Model::forward() must return: torch's output for the
      torch models, the numpy evaluation for the hand-made time-major GRU), and
      DIR/seq_manifest.txt: NAME BATCH SPEC, SPEC "-" for the files Starling must refuse.
      The GRU and embedding models are torch.nn.Modules exported by torch.onnx.export
      (opset 17, IR 8), so the graphs are PyTorch's own; their reference is torch's output.
  onnx_seq_models.py eval MODEL X.bin BATCH GOT.bin
      onnx_models.py's eval with the ops below: checks an exported MODEL with onnx.checker
      and evaluates it in numpy on X (float32 N x T x F for a GRU, int64 N x L token ids
      for an embedding bag); prints the largest difference from GOT, exits 1 above 1e-5.
"""
import io
import warnings
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_models  # noqa: E402  (its numpy evaluator, extended below)

rng = np.random.default_rng(11)
warnings.filterwarnings("ignore", category=UserWarning)  # torch.onnx.export's notes on GRU batch sizes


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def gru(i, a):
    """ONNX GRU, one direction, from the operator's definition (both linear_before_reset)."""
    x, w, r = i[0], i[1][0], i[2][0]
    h_size = a["hidden_size"]
    b = i[3][0] if len(i) > 3 and i[3] is not None else np.zeros(6 * h_size)
    if a.get("layout", 0):
        x = x.transpose(1, 0, 2)
    h = i[5][0] if len(i) > 5 and i[5] is not None else np.zeros((x.shape[1], h_size))
    wz, wr, wh = np.split(w, 3)
    rz, rr, rh = np.split(r, 3)
    wbz, wbr, wbh, rbz, rbr, rbh = np.split(b, 6)
    ys = []
    for xt in x:
        z = sigmoid(xt @ wz.T + wbz + h @ rz.T + rbz)
        rg = sigmoid(xt @ wr.T + wbr + h @ rr.T + rbr)
        if a.get("linear_before_reset", 0):
            n = np.tanh(xt @ wh.T + wbh + rg * (h @ rh.T + rbh))
        else:
            n = np.tanh(xt @ wh.T + wbh + (rg * h) @ rh.T + rbh)
        h = (1 - z) * n + z * h
        ys.append(h)
    y, yh = np.stack(ys)[:, None], h[None]
    if a.get("layout", 0):
        y, yh = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2)
    return y, yh


def reduce(f):
    def op(i, a):
        axes = a.get("axes", i[1].tolist() if len(i) > 1 and i[1] is not None else None)
        return f(i[0], axis=tuple(axes) if axes is not None else None, keepdims=bool(a.get("keepdims", 1)))
    return op


def slice_op(i, a):
    x = i[0]
    axes = i[3].tolist() if len(i) > 3 else list(range(len(i[1])))
    steps = i[4].tolist() if len(i) > 4 else [1] * len(axes)
    idx = [slice(None)] * x.ndim
    for s, e, ax, st in zip(i[1].tolist(), i[2].tolist(), axes, steps):
        idx[ax] = slice(s, e, st)
    return x[tuple(idx)]


onnx_models.EXTRA_OPS.update({
    "GRU": gru,
    "Transpose": lambda i, a: np.transpose(i[0], a.get("perm")),
    "Squeeze": lambda i, a: np.squeeze(i[0], axis=tuple(i[1].tolist()) if len(i) > 1 else None),
    "Slice": slice_op,
    "ReduceSum": reduce(np.sum),
    "ReduceMean": reduce(np.mean),
    "ConstantOfShape": lambda i, a: np.zeros(i[0].tolist()),
})


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def export(module, example, path, dynamic):
    import torch
    buf = io.BytesIO()
    torch.onnx.export(module, example, buf, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": dynamic})
    model = onnx.load_from_string(buf.getvalue())
    if model.ir_version > 8:
        model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return model


def torch_models(out):
    import torch
    torch.manual_seed(3)
    lines = []

    class GruLastState(torch.nn.Module):  # fc(h_n[-1])
        def __init__(self, f, h, outputs):
            super().__init__()
            self.gru = torch.nn.GRU(f, h, batch_first=True)
            self.fc = torch.nn.Linear(h, outputs)

        def forward(self, x):
            _, h = self.gru(x)
            return self.fc(h[-1])

    class GruLastStep(torch.nn.Module):  # fc2(relu(fc1(out[:, -1, :])))
        def __init__(self, f, h, width):
            super().__init__()
            self.gru = torch.nn.GRU(f, h, batch_first=True)
            self.fc1 = torch.nn.Linear(h, width)
            self.fc2 = torch.nn.Linear(width, 1)

        def forward(self, x):
            out, _ = self.gru(x)
            return self.fc2(torch.relu(self.fc1(out[:, -1, :])))

    class SensorGru(torch.nn.Module):  # docs/model.md's example: fc2(relu(fc1(h_n[-1])))
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(input_size=6, hidden_size=32, batch_first=True)
            self.fc1 = torch.nn.Linear(32, 16)
            self.fc2 = torch.nn.Linear(16, 4)

        def forward(self, x):
            _, h = self.gru(x)
            return self.fc2(torch.relu(self.fc1(h[-1])))

    class Bag(torch.nn.Module):  # fc(act(mean or sum of the token embeddings + bias))
        def __init__(self, vocab, dim, outputs, mean, act):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, dim)
            self.bias = torch.nn.Parameter(torch.randn(dim) * 0.3)
            self.fc = torch.nn.Linear(dim, outputs)
            self.mean, self.act = mean, act

        def forward(self, ids):
            e = self.emb(ids)
            bag = e.mean(dim=1) if self.mean else e.sum(dim=1)
            return self.fc(self.act(bag + self.bias))

    cases = [
        ("gru_last_state", GruLastState(3, 5, 2), (4, 3), "gru:4x3-5-2"),
        ("gru_last_step", GruLastStep(2, 6, 8), (7, 2), "gru:7x2-6-8-1/mse"),
        ("gru_sensor", SensorGru(), (50, 6), "gru:50x6-32-16-4"),
    ]
    for name, module, (t, f), spec in cases:
        module.eval()
        batch = 5
        x = torch.randn(batch, t, f)
        model = export(module, x, f"{out}/{name}.onnx", {0: "N"})
        with torch.no_grad():
            y = module(x).numpy().astype(np.float64)
        # The numpy GRU (which checks Starling's exports) agrees with torch on PyTorch's graph.
        assert np.max(np.abs(onnx_models.evaluate(model, x.numpy()) - y)) < 1e-5, name
        if y.shape[1] > 1:
            y = softmax(y)
        x.numpy().astype(np.float32).tofile(f"{out}/{name}.x.bin")
        y.astype(np.float32).tofile(f"{out}/{name}.ref.bin")
        lines.append(f"{name} {batch} {spec}\n")

    bags = [
        ("bag_mean", Bag(20, 4, 3, True, torch.relu), "embedbag:mean:20-4-3"),
        ("bag_sum", Bag(50, 6, 1, False, torch.tanh), "embedbag:tanh:50-6-1/mse"),
    ]
    for name, module, spec in bags:
        module.eval()
        batch, tokens = 6, 9
        vocab = module.emb.num_embeddings
        ids = torch.randint(0, vocab, (batch, tokens))
        model = export(module, ids, f"{out}/{name}.onnx", {0: "N", 1: "L"})
        with torch.no_grad():
            y = module(ids).numpy().astype(np.float64)
        assert np.max(np.abs(onnx_models.evaluate(model, ids.numpy()) - y)) < 1e-5, name
        if y.shape[1] > 1:
            y = softmax(y)
        counts = np.zeros((batch, vocab), np.float32)
        for r, row in enumerate(ids.numpy()):
            for t in row:
                counts[r, t] += 1
        counts.tofile(f"{out}/{name}.x.bin")
        y.astype(np.float32).tofile(f"{out}/{name}.ref.bin")
        lines.append(f"{name} {batch} {spec}\n")
    return lines


def gru_graph(out, name, attrs, select, directions=1):
    """A GRU over x [T, N, F] (layout 0; [N, T, F] for layout 1) made with onnx.helper,
    select (nodes from Y or Y_h to "last", N x H), then a Gemm."""
    t, f, h, d = 5, 2, 3, directions
    nodes = [helper.make_node("GRU", ["x", "W", "R", "B"], ["Y", "Y_h"], name="gru0", hidden_size=h,
                              **attrs)] + select + [
        helper.make_node("Gemm", ["last", "fw", "fb"], ["y"], name="fc", transB=1)]
    inits = [numpy_helper.from_array((rng.standard_normal((d, 3 * h, f)) * 0.6).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((d, 3 * h, h)) * 0.6).astype(np.float32), "R"),
             numpy_helper.from_array((rng.standard_normal((d, 6 * h)) * 0.6).astype(np.float32), "B"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "axes01"),
             numpy_helper.from_array(np.array([1], np.int64), "axes1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([2 ** 62], np.int64), "big"),
             numpy_helper.from_array((rng.standard_normal((2, h)) * 0.6).astype(np.float32), "fw"),
             numpy_helper.from_array((rng.standard_normal(2) * 0.6).astype(np.float32), "fb")]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", t, f] if attrs.get("layout") else [t, "N", f])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, f"{out}/{name}.onnx")
    return model


def make(out):
    lines = torch_models(out)
    # Layout 0 with the input time-major [T, N, F]: Starling's examples are still step-major.
    # Y's last step by Slice; layout 1 (batch-first without a Transpose).
    graphs = [
        ("gru_time_major", {}, [helper.make_node("Squeeze", ["Y_h", "axes0"], ["last"], name="squeeze")]),
        ("gru_slice", {}, [helper.make_node("Slice", ["Y", "minus1", "big", "axes0"], ["Y1"], name="slice"),
                           helper.make_node("Squeeze", ["Y1", "axes01"], ["last"], name="squeeze")]),
        ("gru_layout1", {"layout": 1}, [helper.make_node("Squeeze", ["Y_h", "axes1"], ["last"], name="squeeze")]),
        # linear_before_reset 0 (ONNX's default) imports as gru:lbr0:.
        ("gru_reset_before", {"linear_before_reset": 0},
         [helper.make_node("Squeeze", ["Y_h", "axes0"], ["last"], name="squeeze")]),
    ]
    for name, attrs, select in graphs:
        attrs = dict({"linear_before_reset": 1}, **attrs)
        model = gru_graph(out, name, attrs, select)
        batch = 4
        x = rng.standard_normal((batch, 5, 2)).astype(np.float32)
        y = softmax(onnx_models.evaluate(model, x if attrs.get("layout") else x.transpose(1, 0, 2)))
        x.tofile(f"{out}/{name}.x.bin")
        y.astype(np.float32).tofile(f"{out}/{name}.ref.bin")
        marker = "lbr0:" if attrs["linear_before_reset"] == 0 else ""
        lines.append(f"{name} {batch} gru:{marker}5x2-3-2\n")
    # Refused.
    zero = helper.make_node("Constant", [], ["zero"], name="c0", value=numpy_helper.from_array(np.array(0, np.int64)))
    gru_graph(out, "gru_bidirectional", {"linear_before_reset": 1, "direction": "bidirectional"},
              [zero, helper.make_node("Gather", ["Y_h", "zero"], ["last"], name="forward_direction", axis=0)], 2)
    first = [zero, helper.make_node("Gather", ["Y", "zero"], ["Y0"], name="first_step", axis=0),
             helper.make_node("Squeeze", ["Y0", "axes0"], ["last"], name="squeeze")]
    gru_graph(out, "gru_first_step", {"linear_before_reset": 1}, first)
    lines += ["gru_bidirectional 1 -\n", "gru_first_step 1 -\n"]
    with open(f"{out}/seq_manifest.txt", "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "eval":
        sys.exit(onnx_models.check(*sys.argv[2:6]))  # with the ops above registered
