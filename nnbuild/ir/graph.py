"""The model graph every front-end produces and every generator consumes.

Layers are plain frozen dataclasses in execution order. Each carries the name and type it had in
the source model so generated code can be traced back to it. Weights keep the dtype of the file
(float32 for Keras) so the reference executor can run at float32 or float64.

A model is a chain (each layer reads the previous layer's output) unless `Model.edges` is given:
then it maps every layer name to the names of the tensors it reads (a layer's output tensor has
the layer's name; the model input is `Model.input_name`), a DAG in topological order whose last
layer is the one output. Tensors are channels-last (H, W, C) without the batch axis.

A DAG may have several inputs (`Model.more_inputs` after the first) and several outputs
(`Model.output_names`, any layer outputs in the model's order); `Model.inputs` and `Model.outputs`
list them all, and `input_size` / `output_size` count the values of all of them together (the
flat vectors the check program and the check data hold: inputs, then outputs, each in model order).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from nnbuild import limits, names

#: Element-wise activations with exactly defined semantics (see nnbuild.ir.semantics).
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")


@dataclass(frozen=True)
class Dense:
    """y = act(x @ kernel + bias); kernel is [inputs, units] (Keras layout)."""

    name: str
    kernel: np.ndarray
    bias: Optional[np.ndarray]
    activation: str = "linear"
    source_type: str = "Dense"

    kind = "dense"

    @property
    def units(self) -> int:
        return int(self.kernel.shape[1])

    @property
    def inputs(self) -> int:
        return int(self.kernel.shape[0])

    def output_shape(self, input_shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """Applies to the last axis (Keras): (..., inputs) -> (..., units)."""
        if input_shape and input_shape[-1] != self.inputs:
            raise ValueError(f"kernel {tuple(self.kernel.shape)} expects {self.inputs} inputs, "
                             f"got a tensor of shape {tuple(input_shape)}")
        return tuple(input_shape[:-1]) + (self.units,)


@dataclass(frozen=True)
class Activation:
    """y = act(x), element-wise (softmax over the last axis)."""

    name: str
    activation: str
    source_type: str = "Activation"

    kind = "activation"

    def output_shape(self, input_shape: Tuple[int, ...]) -> Tuple[int, ...]:
        return tuple(input_shape)


def _pair(value, what):
    pair = tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{what} {tuple(value)} must be two positive integers")
    return pair


def _pads(value):
    pads = tuple(int(v) for v in value)
    if len(pads) != 4 or min(pads) < 0:
        raise ValueError(f"padding {tuple(value)} must be (top, bottom, left, right) >= 0")
    return pads


def _rank3(shape, what):
    if len(shape) != 3:
        raise ValueError(f"{what} needs a (height, width, channels) input, got shape {tuple(shape)}")
    return shape


def window_output(size, window, stride, dilation, pad_before, pad_after):
    """Output length of a sliding window over `size` cells plus explicit pads (floor division)."""
    span = dilation * (window - 1) + 1
    padded = size + pad_before + pad_after
    if padded < span:
        raise ValueError(f"window {window} (dilation {dilation}) is larger than the padded input {padded}")
    return (padded - span) // stride + 1


def same_padding(size, window, stride, dilation=1):
    """Keras/TF 'same': out = ceil(size/stride), total pad split with the extra cell AFTER
    (bottom/right): (before, after). Keras2C's issue 14 splits it the other way."""
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (window - 1) + 1 - size, 0)
    return total // 2, total - total // 2


@dataclass(frozen=True)
class Conv2D:
    """y[oy,ox,o] = act(bias[o] + sum_{ky,kx,c} kernel[ky,kx,c,o] * xp[oy*sh + ky*dh, ox*sw + kx*dw, c])
    where xp is x with `padding` (top, bottom, left, right) zero rows/columns around it.
    kernel is [kh, kw, in_channels / groups, filters] (Keras HWIO); ACETONE Definitions 6, 7 and 14.
    With groups > 1, filter o sees only input channels g*C/groups .. (g+1)*C/groups - 1 where
    g = o // (filters / groups) (ONNX Conv group, Keras DepthwiseConv2D)."""

    name: str
    kernel: np.ndarray
    bias: Optional[np.ndarray]
    strides: Tuple[int, int] = (1, 1)
    dilation: Tuple[int, int] = (1, 1)
    padding: Tuple[int, int, int, int] = (0, 0, 0, 0)
    activation: str = "linear"
    source_type: str = "Conv2D"
    #: channel groups: input channel group g (C/groups channels) feeds filters g*F/groups.. (depthwise: groups = C)
    groups: int = 1

    kind = "conv2d"

    def __post_init__(self):
        object.__setattr__(self, "strides", _pair(self.strides, "strides"))
        object.__setattr__(self, "dilation", _pair(self.dilation, "dilation"))
        object.__setattr__(self, "padding", _pads(self.padding))

    @property
    def filters(self) -> int:
        return int(self.kernel.shape[3])

    def output_shape(self, input_shape):
        h, w, c = _rank3(input_shape, "Conv2D")
        kh, kw, ci, co = self.kernel.shape
        g = int(self.groups)
        if g < 1 or c % g or co % g:
            raise ValueError(f"{g} groups do not divide {c} input channels and {co} filters")
        if c != ci * g:
            groups = "" if g == 1 else f" in {g} groups"
            raise ValueError(f"kernel {tuple(self.kernel.shape)} expects {ci * g} input channels{groups}, "
                             f"got a tensor of shape {tuple(input_shape)}")
        t, b, l, r = self.padding
        return (window_output(h, kh, self.strides[0], self.dilation[0], t, b),
                window_output(w, kw, self.strides[1], self.dilation[1], l, r), self.filters)


