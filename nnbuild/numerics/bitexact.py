"""Bit-exact numpy model of the generated fixed-point code (contract in nnbuild.numerics.plan).

The generated C must equal `run(plan, x)` to the last bit on every target; the error against the
float64 reference is then a property of the plan, measurable without a compiler.
"""

import numpy as np

from nnbuild.numerics.formats import Z_FRAC, Z_LIMIT
from nnbuild.numerics.tables import EXP_STEP_BITS, TANH_STEP_BITS, exp_table, tanh_table


def quantize_input(x, tensor, input_range):
    """float32 -> integer as the C does it: clamp to the declared range (NaN gives the low end),
    then round the exact real x * 2^f half away from zero (the C works on the float's bits: no
    float arithmetic, so no rounding of its own; float64 holds every step here exactly)."""
    lo, hi = np.float32(input_range[0]), np.float32(input_range[1])
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        x = np.where(x >= lo, x, lo)
        x = np.where(x > hi, hi, x).astype(np.float32)
    y = x.astype(np.float64) * 2.0 ** tensor.frac
    magnitude = np.floor(np.abs(y) + 0.5)
    return np.where(y < 0, -magnitude, magnitude).astype(np.int64)


def round_shift(values, shift):
    """(v + 2^(s-1)) >> s with a floor shift; a negative s multiplies by 2^-s."""
    values = np.asarray(values, dtype=np.int64)
    if shift > 0:
        return (values + (1 << (shift - 1))) >> shift
    return values * (1 << -shift)


def tanh_q(z, out_frac):
    """Table tanh of Q16 pre-activations, in Q(out_frac)."""
    table = tanh_table(out_frac)
    step = Z_FRAC - TANH_STEP_BITS
    a = np.abs(z)
    sat = a >= (8 << Z_FRAC)
    idx = np.where(sat, 0, a >> step)
    fr = a & ((1 << step) - 1)
    y = table[idx] + (((table[np.minimum(idx + 1, len(table) - 1)] - table[idx]) * fr + (1 << (step - 1))) >> step)
    y = np.where(sat, 1 << out_frac, y)
    return np.where(z < 0, -y, y)


def sigmoid_q(z, out_frac):
    """sigmoid(z) = (1 + tanh(z / 2)) / 2, with z / 2 as an arithmetic shift."""
    return ((1 << out_frac) + tanh_q(np.asarray(z) >> 1, out_frac)) >> 1


def softmax_q(z, out_frac):
    """Table exp of (z - max) in Q15, then one rounded division per output."""
    table = exp_table()
    step = Z_FRAC - EXP_STEP_BITS
    d = z.max(axis=-1, keepdims=True) - z
    far = d >= (16 << Z_FRAC)
    idx = np.where(far, 0, d >> step)
    fr = d & ((1 << step) - 1)
    e = table[idx] - (((table[idx] - table[np.minimum(idx + 1, len(table) - 1)]) * fr + (1 << (step - 1))) >> step)
    e = np.where(far, 0, e)
    s = e.sum(axis=-1, keepdims=True)
    return ((e << out_frac) + (s >> 1)) // s


def dense(layer, xq):
    """Integer accumulation, requantisation and activation of one layer: [N, in] -> [N, out]."""
    kq, bq = layer.kernel_q, layer.bias_q
    if layer.per_mac_shift:
        s = layer.per_mac_shift
        prods = (xq[:, None, :] * kq[None, :, :] + (1 << (s - 1))) >> s
        acc = bq[None, :] + prods.sum(axis=2)
    else:
        acc = bq[None, :] + xq @ kq.T
    z = round_shift(acc, layer.shift)
    if layer.saturate_z:
        z = np.clip(z, -Z_LIMIT, Z_LIMIT)
    act, fo = layer.activation, layer.output.frac
    if act == "tanh":
        return tanh_q(z, fo)
    if act == "sigmoid":
        return sigmoid_q(z, fo)
    if act == "softmax":
        return softmax_q(z, fo)
    if act == "relu":
        return np.maximum(z, 0)
    return z


def run(plan, x, integers=False):
    """Outputs of the fixed-point code for float inputs [N, n_in]: float32 exactly as the C
    converts them ((float)q * 2^-f), or the final integers."""
    q = quantize_input(np.asarray(x, dtype=np.float32).reshape(len(x), -1), plan.input, plan.input_range)
    for layer in plan.layers:
        q = dense(layer, q)
    if integers:
        return q
    return q.astype(np.float32) * np.float32(2.0 ** -plan.output.frac)
