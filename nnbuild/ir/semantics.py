"""Exact numpy semantics of every activation and layer kind of the IR.

This module is the single definition of what a model computes: the reference executor
(nnbuild.ir.reference) uses it, and generated C is checked against that executor. Every
function computes in the dtype of its input array (the caller chooses float32 or float64),
so the same formulas give both the float64 "mathematical" reference and a float32 model
of the firmware arithmetic.

Numerical rules (kept in sync with the C templates):
* sigmoid uses exp(-|x|) only, so it never overflows; exp underflow to 0 is correct rounding.
* tanh is numpy's, saturating to +-1 for huge |x|.
* softmax subtracts the row maximum (last axis) before exp.

Layer functions take batched channels-last tensors [N, H, W, C] (or [N, features]).
"""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import ACTIVATIONS


def linear(x: np.ndarray) -> np.ndarray:
    """linear(x) = x (identity; returned as is)."""
    return x


def relu(x: np.ndarray) -> np.ndarray:
    """relu(x) = x if x > 0 else 0, element-wise: IEEE 754 maxNum(x, 0), so NaN gives 0, as the
    generated C's `x > 0 ? x : 0` does (a check fed NaN compares equal instead of failing)."""
    x = np.asarray(x)
    return np.where(x > 0, x, x.dtype.type(0))


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh(x) = (e^x - e^-x) / (e^x + e^-x); saturates to +-1, never NaN for finite x."""
    return np.tanh(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """sigmoid(x) = 1 / (1 + e^-x).

    Computed as 1/(1+e) for x >= 0 and e/(1+e) for x < 0 with e = exp(-|x|) <= 1, so no term
    overflows for any finite x (|x| = 1e30 gives exactly 1 or 0) and tiny results keep their
    relative precision.
    """
    x = np.asarray(x)
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def softmax(x: np.ndarray) -> np.ndarray:
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j, over the last axis.

    Subtracting the maximum keeps every exponent <= 0, so nothing overflows and the largest
    term is exactly 1 (the sum is >= 1, no division by zero) for finite inputs.
    """
    x = np.asarray(x)
    with np.errstate(under="ignore", over="ignore"):
        shifted = x - np.max(x, axis=-1, keepdims=True)
        e = np.exp(shifted)
    return e / np.sum(e, axis=-1, keepdims=True)


#: Activation name (as in nnbuild.ir.graph.ACTIVATIONS) -> its function.
ACTIVATION_FUNCTIONS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": linear,
    "relu": relu,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "softmax": softmax,
}

assert set(ACTIVATION_FUNCTIONS) == set(ACTIVATIONS), "semantics must cover every IR activation"


def activate(name: str, x: np.ndarray) -> np.ndarray:
    """Apply the activation called `name`; an unknown name is an error, never a silent identity."""
    try:
        fn = ACTIVATION_FUNCTIONS[name]
    except KeyError:
        raise NNBuildError(
            f"unknown activation '{name}' (supported: {', '.join(ACTIVATIONS)})"
        ) from None
    return fn(x)


def dense(layer, x: np.ndarray) -> np.ndarray:
    """Dense: y = act(x @ kernel + bias), kernel [inputs, units]; no bias term if bias is None.

    Weights are cast to x's dtype so the whole layer runs in one precision.
    """
    kernel = np.asarray(layer.kernel, dtype=x.dtype)
    y = x @ kernel
    if layer.bias is not None:
        y = y + np.asarray(layer.bias, dtype=x.dtype)
    return activate(layer.activation, y)


def activation_layer(layer, x: np.ndarray) -> np.ndarray:
    """Activation: y = act(x), element-wise (softmax over the last axis)."""
    return activate(layer.activation, x)