@dataclass(frozen=True)
class ZeroPadding2D:
    """y = x with `padding` (top, bottom, left, right) rows/columns of zeros around it (Def. 6)."""

    name: str
    padding: Tuple[int, int, int, int]
    source_type: str = "ZeroPadding2D"

    kind = "zeropad2d"

    def __post_init__(self):
        object.__setattr__(self, "padding", _pads(self.padding))

    def output_shape(self, input_shape):
        h, w, c = _rank3(input_shape, "ZeroPadding2D")
        t, b, l, r = self.padding
        return (h + t + b, w + l + r, c)


@dataclass(frozen=True)
class Pool2D:
    """Max or average over pool windows (Definition 8) per channel, then act.

    `padding` cells (top, bottom, left, right) are NOT values: max ignores them and average divides
    by the number of real cells in the window (Keras/TF 'same' semantics, count_include_pad=False).
    """

    name: str
    mode: str
    pool: Tuple[int, int]
    strides: Tuple[int, int]
    padding: Tuple[int, int, int, int] = (0, 0, 0, 0)
    activation: str = "linear"
    source_type: str = "MaxPooling2D"

    kind = "pool2d"

    def __post_init__(self):
        if self.mode not in ("max", "avg"):
            raise ValueError(f"pooling mode '{self.mode}' is not max or avg")
        object.__setattr__(self, "pool", _pair(self.pool, "pool size"))
        object.__setattr__(self, "strides", _pair(self.strides, "strides"))
        object.__setattr__(self, "padding", _pads(self.padding))
        t, b, l, r = self.padding
        if max(t, b) >= self.pool[0] or max(l, r) >= self.pool[1]:
            raise ValueError(f"padding {self.padding} must be smaller than the pool {self.pool}")

    def output_shape(self, input_shape):
        h, w, c = _rank3(input_shape, self.source_type)
        t, b, l, r = self.padding
        return (window_output(h, self.pool[0], self.strides[0], 1, t, b),
                window_output(w, self.pool[1], self.strides[1], 1, l, r), c)


@dataclass(frozen=True)
class BatchNorm:
    """y = act(gamma * (x - mean) / sqrt(variance + epsilon) + beta) over the last axis (Def. 9)."""

    name: str
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    epsilon: float
    activation: str = "linear"
    source_type: str = "BatchNormalization"

    kind = "batchnorm"

    def scale_offset(self, dtype=np.float64):
        """(alpha, B) with y = alpha * x + B (Definition 9), computed in float64 then cast."""
        g, b, m, v = (np.asarray(a, np.float64) for a in (self.gamma, self.beta, self.mean, self.variance))
        alpha = g / np.sqrt(v + float(self.epsilon))
        return alpha.astype(dtype), (b - m * alpha).astype(dtype)

    def output_shape(self, input_shape):
        if not input_shape or input_shape[-1] != len(self.gamma):
            raise ValueError(f"{len(self.gamma)} channels of parameters for a tensor of shape "
                             f"{tuple(input_shape)} (normalised axis is the last one)")
        return tuple(input_shape)


@dataclass(frozen=True)
class Flatten:
    """y = x in row-major (H, W, C) order as one vector: channels-last Keras Flatten (Def. 10)."""

    name: str
    source_type: str = "Flatten"

    kind = "flatten"

    def output_shape(self, input_shape):
        return (int(np.prod(input_shape)),)


@dataclass(frozen=True)
class Reshape:
    """y = x with a new shape and the same row-major element order."""

    name: str
    target_shape: Tuple[int, ...]
    source_type: str = "Reshape"

    kind = "reshape"

    def output_shape(self, input_shape):
        if int(np.prod(input_shape)) != int(np.prod(self.target_shape)):
            raise ValueError(f"cannot reshape {tuple(input_shape)} to {tuple(self.target_shape)}")
        return tuple(self.target_shape)


@dataclass(frozen=True)
class Add:
    """y = act(x1 + x2 + ... + xn), element-wise over same-shape inputs (summed left to right)."""

    name: str
    activation: str = "linear"
    source_type: str = "Add"

    kind = "add"
    multi_input = True

    def output_shape(self, *input_shapes):
        if len(input_shapes) < 2:
            raise ValueError(f"Add needs at least 2 inputs, got {len(input_shapes)}")
        if any(tuple(s) != tuple(input_shapes[0]) for s in input_shapes):
            raise ValueError(f"inputs of different shapes {[tuple(s) for s in input_shapes]}")
        return tuple(input_shapes[0])


@dataclass(frozen=True)
class Concatenate:
    """y = the inputs joined along `axis` (0-based, batch axis excluded; Keras default: last)."""

    name: str
    axis: int
    source_type: str = "Concatenate"

    kind = "concat"
    multi_input = True

    def output_shape(self, *input_shapes):
        if len(input_shapes) < 2:
            raise ValueError(f"Concatenate needs at least 2 inputs, got {len(input_shapes)}")
        rank, a = len(input_shapes[0]), self.axis
        if not 0 <= a < rank:
            raise ValueError(f"axis {a} out of range for rank-{rank} inputs")
        for s in input_shapes:
            if len(s) != rank or tuple(s[:a]) + tuple(s[a + 1:]) != tuple(input_shapes[0][:a]) + tuple(input_shapes[0][a + 1:]):
                raise ValueError(f"inputs {[tuple(s) for s in input_shapes]} differ outside axis {a}")
        return tuple(input_shapes[0][:a]) + (sum(s[a] for s in input_shapes),) + tuple(input_shapes[0][a + 1:])


def normal_axes(values, rank, what):
    """Axes normalised to 0..rank-1 (negative counts from the end), each once, in ascending order."""
    out = []
    for a in values:
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"{what} axis {a} out of range for a rank-{rank} tensor")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"{what} axes {tuple(values)} repeat an axis")
    return tuple(sorted(out))


