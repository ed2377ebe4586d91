"""Makes the quantized ONNX fixtures of the onnx_int8 front-end (run from the repository root:
`python3 tests/data/onnx_int8/make_fixtures.py`): two small float models built with onnx.helper
(an MLP and a CNN, seeded weights), each quantized by onnxruntime.quantization.quantize_static from
a seeded calibration set, int8 activations and weights:

- mlp_qdq.onnx / cnn_qdq.onnx: QuantFormat.QDQ, per-tensor weights (mlp) and per-channel (cnn);
- mlp_qop.onnx / cnn_qop.onnx: QuantFormat.QOperator (QGemm, QLinearConv,
  QLinearGlobalAveragePool), per-channel cnn;
- matmul_qdq.onnx / matmul_qop.onnx: MatMul + Add (QLinearMatMul, QLinearAdd), per channel, ending
  in Relu (QDQ) or Softmax (QOperator: QLinearSoftmax);
- pool_qdq.onnx: QDQ, per channel: Conv with pads TFLite's SAME does not give (a PAD), depthwise
  Conv, AveragePool, Add of a tensor to itself, Flatten (the layout TRANSPOSE back to NCHW), Gemm;
- softmax_qdq.onnx: the same with Softmax in QDQ form, whose output scale (1/255) the reader refuses.

Each .npz beside them holds float inputs `x` (8 seeded samples) for `nnbuild check --data`; the
tests run onnxruntime themselves for the measured differences the docs state."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 17


def _init(name, values):
    return numpy_helper.from_array(np.asarray(values, np.float32), name)


def float_mlp(rng):
    """x (1, 12) -> Gemm 16 -> Relu -> Gemm 10 -> Relu -> Gemm 4."""
    w1, b1 = rng.normal(0, 0.4, (16, 12)), rng.normal(0, 0.1, 16)
    w2, b2 = rng.normal(0, 0.3, (10, 16)), rng.normal(0, 0.1, 10)
    w3, b3 = rng.normal(0, 0.3, (4, 10)), rng.normal(0, 0.1, 4)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"], transB=1), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Gemm", ["r2", "w3", "b3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [_init(n, v) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2),
                                                        ("w3", w3), ("b3", b3))])
    return graph, (1, 12)


def float_matmul(rng, softmax=True):
    """x (1, 12) -> MatMul 16 + Add -> Relu -> MatMul 6 + Add -> Softmax (QLinearMatMul and
    QLinearAdd in QOperator form; MatMul and Add between QuantizeLinear/DequantizeLinear in QDQ)."""
    w1, b1 = rng.normal(0, 0.4, (12, 16)), rng.normal(0, 0.1, 16)
    w2, b2 = rng.normal(0, 0.3, (16, 6)), rng.normal(0, 0.1, 6)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Softmax", ["a2"], ["y"], axis=-1) if softmax else helper.make_node("Relu", ["a2"], ["y"])]
    graph = helper.make_graph(nodes, "matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
                              [_init(n, v) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    return graph, (1, 12)


def float_cnn(rng):
    """x (1, 2, 10, 10) -> Conv 6 3x3 pad 1 -> Relu -> MaxPool 2 -> Conv 8 3x3 -> Clip(0, 6)
    -> GlobalAveragePool -> Flatten -> Gemm 5 (the MatMul variant: MatMul + Add)."""
    c1, cb1 = rng.normal(0, 0.3, (6, 2, 3, 3)), rng.normal(0, 0.1, 6)
    c2, cb2 = rng.normal(0, 0.2, (8, 6, 3, 3)), rng.normal(0, 0.1, 8)
    w, b = rng.normal(0, 0.4, (5, 8)), rng.normal(0, 0.1, 5)
    nodes = [helper.make_node("Conv", ["x", "c1", "cb1"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2", "cb2"], ["a2"], kernel_shape=[3, 3]),
             helper.make_node("Clip", ["a2", "lo", "hi"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [_init(n, v) for n, v in (("c1", c1), ("cb1", cb1), ("c2", c2), ("cb2", cb2),
                                                        ("w", w), ("b", b), ("lo", 0.0), ("hi", 6.0))])
    return graph, (1, 2, 10, 10)


def float_pool(rng):
    """x (1, 3, 8, 8) -> Conv 4 3x3 pads (0, 0, 1, 1) (not SAME: a PAD) -> Relu -> depthwise Conv
    (group 4) 3x3 SAME_UPPER -> AveragePool 2 -> Add (the pooled tensor twice) -> Flatten -> Gemm 3."""
    c1, cb1 = rng.normal(0, 0.3, (4, 3, 3, 3)), rng.normal(0, 0.1, 4)
    c2, cb2 = rng.normal(0, 0.3, (4, 1, 3, 3)), rng.normal(0, 0.1, 4)
    w, b = rng.normal(0, 0.2, (3, 4 * 3 * 3)), rng.normal(0, 0.1, 3)
    nodes = [helper.make_node("Conv", ["x", "c1", "cb1"], ["a1"], kernel_shape=[3, 3], pads=[0, 0, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2", "cb2"], ["a2"], kernel_shape=[3, 3], group=4,
                              auto_pad="SAME_UPPER"),
             helper.make_node("AveragePool", ["a2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Add", ["p", "p"], ["s"]),
             helper.make_node("Flatten", ["s"], ["f"]),
             helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                              [_init(n, v) for n, v in (("c1", c1), ("cb1", cb1), ("c2", c2), ("cb2", cb2),
                                                        ("w", w), ("b", b))])
    return graph, (1, 3, 8, 8)


class _Reader:
    def __init__(self, name, samples):
        self.items = iter([{name: s} for s in samples])

    def get_next(self):
        return next(self.items, None)


def quantized(graph, shape, out, fmt, per_channel, seed):
    from onnxruntime import quantization as q
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    float_path = out.with_name(out.stem + "_float.onnx")
    onnx.save(model, float_path)
    rng = np.random.default_rng(seed)
    calibration = [rng.normal(0, 1, shape).astype(np.float32) for _ in range(32)]
    q.quantize_static(str(float_path), str(out), _Reader("x", calibration),
                      quant_format=q.QuantFormat.QDQ if fmt == "qdq" else q.QuantFormat.QOperator,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8, per_channel=per_channel)
    float_path.unlink()
    x = np.concatenate([rng.normal(0, 1, shape).astype(np.float32) for _ in range(8)])
    np.savez(out.with_suffix(".npz"), x=x)


def main():
    for name, build, per_channel in (("mlp", float_mlp, False), ("cnn", float_cnn, True),
                                     ("matmul", float_matmul, True)):
        for fmt in ("qdq", "qop"):
            graph, shape = build(np.random.default_rng(len(name)))
            quantized(graph, shape, HERE / f"{name}_{fmt}.onnx", fmt, per_channel, seed=3)
    # QDQ's Softmax output is calibrated to scale 1/255, not TFLite Micro's 1/256: refused (a test)
    graph, shape = float_matmul(np.random.default_rng(6), softmax=False)
    quantized(graph, shape, HERE / "matmul_qdq.onnx", "qdq", True, seed=3)
    graph, shape = float_matmul(np.random.default_rng(6))
    quantized(graph, shape, HERE / "softmax_qdq.onnx", "qdq", False, seed=3)
    (HERE / "softmax_qdq.npz").unlink()
    graph, shape = float_pool(np.random.default_rng(4))
    quantized(graph, shape, HERE / "pool_qdq.onnx", "qdq", True, seed=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
