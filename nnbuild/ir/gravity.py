"""Gravity programs (Givargis, ASP-DAC'21): a fully connected network that trains itself.

A `GravityModel` is what a `.g` file declares. `plan(model)` lays out one memory blob and compiles
the model into four straight-line programs of macro-instructions whose operands are literal element
offsets into that blob (the FISM of the paper): initialize, activate, backprop (one sample) and
train (a batch of activate + backprop, then one SGD update). The C generator prints the programs;
the numpy functions below are the reference the generated code is checked against.

Blob layout (elements of the precision's type T; the hard region comes first):
    hard:  w1 b1 ... wL bL   a1 ... aL      weights and inference working memory
    rest:  gw1 gb1 ... gwL gbL   d1 ... dL  gradient sums over the batch, deltas dC/dz
`w_l` is stored input-major, `[n_{l-1}][n_l]` (element i*n_l + j joins input i to neuron j), so
the forward pass adds one input times a contiguous weight row to every neuron: no reduction, which
compilers vectorise without reassociating. The input a0 is the caller's `x`, never copied.

Costs (a = output activation, y = target; dC/dz is what backprop starts from):
    quadratic      C = 1/2 sum (a - y)^2           dC/da = a - y
    exponential    C = exp(sum (a - y)^2)          dC/da = 2 (a - y) C      (Gravity's tau = 1)
    cross_entropy  softmax: C = -sum y log a       dC/dz = a sum(y) - y
                   sigmoid: C = -sum y log a + (1 - y) log(1 - a)   dC/dz = a - y
Cross-entropy needs probabilities: on any other output activation it is refused at load.
SGD averages the batch: w -= rate / batch * sum of the batch's gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import List, Tuple

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.names import MAX_NAME_LENGTH, is_c_identifier

KIND = "gravity"
#: Gravity's G__VERSION: what <p>_version() returns
VERSION = 10
ACTIVATIONS = ("relu", "linear", "softmax", "sigmoid", "tanh")
COSTS = ("quadratic", "exponential", "cross_entropy")
#: fixed point: the SGD scale (rate / batch) is an integer with this many fraction bits
SCALE_FRAC = 24
#: the xorshift32 generator of the initialisation keeps 24 random bits per weight
UNIFORM_BITS = 24
#: rate / batch, the SGD constant of the generated C, is at least this (FLT_MIN): a float32 (and
#: avr-gcc's 32-bit double) holds it as a normal number, never flushed to zero or subnormal
FLOAT32_MIN_NORMAL = 2.0 ** -126


@dataclass(frozen=True)
class Layer:
    """One declared layer (hidden or output): its width, activation and where the .g file says so."""

    size: int
    activation: str
    where: str = ""          # file:line:column of its directive
    directive: str = "hidden"
    name: str = ""           # hidden1, hidden2, ..., output (what the trace and the C comments call it)


@dataclass(frozen=True)
class Number:
    """The arithmetic of a precision: float32, float64 or fixedW.F (W whole bits with the sign, F
    fraction bits, stored in the smallest of 8/16/32 bits; saturating, round half up)."""

    name: str
    ctype: str
    bytes: int
    whole: int = 0
    frac: int = 0

    @property
    def fixed(self):
        return self.whole > 0

    @property
    def bits(self):
        return self.whole + self.frac

    @property
    def qmax(self):
        return (1 << (self.bits - 1)) - 1

    @property
    def qmin(self):
        return -(1 << (self.bits - 1))

    @property
    def dtype(self):
        return np.dtype({"float": np.float32, "double": np.float64, "int8_t": np.int8,
                         "int16_t": np.int16, "int32_t": np.int32}[self.ctype])


def number(precision) -> Number:
    """The Number of a precision name: float32, float64, fixedW.F (W + F <= 32)."""
    if precision == "float32":
        return Number("float32", "float", 4)
    if precision == "float64":
        return Number("float64", "double", 8)
    import re
    match = re.fullmatch(r"fixed(\d+)[.,_](\d+)", str(precision))
    if not match:
        raise NNBuildError(f"precision '{precision}' does not compute Gravity programs (float32, float64, fixedW.F)")
    whole, frac = int(match.group(1)), int(match.group(2))
    if whole < 1 or whole + frac > 32:
        raise NNBuildError(f"precision '{precision}': fixed[w, f] is generated for w >= 1 and w + f <= 32 bits "
                           "(products need twice the width, and C99 has no integer wider than 64 bits)")
    storage = 8 if whole + frac <= 8 else 16 if whole + frac <= 16 else 32
    return Number(f"fixed{whole}.{frac}", f"int{storage}_t", storage // 8, whole, frac)


@dataclass
class GravityModel:
    """What a .g file declares. `layers` are hidden layers then the output, in declared order."""

    name: str
    prefix: str
    inputs: int
    layers: List[Layer]
    precision: str = "float32"
    cost: str = "cross_entropy"
    batch: int = 1
    learning_rate: float = 0.1
    source_files: List[str] = field(default_factory=list)
    kind: str = KIND

    @property
    def sizes(self):
        return [self.inputs] + [layer.size for layer in self.layers]

    @property
    def input_size(self):
        return self.inputs

    @property
    def output_size(self):
        return self.layers[-1].size


def validate(model: GravityModel):
    """The checks every Gravity model passes, whoever built it; one line naming the item."""
    where = model.source_files[0] if model.source_files else model.name
    if not model.layers:
        raise NNBuildError("a Gravity program needs an output layer", path=where)
    for layer in model.layers:
        if layer.activation not in ACTIVATIONS:
            raise NNBuildError(f"{layer.where or where}: activation '{layer.activation}' is not one of "
                               f"{', '.join(ACTIVATIONS)}")
        if layer.size < 1:
            raise NNBuildError(f"{layer.where or where}: a layer needs at least one neuron (got {layer.size})")
    if model.inputs < 1:
        raise NNBuildError(f"{where}: .input must be at least 1 (got {model.inputs})")
    if model.cost not in COSTS:
        raise NNBuildError(f"{where}: cost function '{model.cost}' is not one of {', '.join(COSTS)}")
    out = model.layers[-1]
    if model.cost == "cross_entropy" and out.activation not in ("softmax", "sigmoid"):
        raise NNBuildError(f"{out.where or where}: .costfnc cross_entropy needs probabilities: the output "
                           f"activation must be softmax or sigmoid, not {out.activation}")
    if not 1 <= model.batch <= 1000:
        raise NNBuildError(f"{where}: .batch must be 1 to 1000 (got {model.batch})")
    if not 0 < model.learning_rate <= 1:
        raise NNBuildError(f"{where}: the sgd rate must be in (0, 1] (got {model.learning_rate!r})")
    if model.learning_rate / model.batch < FLOAT32_MIN_NORMAL:
        raise NNBuildError(f"{where}: the sgd rate {model.learning_rate!r} / batch {model.batch} is below the "
                           f"smallest normal float32 {FLOAT32_MIN_NORMAL:.7g}: the generated update would "
                           "multiply by zero or a subnormal")
    for directive, value in (("module", model.name), ("prefix", model.prefix)):
        if len(value) > MAX_NAME_LENGTH:
            raise NNBuildError(f"{where}: .{directive} name of {len(value):,} characters: at most "
                               f"{MAX_NAME_LENGTH} (the significant characters of a C identifier)")
        if not (directive == "prefix" and value == "") and not is_c_identifier(value):
            raise NNBuildError(f"{where}: .{directive} {value!r} is not a C identifier")
    return model


# --------------------------------------------------------------------------- layout and programs


@dataclass(frozen=True)
class Region:
    """Offsets (in elements of T) of one layer's arrays in the blob."""

    w: int
    b: int
    a: int
    gw: int
    gb: int
    d: int


