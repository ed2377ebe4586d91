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
    """relu(x) = max(x, 0), element-wise (NaN propagates)."""
    x = np.asarray(x)
    return np.maximum(x, x.dtype.type(0))


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


#: Layer kind (the `kind` class attribute of nnbuild.ir.graph layers) -> its semantics.
LAYER_SEMANTICS = {
    "dense": dense,
    "activation": activation_layer,
}


def apply_layer(layer, x: np.ndarray) -> np.ndarray:
    """Compute one layer on x ([..., features]) in x's dtype, dispatching on layer.kind."""
    fn = LAYER_SEMANTICS.get(getattr(layer, "kind", None))
    if fn is None:
        raise NNBuildError(
            f"no semantics defined for layer kind '{getattr(layer, 'kind', type(layer).__name__)}'",
            item=f"layer '{getattr(layer, 'name', '?')}'",
        )
    return fn(layer, x)
