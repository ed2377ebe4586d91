"""Property (issue 23, point 5): for small random ONNX graphs over the supported operators, with
awkward and hostile attribute values mixed in (infinite and NaN floats, enum strings outside the
spec, zero and negative sizes, -inf pads), `generate` either refuses in one line naming the file
(an NNBuildError, never another exception) or writes C that compiles with -Wall -Wextra -Werror
-pedantic on the host. A seeded generator: the same graphs every run, each case named by its seed."""

import math
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnbuild import steps
from nnbuild.errors import NNBuildError

CFLAGS = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "-o", "/dev/null"]
#: seeds of the graphs checked (each a few ops long); ~0.5 s each with the compile
SEEDS = range(40)
SHAPES = ("v1", "v2", "v3")
PRECISIONS = ("float32", "float64")
ODD_FLOATS = (math.inf, -math.inf, math.nan, 1e-45, 1e-49, 3.4e38, -0.0)
#: constant pad values: PyTorch pads with -inf before a max pooling
PAD_VALUES = (0.0, -math.inf, -math.inf, math.inf, math.nan, 1e-45, -0.0)


class Builder:
    """One random graph: a chain of ops from the input, each one's output shape known from onnx's
    shape inference (an op whose shape cannot be inferred is dropped and another one drawn)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        rank = 4 if self.rng.random() < 0.7 else 2
        self.shape = [1, int(self.rng.integers(1, 4))] + [int(self.rng.integers(3, 7)) for _ in range(rank - 2)]
        self.input_shape = list(self.shape)
        self.nodes, self.inits, self.current, self.count = [], [], "x", 0

    def odd(self, usual):
        """Usually `usual`, sometimes a non-finite, subnormal or huge float."""
        return float(self.rng.choice(ODD_FLOATS)) if self.rng.random() < 0.25 else float(usual)

    def const(self, array):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weights(self, *shape):
        return self.rng.normal(size=shape).astype(np.float32)

    def node(self, op, inputs=(), **attrs):
        self.count += 1
        return helper.make_node(op, [self.current] + list(inputs), [f"t{self.count}"], name=f"n{self.count}_{op}",
                                **attrs)

    def spatial(self):
        return len(self.shape) == 4

    def candidates(self):
        r = self.rng
        c = self.shape[1]
        ops = [
            lambda: self.node(str(r.choice(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Softsign", "Softplus"]))),
            lambda: self.node("LeakyRelu", alpha=self.odd(0.1)),
            lambda: self.node("Elu", alpha=self.odd(1.0)),
            lambda: self.node("Selu", alpha=self.odd(1.67), gamma=self.odd(1.05)),
            lambda: self.node("HardSigmoid", alpha=self.odd(0.2), beta=self.odd(0.5)),
            lambda: self.node("Clip", [self.const(np.float32(self.odd(-1.0))), self.const(np.float32(self.odd(1.0)))]),
            lambda: self.node(str(r.choice(["Add", "Mul", "Sub", "Max", "Min"])),
                              [self.const(self.weights(*self.shape[1:]) if r.random() < 0.5 else
                                          np.float32(self.odd(0.5)))]),
            lambda: self.node("Softmax", axis=int(r.integers(-1, len(self.shape)))),
            lambda: self.node(str(r.choice(["ReduceMean", "ReduceMax", "ReduceMin"])),
                              axes=[int(r.integers(1, len(self.shape)))], keepdims=int(r.integers(0, 3) // 2)),
            lambda: self.node("Flatten", axis=1),
            lambda: self.node("Transpose", perm=[0] + [int(p) + 1 for p in r.permutation(len(self.shape) - 1)]),
            lambda: self.node("Pad", [self.const(np.array([0, 0] + [int(r.integers(0, 2)) for _ in self.shape[2:]]
                                                           + [0, 0] + [int(r.integers(0, 3)) for _ in self.shape[2:]],
                                                           np.int64)),
                                      self.const(np.float32(r.choice(PAD_VALUES)))],
                              mode=str(r.choice(["constant", "constant", "edge", "reflect", "EVIL"]))),
            lambda: self.node("Tile", [self.const(np.array([1] + [int(r.integers(1, 3)) for _ in self.shape[1:]],
                                                           np.int64))]),
            lambda: self.node("MatMul", [self.const(self.weights(self.shape[-1], int(r.integers(1, 5))))]),
        ]
        if self.spatial():
            k = [int(r.integers(1, 4)), int(r.integers(1, 4))]
            auto = str(r.choice(["NOTSET", "SAME_UPPER", "VALID", "EVIL"]))
            ops += [
                lambda: self.node("Conv", [self.const(self.weights(int(r.integers(1, 4)), c, *k))],
                                  strides=[int(r.integers(1, 3))] * 2, auto_pad=auto),
                lambda: self.node("MaxPool", kernel_shape=k, strides=[int(r.integers(1, 3))] * 2,
                                  pads=[int(r.integers(0, 2))] * 4, ceil_mode=int(r.integers(0, 2))),
                lambda: self.node("AveragePool", kernel_shape=k, auto_pad=auto,
                                  count_include_pad=int(r.integers(0, 2))),
                lambda: self.node("GlobalAveragePool"),
                lambda: self.node("BatchNormalization", [self.const(self.weights(c)), self.const(self.weights(c)),
                                                         self.const(self.weights(c)),
                                                         self.const(np.abs(self.weights(c)) + 0.1)],
                                  epsilon=self.odd(1e-5)),
                lambda: self.node("LRN", size=int(r.integers(1, 4)), alpha=self.odd(1e-4), bias=self.odd(1.0)),
                lambda: self.node("Resize", ["", self.const(np.array([1, 1, 2, 2], np.float32))],
                                  mode=str(r.choice(["nearest", "linear", "cubic"])),
                                  coordinate_transformation_mode=str(r.choice(["half_pixel", "asymmetric",
                                                                               "align_corners", "evil */"]))),
            ]
        return ops

    def step(self):
        """Append one op whose output shape onnx infers; False when none could be added."""
        for _ in range(5):
            inits = len(self.inits)
            op = self.rng.choice(self.candidates())
            node = op()
            shape = self.infer(node)
            if shape is not None and all(d >= 1 for d in shape) and shape[0] == 1:
                self.nodes.append(node)
                self.current, self.shape = node.output[0], shape
                return True
            del self.inits[inits:]
        return False

    def model(self, nodes=None, output=None):
        nodes = list(nodes if nodes is not None else self.nodes)
        output = output or self.current
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.input_shape)],
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model

    def infer(self, node):
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model(self.nodes + [node], node.output[0]),
                                                         strict_mode=True)
        except Exception:  # noqa: BLE001 (an op onnx itself rejects here: draw another)
            return None
        t = inferred.graph.output[0].type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim]
        return dims if t.HasField("shape") and dims else None


def random_model(seed):
    b = Builder(seed)
    for _ in range(int(b.rng.integers(1, 5))):
        if not b.step():
            break
    if not b.nodes:
        b.current = "x"
        b.nodes.append(b.node("Relu"))
        b.current = b.nodes[-1].output[0]
    return b.model(), SHAPES[seed % 3], PRECISIONS[(seed // 3) % 2]


@pytest.mark.e2e
@pytest.mark.parametrize("seed", SEEDS)
def test_every_generated_model_compiles_or_is_refused_in_one_line(tmp_path, seed):
    model, shape, precision = random_model(seed)
    path = tmp_path / f"g{seed}.onnx"
    path.write_bytes(model.SerializeToString())
    try:
        written = steps.generate(str(path), tmp_path / "out", shape=shape, precision=precision)
    except NNBuildError as refusal:
        message = str(refusal)
        assert "\n" not in message and str(path) in message, message
        return
    for c_file in [p for p in map(str, written) if p.endswith(".c")]:
        run = subprocess.run(CFLAGS + [c_file], capture_output=True, text=True)
        assert run.returncode == 0, f"seed {seed} ({shape}, {precision}): {run.stderr[:2000]}"


def test_the_generator_covers_generated_and_refused_cases():
    """The seeds hold both outcomes and the hostile values (a property test that never refuses or
    never generates checks nothing)."""
    ops, hostile = set(), 0
    for seed in SEEDS:
        model, _, _ = random_model(seed)
        ops |= {n.op_type for n in model.graph.node}
        for n in model.graph.node:
            for a in n.attribute:
                if (a.type == onnx.AttributeProto.FLOAT and not math.isfinite(a.f)) or a.s in (b"EVIL", b"evil */"):
                    hostile += 1
    assert len(ops) >= 15 and hostile >= 3, (sorted(ops), hostile)
