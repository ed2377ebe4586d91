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

import math
from typing import Callable, Dict

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import ACTIVATIONS, normal_axes


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

    Weights are cast to x's dtype so the whole layer runs in one precision, and made C-contiguous:
    BLAS sums in an order that depends on the operand's layout, and the same weights read from
    another format (NNEF's OIHW, transposed) must give the same bits.
    """
    kernel = np.ascontiguousarray(layer.kernel, dtype=x.dtype)
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
    kernel = np.ascontiguousarray(layer.kernel, dtype=x.dtype)   # layout-independent sums (see dense)
    oh, ow, co = layer.output_shape(x.shape[1:])
    xp = _pad(x, layer.padding, 0)
    y = np.zeros((x.shape[0], oh, ow, co), dtype=x.dtype)
    g = int(layer.groups)
    ci, cog = kernel.shape[2], co // g
    for ky, kx, patch in _windows(xp, kernel.shape[:2], layer.strides, layer.dilation, (oh, ow)):
        for group in range(g):
            y[..., group * cog:(group + 1) * cog] += (patch[..., group * ci:(group + 1) * ci]
                                                       @ kernel[ky, kx, :, group * cog:(group + 1) * cog])
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


# --------------------------------------------------------------------------- N-d tensor operations
# Batched tensors [N, *shape]: axis k of the IR shape is numpy axis k + 1.


def _real(x, value):
    return x.dtype.type(value)


def _elu(x, alpha):
    with np.errstate(over="ignore"):
        return np.where(x > 0, x, _real(x, alpha) * (np.exp(np.minimum(x, 0)) - _real(x, 1)))


def _softplus(x):
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow for any finite x."""
    with np.errstate(under="ignore"):
        return np.maximum(x, _real(x, 0)) + np.log1p(np.exp(-np.abs(x)))


def _clip(x, lo, hi):
    """ONNX Clip: NaN stays NaN (comparisons, not fmin/fmax)."""
    return np.where(x < _real(x, lo), _real(x, lo), np.where(x > _real(x, hi), _real(x, hi), x))


def _erf(x):
    """erf element-wise, computed in float64 (math.erf, correctly rounded to ~1 ulp) then in x's dtype."""
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype) if x.size else x


