"""Semantics and reference executor: exact formulas, no overflow/NaN, dtype handling."""

from pathlib import Path

import numpy as np
import pytest

from nnbuild import frontends
from nnbuild.errors import NNBuildError
from nnbuild.ir import semantics
from nnbuild.ir.graph import ACTIVATIONS, Activation, Dense, Model
from nnbuild.ir.reference import run, run_layers

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

HUGE = np.array([1e30, -1e30, 0.0, 3.0, -3.0])


def small_model(bias=True):
    """2 -> 3 relu -> 2 linear -> softmax, with exact small weights."""
    k1 = np.array([[1.0, -1.0, 0.5], [2.0, 0.0, -0.5]], np.float32)
    k2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]], np.float32)
    b1 = np.array([0.0, 0.5, -0.25], np.float32) if bias else None
    return Model("small", (2,), [Dense("d1", k1, b1, "relu"), Dense("d2", k2, None, "linear"),
                                 Activation("sm", "softmax")])


# ----------------------------------------------------------------------------- activations


def test_semantics_cover_every_ir_activation():
    assert set(semantics.ACTIVATION_FUNCTIONS) == set(ACTIVATIONS)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "softmax", "relu", "linear"])
def test_no_overflow_or_nan_at_1e30(name, dtype):
    x = HUGE.astype(dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = semantics.activate(name, x)
    assert y.dtype == dtype
    assert np.isfinite(y).all()


def test_sigmoid_values():
    with np.errstate(all="raise", under="ignore"):
        y = semantics.sigmoid(HUGE)
    assert y[0] == 1.0 and y[1] == 0.0 and y[2] == 0.5
    np.testing.assert_allclose(y[3:], 1 / (1 + np.exp(-HUGE[3:])), rtol=1e-15)
    # tiny results keep relative precision (e/(1+e) branch)
    np.testing.assert_allclose(semantics.sigmoid(np.array([-700.0])), np.exp(-700.0), rtol=1e-12)


def test_tanh_saturates():
    assert list(semantics.tanh(HUGE)[:3]) == [1.0, -1.0, 0.0]


def test_softmax_last_axis_max_subtraction():
    x = np.array([[1e30, 0.0, -1e30], [1.0, 2.0, 3.0]])
    y = semantics.softmax(x)
    np.testing.assert_array_equal(y[0], [1.0, 0.0, 0.0])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(y[1], e / e.sum(), rtol=1e-15)
    np.testing.assert_allclose(semantics.softmax(x[1] + 1000.0), y[1], rtol=1e-12)  # shift-invariant


def test_relu_and_linear():
    x = np.array([-2.0, -0.0, 0.0, 3.5])
    np.testing.assert_array_equal(semantics.relu(x), [0.0, 0.0, 0.0, 3.5])
    assert semantics.linear(x) is x


def test_unknown_activation_is_an_error():
    with pytest.raises(NNBuildError, match="unknown activation 'elu'"):
        semantics.activate("elu", np.zeros(2))


# ----------------------------------------------------------------------------- layers


def test_dense_formula_with_and_without_bias():
    rng = np.random.default_rng(3)
    k, b, x = rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=(2, 4))
    np.testing.assert_array_equal(semantics.dense(Dense("d", k, b, "tanh"), x), np.tanh(x @ k + b))
    np.testing.assert_array_equal(semantics.dense(Dense("d", k, None, "relu"), x), np.maximum(x @ k, 0))


def test_dense_runs_in_input_dtype():
    k = np.ones((2, 2), np.float64)
    assert semantics.dense(Dense("d", k, np.zeros(2), "sigmoid"), np.ones(2, np.float32)).dtype == np.float32


def test_unknown_layer_kind():
    class Odd:
        kind, name = "conv", "c1"
    with pytest.raises(NNBuildError, match="layer 'c1'.*'conv'"):
        semantics.apply_layer(Odd(), np.zeros(2))


# ----------------------------------------------------------------------------- reference executor


def test_run_batch_and_single_sample():
    model = small_model()
    xs = np.array([[0.5, -1.0], [2.0, 1.0], [0.0, 0.0]])
    y = run(model, xs)
    assert y.shape == (3, 2) and y.dtype == np.float64
    np.testing.assert_allclose(y.sum(axis=1), 1.0)
    single = run(model, [2.0, 1.0])
    assert single.shape == (2,)
    np.testing.assert_array_equal(single, y[1])
    h = np.maximum(np.array([2.0, 1.0]) @ model.layers[0].kernel + model.layers[0].bias, 0)
    z = h @ model.layers[1].kernel
    np.testing.assert_allclose(single, np.exp(z - z.max()) / np.exp(z - z.max()).sum(), rtol=1e-15)


def test_run_layers_traces_every_layer():
    model = small_model(bias=False)
    trace = run_layers(model, [1.0, 2.0], np.float32)
    assert [name for name, _ in trace] == ["input", "d1", "d2", "sm"]
    assert [v.shape for _, v in trace] == [(2,), (3,), (2,), (2,)]
    assert all(v.dtype == np.float32 for _, v in trace)
    np.testing.assert_array_equal(trace[-1][1], run(model, [1.0, 2.0], np.float32))


def test_run_rejects_wrong_shape_and_dtype():
    with pytest.raises(NNBuildError, match="input shape \\(3,\\) does not match"):
        run(small_model(), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="float32 or float64"):
        run(small_model(), [1.0, 2.0], np.float16)


def _f1tenth_models():
    models = [frontends.load(REPO / "firmware_examples" / "f1tenth" / "architecture.json")]
    real = SHARED / "data" / "f1tenth" / "TD3_L61_128x128_C1.h5"
    if real.exists():
        models.append(frontends.load(real))
    return models


def test_float32_vs_float64_on_f1tenth():
    x = np.random.default_rng(7).uniform(-1.0, 1.0, (256, 61))
    models = _f1tenth_models()
    for model in models:
        y64, y32 = run(model, x, np.float64), run(model, x, np.float32)
        assert y32.dtype == np.float32
        assert np.abs(y64 - y32).max() < 1e-5, model.name
    if len(models) == 1:
        pytest.skip("only the example model checked: ../shared/data/f1tenth not present")


def test_batchnorm_that_would_overflow_float32_when_folded_stays_unfolded():
    """Folding multiplies the kernel by gamma/sqrt(var+eps): 3e38 * 10 is not a float32. The pass
    keeps the BatchNorm (same semantics), says why, and prints no warning."""
    import warnings

    from nnbuild import passes
    from nnbuild.ir.graph import BatchNorm, Dense, Model
    kernel = np.array([[3e38, 1.0]], dtype=np.float32)
    model = Model("big", (1,), [Dense("d", kernel, None), BatchNorm("bn", np.full(2, 10.0, np.float32),
                  np.zeros(2, np.float32), np.zeros(2, np.float32), np.ones(2, np.float32), 0.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        folded, log = passes.run(model)
    assert [l.kind for l in folded.layers] == ["dense", "batchnorm"]
    assert any("not folded" in line and "exceed float32" in line for line in log)