def _windows(x: np.ndarray, window, strides, dilation, out_hw):
    """Yield (ky, kx, slice of x [N, OH, OW, C]) for every window offset of a padded [N,H,W,C] x."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = window, strides, dilation, out_hw
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            yield ky, kx, x[:, y0:y0 + (oh - 1) * sh + 1:sh, x0:x0 + (ow - 1) * sw + 1:sw, :]


def _pad(x: np.ndarray, padding, value) -> np.ndarray:
    t, b, l, r = padding
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def conv2d(layer, x: np.ndarray) -> np.ndarray:
    """Conv2D (ACETONE Definitions 6, 7, 14 with dilation): zero-pad (top, bottom, left, right),
    then y[n,oy,ox,o] = act(bias[o] + sum_{ky,kx,c} K[ky,kx,c,o] * xp[n, oy*sh+ky*dh, ox*sw+kx*dw, c])."""
    kernel = np.asarray(layer.kernel, dtype=x.dtype)
    oh, ow, co = layer.output_shape(x.shape[1:])
    xp = _pad(x, layer.padding, 0)
    y = np.zeros((x.shape[0], oh, ow, co), dtype=x.dtype)
    for ky, kx, patch in _windows(xp, kernel.shape[:2], layer.strides, layer.dilation, (oh, ow)):
        y += patch @ kernel[ky, kx]
    if layer.bias is not None:
        y += np.asarray(layer.bias, dtype=x.dtype)
    return activate(layer.activation, y)


def zeropad2d(layer, x: np.ndarray) -> np.ndarray:
    """ZeroPadding2D (Definition 6): zero rows on top/bottom, zero columns left/right."""
    return _pad(x, layer.padding, 0)


def pool2d(layer, x: np.ndarray) -> np.ndarray:
    """MaxPooling2D / AveragePooling2D (Definition 8) with Keras padding semantics: padded cells are
    not values (max ignores them, average divides by the count of real cells only), then act."""
    oh, ow, _ = layer.output_shape(x.shape[1:])
    args = (layer.pool, layer.strides, (1, 1), (oh, ow))
    if layer.mode == "max":
        xp = _pad(x, layer.padding, -np.inf)
        y = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf, dtype=x.dtype)
        for _, _, patch in _windows(xp, *args):
            y = np.maximum(y, patch)
    else:
        xp = _pad(x, layer.padding, 0)
        ones = _pad(np.ones((1,) + x.shape[1:3] + (1,), dtype=x.dtype), layer.padding, 0)
        y = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=x.dtype)
        count = np.zeros((1, oh, ow, 1), dtype=x.dtype)
        for (_, _, patch), (_, _, real) in zip(_windows(xp, *args), _windows(ones, *args)):
            y += patch
            count += real
        y = y / count
    return activate(layer.activation, y)


def batchnorm(layer, x: np.ndarray) -> np.ndarray:
    """BatchNormalization (Definition 9): act(gamma * (x - mean) / sqrt(var + eps) + beta), last axis.
    Evaluated in that order (not as alpha*x + B) so it is the definition, not a refactoring of it."""
    g, b, m, v = (np.asarray(a, dtype=x.dtype) for a in (layer.gamma, layer.beta, layer.mean, layer.variance))
    y = g * ((x - m) / np.sqrt(v + x.dtype.type(layer.epsilon))) + b
    return activate(layer.activation, y)


def flatten(layer, x: np.ndarray) -> np.ndarray:
    """Flatten (Definition 10, channels-last): row-major (H, W, C) order."""
    return x.reshape(x.shape[0], -1)


def reshape(layer, x: np.ndarray) -> np.ndarray:
    """Reshape: same row-major element order, new shape."""
    return x.reshape((x.shape[0],) + tuple(layer.target_shape))


def add(layer, *xs: np.ndarray) -> np.ndarray:
    """Add: act(x1 + x2 + ... + xn), summed left to right."""
    y = xs[0]
    for other in xs[1:]:
        y = y + other
    return activate(layer.activation, y)


def concat(layer, *xs: np.ndarray) -> np.ndarray:
    """Concatenate along layer.axis (batch axis excluded)."""
    return np.concatenate(xs, axis=layer.axis + 1)


#: Layer kind (the `kind` class attribute of nnbuild.ir.graph layers) -> its semantics.
LAYER_SEMANTICS = {
    "dense": dense,
    "activation": activation_layer,
    "conv2d": conv2d,
    "zeropad2d": zeropad2d,
    "pool2d": pool2d,
    "batchnorm": batchnorm,
    "flatten": flatten,
    "reshape": reshape,
    "add": add,
    "concat": concat,
}


def apply_layer(layer, *xs: np.ndarray) -> np.ndarray:
    """Compute one layer on its input(s) (batched, in the inputs' dtype), dispatching on layer.kind."""
    fn = LAYER_SEMANTICS.get(getattr(layer, "kind", None))
    if fn is None:
        raise NNBuildError(
            f"no semantics defined for layer kind '{getattr(layer, 'kind', type(layer).__name__)}'",
            item=f"layer '{getattr(layer, 'name', '?')}'",
        )
    return fn(layer, *xs)
