#!/usr/bin/env python3
"""ONNX files and reference outputs for tests/onnx (python3-onnx and numpy).

  onnx_models.py make DIR
      writes DIR/NAME.onnx for the import cases, with DIR/NAME.x.bin (float32 inputs)
      and DIR/NAME.ref.bin (float32: what Starling's Model::forward() must return:
      softmax probabilities, P(y=1) or the prediction), and DIR/manifest.txt with one
      line per case: NAME BATCH SPEC (SPEC "-" for the files Starling must refuse).
  onnx_models.py eval MODEL X.bin BATCH GOT.bin
      checks MODEL with onnx.checker, evaluates it on X in numpy and prints the largest
      difference from GOT (exit 1 above 1e-5).

The reference is onnx.reference.ReferenceEvaluator when this onnx has it (>= 1.13),
otherwise the small numpy evaluator below, written from the ONNX operator definitions.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def conv2d(x, w, b, strides, pads):
    if any(pads):
        x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ho, wo = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    y = np.zeros((n, o, ho, wo), dtype=np.float64)
    for i in range(ho):
        for j in range(wo):
            patch = x[:, :, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
            y[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    if b is not None:
        y += b[None, :, None, None]
    return y


def conv(x, w, b, strides, pads):
    """Conv over 1-D (N x C x L) or 2-D inputs: a 1-D one is a 2-D one of height 1."""
    if x.ndim == 3:
        return conv2d(x[:, :, None, :], w[:, :, None, :], b, [1, strides[0]], [0, pads[0], 0, pads[1]])[:, :, 0, :]
    return conv2d(x, w, b, strides, pads)


def pool(x, k, s, reduce):
    if x.ndim == 3:
        return pool(x[:, :, None, :], [1, k[0]], [1, s[0]], reduce)[:, :, 0, :]
    n, c, h, w = x.shape
    ho, wo = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    y = np.empty((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            y[:, :, i, j] = reduce(x[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]], axis=(2, 3))
    return y


def maxpool(x, k, s):
    return pool(x, [k, k], [s, s], np.max)


def batchnorm(x, scale, bias, mean, var, eps):
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)


# More reference ops, by name: f(inputs, attributes) -> output (or a tuple of outputs).
EXTRA_OPS = {}


def evaluate(model, x):
    """The graph's output on x, in float64, from the operator definitions."""
    try:
        from onnx.reference import ReferenceEvaluator  # onnx >= 1.13
        return np.asarray(ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x})[0], dtype=np.float64)
    except ImportError:
        pass
    g = model.graph
    v = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inputs = [i for i in g.input if i.name not in v]
    v[inputs[0].name] = x if x.dtype.kind in "iu" else x.astype(np.float64)  # token ids stay integers
    for n in g.node:
        a = {at.name: helper.get_attribute_value(at) for at in n.attribute}
        i = [v[name] if name else None for name in n.input]
        op = n.op_type
        if op == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
        elif op == "MatMul":
            y = i[0] @ i[1]
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Sigmoid":
            y = sigmoid(i[0])
        elif op == "Conv":
            rank = i[0].ndim - 2
            y = conv(i[0], i[1], i[2] if len(i) > 2 else None, a.get("strides", [1] * rank), a.get("pads", [0] * 2 * rank))
        elif op in ("MaxPool", "AveragePool"):
            rank = i[0].ndim - 2
            y = pool(i[0], a["kernel_shape"], a.get("strides", [1] * rank), np.max if op == "MaxPool" else np.mean)
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=tuple(range(2, i[0].ndim)), keepdims=True)
        elif op == "BatchNormalization":
            y = batchnorm(i[0], i[1], i[2], i[3], i[4], a.get("epsilon", 1e-5))
        elif op == "LeakyRelu":
            y = np.where(i[0] > 0, i[0], a.get("alpha", 0.01) * i[0])
        elif op == "Clip":
            y = np.clip(i[0], i[1] if len(i) > 1 and i[1] is not None else -np.inf,
                        i[2] if len(i) > 2 and i[2] is not None else np.inf)
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "Reshape":
            shape = [i[0].shape[k] if d == 0 else d for k, d in enumerate(i[1].tolist())]
            y = i[0].reshape(shape)
        elif op == "Softmax":
            y = softmax(i[0])
        elif op == "LogSoftmax":
            y = np.log(softmax(i[0]))
        elif op in ("Dropout", "Identity", "Cast"):
            y = i[0]
        elif op == "Shape":
            y = np.array(i[0].shape, dtype=np.int64)
        elif op == "Gather":
            y = np.take(i[0], i[1], axis=a.get("axis", 0))
        elif op == "Unsqueeze":
            y = np.expand_dims(i[0], tuple(i[1].tolist()))
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Constant":
            y = numpy_helper.to_array(a["value"])
        elif op in EXTRA_OPS:  # ops other test scripts add (onnx_seq_models.py)
            y = EXTRA_OPS[op](i, a)
        else:
            raise SystemExit("onnx_models.py: no reference for " + op)
        for name, out in zip(n.output, y if isinstance(y, tuple) else (y,)):
            v[name] = out
    return v[g.output[0].name]


