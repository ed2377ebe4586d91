"""The int8 precision (shape tflm): a full-integer TFLite model's generated C, compiled for the host
and run, equals TFLite Micro's int8 outputs (the goldens y_q of tests/data/tflite/, made by
make_fixtures.py with PyPI tflite-micro) and nnbuild.numerics.tflm_int8 bit for bit; what it
cannot generate is refused in one line."""

import numpy as np
import pytest

from conftest import REPO
from nnbuild import frontends, kinds, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.frontends import tflite as tfl
from nnbuild.numerics import tflm_int8

DATA = REPO / "tests" / "data" / "tflite"
#: every int8 fixture whose operators the int8 precision generates
FIXTURES = ["mlp", "cnn", "core", "arith", "pooled", "conv1d", "merge", "mixed", "extra"]


def host_outputs(name, tmp_path, x_q):
    """The int8 outputs of the fixture's C built and run on the host, as float32 [cases, outputs]."""
    program, _ = pipeline.build_check_program(DATA / f"{name}_int8.tflite", "host", tmp_path, precision="int8")
    outputs, _ = pipeline.run_cases("host", program, np.asarray(x_q, np.float32).reshape(len(x_q), -1),
                                    n_outputs(name), kind="int8")
    return np.asarray(outputs)


def n_outputs(name):
    with np.load(DATA / f"{name}_int8.npz") as gold:
        return int(np.prod(gold["y_q"].shape[1:]))


@pytest.mark.parametrize("name", FIXTURES)
def test_generated_c_is_bit_exact_with_tflite_micro(name, tmp_path):
    with np.load(DATA / f"{name}_int8.npz") as gold:
        x_q, y_q = gold["x_q"], gold["y_q"]
    graph = tfl.read(DATA / f"{name}_int8.tflite")
    rng = np.random.default_rng(7)
    extra = rng.integers(-128, 128, size=(24,) + x_q.shape[1:])
    x_all = np.concatenate([x_q.astype(np.int64), extra])
    got = host_outputs(name, tmp_path, x_all)
    assert np.array_equal(got[:len(x_q)], y_q.reshape(len(x_q), -1).astype(np.float32))
    model = np.stack([tflm_int8.run(graph, x).reshape(-1) for x in x_all]).astype(np.float32)
    assert np.array_equal(got, model)
