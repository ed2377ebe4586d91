"""Fixed-point plan of a CNN graph (the v1/v2/v3 shapes): per-tensor power-of-two formats and an
interval proof, element by element, that no accumulator or stored tensor overflows.

Same contract as the MLP plan (nnbuild.numerics.plan): inputs clamped to the declared range and
rounded; Conv2D/Dense accumulate exact integer products from an integer bias, then round_shift to
the output format (or to Q16 for the table activations tanh/sigmoid/softmax). The proof is made
twice per tensor: real intervals (the model's own values over the input box) choose each format,
then integer intervals of what the code computes, evaluated with the bit-exact model's own
operations (nnbuild.numerics.graph_bitexact), prove that it fits. The accumulator width covers
every partial sum: |bias| + sum |w| * max|x|, per output element. The format policy, activation
intervals and int32-accumulator weight search are shared with the MLP plan (nnbuild.numerics.proof).
"""

from dataclasses import dataclass, field, replace
from typing import List, Optional

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.numerics import graph_bitexact as gb, proof
from nnbuild.numerics.bitexact import quantize_input, round_shift
from nnbuild.numerics.formats import (INT32_MAX, TABLE_ACTIVATIONS as TABLES, Z_FRAC, Z_LIMIT, Tensor, check_precision,
                                      to_int)
from nnbuild.numerics.proof import activation_interval, magnitude

#: precisions the CNN shapes generate in fixed point
GRAPH_PRECISIONS = ("q16", "q16-acc32", "q8")


@dataclass
class QOp:
    """One layer of the graph in fixed point, with the facts proving it cannot overflow."""

    name: str
    kind: str
    source_type: str
    activation: str
    layer: object
    sources: List[str]
    inputs: List[Tensor]
    output: Tensor
    shape: tuple                       # output shape (no batch axis)
    weight: Optional[Tensor] = None
    kernel_q: Optional[np.ndarray] = None   # the IR kernel's layout (HWIO / [in, out]), integers
    bias_q: Optional[np.ndarray] = None     # at the accumulator's 2^-acc_frac
    acc_frac: int = 0
    acc_bits: int = 32
    acc_bound: int = 0                 # max |partial sum| over the input box, integer units
    shift: int = 0                     # accumulator -> pre-activation (round_shift)
    saturate_z: bool = False
    pool_shift: Optional[int] = 0      # average pooling: log2 of the real cells of every window (None: reciprocals)
    interval: tuple = (0, 0)           # proven min/max of the stored output integers
    pre_activation: tuple = (0.0, 0.0)
    notes: List[str] = field(default_factory=list)

    @property
    def what(self):
        return f"{self.source_type} '{self.name}'"


@dataclass
class GraphPlan:
    precision: str
    input: Tensor
    input_name: str
    input_shape: tuple
    input_range: tuple
    ops: List[QOp]
    formats: dict
    saturation: List[str] = field(default_factory=list)
    #: a model of several inputs or outputs: every input (name, shape) and output name, in the
    #: model's order (empty: the one input above, the last op's output)
    inputs: tuple = ()
    output_names: tuple = ()

    @property
    def output(self):
        """The format of the (first) output."""
        return self.formats[self.output_names[0]] if self.output_names else self.ops[-1].output

    @property
    def output_formats(self):
        """The format of every output, in the model's order."""
        return [self.formats[n] for n in self.output_names] if self.output_names else [self.output]

    def summary(self):
        """JSON-able proof record for the trace and the report."""
        return proof.record(self, [
            {"name": op.name, "type": op.source_type, "activation": op.activation,
             "inputs": [vars(t) for t in op.inputs], "output": vars(op.output),
             "weight": vars(op.weight) if op.weight else None, "accumulator_bits": op.acc_bits,
             "accumulator_frac": op.acc_frac, "accumulator_bound": int(op.acc_bound), "shift": op.shift,
             "saturate_pre_activation": op.saturate_z, "output_integer_interval": [int(v) for v in op.interval],
             "pre_activation_interval": [float(v) for v in op.pre_activation], "notes": op.notes}
            for op in self.ops])