def broadcast_shape(*shapes):
    """numpy/ONNX multidirectional broadcasting of the shapes (aligned on the last axis)."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {int(s[len(s) - rank + k]) for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


#: Element-wise functions of one tensor (nnbuild.ir.semantics.UNARY_FUNCTIONS) -> their parameters.
UNARY_OPS = {
    "relu": (), "leaky_relu": ("alpha",), "elu": ("alpha",), "selu": ("alpha", "gamma"),
    "sigmoid": (), "hard_sigmoid": ("alpha", "beta"), "tanh": (), "softplus": (), "softsign": (),
    "exp": (), "log": (), "sqrt": (), "abs": (), "neg": (), "reciprocal": (), "clip": ("min", "max"),
    "hard_swish": (), "erf": (), "gelu": ("approximate",), "sign": (), "shrink": ("lambd", "bias"),
}


@dataclass(frozen=True)
class Unary:
    """y = op(x) element-wise, `params` in the order UNARY_OPS lists them (ONNX names: Relu,
    LeakyRelu, Elu, Selu, Sigmoid, HardSigmoid, Tanh, Softplus, Softsign, Exp, Log, Sqrt, Abs, Neg,
    Reciprocal, Clip, HardSwish, Erf, Gelu (approximate 0: none, 1: tanh), Sign, Shrink; Keras
    LeakyReLU, ELU, ReLU(max_value) as clip)."""

    name: str
    op: str
    params: Tuple[float, ...] = ()
    source_type: str = "Unary"

    kind = "unary"

    def __post_init__(self):
        if self.op not in UNARY_OPS:
            raise ValueError(f"unary op '{self.op}' is not one of {', '.join(UNARY_OPS)}")
        params = tuple(float(p) for p in self.params)
        if len(params) != len(UNARY_OPS[self.op]):
            raise ValueError(f"{self.op} takes {len(UNARY_OPS[self.op])} parameter(s) "
                             f"({', '.join(UNARY_OPS[self.op]) or 'none'}), got {len(params)}")
        if any(p != p for p in params):
            raise ValueError(f"{self.op} parameter is NaN")
        # infinite parameters are refused, but for clip's open bounds (min -inf, max +inf)
        allowed = ((float("-inf"),), (float("inf"),)) if self.op == "clip" else ((),) * len(params)
        if any(abs(p) == float("inf") and p not in ok for p, ok in zip(params, allowed)):
            raise ValueError(f"{self.op} parameter is infinite")
        object.__setattr__(self, "params", params)

    def output_shape(self, input_shape):
        return tuple(input_shape)


#: Element-wise functions of several broadcast operands (nnbuild.ir.semantics.ELEMENTWISE).
ELEMENTWISE_OPS = ("add", "sub", "mul", "div", "max", "min", "mean")


@dataclass(frozen=True)
class Elementwise:
    """y = act(op(o1, o2, ..., on)) with numpy/ONNX broadcasting of the operands, folded left to
    right (mean: the sum left to right, then divided by n). The operands are the tensors the layer
    reads (in order) with the constant arrays of `constants` inserted: ((position, array), ...)
    puts `array` at operand index `position` (ONNX Add(x, B) with B an initializer: ((1, B),))."""

    name: str
    op: str
    constants: Tuple[Tuple[int, np.ndarray], ...] = ()
    activation: str = "linear"
    source_type: str = "Elementwise"

    kind = "elementwise"
    multi_input = True

    def __post_init__(self):
        if self.op not in ELEMENTWISE_OPS:
            raise ValueError(f"element-wise op '{self.op}' is not one of {', '.join(ELEMENTWISE_OPS)}")
        object.__setattr__(self, "constants", tuple((int(p), np.asarray(a)) for p, a in self.constants))

    def operands(self, tensors):
        """The operand list: the tensors in order with the constants inserted at their positions."""
        out, tensors = [], list(tensors)
        constants = dict(self.constants)
        for position in range(len(tensors) + len(constants)):
            if position in constants:
                out.append(constants[position])
            elif tensors:
                out.append(tensors.pop(0))
            else:
                raise ValueError(f"constant position {position} leaves a gap among the operands")
        return out

    def output_shape(self, *input_shapes):
        shapes = [tuple(np.shape(o)) if isinstance(o, np.ndarray) else tuple(o)
                  for o in self.operands(list(input_shapes))]
        if len(shapes) < 2 and self.op != "mean":
            raise ValueError(f"{self.op} needs at least 2 operands, got {len(shapes)}")
        out = broadcast_shape(*shapes)
        tensor_shapes = [tuple(s) for s in input_shapes]
        if any(len(s) > len(out) for s in tensor_shapes):
            raise ValueError("an operand has more axes than the result")
        return out


@dataclass(frozen=True)
class Transpose:
    """y = x with its axes permuted: y.shape[k] = x.shape[perm[k]] (numpy.transpose, ONNX perm)."""

    name: str
    perm: Tuple[int, ...]
    source_type: str = "Transpose"

    kind = "transpose"

    def output_shape(self, input_shape):
        perm = tuple(int(p) for p in self.perm)
        if sorted(perm) != list(range(len(input_shape))):
            raise ValueError(f"perm {perm} is not a permutation of the {len(input_shape)} axes")
        return tuple(input_shape[p] for p in perm)


#: How Pad fills: ONNX modes (constant value, edge repeat, reflect without the edge, wrap around).
PAD_MODES = ("constant", "edge", "reflect", "wrap")


@dataclass(frozen=True)
class Pad:
    """y = x with pads[k] = (before, after) cells added on axis k (negative: cells removed), filled
    by `mode` as numpy.pad does ('constant' with `value`, 'edge', 'reflect', 'wrap')."""

    name: str
    pads: Tuple[Tuple[int, int], ...]
    mode: str = "constant"
    value: float = 0.0
    source_type: str = "Pad"

    kind = "pad"

    def __post_init__(self):
        if self.mode not in PAD_MODES:
            raise ValueError(f"pad mode '{self.mode}' is not one of {', '.join(PAD_MODES)}")
        object.__setattr__(self, "pads", tuple((int(b), int(a)) for b, a in self.pads))
        if float(self.value) != float(self.value) and self.mode == "constant":
            # max, min and comparisons over NaN differ between numpy and C: no defined semantics
            raise ValueError("pad value is NaN")

    def output_shape(self, input_shape):
        if len(self.pads) != len(input_shape):
            raise ValueError(f"{len(self.pads)} pad pairs for a rank-{len(input_shape)} tensor")
        out = []
        for n, (b, a) in zip(input_shape, self.pads):
            if self.mode == "reflect" and max(b, a) > n - 1:
                raise ValueError(f"reflect padding {max(b, a)} needs an axis longer than that (size {n})")
            if self.mode == "wrap" and max(b, a) > n:
                raise ValueError(f"wrap padding {max(b, a)} is longer than the axis ({n})")
            out.append(n + b + a)
        return tuple(out)


@dataclass(frozen=True)
class Slice:
    """y[..., i_k, ...] = x[..., starts[k] + i_k * steps[k], ...] for i_k < counts[k] (ONNX Slice
    and Keras Cropping once normalised: every start in range, steps may be negative)."""

    name: str
    starts: Tuple[int, ...]
    steps: Tuple[int, ...]
    counts: Tuple[int, ...]
    source_type: str = "Slice"

    kind = "slice"

    def output_shape(self, input_shape):
        if not len(self.starts) == len(self.steps) == len(self.counts) == len(input_shape):
            raise ValueError(f"slice of rank {len(self.starts)} for a rank-{len(input_shape)} tensor")
        for n, s, d, c in zip(input_shape, self.starts, self.steps, self.counts):
            if d == 0 or c < 1 or not (0 <= s < n and 0 <= s + (c - 1) * d < n):
                raise ValueError(f"slice start {s} step {d} count {c} leaves an axis of size {n}")
        return tuple(int(c) for c in self.counts)


@dataclass(frozen=True)
class Gather:
    """y = numpy.take(x, indices, axis): constant indices (already in 0..n-1), a scalar removing
    the axis or a vector of any length (ONNX Gather with an initializer as indices)."""

    name: str
    axis: int
    indices: np.ndarray
    source_type: str = "Gather"

    kind = "gather"

    def output_shape(self, input_shape):
        a = self.axis
        idx = np.asarray(self.indices)
        if not 0 <= a < len(input_shape):
            raise ValueError(f"axis {a} out of range for a rank-{len(input_shape)} tensor")
        if idx.dtype.kind not in "iu" or idx.ndim > 1 or (idx.size and (idx.min() < 0 or idx.max() >= input_shape[a])):
            raise ValueError(f"indices must be integers in 0..{input_shape[a] - 1}, scalar or vector")
        return tuple(input_shape[:a]) + tuple(idx.shape) + tuple(input_shape[a + 1:])


@dataclass(frozen=True)
class GatherElements:
    """y[i] = x[i with axis `axis` replaced by indices[i]] (ONNX GatherElements, constant indices
    of the output's shape, already in 0..n-1)."""

    name: str
    axis: int
    indices: np.ndarray
    source_type: str = "GatherElements"

    kind = "gather_elements"

    def output_shape(self, input_shape):
        idx = np.asarray(self.indices)
        a = self.axis
        if idx.ndim != len(input_shape) or not 0 <= a < idx.ndim:
            raise ValueError(f"indices of rank {idx.ndim} for a rank-{len(input_shape)} tensor, axis {a}")
        if idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= input_shape[a])):
            raise ValueError(f"indices must be integers in 0..{input_shape[a] - 1}")
        if any(i > n for k, (i, n) in enumerate(zip(idx.shape, input_shape)) if k != a):
            raise ValueError(f"indices shape {idx.shape} exceeds the input {tuple(input_shape)}")
        return tuple(int(d) for d in idx.shape)