@dataclass(frozen=True)
class Instr:
    """One macro-instruction: an operation, the layer it belongs to (index, -1 for none) and
    literal operands (offsets, counts, activation names, constants)."""

    op: str
    layer: int
    args: Tuple


@dataclass
class Plan:
    """The blob layout and the four programs of a model in one number format."""

    model: GravityModel
    number: Number
    regions: List[Region]
    hard: int                 # elements
    size: int                 # elements
    params: int               # elements of [w1 b1 ... wL bL]
    gradients: int            # offset of gw1
    programs: dict            # name -> [Instr]

    @property
    def hard_bytes(self):
        return self.hard * self.number.bytes

    @property
    def size_bytes(self):
        return self.size * self.number.bytes

    @property
    def output_offset(self):
        return self.regions[-1].a


def layout(sizes):
    """(regions, hard, size, params, gradients) of a network with these layer widths."""
    params, offsets = 0, []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        offsets.append((params, params + n_in * n_out))
        params += n_in * n_out + n_out
    a_start = params
    a_offsets = np.cumsum([0] + sizes[1:-1]).tolist()
    hard = a_start + sum(sizes[1:])
    gradients = hard
    d_start = gradients + params
    size = d_start + sum(sizes[1:])
    regions = [Region(w=w, b=b, a=a_start + a_offsets[l], gw=gradients + w, gb=gradients + b,
                      d=d_start + a_offsets[l]) for l, (w, b) in enumerate(offsets)]
    return regions, hard, size, params, gradients