def quantize_graph(model, precision, input_range):
    """The fixed-point plan of a CNN graph, or one line naming the layer that cannot be proved."""
    check_precision(precision)
    if precision not in GRAPH_PRECISIONS:
        raise NNBuildError(f"the CNN shapes generate fixed point as {', '.join(GRAPH_PRECISIONS)}, "
                           f"not '{precision}'")
    policy, lo, hi, in_t, saturation = proof.start(precision, input_range)
    shapes = model.tensor_shapes()
    in_shape = tuple(shapes[model.input_name])
    real, ints, formats = {}, {}, {}
    for name, shape in model.inputs:   # several inputs: each over the declared range, in one format
        shape = tuple(shape)
        real[name] = (np.full((1,) + shape, lo), np.full((1,) + shape, hi))
        ints[name] = tuple(quantize_input(np.full((1, int(np.prod(shape))), v, np.float32), in_t,
                                          (lo, hi)).reshape((1,) + shape) for v in (lo, hi))
        formats[name] = in_t
    several = getattr(model, "several_io", False)
    plan = GraphPlan(precision, in_t, model.input_name, in_shape, (lo, hi), [], formats, saturation=saturation,
                     inputs=tuple((n, tuple(s)) for n, s in model.inputs) if several else (),
                     output_names=tuple(model.outputs) if several else ())
    for index, layer in enumerate(model.layers):
        sources = list(model.sources(index))
        op = QOp(layer.name, layer.kind, layer.source_type, getattr(layer, "activation", None) or "linear",
                 layer, sources, [formats[s] for s in sources], formats[sources[0]], tuple(shapes[layer.name]))
        real[layer.name] = real_interval(layer, [real[s] for s in sources], op.shape)
        ints[layer.name] = plan_op(op, policy, [real[s] for s in sources], real[layer.name],
                                   [ints[s] for s in sources])
        op.interval = (int(ints[layer.name][0].min()), int(ints[layer.name][1].max()))
        formats[layer.name] = op.output
        plan.ops.append(op)
    return plan


def _linear(layer, kernel, bias, x):
    return gb.affine(layer, x, kernel, bias)


def affine_interval(layer, kernel, bias, lo, hi):
    """Exact per-element interval of bias + sum w * x over the box [lo, hi]."""
    kernel = np.asarray(kernel)
    zero = np.zeros_like(np.asarray(bias))
    pos, neg = np.maximum(kernel, 0), np.minimum(kernel, 0)
    return (_linear(layer, pos, bias, lo) + _linear(layer, neg, zero, hi),
            _linear(layer, pos, bias, hi) + _linear(layer, neg, zero, lo))


def real_interval(layer, intervals, shape):
    """Per-element real interval of a layer's output over the input box (every kind but the
    affine ones is monotone in each input, so its interval is its value at the ends)."""
    kind, act = layer.kind, getattr(layer, "activation", None) or "linear"
    if kind in ("conv2d", "dense"):
        return activation_interval(act, *affine_interval(layer, *proof.affine_parameters(layer), *intervals[0]))
    if kind == "batchnorm":
        alpha, offset = layer.scale_offset(np.float64)
        a, b = intervals[0][0] * alpha, intervals[0][1] * alpha
        return activation_interval(act, np.minimum(a, b) + offset, np.maximum(a, b) + offset)
    ends = []
    for end in (0, 1):
        xs = [i[end] for i in intervals]
        if kind == "pool2d":
            total = gb.pool_sum(layer, xs[0], layer.mode if layer.mode == "max" else "sum")
            ends.append(total if layer.mode == "max" else
                        total / gb.pool_cells(layer, xs[0].shape[1:])[None, :, :, None])
        elif kind == "zeropad2d":
            ends.append(gb.pad2d(xs[0], layer.padding))
        elif kind == "add":
            ends.append(sum(xs))
        elif kind == "concat":
            ends.append(np.concatenate(xs, axis=layer.axis + 1))
        elif kind in ("activation", "flatten", "reshape"):
            ends.append(xs[0].reshape((1,) + tuple(shape)))
        elif kind in gb.MOVES:
            ends.append(gb.move(layer, xs[0]))
        else:
            raise NNBuildError(f"layer kind '{kind}' has no fixed-point form in the CNN shapes",
                               item=f"{layer.source_type} '{layer.name}'")
    return activation_interval(act, *ends)