@dataclass(frozen=True)
class Tile:
    """y = numpy.tile(x, repeats), one repeat count per axis (ONNX Tile)."""

    name: str
    repeats: Tuple[int, ...]
    source_type: str = "Tile"

    kind = "tile"

    def output_shape(self, input_shape):
        if len(self.repeats) != len(input_shape) or min(self.repeats) < 1:
            raise ValueError(f"repeats {tuple(self.repeats)} must be one count >= 1 per axis")
        return tuple(int(n) * int(r) for n, r in zip(input_shape, self.repeats))


#: Resize interpolation modes and the ONNX coordinate transformations nnbuild implements.
RESIZE_MODES = ("nearest", "linear", "cubic")
RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                      "tf_half_pixel_for_nn", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class Resize:
    """ONNX Resize (opset 10-21 without roi/antialias) over every axis: output size `sizes[k]`,
    scale `scales[k]` (out/in unless the model gave one), coordinates mapped back by
    `coordinate_mode`, then interpolated by `mode` along each axis separably (see
    nnbuild.ir.semantics.resize_taps). Keras UpSampling2D is nearest/asymmetric/floor."""

    name: str
    sizes: Tuple[int, ...]
    scales: Tuple[float, ...]
    mode: str = "nearest"
    coordinate_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    source_type: str = "Resize"

    kind = "resize"

    def __post_init__(self):
        for value, allowed, what in ((self.mode, RESIZE_MODES, "mode"),
                                     (self.coordinate_mode, RESIZE_COORDINATES, "coordinate_transformation_mode"),
                                     (self.nearest_mode, NEAREST_MODES, "nearest_mode")):
            if value not in allowed:
                raise ValueError(f"Resize {what} '{value}' is not one of {', '.join(allowed)}")
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))
        if any(not (s > 0 and s < float("inf")) for s in self.scales):
            raise ValueError(f"Resize scales {self.scales} must be finite and > 0")

    def output_shape(self, input_shape):
        if len(self.sizes) != len(input_shape) or len(self.scales) != len(input_shape):
            raise ValueError(f"Resize of rank {len(self.sizes)} for a rank-{len(input_shape)} tensor")
        return tuple(self.sizes)