def plan(model: GravityModel, precision=None) -> Plan:
    """The layout and programs of `model` computed in `precision` (default: the model's own)."""
    validate(model)
    num = number(precision or model.precision)
    model.layers = [layer if layer.name else replace(layer, name=default_name(i, len(model.layers)))
                    for i, layer in enumerate(model.layers)]
    sizes = model.sizes
    regions, hard, size, params, gradients = layout(sizes)
    if num.fixed:
        check_fixed_accumulators(model, num)
    last = len(model.layers) - 1
    init = []
    for l, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        init.append(Instr("uniform", l, (regions[l].w, n_in * n_out, glorot_limit(n_in, n_out))))
        init.append(Instr("zero", l, (regions[l].b, n_out)))
    init.append(Instr("zero", -1, (gradients, size - gradients)))
    activate = []
    for l, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        src = None if l == 0 else regions[l - 1].a
        activate.append(Instr("affine", l, (regions[l].a, regions[l].w, regions[l].b, src, n_in, n_out)))
        activate.append(Instr("activation", l, (regions[l].a, n_out, model.layers[l].activation)))
    backprop = [Instr("output_delta", last, (regions[last].d, regions[last].a, sizes[-1], model.cost,
                                             model.layers[-1].activation))]
    for l in range(last, -1, -1):
        src = None if l == 0 else regions[l - 1].a
        backprop.append(Instr("accumulate", l, (regions[l].gw, regions[l].gb, regions[l].d, src,
                                                sizes[l], sizes[l + 1])))
        if l > 0:
            backprop.append(Instr("hidden_delta", l - 1, (regions[l - 1].d, regions[l].w, regions[l].d,
                                                          regions[l - 1].a, sizes[l], sizes[l + 1],
                                                          model.layers[l - 1].activation)))
    train = [Instr("batch", -1, (model.batch, sizes[0], sizes[-1])),
             Instr("update", -1, (0, gradients, params, model.learning_rate / model.batch))]
    return Plan(model, num, regions, hard, size, params, gradients,
                {"initialize": init, "activate": activate, "backprop": backprop, "train": train})


def default_name(index, count):
    return "output" if index == count - 1 else f"hidden{index + 1}"


def glorot_limit(n_in, n_out):
    """Glorot-uniform: U[-l, l] with l = sqrt(6 / (fan_in + fan_out))."""
    return math.sqrt(6.0 / (n_in + n_out))


def check_fixed_accumulators(model, num):
    """Dot products sum exact products (2F fraction bits) in int64: refuse a format where the sum
    of the widest layer's saturated products could overflow it, naming the layer."""
    widest = 0
    for l, (n_in, n_out) in enumerate(zip(model.sizes[:-1], model.sizes[1:])):
        terms = max(n_in + 1, n_out)
        if (terms * (1 << (2 * (num.bits - 1)))) >= (1 << 63):
            layer = model.layers[l]
            raise NNBuildError(f"{layer.where or model.name}: precision {num.name} cannot sum {terms} products "
                               f"in 64 bits without overflow; use fewer bits (w + f) for this layer size")
        widest = max(widest, terms)
    return widest


# --------------------------------------------------------------------------- initialisation