def weights(*shape):
    return (rng.standard_normal(shape) * 0.4).astype(np.float32)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def value(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def save(out, name, nodes, inits, in_dims, out_dims, spec, batch, head, ir=None, opset=17):
    graph = helper.make_graph(nodes, name, [value("x", ["N"] + in_dims)], [value("y", ["N"] + out_dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir if ir is not None else 8
    if spec != "-":
        onnx.checker.check_model(model)
        x = rng.standard_normal([batch] + in_dims).astype(np.float32)
        y = evaluate(model, x)
        if head == "logits":
            y = softmax(y)
        elif head == "log":
            y = np.exp(y)
        x.tofile(f"{out}/{name}.x.bin")
        y.astype(np.float32).tofile(f"{out}/{name}.ref.bin")
    onnx.save(model, f"{out}/{name}.onnx")
    return f"{name} {batch} {spec}\n"


def dense(name, x, y, n_in, n_out, trans_b=True):
    w = weights(n_out, n_in)
    return [helper.make_node("Gemm", [x, name + ".w", name + ".b"], [y], name=name, transB=1 if trans_b else 0)], [
        init(name + ".w", w if trans_b else w.T.copy()), init(name + ".b", weights(n_out))]


def make(out):
    lines = []
    # linear regression: one Gemm, one output.
    n, i = dense("fc", "x", "y", 13, 1)
    lines.append(save(out, "linear", n, i, [13], [1], "linear:13-1/mse", 9, "raw"))
    # mlp as PyTorch exports it: Gemm transB=1, Relu, final Softmax.
    n1, i1 = dense("fc1", "x", "h1", 20, 16)
    n2, i2 = dense("fc2", "a1", "h2", 16, 8)
    n3, i3 = dense("fc3", "a2", "z", 8, 5)
    nodes = n1 + [helper.make_node("Relu", ["h1"], ["a1"], name="relu1")] + n2 + [
        helper.make_node("Relu", ["h2"], ["a2"], name="relu2")] + n3 + [
        helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=1)]
    lines.append(save(out, "mlp_relu", nodes, i1 + i2 + i3, [20], [5], "mlp:20-16-8-5", 11, "probs"))
    # mlp with tanh, Gemm transB=0 (weights {in, out}), logits out.
    n1, i1 = dense("l1", "x", "h1", 10, 7, trans_b=False)
    n2, i2 = dense("l2", "a1", "y", 7, 3, trans_b=False)
    nodes = n1 + [helper.make_node("Tanh", ["h1"], ["a1"], name="tanh1")] + n2
    lines.append(save(out, "mlp_tanh", nodes, i1 + i2, [10], [3], "mlp:tanh:10-7-3", 6, "logits"))
    # MatMul + Add with sigmoid, ending in a Sigmoid on one output: binary.
    w1, b1, w2, b2 = weights(9, 6), weights(6), weights(6, 1), weights(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["h1"], name="add1"),
             helper.make_node("Sigmoid", ["h1"], ["a1"], name="sig1"),
             helper.make_node("MatMul", ["a1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["b2", "m2"], ["z"], name="add2"),
             helper.make_node("Sigmoid", ["z"], ["y"], name="head")]
    inits = [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2)]
    lines.append(save(out, "matmul_add", nodes, inits, [9], [1], "mlp:sigmoid:9-6-1/logistic", 7, "raw"))
    # cnn as PyTorch exports it: conv, relu, pool (and conv, pool, relu), x.view(x.size(0), -1)
    # as Shape/Gather/Unsqueeze/Concat/Reshape, dropout, log-softmax.
    nodes = [
        helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[0, 0, 0, 0],
                         strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2.w", "c2.b"], ["c2"], name="conv2", kernel_shape=[3, 3]),
        helper.make_node("MaxPool", ["c2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Relu", ["p2"], ["r2"], name="relu2"),
        helper.make_node("Shape", ["r2"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["zero"], name="c0", value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Constant", [], ["axes"], name="c1", value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Constant", [], ["minus1"], name="c2", value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["n1", "minus1"], ["shape2"], name="concat", axis=0),
        helper.make_node("Reshape", ["r2", "shape2"], ["flat"], name="view"),
        helper.make_node("Gemm", ["flat", "f1.w", "f1.b"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], name="relu3"),
        helper.make_node("Dropout", ["hr"], ["hd"], name="dropout"),
        helper.make_node("Gemm", ["hd", "f2.w", "f2.b"], ["z"], name="fc2", transB=1),
        helper.make_node("LogSoftmax", ["z"], ["y"], name="logsoftmax", axis=1),
    ]
    inits = [init("c1.w", weights(4, 2, 3, 3)), init("c1.b", weights(4)), init("c2.w", weights(6, 4, 3, 3)),
             init("c2.b", weights(6)), init("f1.w", weights(16, 24)), init("f1.b", weights(16)),
             init("f2.w", weights(3, 16)), init("f2.b", weights(3))]
    lines.append(save(out, "cnn_pytorch", nodes, inits, [2, 14, 14], [3], "cnn:2x14x14-c4k3-p2-c6k3-p2-f16-3", 5,
                      "log"))
    # cnn with Flatten, one output: regression.
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1)]
    inits = [init("cw", weights(5, 3, 3, 3)), init("cb", weights(5)), init("fw", weights(1, 180)),
             init("fb", weights(1))]
    lines.append(save(out, "cnn_flatten", nodes, inits, [3, 8, 8], [1], "cnn:3x8x8-c5k3-1/mse", 4, "raw"))

    # nn.Flatten then nn.Linear on an image input: an mlp over its C x H x W features.
    n1, i1 = dense("fc1", "f", "h1", 16, 6)
    n2, i2 = dense("fc2", "a1", "y", 6, 3)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten")] + n1 + [
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1")] + n2
    lines.append(save(out, "mlp_image", nodes, i1 + i2, [1, 4, 4], [3], "mlp:16-6-3", 3, "logits"))

    # The PyTorch block conv (stride 2, padding 1, no bias) -> BatchNorm -> ReLU, then an
    # average pool, a conv with its ReLU, global average pooling, a linear layer, softmax.
    nodes = [
        helper.make_node("Conv", ["x", "c1.w"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "bn.s", "bn.b", "bn.m", "bn.v"], ["n1"], name="bn1",
                         epsilon=1e-5, momentum=0.9),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("AveragePool", ["r1"], ["a1"], name="avg1", kernel_shape=[2, 2], strides=[2, 2],
                         count_include_pad=1),
        helper.make_node("Conv", ["a1", "c2.w", "c2.b"], ["c2"], name="conv2", kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["z"], name="fc", transB=1),
        helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=1),
    ]
    inits = [init("c1.w", weights(4, 3, 3, 3)), init("bn.s", weights(4) + 1), init("bn.b", weights(4)),
             init("bn.m", weights(4)), init("bn.v", np.abs(weights(4)) + 0.5), init("c2.w", weights(5, 4, 2, 2)),
             init("c2.b", weights(5)), init("fc.w", weights(4, 5)), init("fc.b", weights(4))]
    lines.append(save(out, "cnn_bn", nodes, inits, [3, 12, 12], [4], "cnn:3x12x12-c4k3s2z1l-b-r-a2-c5k2-g-4", 6,
                      "probs"))
    # 1-D convolutions over a sensor series: padded conv, leaky ReLU, max pool, conv,
    # ReLU6 as a Clip whose bounds are Constant nodes (opset 11+ inputs).
    nodes = [
        helper.make_node("Conv", ["x", "d1.w", "d1.b"], ["c1"], name="conv1d1", kernel_shape=[5], pads=[2, 2]),
        helper.make_node("LeakyRelu", ["c1"], ["l1"], name="leaky", alpha=0.1),
        helper.make_node("MaxPool", ["l1"], ["p1"], name="pool1", kernel_shape=[2], strides=[2]),
        helper.make_node("Conv", ["p1", "d2.w", "d2.b"], ["c2"], name="conv1d2", kernel_shape=[3]),
        helper.make_node("Constant", [], ["lo"], name="lo", value=numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Constant", [], ["hi"], name="hi", value=numpy_helper.from_array(np.array(6, np.float32))),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="relu6"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    inits = [init("d1.w", weights(4, 2, 5)), init("d1.b", weights(4)), init("d2.w", weights(3, 4, 3) * 4),
             init("d2.b", weights(3)), init("fc.w", weights(3, 18)), init("fc.b", weights(3))]
    lines.append(save(out, "conv1d", nodes, inits, [2, 16], [3], "cnn:2x16-c4k5z2l-lr0.1-p2-c3k3l-clip0_6-3", 5,
                      "logits"))
    # Batch normalization with its own epsilon, standalone tanh, a sigmoid head.
    nodes = [
        helper.make_node("Conv", ["x", "c.w", "c.b"], ["c"], name="conv", kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "bn.s", "bn.b", "bn.m", "bn.v"], ["n"], name="bn",
                         epsilon=1e-3),
        helper.make_node("Tanh", ["n"], ["t"], name="tanh"),
        helper.make_node("Flatten", ["t"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["z"], name="fc", transB=1),
        helper.make_node("Sigmoid", ["z"], ["y"], name="head"),
    ]
    inits = [init("c.w", weights(2, 1, 3, 3)), init("c.b", weights(2)), init("bn.s", weights(2) + 1),
             init("bn.b", weights(2)), init("bn.m", weights(2)), init("bn.v", np.abs(weights(2)) + 0.5),
             init("fc.w", weights(1, 32)), init("fc.b", weights(1))]
    lines.append(save(out, "bn_eps", nodes, inits, [1, 6, 6], [1], "cnn:1x6x6-c2k3l-be0.001-t-1/logistic", 4, "raw"))

    # Refused: an asymmetrically padded convolution, an LSTM, BatchNormalization in
    # training mode, padded and overlapping average pools, a one-sided Clip, newer IR
    # and opset.
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], name="conv3", kernel_shape=[3, 3], pads=[0, 0, 1, 1]),
             helper.make_node("Flatten", ["c"], ["y"], name="flatten")]
    lines.append(save(out, "padded_conv", nodes, [init("cw", weights(2, 1, 3, 3))], [1, 6, 6], [50], "-", 1, ""))
    nodes = [helper.make_node("AveragePool", ["x"], ["p"], name="avg", kernel_shape=[2, 2], strides=[2, 2],
                              pads=[1, 1, 1, 1], count_include_pad=1),
             helper.make_node("Flatten", ["p"], ["y"], name="flatten")]
    lines.append(save(out, "avgpool_pads", nodes, [], [1, 6, 6], [16], "-", 1, ""))
    nodes = [helper.make_node("AveragePool", ["x"], ["p"], name="avg", kernel_shape=[2, 2]),
             helper.make_node("Flatten", ["p"], ["y"], name="flatten")]
    lines.append(save(out, "avgpool_stride", nodes, [], [1, 6, 6], [25], "-", 1, ""))
    nodes = [helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")]
    lines.append(save(out, "clip_min", nodes, [init("lo", np.array(-1, np.float32))], [4], [4], "-", 1, ""))
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["", "y"], name="lstm0", hidden_size=4)]
    inits = [init("W", weights(1, 16, 5)), init("R", weights(1, 16, 4))]
    graph = helper.make_graph(nodes, "lstm", [value("x", [3, "N", 5])], [value("y", [1, "N", 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), f"{out}/lstm.onnx")
    lines.append("lstm 1 -\n")
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], name="bn1",
                              training_mode=1)]
    inits = [init("s", weights(2)), init("b", weights(2)), init("m", weights(2)), init("v", np.ones(2, np.float32))]
    lines.append(save(out, "batchnorm", nodes, inits, [2, 4, 4], [2, 4, 4], "-", 1, ""))
    n, i = dense("fc", "x", "y", 4, 2)
    lines.append(save(out, "ir9", n, i, [4], [2], "-", 1, "", ir=9))
    lines.append(save(out, "opset18", n, i, [4], [2], "-", 1, "", opset=18))
    with open(f"{out}/manifest.txt", "w") as f:
        f.writelines(lines)


def check(model_path, x_path, batch, got_path):
    model = onnx.load(model_path)
    onnx.checker.check_model(model)
    inp = model.graph.input[0].type.tensor_type
    if inp.elem_type == TensorProto.INT64:  # token ids, N x L
        x = np.fromfile(x_path, dtype=np.int64).reshape(int(batch), -1)
    else:
        dims = [d.dim_value for d in inp.shape.dim[1:]]
        x = np.fromfile(x_path, dtype=np.float32).reshape([int(batch)] + dims)
    want = evaluate(model, x)
    got = np.fromfile(got_path, dtype=np.float32).reshape(want.shape)
    diff = float(np.max(np.abs(want - got)))
    print(f"{model_path}: IR {model.ir_version}, opset {model.opset_import[0].version}, checker ok, "
          f"max |numpy - starling| = {diff:.3g}")
    return 0 if diff <= 1e-5 else 1


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "eval":
        sys.exit(check(*sys.argv[2:6]))