#: Reductions over axes (ONNX ReduceSum/Mean/Max/Min/Prod; Keras GlobalAveragePooling2D is mean).
REDUCE_OPS = ("sum", "mean", "max", "min", "prod")


@dataclass(frozen=True)
class Reduce:
    """y = op over `axes` of x (in ascending axis order, row-major within them), those axes kept
    as size 1 when `keepdims`; mean is the sum divided by the count."""

    name: str
    op: str
    axes: Tuple[int, ...]
    keepdims: bool = True
    source_type: str = "Reduce"

    kind = "reduce"

    def __post_init__(self):
        if self.op not in REDUCE_OPS:
            raise ValueError(f"reduction '{self.op}' is not one of {', '.join(REDUCE_OPS)}")
        object.__setattr__(self, "axes", tuple(int(a) for a in self.axes))

    def output_shape(self, input_shape):
        axes = normal_axes(self.axes, len(input_shape), "reduce")
        if not axes:
            raise ValueError("reduce over no axis")
        if self.keepdims:
            return tuple(1 if k in axes else n for k, n in enumerate(input_shape))
        out = tuple(n for k, n in enumerate(input_shape) if k not in axes)
        return out or (1,)


@dataclass(frozen=True)
class Softmax:
    """y = softmax over axis `axis` (max subtracted first; ONNX Softmax-13, Keras Softmax(axis))."""

    name: str
    axis: int = -1
    source_type: str = "Softmax"

    kind = "softmax"

    def output_shape(self, input_shape):
        normal_axes((self.axis,), len(input_shape), "softmax")
        return tuple(input_shape)


@dataclass(frozen=True)
class LRN:
    """ONNX LRN over the last (channel) axis: y[c] = x[c] / (bias + alpha / size * sum_{c' in
    [c - floor((size-1)/2), c + ceil((size-1)/2)]} x[c']^2) ^ beta."""

    name: str
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0
    source_type: str = "LRN"

    kind = "lrn"

    def output_shape(self, input_shape):
        if int(self.size) < 1:
            raise ValueError(f"LRN size {self.size} must be >= 1")
        return tuple(input_shape)


#: Recurrent cells: gate count and the gate order of the weight rows (ONNX's).
RECURRENT_CELLS = {"lstm": ("i", "o", "f", "c"), "gru": ("z", "r", "h"), "rnn": ("i",)}
#: The default activations of each cell (ONNX's): f, g (and h for LSTM); f alone for a simple RNN.
RECURRENT_DEFAULT_ACTIVATIONS = {"lstm": ("sigmoid", "tanh", "tanh"), "gru": ("sigmoid", "tanh"), "rnn": ("tanh",)}
#: Activation functions a recurrent cell may use for f, g (and h for LSTM).
RECURRENT_ACTIVATIONS = ("sigmoid", "tanh", "relu")
#: What a recurrent layer outputs: every step's hidden state [T, D, H], the last hidden state
#: [D, H], or the last cell state [D, H] (LSTM).
RECURRENT_OUTPUTS = ("sequence", "last", "cell")
#: How an LSTM couples its input and forget gates: ONNX input_forget (f = 1 - i), TFLite CIFG
#: (no input gate weights: i = 1 - f).
RECURRENT_COUPLINGS = (None, "forget_from_input", "input_from_forget")