def plan_op(op, policy, real_in, real_out, int_in):
    """Fill `op`'s formats and proof; return the integer interval of its output."""
    kind = op.kind
    if op.activation not in ("linear", "relu") + TABLES:
        raise NNBuildError(f"activation '{op.activation}' has no fixed-point form", item=op.what)
    if kind in ("conv2d", "dense"):
        return plan_affine(op, policy, real_in[0], real_out, int_in[0])
    if kind == "batchnorm":
        return plan_batchnorm(op, policy, real_in[0], real_out, int_in[0])
    if kind in ("flatten", "reshape"):
        return tuple(v.reshape((1,) + op.shape) for v in int_in[0])
    if kind in gb.MOVES:
        return tuple(gb.move(op.layer, v) for v in int_in[0])
    if kind == "zeropad2d":
        return tuple(np.pad(v, ((0, 0),) + tuple((a, b) for a, b in (op.layer.padding[:2], op.layer.padding[2:]))
                            + ((0, 0),)) for v in int_in[0])
    if kind == "concat":
        op.output = Tensor(min(t.frac for t in op.inputs), 16)
        return tuple(gb.apply(op, [i[end] for i in int_in]) for end in (0, 1))
    if kind == "pool2d":
        if op.layer.mode == "avg":
            cells = np.unique(gb.pool_cells(op.layer, real_in[0][0].shape[1:]))
            if len(cells) == 1 and not int(cells[0]) & (int(cells[0]) - 1):
                op.pool_shift = int(cells[0]).bit_length() - 1
            else:
                op.pool_shift = None
                op.notes.append(f"windows of {', '.join(str(int(c)) for c in cells)} real cells: the sum is "
                                f"multiplied by round(2^{gb.RECIP_FRAC} / cells) and rounded back")
                recip = gb.reciprocals(int(cells.max()))
                if max(int(n) * (1 << 15) * int(recip[int(n)]) for n in cells) > INT32_MAX:
                    raise NNBuildError("average pooling window too large for the 32-bit reciprocal product",
                                       item=op.what)
        op.acc_frac = op.inputs[0].frac
        return plan_activation(op, policy, real_out, lambda end: gb.pool(op, int_in[0][end]))
    if kind == "add":
        op.acc_frac = max(t.frac for t in op.inputs)
        return plan_activation(op, policy, real_out,
                               lambda end: sum(gb.align(i[end], t.frac, op.acc_frac) for i, t in zip(int_in, op.inputs)),
                               check_acc=True)
    if kind == "activation":
        op.acc_frac = op.inputs[0].frac
        return plan_activation(op, policy, real_out, lambda end: int_in[0][end])
    raise NNBuildError(f"layer kind '{kind}' has no fixed-point form in the CNN shapes", item=op.what)


def finish(op, acc_lo, acc_hi, real_out, policy):
    """Output format, shift and saturation from the accumulator's integer interval: the output
    format loses fraction bits until the proven integers fit int16."""
    op.output = policy.output_tensor(op.activation, magnitude(real_out), op.what)
    while True:
        target = Z_FRAC if op.activation in TABLES else op.output.frac
        op.shift = op.acc_frac - target
        z_bound = max(abs(int(round_shift(acc_lo, op.shift).min())), abs(int(round_shift(acc_hi, op.shift).max())))
        if op.shift < 0 and max(abs(int(acc_lo.min())), abs(int(acc_hi.max()))) << -op.shift > INT32_MAX:
            raise NNBuildError("the pre-activation cannot be aligned within int32", item=op.what)
        op.saturate_z = op.activation in TABLES and z_bound >= Z_LIMIT
        if op.saturate_z:
            op.notes.append(f"pre-activation clamped to +-2^29 at Q16 before the table {op.activation}: exact, "
                            "since the table is flat there to the output LSB")
        ends = [gb.activate(op.activation, a, op.acc_frac, op.output.frac, op.saturate_z) for a in (acc_lo, acc_hi)]
        if op.activation == "softmax":
            ends = [np.zeros_like(ends[0]), np.full_like(ends[1], 1 << op.output.frac)]
        top = max(abs(int(ends[0].min())), abs(int(ends[1].max())))
        if top <= op.output.qmax:
            return tuple(ends)
        op.output = Tensor(op.output.frac - 1, 16)
        op.notes.append(f"output fraction bits lowered to {op.output.frac}: the rounded integers reach {top}")


def plan_affine(op, policy, real_in, real_out, int_in):
    layer = op.layer
    kernel, bias = proof.affine_parameters(layer)
    pre = affine_interval(layer, kernel, bias, *real_in)
    op.pre_activation = (float(pre[0].min()), float(pre[1].max()))
    x_abs = np.maximum(np.abs(int_in[0]), np.abs(int_in[1]))

    def with_weights(w_t):
        op.weight = w_t
        op.kernel_q = to_int(kernel, w_t.frac, w_t.bits, f"{op.what} kernel")
        op.acc_frac = w_t.frac + op.inputs[0].frac
        op.bias_q = to_int(bias, op.acc_frac, 64, f"{op.what} bias")
        op.acc_bound = int(_linear(layer, np.abs(op.kernel_q), np.abs(op.bias_q), x_abs).max())
        op.acc_bits = 32 if op.acc_bound <= INT32_MAX else 64
        return op

    _, op.notes = policy.fit_accumulator(
        policy.tensor(float(np.abs(kernel).max()), f"{op.what} kernel", policy.weight_bits), with_weights, op.what)
    proof.check_int64(op.acc_bound, op.what)
    acc = affine_interval(layer, op.kernel_q, op.bias_q, *int_in)
    return finish(op, acc[0], acc[1], real_out, policy)