def _gelu(x, approximate):
    """ONNX Gelu-20: 0.5 x (1 + erf(x / sqrt 2)); approximate=1 ("tanh"):
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    half, one = _real(x, 0.5), _real(x, 1)
    if approximate:
        u = _real(x, math.sqrt(2.0 / np.pi)) * (x + _real(x, 0.044715) * x * x * x)
        return half * x * (one + np.tanh(u))
    return half * x * (one + _erf(x * _real(x, 1.0 / math.sqrt(2.0))))


def _quiet(fn):
    def run(x, *params):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(x, *params)
    return run


#: Unary op name (nnbuild.ir.graph.UNARY_OPS) -> f(x, *params), computed in x's dtype.
UNARY_FUNCTIONS = {
    "relu": lambda x: relu(x),
    "leaky_relu": lambda x, a: np.where(x < 0, _real(x, a) * x, x),
    "elu": _elu,
    "selu": lambda x, a, g: _real(x, g) * _elu(x, a),
    "sigmoid": lambda x: sigmoid(x),
    "hard_sigmoid": lambda x, a, b: _clip(_real(x, a) * x + _real(x, b), 0.0, 1.0),
    "tanh": lambda x: np.tanh(x),
    "softplus": _softplus,
    "softsign": lambda x: x / (_real(x, 1) + np.abs(x)),
    "exp": _quiet(lambda x: np.exp(x)),
    "log": _quiet(lambda x: np.log(x)),
    "sqrt": _quiet(lambda x: np.sqrt(x)),
    "abs": lambda x: np.abs(x),
    "neg": lambda x: -x,
    "reciprocal": _quiet(lambda x: _real(x, 1) / x),
    "clip": _clip,
    "hard_swish": lambda x: x * _clip(_real(x, 1.0 / 6.0) * x + _real(x, 0.5), 0.0, 1.0),
    "erf": _erf,
    "gelu": _gelu,
    "sign": lambda x: np.where(x > 0, _real(x, 1), np.where(x < 0, _real(x, -1), x * _real(x, 0))),
    "shrink": lambda x, lambd, bias: np.where(x < -_real(x, lambd), x + _real(x, bias),
                                              np.where(x > _real(x, lambd), x - _real(x, bias), _real(x, 0))),
}


def unary(layer, x: np.ndarray) -> np.ndarray:
    """Unary: y = op(x, *params) element-wise (see UNARY_FUNCTIONS)."""
    return UNARY_FUNCTIONS[layer.op](np.asarray(x), *layer.params)


def _binary(op, a, b):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if op in ("add", "mean"):
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op == "div":
            return a / b
        if op == "max":
            return np.where(b > a, b, a)
        return np.where(b < a, b, a)


def elementwise(layer, *xs: np.ndarray) -> np.ndarray:
    """Elementwise: operands (tensors with the constants inserted) broadcast together, folded left
    to right with op (max/min keep the left operand unless the right one compares greater/less),
    mean divides the sum by the operand count; then the activation."""
    n, dtype = xs[0].shape[0], xs[0].dtype
    operands = layer.operands([("tensor", x) for x in xs])
    rank = max(len(o[1].shape) - 1 if isinstance(o, tuple) else np.ndim(o) for o in operands)
    aligned = []
    for o in operands:
        if isinstance(o, tuple):
            x = o[1]
            aligned.append(x.reshape((n,) + (1,) * (rank - (x.ndim - 1)) + x.shape[1:]))
        else:
            c = np.asarray(o, dtype=dtype)
            aligned.append(c.reshape((1,) + (1,) * (rank - c.ndim) + c.shape))
    y = aligned[0] + np.zeros((), dtype) if len(aligned) == 1 else _binary(layer.op, aligned[0], aligned[1])
    for other in aligned[2:]:
        y = _binary(layer.op, y, other)
    if layer.op == "mean":
        y = y / dtype.type(len(aligned))
    shape = (n,) + layer.output_shape(*[x.shape[1:] for x in xs])
    return activate(layer.activation, np.broadcast_to(y, shape).astype(dtype, copy=True))


def transpose(layer, x: np.ndarray) -> np.ndarray:
    """Transpose: y.shape[k] = x.shape[perm[k]]."""
    return np.transpose(x, (0,) + tuple(int(p) + 1 for p in layer.perm)).copy()


def pad(layer, x: np.ndarray) -> np.ndarray:
    """Pad: numpy.pad per axis ('constant' with value, 'edge', 'reflect', 'wrap'); negative pads
    crop first."""
    crop = tuple([slice(None)] + [slice(max(-b, 0), x.shape[k + 1] - max(-a, 0))
                                  for k, (b, a) in enumerate(layer.pads)])
    x = x[crop]
    widths = [(0, 0)] + [(max(b, 0), max(a, 0)) for b, a in layer.pads]
    if layer.mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=x.dtype.type(layer.value))
    return np.pad(x, widths, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[layer.mode])


def slice_layer(layer, x: np.ndarray) -> np.ndarray:
    """Slice: y[i] = x[starts + i * steps] per axis, counts[k] cells on axis k."""
    index = [np.arange(x.shape[0])]
    for s, d, c in zip(layer.starts, layer.steps, layer.counts):
        index.append(int(s) + np.arange(int(c)) * int(d))
    return x[np.ix_(*index)]


def gather(layer, x: np.ndarray) -> np.ndarray:
    """Gather: numpy.take(x, indices, axis) (a scalar index removes the axis)."""
    return np.take(x, np.asarray(layer.indices), axis=layer.axis + 1)


def gather_elements(layer, x: np.ndarray) -> np.ndarray:
    """GatherElements: y[i] = x[i with the axis coordinate replaced by indices[i]]."""
    idx = np.asarray(layer.indices)
    index = list(np.ix_(*[np.arange(n) for n in (x.shape[0],) + idx.shape]))
    index[layer.axis + 1] = idx[None]
    return x[tuple(index)]


def tile(layer, x: np.ndarray) -> np.ndarray:
    """Tile: numpy.tile per axis."""
    return np.tile(x, (1,) + tuple(int(r) for r in layer.repeats))


def resize_coordinates(layer, axis, size_in):
    """Source coordinate of every output cell of `axis` (ONNX coordinate_transformation_mode)."""
    size_out, scale = layer.sizes[axis], layer.scales[axis]
    y = np.arange(size_out, dtype=np.float64)
    mode = layer.coordinate_mode
    if mode == "align_corners":
        return np.zeros(size_out) if size_out == 1 else y * (size_in - 1) / (size_out - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return np.full(size_out, -0.5) if size_out == 1 else (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "half_pixel_symmetric":
        adjustment = size_out / (scale * size_in)
        return size_in / 2 * (1 - adjustment) + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5


def _nearest(x, mode):
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    low, frac = np.floor(x), x - np.floor(x)
    if mode == "round_prefer_floor":
        return np.where(frac > 0.5, low + 1, low)
    return np.where(frac >= 0.5, low + 1, low)


def _cubic(r, a):
    return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                     ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a])


def resize_taps(layer, input_shape):
    """Per axis, None (the axis is copied) or (indices [out, taps], weights [out, taps] float64):
    output cell i of that axis is sum_t weights[i, t] * x[indices[i, t]] (ONNX Resize: neighbours
    beyond the edge clamp to it; exclude_outside zeroes them and renormalises)."""
    taps = []
    for axis, size_in in enumerate(input_shape):
        size_out = layer.sizes[axis]
        if size_out == size_in and layer.scales[axis] == 1.0 and layer.coordinate_mode != "tf_half_pixel_for_nn":
            taps.append(None)
            continue
        x = resize_coordinates(layer, axis, size_in)
        if layer.mode == "nearest":
            idx = np.clip(_nearest(x, layer.nearest_mode), 0, size_in - 1).astype(np.int64)[:, None]
            taps.append((idx, np.ones(idx.shape)))
            continue
        low = np.floor(x)
        ratio = np.where(x == low, 1.0, x - low)   # ONNX: an integer coordinate takes the left pair
        base = low.astype(np.int64) - np.where(x == low, 1, 0)
        if layer.mode == "linear":
            weights = np.stack([1 - ratio, ratio], axis=1)
            idx = base[:, None] + np.arange(2)[None, :]
        else:
            weights = _cubic(ratio, float(layer.cubic_coeff_a)).T
            idx = base[:, None] + np.arange(-1, 3)[None, :]
        if layer.exclude_outside:
            weights = np.where((idx < 0) | (idx >= size_in), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        taps.append((np.clip(idx, 0, size_in - 1), weights))
    return taps


def resize(layer, x: np.ndarray) -> np.ndarray:
    """Resize: each resized axis in turn, y_i = sum_t w[i, t] * x[idx[i, t]] (float64 weights cast
    to x's dtype); nearest copies."""
    for axis, tap in enumerate(resize_taps(layer, x.shape[1:])):
        if tap is None:
            continue
        idx, weights = tap
        if layer.mode == "nearest":
            x = np.take(x, idx[:, 0], axis=axis + 1)
            continue
        shape = (1,) * (axis + 1) + weights.shape + (1,) * (x.ndim - axis - 2)
        w = weights.astype(x.dtype).reshape(shape)
        parts = np.take(x, idx, axis=axis + 1) * w
        y = parts.take(0, axis=axis + 2)
        for t in range(1, idx.shape[1]):
            y = y + parts.take(t, axis=axis + 2)
        x = y
    return x


def reduce(layer, x: np.ndarray) -> np.ndarray:
    """Reduce: op over the axes (sum, mean = sum / count, max, min, prod), keepdims or not."""
    axes = tuple(a + 1 for a in normal_axes(layer.axes, x.ndim - 1, "reduce"))
    with np.errstate(over="ignore", invalid="ignore"):
        if layer.op in ("sum", "mean"):
            y = np.sum(x, axis=axes, keepdims=True)
            if layer.op == "mean":
                y = y / x.dtype.type(int(np.prod([x.shape[a] for a in axes])))
        else:
            y = {"max": np.max, "min": np.min, "prod": np.prod}[layer.op](x, axis=axes, keepdims=True)
    return y.reshape((x.shape[0],) + layer.output_shape(x.shape[1:])).astype(x.dtype)


def softmax_layer(layer, x: np.ndarray) -> np.ndarray:
    """Softmax over one axis (the max subtracted first)."""
    axis = int(layer.axis) % (x.ndim - 1) + 1
    return np.moveaxis(softmax(np.moveaxis(x, axis, -1)), -1, axis)


def lrn(layer, x: np.ndarray) -> np.ndarray:
    """LRN over the last axis: x / (bias + alpha/size * window sum of squares)^beta."""
    c, size = x.shape[-1], int(layer.size)
    low, high = (size - 1) // 2, -(-(size - 1) // 2)
    sq = x * x
    window = np.zeros_like(x)
    for k in range(c):
        window[..., k] = np.sum(sq[..., max(0, k - low):min(c, k + high + 1)], axis=-1)
    t = x.dtype.type
    return x / (t(layer.bias) + t(layer.alpha) / t(size) * window) ** t(layer.beta)


def _gate(layer, pre, fn):
    """A gate: clip the pre-activation to [-clip, clip] (ONNX clip, if set), then its function."""
    if layer.clip is not None:
        pre = _clip(pre, -float(layer.clip), float(layer.clip))
    return activate(fn, pre)


def _lstm_step(layer, d, t, x_t, h, c, pre):
    """One LSTM step of direction d: (h, c) after x_t, pre = W x_t + R h + b [N, 4H] (i, o, f, c)."""
    f_act, g_act, h_act = layer.activations
    n = layer.hidden
    dt = x_t.dtype
    pi, po, pf, pc = (pre[:, k * n:(k + 1) * n] for k in range(4))
    if layer.peephole is not None:
        p = np.asarray(layer.peephole[d], dtype=dt)
        pi, pf = pi + p[0] * c, pf + p[2] * c
    one = dt.type(1)
    if layer.coupling == "input_from_forget":
        f = _gate(layer, pf, f_act)
        i = one - f
    else:
        i = _gate(layer, pi, f_act)
        f = one - i if layer.coupling == "forget_from_input" else _gate(layer, pf, f_act)
    c = f * c + i * _gate(layer, pc, g_act)
    if layer.cell_clip is not None:
        c = _clip(c, -float(layer.cell_clip), float(layer.cell_clip))
    if layer.peephole is not None:
        po = po + np.asarray(layer.peephole[d][1], dtype=dt) * c
    return _gate(layer, po, f_act) * activate(h_act, c), c


def _gru_step(layer, d, x_t, h, xw, r_rows):
    """One GRU step of direction d: h after x_t, xw = W x_t + bias [N, 3H] (z, r, h)."""
    f_act, g_act = layer.activations
    n, dt = layer.hidden, x_t.dtype
    rz, rr, rh = r_rows
    z = _gate(layer, xw[:, :n] + h @ rz.T, f_act)
    r = _gate(layer, xw[:, n:2 * n] + h @ rr.T, f_act)
    rb = np.asarray(layer.rbias[d], dtype=dt)
    if layer.linear_before_reset:
        cand = xw[:, 2 * n:] + r * (h @ rh.T + rb)
    else:
        cand = xw[:, 2 * n:] + ((r * h) @ rh.T + rb)
    return (dt.type(1) - z) * _gate(layer, cand, g_act) + z * h


def recurrent(layer, x: np.ndarray, *states: np.ndarray) -> np.ndarray:
    """Recurrent (LSTM/GRU/RNN, nnbuild.ir.graph.Recurrent) over x [N, T, F]: each direction from its
    initial state (zero unless a constant or, for layer.state_inputs, the `states` [N, D, H] give
    it), forward t = 0..T-1 or reverse T-1..0; returns every step's hidden state [N, T, D, H], the
    last one [N, D, H] or the last cell state [N, D, H]."""
    dt, (batch, steps, _) = x.dtype, x.shape
    n, dirs = layer.hidden, len(layer.directions)
    seq = np.zeros((batch, steps, dirs, n), dtype=dt)
    last = np.zeros((batch, dirs, n), dtype=dt)
    cells = np.zeros((batch, dirs, n), dtype=dt)
    given = dict(zip(layer.state_inputs, states))
    for d, direction in enumerate(layer.directions):
        w = np.ascontiguousarray(layer.w[d], dtype=dt)
        r = np.ascontiguousarray(layer.r[d], dtype=dt)
        b = np.asarray(layer.bias[d], dtype=dt)
        h = np.zeros((batch, n), dt) + (0 if layer.initial_h is None else np.asarray(layer.initial_h[d], dt))
        c = np.zeros((batch, n), dt) + (0 if layer.initial_c is None else np.asarray(layer.initial_c[d], dt))
        if "h" in given:
            h = np.asarray(given["h"][:, d, :], dt).copy()
        if "c" in given:
            c = np.asarray(given["c"][:, d, :], dt).copy()
        order = range(steps) if direction == "forward" else range(steps - 1, -1, -1)
        for t in order:
            x_t = x[:, t, :]
            if layer.cell == "lstm":
                h, c = _lstm_step(layer, d, t, x_t, h, c, (x_t @ w.T + b) + h @ r.T)
            elif layer.cell == "rnn":
                h = _gate(layer, (x_t @ w.T + b) + h @ r.T, layer.activations[0])
            else:
                h = _gru_step(layer, d, x_t, h, x_t @ w.T + b, (r[:n], r[n:2 * n], r[2 * n:]))
            seq[:, t, d, :] = h
        last[:, d, :], cells[:, d, :] = h, c
    return {"sequence": seq, "last": last, "cell": cells}[layer.output]


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
    "unary": unary,
    "elementwise": elementwise,
    "transpose": transpose,
    "pad": pad,
    "slice": slice_layer,
    "gather": gather,
    "gather_elements": gather_elements,
    "tile": tile,
    "resize": resize,
    "reduce": reduce,
    "softmax": softmax_layer,
    "lrn": lrn,
    "recurrent": recurrent,
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