@dataclass(frozen=True)
class Recurrent:
    """An LSTM, GRU or simple RNN over a sequence x [T, F], ONNX's equations (one set per direction d):

    LSTM (gates i, o, f, c):  i = f(Wi x_t + Ri h + Pi . c + bi); f = f(Wf x_t + Rf h + Pf . c + bf)
                              c~ = g(Wc x_t + Rc h + bc); c = f . c + i . c~ (cell_clip clips c)
                              o = f(Wo x_t + Ro h + Po . c + bo); h = o . h(c)
    GRU (gates z, r, h):      z = f(Wz x_t + Rz h + bz); r = f(Wr x_t + Rr h + br)
                              h~ = g(Wh x_t + Rh (r . h) + bh + rbh), or with linear_before_reset
                              h~ = g(Wh x_t + bh + r . (Rh h + rbh)); h = (1 - z) . h~ + z . h
    RNN (gate i):             h = f(Wi x_t + Ri h + bi)
    where b = wb + rb summed (both ONNX bias halves) except the GRU candidate's, kept apart (wb in
    `bias`, rb in `rbias`). `clip` clips every gate pre-activation to [-clip, clip] (ONNX). The
    state starts at `initial_h`/`initial_c` (zero if None) on every call: nothing is kept between
    sequences. A forward direction reads t = 0..T-1, a reverse one T-1..0. w: [D, G*H, F],
    r: [D, G*H, H], bias: [D, G*H], rbias: [D, H] (GRU), peephole: [D, 3, H] (i, o, f) or None,
    rows in the gate order of RECURRENT_CELLS."""

    name: str
    cell: str
    directions: Tuple[str, ...]
    w: np.ndarray
    r: np.ndarray
    bias: np.ndarray
    rbias: Optional[np.ndarray] = None
    peephole: Optional[np.ndarray] = None
    initial_h: Optional[np.ndarray] = None
    initial_c: Optional[np.ndarray] = None
    #: f, g (and h for LSTM), f alone (RNN); None: the ONNX defaults (RECURRENT_DEFAULT_ACTIVATIONS)
    activations: Optional[Tuple[str, ...]] = None
    clip: Optional[float] = None
    cell_clip: Optional[float] = None
    coupling: Optional[str] = None
    linear_before_reset: bool = False
    output: str = "sequence"
    source_type: str = "LSTM"
    #: initial states read from tensors after x, in this order ("h", then "c"), each [D, H]: the
    #: caller's state (explicit arguments of the C function when they are model inputs)
    state_inputs: Tuple[str, ...] = ()

    kind = "recurrent"
    multi_input = True

    def __post_init__(self):
        if self.cell not in RECURRENT_CELLS:
            raise ValueError(f"recurrent cell '{self.cell}' is not one of {', '.join(RECURRENT_CELLS)}")
        if not self.directions or len(self.directions) > 2 or \
                any(d not in ("forward", "reverse") for d in self.directions):
            raise ValueError(f"directions {self.directions} must be forward and/or reverse")
        if self.output not in RECURRENT_OUTPUTS or (self.output == "cell" and self.cell != "lstm"):
            raise ValueError(f"recurrent output '{self.output}' is not one of {', '.join(RECURRENT_OUTPUTS)} "
                             "(cell: LSTM only)")
        want = len(RECURRENT_DEFAULT_ACTIVATIONS[self.cell])
        if self.activations is None:
            object.__setattr__(self, "activations", RECURRENT_DEFAULT_ACTIVATIONS[self.cell])
        object.__setattr__(self, "activations", tuple(self.activations))
        if len(self.activations) != want or any(a not in RECURRENT_ACTIVATIONS for a in self.activations):
            raise ValueError(f"activations {self.activations} must be {want} of {', '.join(RECURRENT_ACTIVATIONS)}")
        if self.coupling not in RECURRENT_COUPLINGS or (self.coupling and self.cell != "lstm"):
            raise ValueError(f"gate coupling '{self.coupling}' is not an LSTM coupling")
        states = tuple(self.state_inputs)
        if states not in ((), ("h",), ("c",), ("h", "c")) or ("c" in states and self.cell != "lstm"):
            raise ValueError(f"state inputs {states} are not h and/or c (c: LSTM only)")
        if ("h" in states and self.initial_h is not None) or ("c" in states and self.initial_c is not None):
            raise ValueError("an initial state is both a constant and an input")
        object.__setattr__(self, "state_inputs", states)
        for what in ("clip", "cell_clip"):
            value = getattr(self, what)
            if value is not None and not 0 < float(value) < float("inf"):
                raise ValueError(f"{what} {value} must be a finite number > 0")

    @property
    def gates(self) -> int:
        return len(RECURRENT_CELLS[self.cell])

    @property
    def hidden(self) -> int:
        return int(self.r.shape[2])

    @property
    def features(self) -> int:
        return int(self.w.shape[2])

    def arrays(self) -> Dict[str, np.ndarray]:
        """The weight arrays by role (the present ones), with the shapes they must have."""
        d, g, h = len(self.directions), self.gates, int(np.shape(self.r)[-1])
        shapes = {"w": (d, g * h, None), "r": (d, g * h, h), "bias": (d, g * h), "rbias": (d, h),
                  "peephole": (d, 3, h), "initial_h": (d, h), "initial_c": (d, h)}
        return {k: (getattr(self, k), shapes[k]) for k in shapes if getattr(self, k) is not None}

    def output_shape(self, input_shape, *state_shapes):
        if len(input_shape) != 2:
            raise ValueError(f"a recurrent layer reads a sequence [steps, features], got shape {tuple(input_shape)}")
        d = len(self.directions)
        if len(state_shapes) != len(self.state_inputs) or any(tuple(s) != (d, self.hidden) for s in state_shapes):
            raise ValueError(f"state inputs {self.state_inputs} need {len(self.state_inputs)} tensor(s) of shape "
                             f"{(d, self.hidden)}, got {[tuple(s) for s in state_shapes]}")
        if input_shape[1] != self.features:
            raise ValueError(f"W {tuple(self.w.shape)} expects {self.features} features, got a tensor of shape "
                             f"{tuple(input_shape)}")
        d = len(self.directions)
        return (int(input_shape[0]), d, self.hidden) if self.output == "sequence" else (d, self.hidden)


def argument_name(role, label, taken):
    """The C argument of an input or output (role "in" / "out") of the model file's name `label`:
    <role>_<label> made a checked identifier, unique even upper-cased among `taken` (updated; the
    header's size macros upper-case it)."""
    base = f"{role}_{names.c_identifier(label)}"[:names.MAX_NAME_LENGTH - 8]
    name, k = base, 1
    while name.upper() in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name.upper())
    return name


#: Layers whose output is their input seen with another shape (no code, no memory).
ALIASES = ("flatten", "reshape")


