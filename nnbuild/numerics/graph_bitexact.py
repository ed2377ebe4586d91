"""Bit-exact numpy model of the generated fixed-point CNN code (shapes v1, v2, v3), and the integer
operations the graph planner (nnbuild.numerics.graph_plan) proves its intervals with.

Every operation here is what the C does to int16 tensors (channels-last, batch axis first):
convolution and Dense accumulate exact integer products, requantise with round_shift, then the
MLP's table activations; pooling, padding, Add and Concatenate are integer operations that are
monotone in each input, so the planner bounds them by evaluating them on the interval ends.
"""

import numpy as np

from nnbuild.numerics.bitexact import quantize_input, round_shift, sigmoid_q, softmax_q, tanh_q
from nnbuild.numerics.formats import Z_FRAC, Z_LIMIT

#: max pooling pads with this (below any int16, int32 or int64 accumulator value the code sees)
MAX_PAD = -(1 << 62)


def windows(xp, window, strides, dilation, out_hw):
    """(ky, kx, the [N, OH, OW, C] slice of a padded [N, H, W, C] x under that kernel tap)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = window, strides, dilation, out_hw
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            yield ky, kx, xp[:, y0:y0 + (oh - 1) * sh + 1:sh, x0:x0 + (ow - 1) * sw + 1:sw, :]


def pad2d(x, padding, value=0):
    t, b, l, r = padding
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def affine(layer, x, kernel, bias):
    """bias + the Conv2D (layer's strides, dilation, padding, groups) or Dense sum of kernel * x, in
    x's dtype: int64 for what the code computes, float64 for the real intervals (the IR's own
    definition, nnbuild.ir.semantics, is the same sum; numerics sits below the IR)."""
    kernel = np.asarray(kernel, dtype=x.dtype)
    bias = np.asarray(bias, dtype=x.dtype)
    if layer.kind == "dense":
        return x @ kernel + bias
    oh, ow, co = layer.output_shape(x.shape[1:])
    y = np.zeros((x.shape[0], oh, ow, co), dtype=x.dtype)
    g, ci = int(layer.groups), kernel.shape[2]
    cog = co // g
    for ky, kx, patch in windows(pad2d(x, layer.padding), kernel.shape[:2], layer.strides, layer.dilation, (oh, ow)):
        for group in range(g):
            y[..., group * cog:(group + 1) * cog] += (patch[..., group * ci:(group + 1) * ci]
                                                       @ kernel[ky, kx, :, group * cog:(group + 1) * cog])
    return y + bias


def accumulate(layer, kernel_q, bias_q, xq):
    """bias + sum of exact products of a Conv2D or Dense layer on integers (int64 numpy)."""
    return affine(layer, np.asarray(xq, dtype=np.int64), kernel_q, bias_q)


def pool_sum(layer, xq, mode):
    """Per-window max (padding ignored) or sum (padding adds 0) of [N, H, W, C] integers."""
    oh, ow, _ = layer.output_shape(xq.shape[1:])
    xp = pad2d(np.asarray(xq), layer.padding, MAX_PAD if mode == "max" else 0)
    out = None
    for _, _, patch in windows(xp, layer.pool, layer.strides, (1, 1), (oh, ow)):
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


#: data movements: the code copies the integers unchanged (their format is kept)
MOVES = ("transpose", "slice")


def move(layer, x):
    """A Transpose or Slice of a [N, ...] tensor (the IR's definitions, on integers)."""
    if layer.kind == "transpose":
        return np.transpose(x, (0,) + tuple(int(p) + 1 for p in layer.perm))
    index = [np.arange(x.shape[0])] + [int(s) + np.arange(int(c)) * int(d)
                                       for s, d, c in zip(layer.starts, layer.steps, layer.counts)]
    return x[np.ix_(*index)]


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
        return pad2d(xs[0], op.layer.padding)
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
    if kind in MOVES:
        return move(op.layer, xs[0])
    raise ValueError(f"operation kind '{kind}' has no fixed-point form")


def run_graph(plan, x, integers=False):
    """Outputs of the fixed-point CNN code for float inputs [N, n_in] (float32 as the C converts
    them, or the final integers); several inputs and outputs one after the other in a row."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    values, at = {}, 0
    for name, shape in plan.inputs or ((plan.input_name, plan.input_shape),):
        size = int(np.prod(shape))   # several inputs: one after the other in each row, the model's order
        q = quantize_input(x[:, at:at + size], plan.input, plan.input_range)
        values[name] = q.reshape((len(x),) + tuple(shape))
        at += size
    for op in plan.ops:
        values[op.name] = apply(op, [values[s] for s in op.sources])
    names = plan.output_names or (plan.ops[-1].name,)
    ys = [values[n].reshape(len(x), -1) for n in names]
    if integers:
        return np.concatenate(ys, axis=1)
    return np.concatenate([y.astype(np.float32) * np.float32(2.0 ** -f.frac) for y, f in
                           zip(ys, plan.output_formats)], axis=1)