def plan_batchnorm(op, policy, real_in, real_out, int_in):
    """A BatchNorm left unfolded: y = x * scale_q[c] + offset_q[c] at 2^-(scale frac + input frac)."""
    alpha, offset = op.layer.scale_offset(np.float64)
    op.pre_activation = (float(real_out[0].min()), float(real_out[1].max()))
    op.weight = policy.tensor(float(np.abs(alpha).max()), f"{op.what} scale")
    op.kernel_q = to_int(alpha, op.weight.frac, 16, f"{op.what} scale")
    op.acc_frac = op.weight.frac + op.inputs[0].frac
    op.bias_q = to_int(offset, op.acc_frac, 64, f"{op.what} offset")
    a, b = int_in[0] * op.kernel_q, int_in[1] * op.kernel_q
    acc_lo, acc_hi = np.minimum(a, b) + op.bias_q, np.maximum(a, b) + op.bias_q
    op.acc_bound = max(abs(int(acc_lo.min())), abs(int(acc_hi.max())))
    if op.acc_bound > INT32_MAX:
        raise NNBuildError("the scaled value can overflow int32 over the input range", item=op.what)
    return finish(op, acc_lo, acc_hi, real_out, policy)


def plan_activation(op, policy, real_out, evaluate, check_acc=False):
    """Pooling, Add and standalone activations: an integer function monotone in every input, so
    its interval is its value at the interval ends."""
    acc_lo, acc_hi = evaluate(0), evaluate(1)
    op.acc_bound = max(abs(int(acc_lo.min())), abs(int(acc_hi.max())))
    if check_acc and op.acc_bound > INT32_MAX:
        raise NNBuildError("the aligned sum can overflow int32 over the input range", item=op.what)
    if op.activation in ("linear", "relu") and op.kind != "add":
        op.output = op.inputs[0]
        op.shift = 0
        ends = [gb.activate(op.activation, a, op.acc_frac, op.output.frac) for a in (acc_lo, acc_hi)]
        return tuple(ends)
    return finish(op, acc_lo, acc_hi, real_out, policy)


def segment_plan(whole, segment, received):
    """The plan of `segment`, a part of the model `whole` was proved for (a multi-item split): each
    layer the whole model has (same name and kind) keeps the whole plan's formats and proof, since
    the segment computes the whole model's tensors from the whole model's integers; the layers that
    only receive them (slices of a packed input, reshapes and transposes to the held layout) copy
    integers and keep their format. `received` maps each name the segment receives a tensor under
    (its input, a slice or view of it) to the whole plan's tensor name; the system input keeps the
    whole plan's input rounding."""
    by_name = {op.name: op for op in whole.ops}
    formats = {name: whole.formats[tensor] for name, tensor in received.items()}
    if segment.input_name == whole.input_name:
        formats[segment.input_name] = whole.input
    if segment.input_name not in formats:
        raise NNBuildError(f"segment '{segment.name}': its input '{segment.input_name}' is no tensor of the "
                           "whole model's plan")
    shapes = segment.tensor_shapes()
    plan = GraphPlan(whole.precision, formats[segment.input_name], segment.input_name,
                     tuple(shapes[segment.input_name]), whole.input_range, [], formats,
                     saturation=list(whole.saturation) if segment.input_name == whole.input_name else [])
    for index, layer in enumerate(segment.layers):
        sources = list(segment.sources(index))
        mine = by_name.get(layer.name)
        if layer.name not in received and mine is not None and mine.kind == layer.kind:
            op = replace(mine, layer=layer, sources=sources)
        elif layer.kind in ("flatten", "reshape") + gb.MOVES:
            out = formats.get(layer.name, formats[sources[0]])
            op = QOp(layer.name, layer.kind, layer.source_type, "linear", layer, sources,
                     [formats[sources[0]]], out, tuple(shapes[layer.name]))
        else:
            raise NNBuildError(f"segment '{segment.name}': layer '{layer.name}' is not in the whole model's plan")
        formats[layer.name] = op.output
        plan.ops.append(op)
    return plan