@dataclass
class Model:
    """A loaded model: layers from one input tensor to one output tensor (chain, or DAG via edges)."""

    name: str
    input_shape: Tuple[int, ...]
    layers: list
    source_files: Tuple[str, ...] = ()
    #: Facts about the source (format, keras_version, ignored layers) for traceability.
    meta: dict = field(default_factory=dict)
    #: None for a chain; else layer name -> names of the tensors it reads (see the module doc).
    edges: Optional[Dict[str, Tuple[str, ...]]] = None
    #: Name of the model input tensor in `edges`.
    input_name: str = "input"
    #: The inputs after the first, in the model's order: ((tensor name, shape), ...) (a DAG only).
    more_inputs: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()
    #: The output tensors in the model's order; None: the last layer's output alone.
    output_names: Optional[Tuple[str, ...]] = None
    #: IR tensor name -> the name the model file gives that input or output (for the C API).
    io_labels: Dict[str, str] = field(default_factory=dict)

    @property
    def is_chain(self) -> bool:
        return self.edges is None

    @property
    def inputs(self) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
        """Every model input as (tensor name, shape), in the model's order."""
        return ((self.input_name, tuple(self.input_shape)),) + tuple(
            (n, tuple(s)) for n, s in self.more_inputs)

    @property
    def outputs(self) -> Tuple[str, ...]:
        """Every model output tensor name, in the model's order."""
        return tuple(self.output_names) if self.output_names else (self.layers[-1].name,)

    @property
    def several_io(self) -> bool:
        """True for a model of several inputs or several outputs (its C API takes each)."""
        return len(self.inputs) > 1 or len(self.outputs) > 1

    def sources(self, index: int) -> Tuple[str, ...]:
        """Names of the tensors layer `index` reads (the model input is `input_name`)."""
        if self.edges is not None:
            return tuple(self.edges[self.layers[index].name])
        return (self.layers[index - 1].name if index else self.input_name,)

    def consumers(self) -> Dict[str, List[int]]:
        """Tensor name -> indices of the layers that read it (in execution order)."""
        out = {name: [] for name, _ in self.inputs}
        out.update({layer.name: [] for layer in self.layers})
        for i in range(len(self.layers)):
            for src in self.sources(i):
                out.setdefault(src, []).append(i)
        return out

    def tensor_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Tensor name -> shape, for the input and every layer output."""
        shapes = {name: shape for name, shape in self.inputs}
        for i, layer in enumerate(self.layers):
            ins = [shapes[s] for s in self.sources(i)]
            shapes[layer.name] = tuple(int(d) for d in layer.output_shape(*ins))
        return shapes

    def shapes(self):
        """The tensor shape after each layer, input first."""
        if self.edges is None:
            shapes = [tuple(self.input_shape)]
            for layer in self.layers:
                shapes.append(tuple(layer.output_shape(shapes[-1])))
            return shapes
        named = self.tensor_shapes()
        return [named[self.input_name]] + [named[layer.name] for layer in self.layers]

    @property
    def output_shape(self) -> Tuple[int, ...]:
        """The shape of the (first) output."""
        if self.output_names:
            return self.tensor_shapes()[self.output_names[0]]
        return self.shapes()[-1]

    def output_shapes(self) -> Tuple[Tuple[int, ...], ...]:
        """The shape of every output, in the model's order."""
        if not self.output_names:
            return (self.output_shape,)
        named = self.tensor_shapes()
        return tuple(named[n] for n in self.output_names)

    def arguments(self) -> List[dict]:
        """The C function's arguments of a model of several inputs or outputs, in order: every input,
        then every output, each in the model's order: {"role": "in" | "out", "tensor", "label" (the
        model file's name), "name" (in_<label> / out_<label> made a checked C identifier, unique even
        upper-cased: the header's size macros upper-case it), "shape", "size", "offset" (of its
        values in the flat vector of all inputs, or of all outputs)}."""
        out, taken = [], set()
        shapes = dict(self.inputs)
        shapes.update(zip(self.outputs, self.output_shapes()))
        for role, tensors in (("in", [n for n, _ in self.inputs]), ("out", self.outputs)):
            offset = 0
            for tensor in tensors:
                label = self.io_labels.get(tensor, tensor)
                name = argument_name(role, label, taken)
                size = int(np.prod(shapes[tensor]))
                out.append({"role": role, "tensor": tensor, "label": label, "name": name,
                            "shape": tuple(shapes[tensor]), "size": size, "offset": offset})
                offset += size
        return out

    @property
    def input_size(self) -> int:
        """Values of all the inputs together."""
        return sum(int(np.prod(shape)) for _, shape in self.inputs)

    @property
    def output_size(self) -> int:
        """Values of all the outputs together."""
        return sum(int(np.prod(shape)) for shape in self.output_shapes())


# --------------------------------------------------------------------------- load-time validation

#: Largest tensor nnbuild generates code for (elements): see nnbuild.limits.
MAX_TENSOR_ELEMENTS = limits.MAX_TENSOR_ELEMENTS
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class LayerProblem(ValueError):
    """Why a model cannot be generated; `layer` is the culprit (None: the model as a whole).
    Front-ends turn it into an NNBuildError naming the file and the layer."""

    def __init__(self, message, layer=None):
        super().__init__(message)
        self.layer = layer


def weight_problem(array) -> Optional[str]:
    """What is wrong with a weight array (None if nothing): not real floating point, a zero-size
    dimension, NaN, infinity, or a value float32 cannot hold. Checked without casting (no warnings)."""
    array = np.asarray(array)
    if array.dtype.kind != "f" or array.dtype.itemsize > 8:
        return f"is not a float16/32/64 array (dtype {array.dtype})"
    if array.ndim == 0:
        return "is a scalar, not an array"
    if 0 in array.shape:
        return f"has a zero-size dimension (shape {tuple(array.shape)})"
    if np.isnan(array).any():
        return "holds NaN"
    if np.isinf(array).any():
        return "holds infinity"
    biggest = float(np.max(np.abs(array)))
    if biggest > _FLOAT32_MAX:
        return f"holds {biggest:.6g}, beyond the float32 range"
    return None


def _layer_arrays(layer) -> Dict[str, np.ndarray]:
    """The weight arrays of a layer by their Keras role name."""
    names = {"dense": ("kernel", "bias"), "conv2d": ("kernel", "bias"),
             "batchnorm": ("gamma", "beta", "mean", "variance")}.get(getattr(layer, "kind", None), ())
    return {n: getattr(layer, n) for n in names if getattr(layer, n) is not None}


def _recurrent_problem(layer) -> Optional[str]:
    """A problem of a recurrent layer's weight arrays: each real, finite, of its role's shape."""
    if layer.cell == "gru" and layer.rbias is None:
        return "GRU has no recurrence bias of its candidate gate (rbias)"
    if layer.cell != "gru" and layer.rbias is not None:
        return f"{layer.cell.upper()} has a GRU candidate bias (rbias)"
    for role, (array, shape) in layer.arrays().items():
        problem = weight_problem(array)
        if problem:
            return f"{role} {problem}"
        if len(array.shape) != len(shape) or any(w is not None and a != w for a, w in zip(array.shape, shape)):
            return f"{role} has shape {tuple(array.shape)}, expected {tuple('F' if w is None else w for w in shape)}"
    if layer.initial_c is not None and layer.cell != "lstm":
        return f"a {layer.cell.upper()} has no cell state (initial_c)"
    return None