def xorshift_state(seed):
    """The generator's first state for a seed (any 32-bit value; never 0)."""
    state = (int(seed) * 2654435761 + 0x9E3779B9) & 0xFFFFFFFF
    return state or 1


def uniform_scale(num, limit):
    """The constant the 24-bit signed draw k in [-2^23, 2^23) is multiplied by: limit / 2^23 as T
    (float), or as a fixed value with SCALE_FRAC more fraction bits (integer)."""
    if num.fixed:
        return int(round(limit * 2 ** (num.frac + SCALE_FRAC - (UNIFORM_BITS - 1))))
    return np.dtype(num.dtype).type(limit / 2 ** (UNIFORM_BITS - 1))


def initial_blob(plan_: Plan, seed):
    """The blob <p>_initialize(m, seed) writes, bit for bit (numpy mirror of the C)."""
    num = plan_.number
    blob = np.zeros(plan_.size, dtype=num.dtype)
    state = xorshift_state(seed)
    for instr in plan_.programs["initialize"]:
        if instr.op != "uniform":
            continue
        offset, count, limit = instr.args
        draws, _ = xorshift_stream_from(state, count)
        state = int(draws[-1])
        k = (draws >> (32 - UNIFORM_BITS)).astype(np.int64) - (1 << (UNIFORM_BITS - 1))
        scale = uniform_scale(num, limit)
        if num.fixed:
            q = (k * scale + (1 << (SCALE_FRAC - 1))) >> SCALE_FRAC
            blob[offset:offset + count] = np.clip(q, num.qmin, num.qmax)
        else:
            blob[offset:offset + count] = k.astype(num.dtype) * scale
    return blob


def xorshift_stream_from(state, count):
    """`count` successive xorshift32 outputs (Marsaglia 13/17/5) after `state`, as uint64, and the last state."""
    out = np.empty(count, dtype=np.uint64)
    s = state
    for k in range(count):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        out[k] = s
    return out, s


# --------------------------------------------------------------------------- numpy reference (float64)


def unpack(plan_: Plan, blob):
    """[(W [n_in][n_out], b [n_out])] of a blob, as float64 real values."""
    num = plan_.number
    values = np.asarray(blob, dtype=np.float64)
    if num.fixed:
        values = values / 2.0 ** num.frac
    sizes = plan_.model.sizes
    return [(values[r.w:r.w + n_in * n_out].reshape(n_in, n_out).copy(), values[r.b:r.b + n_out].copy())
            for r, n_in, n_out in zip(plan_.regions, sizes[:-1], sizes[1:])]


def pack(plan_: Plan, weights, blob=None):
    """A blob holding these real weights (rounded and saturated to the format in fixed point)."""
    num = plan_.number
    blob = np.zeros(plan_.size, dtype=num.dtype) if blob is None else blob.copy()
    for r, (w, b) in zip(plan_.regions, weights):
        for offset, values in ((r.w, np.ravel(w)), (r.b, np.ravel(b))):
            if num.fixed:
                values = np.clip(np.floor(np.asarray(values) * 2.0 ** num.frac + 0.5), num.qmin, num.qmax)
            blob[offset:offset + len(values)] = values
    return blob


def activation(name, z):
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "linear":
        return z
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "tanh":
        return np.tanh(z)
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def forward(model, weights, x):
    """Every layer's activation for a batch x [N, n_in] (float64): [a1, ..., aL]."""
    a, out = np.asarray(x, dtype=np.float64), []
    for layer, (w, b) in zip(model.layers, weights):
        a = activation(layer.activation, a @ w + b)
        out.append(a)
    return out


def activate(model, weights, x):
    return forward(model, weights, x)[-1]


def cost(model, weights, x, y):
    """The batch's cost: the sum over its samples of the cost function."""
    a = activate(model, weights, x)
    y = np.asarray(y, dtype=np.float64)
    if model.cost == "quadratic":
        return 0.5 * np.sum((a - y) ** 2)
    if model.cost == "exponential":
        return np.sum(np.exp(np.sum((a - y) ** 2, axis=-1)))
    if model.layers[-1].activation == "softmax":
        return -np.sum(y * np.log(a))
    return -np.sum(y * np.log(a) + (1 - y) * np.log(1 - a))


