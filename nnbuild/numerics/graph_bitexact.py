"""Bit-exact numpy model of the generated fixed-point CNN code (shapes v1, v2, v3), and the integer
operations the graph planner (nnbuild.numerics.graph_plan) proves its intervals with.

Every operation here is what the C does to int16 tensors (channels-last, batch axis first):
convolution and Dense accumulate exact integer products, requantise with round_shift, then the
MLP's table activations; pooling, padding, Add and Concatenate are integer operations that are
monotone in each input, so the planner bounds them by evaluating them on the interval ends.
"""

import dataclasses

import numpy as np

from nnbuild.ir import semantics
from nnbuild.numerics.bitexact import quantize_input, round_shift, sigmoid_q, softmax_q, tanh_q
from nnbuild.numerics.formats import Z_FRAC, Z_LIMIT

#: max pooling pads with this (below any int16, int32 or int64 accumulator value the code sees)
MAX_PAD = -(1 << 62)


def accumulate(layer, kernel_q, bias_q, xq):
    """bias + sum of exact products of a Conv2D or Dense layer on integers (int64 numpy)."""
    integer = dataclasses.replace(layer, kernel=np.asarray(kernel_q, dtype=np.int64),
                                  bias=np.asarray(bias_q, dtype=np.int64), activation="linear")
    return semantics.apply_layer(integer, np.asarray(xq, dtype=np.int64))


def pool_sum(layer, xq, mode):
    """Per-window max (padding ignored) or sum (padding adds 0) of [N, H, W, C] integers."""
    oh, ow, _ = layer.output_shape(xq.shape[1:])
    t, b, l, r = layer.padding
    fill = MAX_PAD if mode == "max" else 0
    xp = np.pad(np.asarray(xq, dtype=np.int64), ((0, 0), (t, b), (l, r), (0, 0)), constant_values=fill)
    (kh, kw), (sh, sw) = layer.pool, layer.strides
    out = None
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw, :]
            out = patch.copy() if out is None else (np.maximum(out, patch) if mode == "max" else out + patch)
    return out


def pool_cells(layer, in_shape):
    """Number of real (unpadded) cells in each output window: [OH, OW]."""
    ones = np.ones((1,) + tuple(in_shape[:2]) + (1,), dtype=np.int64)
    return pool_sum(layer, ones, "sum")[0, :, :, 0]


#: average pooling over windows of different cell counts multiplies by round(2^15 / cells)
RECIP_FRAC = 15


def reciprocals(cells_max):
    """round(2^15 / n) for n = 0..cells_max (entry 0 unused): the average pooling divisors."""
    n = np.arange(cells_max + 1)
    return np.concatenate([[0], np.floor(2.0 ** RECIP_FRAC / n[1:] + 0.5)]).astype(np.int64)


def pool(op, xq):
    """Max pooling; average pooling as round_shift(sum, log2(cells)) when every window has the same
    power-of-two count of real cells, else round_shift(sum * round(2^15 / cells), 15)."""
    layer = op.layer
    if layer.mode == "max":
        return pool_sum(layer, xq, "max")
    total = pool_sum(layer, xq, "sum")
    if op.pool_shift is not None:
        return round_shift(total, op.pool_shift)
    cells = pool_cells(layer, xq.shape[1:])
    return round_shift(total * reciprocals(int(cells.max()))[cells][None, :, :, None], RECIP_FRAC)


def align(values, from_frac, to_frac):
    """Integers at 2^-from_frac re-expressed at 2^-to_frac (exact left shift, or round_shift)."""
    return round_shift(values, from_frac - to_frac)


def activate(act, v, frac, out_frac, saturate=False):
    """An activation on integers at 2^-frac: relu and linear keep the format (rounded to out_frac),
    the table activations take their input at Q16 (clamped to +-Z_LIMIT when `saturate`)."""
    if act in ("linear", "relu"):
        v = align(v, frac, out_frac)
        return np.maximum(v, 0) if act == "relu" else v
    z = align(v, frac, Z_FRAC)
    if saturate:
        z = np.clip(z, -Z_LIMIT, Z_LIMIT)
    if act == "tanh":
        return tanh_q(z, out_frac)
    if act == "sigmoid":
        return sigmoid_q(z, out_frac)
    if act == "softmax":
        return softmax_q(z, out_frac)
    raise ValueError(f"activation '{act}' has no fixed-point form")


def apply(op, xs):
    """One planned operation (nnbuild.numerics.graph_plan.QOp) on its integer inputs."""
    kind = op.kind
    if kind in ("conv2d", "dense"):
        acc = accumulate(op.layer, op.kernel_q, op.bias_q, xs[0])
        return activate(op.activation, acc, op.acc_frac, op.output.frac, op.saturate_z)
    if kind == "batchnorm":
        acc = xs[0] * op.kernel_q + op.bias_q
        return activate(op.activation, acc, op.acc_frac, op.output.frac, op.saturate_z)
    if kind == "pool2d":
        return activate(op.activation, pool(op, xs[0]), op.inputs[0].frac, op.output.frac, op.saturate_z)
    if kind == "zeropad2d":
        t, b, l, r = op.layer.padding
        return np.pad(xs[0], ((0, 0), (t, b), (l, r), (0, 0)))
    if kind == "add":
        acc = sum(align(x, f.frac, op.acc_frac) for x, f in zip(xs, op.inputs))
        return activate(op.activation, acc, op.acc_frac, op.output.frac, op.saturate_z)
    if kind == "concat":
        parts = [align(x, f.frac, op.output.frac) for x, f in zip(xs, op.inputs)]
        return np.concatenate(parts, axis=op.layer.axis + 1)
    if kind == "activation":
        return activate(op.activation, xs[0], op.inputs[0].frac, op.output.frac, op.saturate_z)
    if kind in ("flatten", "reshape"):
        return xs[0].reshape((xs[0].shape[0],) + tuple(op.shape))
    raise ValueError(f"operation kind '{kind}' has no fixed-point form")


def run_graph(plan, x, integers=False):
    """Outputs of the fixed-point CNN code for float inputs [N, n_in] (float32 as the C converts
    them, or the final integers)."""
    x = np.asarray(x, dtype=np.float32)
    q = quantize_input(x.reshape(len(x), -1), plan.input, plan.input_range)
    values = {plan.input_name: q.reshape((len(x),) + tuple(plan.input_shape))}
    for op in plan.ops:
        values[op.name] = apply(op, [values[s] for s in op.sources])
    y = values[plan.ops[-1].name].reshape(len(x), -1)
    if integers:
        return y
    return y.astype(np.float32) * np.float32(2.0 ** -plan.output.frac)