def _layer_problem(layer) -> Optional[str]:
    """A problem of one layer on its own (parameters), before shapes are considered."""
    arrays = _layer_arrays(layer)
    for role, array in arrays.items():
        problem = weight_problem(array)
        if problem:
            return f"{role} {problem}"
    kind = layer.kind
    if kind in ("dense", "conv2d"):
        rank = 2 if kind == "dense" else 4
        kernel = arrays["kernel"]
        if kernel.ndim != rank:
            return f"kernel has shape {tuple(kernel.shape)}, expected {rank}-D"
        if "bias" in arrays and arrays["bias"].shape != (kernel.shape[-1],):
            return f"bias has shape {tuple(arrays['bias'].shape)}, expected ({kernel.shape[-1]},)"
    if kind == "batchnorm":
        n = arrays["gamma"].shape
        if len(n) != 1 or any(a.shape != n for a in arrays.values()):
            return f"parameters must be vectors of one length, got {[tuple(a.shape) for a in arrays.values()]}"
        eps = layer.epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
            return f"epsilon {eps!r} must be a finite number >= 0"
        denominator = np.asarray(layer.variance, np.float64) + float(eps)
        bad = np.flatnonzero(~(denominator > 0))
        if bad.size:
            k = int(bad[0])
            return (f"moving_variance + epsilon must be > 0 (channel {k}: variance "
                    f"{float(layer.variance[k]):.6g}, epsilon {float(eps):.6g})")
        alpha, offset = layer.scale_offset(np.float64)
        for what, values in (("scale gamma/sqrt(variance + epsilon)", alpha), ("offset", offset)):
            if not np.all(np.abs(values) <= _FLOAT32_MAX):
                return f"{what} is beyond the float32 range"
    if kind == "elementwise":
        for position, constant in layer.constants:
            problem = weight_problem(np.reshape(constant, (-1,)) if np.ndim(constant) == 0 else constant)
            if problem:
                return f"constant operand {position} {problem}"
    if kind == "recurrent":
        problem = _recurrent_problem(layer)
        if problem:
            return problem
    activation = getattr(layer, "activation", "linear")
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} is not one of {', '.join(ACTIVATIONS)}"
    return None


def validate(model: "Model") -> "Model":
    """Check a freshly loaded model can be generated: every layer's parameters are real, finite,
    float32-representable and of consistent shapes; every tensor shape is computable with every
    dimension >= 1 and at most MAX_TENSOR_ELEMENTS elements. Raises LayerProblem naming the layer
    and its source type; returns the model."""
    shape = tuple(model.input_shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
        raise LayerProblem(f"input shape {shape} must be one or more dimensions >= 1")
    if not model.layers:
        raise LayerProblem("model has no layers")
    if int(np.prod(shape, dtype=object)) > MAX_TENSOR_ELEMENTS:
        raise LayerProblem(f"input shape {shape} has more than {MAX_TENSOR_ELEMENTS} elements "
                           "(limit MAX_TENSOR_ELEMENTS)")
    if len(model.layers) > limits.MAX_LAYERS:
        raise LayerProblem(f"{len(model.layers)} layers (limit MAX_LAYERS = {limits.MAX_LAYERS})")
    shapes = {model.input_name: shape}
    for name, more in model.more_inputs:
        more = tuple(more)
        if not more or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in more):
            raise LayerProblem(f"input '{name}' shape {more} must be one or more dimensions >= 1")
        if int(np.prod(more, dtype=object)) > MAX_TENSOR_ELEMENTS:
            raise LayerProblem(f"input '{name}' shape {more} has more than {MAX_TENSOR_ELEMENTS} elements "
                               "(limit MAX_TENSOR_ELEMENTS)")
        if name in shapes:
            raise LayerProblem(f"two inputs are named '{name}'")
        shapes[name] = more
    for index, layer in enumerate(model.layers):
        what = f"{layer.source_type}"
        problem = _layer_problem(layer)
        if problem:
            raise LayerProblem(f"{what} {problem}", layer.name)
        try:
            ins = [shapes[s] for s in model.sources(index)]
            out = tuple(int(d) for d in layer.output_shape(*ins))
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise LayerProblem(f"{what}: {exc}", layer.name) from None
        if not out or min(out) < 1:
            raise LayerProblem(f"{what} output shape {out} has a dimension < 1", layer.name)
        if int(np.prod(out, dtype=object)) > MAX_TENSOR_ELEMENTS:
            raise LayerProblem(f"{what} output shape {out} has more than {MAX_TENSOR_ELEMENTS} elements "
                               "(limit MAX_TENSOR_ELEMENTS)", layer.name)
        shapes[layer.name] = out
    if all(layer.kind in ALIASES for layer in model.layers):
        raise LayerProblem("the model computes nothing: every layer only reshapes its input")
    _check_outputs(model, shapes)
    return model


def _check_outputs(model, shapes):
    """Several inputs/outputs: each output a distinct layer output, within limits.MAX_MODEL_IO."""
    outputs = model.outputs
    if len(model.inputs) + len(outputs) > limits.MAX_MODEL_IO:
        raise LayerProblem(f"{len(model.inputs)} inputs and {len(outputs)} outputs (limit MAX_MODEL_IO = "
                           f"{limits.MAX_MODEL_IO} arguments of the C function)")
    inputs = {name for name, _ in model.inputs}
    for k, name in enumerate(outputs):
        if name in inputs:
            raise LayerProblem(f"output '{model.io_labels.get(name, name)}' is an input: there is nothing to compute")
        if name not in shapes:
            raise LayerProblem(f"output '{name}' is no layer's output")
        if name in outputs[:k]:
            raise LayerProblem(f"output '{model.io_labels.get(name, name)}' is listed twice")
