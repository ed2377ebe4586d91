"""nnbuild.numerics.tflm_int8: TFLite Micro's int8 arithmetic in numpy agrees bit for bit with TFLite
Micro's own interpreter (the int8 goldens of tests/data/tflite/, made by make_fixtures.py with PyPI
`tflite-micro`) on the full-integer models whose operators it implements; an operator it does not
implement is named, never approximated."""

import math

import numpy as np
import pytest

from conftest import REPO, tflite_with_opcode
from nnbuild.frontends import tflite as tfl
from nnbuild.numerics import tflm_int8

DATA = REPO / "tests" / "data" / "tflite"


@pytest.mark.parametrize("name", ["core", "arith", "pooled", "conv1d", "merge", "mlp", "cnn", "mixed", "extra",
                                  "acts"])
def test_int8_outputs_are_bit_exact_with_tflite_micro(name):
    """core: CONV_2D, DEPTHWISE_CONV_2D (multiplier 2, relu6), MAX/AVERAGE_POOL_2D, RESHAPE, FULLY_CONNECTED
    (relu); arith: ADD, MUL, CONCATENATION, PAD, MAX_POOL_2D, FULLY_CONNECTED; pooled: MEAN (Keras
    GlobalAveragePooling2D); conv1d: EXPAND_DIMS, LOGISTIC; merge: TANH, PAD, ADD, MUL, CONCATENATION, MEAN;
    mlp: FULLY_CONNECTED, TANH, LOGISTIC, SOFTMAX; cnn: DEPTHWISE_CONV_2D (relu6), SOFTMAX; mixed: LEAKY_RELU,
    SUB, MAXIMUM, TRANSPOSE, REDUCE_MAX; extra: HARD_SWISH; acts: standalone RELU and RELU6 and an
    int8-to-int8 QUANTIZE (with TensorFlow's RELU6, which rescales to the output, 192 steps off; with an
    unscaled RELU 97; with QUANTIZE as a copy 254).
    Per-channel filter scales, int32 biases, SAME and VALID padding. (Also measured on 300 random int8
    inputs each: 0 differences.)"""
    graph = tfl.read(DATA / f"{name}_int8.tflite")
    with np.load(DATA / f"{name}_int8.npz") as gold:
        x_q, y_q = gold["x_q"], gold["y_q"]
    got = np.stack([tflm_int8.run(graph, x) for x in x_q])
    assert got.dtype == np.int8
    assert np.array_equal(got.reshape(len(x_q), -1), y_q.reshape(len(x_q), -1))


def test_an_operator_without_an_int8_model_is_named(tmp_path):
    """mlp_int8 with its TANH operator code rewritten to LOG_SOFTMAX, which has no int8 model."""
    tflite_with_opcode(DATA / "mlp_int8.tflite", tmp_path / "m.tflite", 28, 50)
    graph = tfl.read(tmp_path / "m.tflite")
    with np.load(DATA / "mlp_int8.npz") as gold:
        x = gold["x_q"][0]
    with pytest.raises(NotImplementedError, match=r"operator 2 \(LOG_SOFTMAX\) has no int8 model yet"):
        tflm_int8.run(graph, x)


@pytest.mark.parametrize("real", [1e-9, 0.000123, 0.0049, 0.25, 0.5, 0.75, 0.9999999, 1.0, 3.7, 1234.5])
def test_quantize_multiplier_represents_the_real_multiplier(real):
    multiplier, shift = tflm_int8.quantize_multiplier(real)
    assert 2 ** 30 <= multiplier < 2 ** 31
    assert math.isclose(multiplier * 2.0 ** (shift - 31), real, rel_tol=2.0 ** -30)


def test_requantisation_rounds_as_gemmlowp():
    """The doubling high multiply adds 2^30 (or 1 - 2^30 below zero) before a truncating division, so a
    negative tie goes toward zero there; the power-of-two division then rounds ties away from zero."""
    half, shift = tflm_int8.quantize_multiplier(0.5)
    assert (half, shift) == (2 ** 30, 0)
    got = tflm_int8.multiply_by_quantized_multiplier(np.array([3, 5, -3, -5, 2 ** 31 - 1, -2 ** 31]), half, shift)
    assert got.tolist() == [2, 3, -1, -2, 2 ** 30, -2 ** 30]
    quarter, shift = tflm_int8.quantize_multiplier(0.25)
    assert (quarter, shift) == (2 ** 30, -1)
    # rounded twice (TFLite Micro's default, not TFLITE_SINGLE_ROUNDING): 5 * 0.25 = 1.25 gives 2
    assert tflm_int8.multiply_by_quantized_multiplier(np.array([6, -6, 5, -5]), quarter, shift).tolist() == [2, -2, 2, -1]


def test_activation_ranges_are_quantized_bounds():
    assert tflm_int8.activation_range(3, 0.05, -128) == (-128, -8)  # RELU6 at scale 0.05: 6.0 is 120 steps
    assert tflm_int8.activation_range(1, 0.05, -10) == (-10, 127)
    assert tflm_int8.activation_range(0, 0.05, -10) == (-128, 127)


def test_relu6_clamps_in_the_input_scale_and_ignores_the_output():
    """TFLite Micro's int8 RELU6 clamps the input values to 0 and 6 quantized at the input's scale and
    zero point (6 / 0.02555 rounds to 235 steps: above 127) and writes them unchanged."""
    assert tflm_int8.relu6_bounds(0.02555, -1) == (-1, 127)
    assert tflm_int8.relu6_bounds(0.05, -128) == (-128, -8)
    assert tflm_int8.relu6(np.array([-128, -2, -1, 0, 5, 127]), 0.05, -10).tolist() == [-10, -2, -1, 0, 5, 110]


def test_relu_and_requantize_rescale_to_the_output():
    """RELU: z_out + (x - z_in) * s_in / s_out, at least z_out; QUANTIZE int8 to int8: the same without the
    lower bound, saturated to int8."""
    x = np.array([-128, -20, -10, 0, 10, 127])
    assert tflm_int8.relu(x, (0.1, -10), (0.2, 5)).tolist() == [5, 5, 5, 10, 15, 74]
    assert tflm_int8.requantize(x, (0.1, -10), (0.2, 5)).tolist() == [-54, 0, 5, 10, 15, 74]
    assert tflm_int8.requantize(x, (0.1, 0), (0.01, 0)).tolist() == [-128, -128, -100, 0, 100, 127]