def derivative_times(name, a, g):
    """dC/dz from dC/da = g, for an activation whose output is a (every derivative is one of a)."""
    if name == "relu":
        return np.where(a > 0, g, 0.0)
    if name == "linear":
        return g
    if name == "sigmoid":
        return g * a * (1 - a)
    if name == "tanh":
        return g * (1 - a * a)
    return a * (g - np.sum(a * g, axis=-1, keepdims=True))


def output_delta(model, a, y):
    """dC/dz of the output layer, per sample."""
    act = model.layers[-1].activation
    if model.cost == "cross_entropy":
        return a * np.sum(y, axis=-1, keepdims=True) - y if act == "softmax" else a - y
    g = a - y
    if model.cost == "exponential":
        g = 2 * g * np.exp(np.sum((a - y) ** 2, axis=-1, keepdims=True))
    return derivative_times(act, a, g)


def gradients(model, weights, x, y):
    """[(dC/dW, dC/db)] of the batch cost (sum over samples), by backpropagation."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    acts = forward(model, weights, x)
    d = output_delta(model, acts[-1], y)
    grads = [None] * len(weights)
    for l in range(len(weights) - 1, -1, -1):
        prev = x if l == 0 else acts[l - 1]
        grads[l] = (prev.T @ d, d.sum(axis=0))
        if l:
            d = derivative_times(model.layers[l - 1].activation, prev, d @ weights[l][0].T)
    return grads


def train_step(model, weights, x, y):
    """The weights after one SGD batch: w -= rate / batch * gradient of the batch cost."""
    scale = model.learning_rate / model.batch
    return [(w - scale * gw, b - scale * gb) for (w, b), (gw, gb) in zip(weights, gradients(model, weights, x, y))]


# --------------------------------------------------------------------------- from a trained network


def from_network(network, *, cost=None, batch=1, learning_rate=0.1, precision="float32"):
    """(GravityModel, [(W, b)]) of a trained fully connected network (nnbuild.ir.graph.Model: a
    chain of Dense layers, each optionally followed by an Activation), so any model file nnbuild
    reads can be fine-tuned by generated training code. Anything else is refused naming the layer.
    The cost defaults to cross-entropy on softmax/sigmoid outputs, else quadratic."""
    from nnbuild.ir.graph import Activation, Dense
    where = network.source_files[0] if network.source_files else network.name
    if getattr(network, "edges", None) or len(getattr(network, "input_shape", ())) != 1:
        raise NNBuildError("a Gravity program is a chain of Dense layers over a vector input", path=where)
    layers, weights = [], []
    for layer in network.layers:
        if isinstance(layer, Dense):
            bias = layer.bias if layer.bias is not None else np.zeros(layer.units)
            weights.append((np.asarray(layer.kernel, np.float64), np.asarray(bias, np.float64)))
            layers.append([layer.units, layer.activation, layer.name])
        elif isinstance(layer, Activation) and layers and layers[-1][1] == "linear":
            layers[-1][1] = layer.activation
        else:
            raise NNBuildError(f"{layer.source_type} layer has no Gravity form (Dense layers and their "
                               "activations only)", path=where, item=f"layer '{layer.name}'")
    for size, act, name in layers:
        if act not in ACTIVATIONS:
            raise NNBuildError(f"activation '{act}' has no Gravity form ({', '.join(ACTIVATIONS)})", path=where,
                               item=f"layer '{name}'")
    if len(layers) < 2:
        raise NNBuildError("a Gravity program needs a hidden layer and an output layer", path=where)
    out_act = layers[-1][1]
    cost = cost or ("cross_entropy" if out_act in ("softmax", "sigmoid") else "quadratic")
    count = len(layers)
    model = GravityModel(name=network.name, prefix=network.name, inputs=int(network.input_shape[0]),
                         layers=[Layer(size, act, f"{where} layer '{name}'", "output" if i == count - 1 else "hidden",
                                       default_name(i, count)) for i, (size, act, name) in enumerate(layers)],
                         precision=precision, cost=cost, batch=batch, learning_rate=learning_rate,
                         source_files=list(network.source_files))
    return validate(model), weights
