"""NNet front-end: the ACAS Xu text format (Kyle Julian, Stanford 2016; the networks of Reluplex,
Katz et al., CAV 2017, and of most verification benchmarks since). Read with plain Python.

The format (Reluplex nnet/nnet.cpp and sisl/NNet utils/readNNet.py agree on it):

1. any number of header lines starting with `//`;
2. `numLayers, numInputs, numOutputs, maxLayerSize` (numLayers counts the weight layers);
3. the numLayers + 1 layer sizes, input first (`5,50,50,50,50,50,50,5,`);
4. an obsolete flag line (one value, ignored);
5. the input minimums, 6. the input maximums (one per input);
7. the means, 8. the ranges: one per input, then ONE more value that applies to every output;
9. per layer, `size[l+1]` lines of `size[l]` weights (row i: the weights into neuron i, [out][in]),
   then `size[l+1]` lines of one bias each.

Values are comma-separated, usually with a trailing comma: fields are split on `,` and empty fields
dropped. Every value is a decimal number (no NaN, no infinity, nothing float32 cannot hold).

Semantics (Reluplex's C++ reference, which the golden outputs in ../shared/data/nnet/README.md
follow; the 2024 sisl/NNet python/nnet.py clamps without subtracting the mean and differs): each
input clamped to [min, max], normalised as (x - mean) / range, ReLU after every hidden layer, the
last layer linear, each output mapped back as y * range_out + mean_out. The IR model computes that
whole raw-input -> raw-output function, with the normalisation as IR layers:

    clamp_min   Elementwise max(x, minimums)        clamp_max   Elementwise min(x, maximums)
    sub_mean    Elementwise x - means[:n]           div_range   Elementwise x / ranges[:n]
    layer_1 .. layer_L   Dense (kernel [in, out] = the file's rows transposed), relu / linear
    mul_range   Elementwise y * range_out           add_mean    Elementwise y + mean_out

(max then min is the C++ `if x > max ... else if x < min ...` because every minimum is checked to be
<= its maximum; a NaN input stays NaN in both.) Weights and constants are kept in float64, as the
file's decimals are read by the reference C++.

The file is untrusted: its size, the layer count and every layer size are bounded, every count is
checked against the lines actually present before anything is allocated, and every failure is one
line naming the file and the line (and the layer) at fault.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Tuple

import numpy as np

from nnbuild import limits
from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import Dense, Elementwise, Model
from nnbuild.names import c_identifier

#: largest file read (bytes); the ACAS Xu networks are 167 KB
MAX_BYTES = limits.MAX_NNET_BYTES
#: most weight layers, largest layer (neurons)
MAX_LAYERS = 1024
MAX_LAYER_SIZE = 1 << 20
#: float32's largest finite value: the generated C holds every weight and constant as a float
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: the smallest |range| an input may be divided by (float32's smallest normal number)
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: a line of comma-separated decimals (empty fields allowed), matched without backtracking
_NUMBERS = re.compile(r"[ \t]*(?:{0}[ \t]*)?(?:,[ \t]*(?:{0}[ \t]*)?)*".format(_NUMBER.pattern))
_INTEGER = re.compile(r"[+-]?\d{1,12}")


def _err(path, line, message, layer=None) -> NNBuildError:
    where = f"line {line}" if line else None
    if layer is not None:
        where = f"layer {layer}, {where}" if where else f"layer {layer}"
    return NNBuildError(message, path=path, item=where)


def _show(text, limit=24) -> str:
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


class _Lines:
    """The data lines of the file after the header, read one at a time (blank lines skipped): the
    file is never split into a list of every field, which would cost many times its size."""

    def __init__(self, path, data: bytes, start: int, number: int):
        self.path, self.data, self.pos, self.number = path, data, start, number
        self.size, self.last_line = len(data), data.count(b"\n") + 1

    @property
    def left(self) -> int:
        """How many data lines are left, counted in vectorised passes (no object per line): the
        lines minus the blank ones, once str.strip's whitespace is deleted."""
        rest = np.frombuffer(self.data[self.pos:].translate(None, _BLANKS), np.uint8)
        if not len(rest):
            return 0
        newline = rest == ord("\n")
        empty = int(newline[0]) + int(np.count_nonzero(newline[1:] & newline[:-1])) + int(newline[-1])
        return int(np.count_nonzero(newline)) + 1 - empty

    def next(self, what, layer=None) -> Tuple[int, str]:
        while self.pos <= self.size:
            end = self.data.find(b"\n", self.pos)
            end = self.size if end < 0 else end
            text = self.data[self.pos:end].decode("ascii").strip()
            self.pos, self.number = end + 1, self.number + 1
            if text:
                return self.number, text
        raise _err(self.path, self.last_line, f"file ends before the {what} (truncated)", layer)

    def values(self, what, count, layer=None, integers=False):
        """The next line as exactly `count` numbers (ints with `integers`); a line is not split
        when its commas alone show it holds far more than `count` values."""
        line, text = self.next(what, layer)
        if count is not None and text.count(",") > 2 * count + 2:
            raise _err(self.path, line, f"the {what} line has {text.count(',') + 1} comma-separated fields, "
                                        f"expected {count} values", layer)
        fields = [f.strip() for f in text.split(",") if f.strip()]
        if count is not None and len(fields) != count:
            raise _err(self.path, line, f"the {what} line has {len(fields)} value(s), expected {count}", layer)
        if not integers and len(fields) > 8 and _NUMBERS.fullmatch(text):  # a long row of decimals: numpy
            row = np.array(fields, dtype=np.float64)                      # converts it at once
            if float(np.max(np.abs(row))) <= _FLOAT32_MAX:
                return line, row
        return line, [_integer(self.path, line, f, what, layer) if integers else _number(self.path, line, f, what, layer)
                      for f in fields]


#: the ASCII whitespace str.strip removes, but the newline
_BLANKS = b" \t\r\x0b\x0c\x1c\x1d\x1e\x1f"
_NOT_ASCII = re.compile(rb"[\x80-\xff]")
_COMMENT = re.compile(rb"^[ \t\r\x0b\x0c\x1c-\x1f]*//", re.M)


def _number(path, line, field, what, layer=None) -> float:
    if not _NUMBER.fullmatch(field):
        raise _err(path, line, f"{what}: {_show(field)} is not a decimal number", layer)
    value = float(field)
    if not abs(value) <= _FLOAT32_MAX:  # also refuses 1e999 (infinity once read)
        raise _err(path, line, f"{what}: {_show(field)} is beyond the float32 range", layer)
    return value


def _integer(path, line, field, what, layer=None) -> int:
    if not _INTEGER.fullmatch(field):
        raise _err(path, line, f"{what}: {_show(field)} is not an integer (at most 12 digits)", layer)
    return int(field)


def _line_of(data, match):
    return data.count(b"\n", 0, match.start()) + 1 if match else None


def _read_lines(path) -> _Lines:
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise _err(path, None, f"file is {size} bytes (at most {MAX_BYTES} read)")
        with open(path, "rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except OSError as error:
        raise NNBuildError(f"cannot read the file ({error.strerror or error})", path=path) from None
    if len(data) > MAX_BYTES:
        raise _err(path, None, f"file is over {MAX_BYTES} bytes")
    start, number = 0, 0
    while start <= len(data):  # the '//' header: its comments may hold any bytes
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if not data[start:end].lstrip().startswith(b"//"):
            break
        start, number = end + 1, number + 1
    not_ascii, comment = (_line_of(data, pattern.search(data, start)) for pattern in (_NOT_ASCII, _COMMENT))
    if not_ascii and (not comment or not_ascii <= comment):
        raise _err(path, not_ascii, "holds bytes that are not ASCII (an NNet file is text)")
    if comment:
        raise _err(path, comment, "a '//' comment after the header (comments only come first)")
    return _Lines(path, data, start, number)


def load(path) -> Model:
    """Read an NNet file into the IR model of its raw-input -> raw-output function (module doc)."""
    lines = _read_lines(path)
    if not lines.left:
        raise _err(path, lines.last_line, "no data after the '//' header (empty or not an NNet file)")

    line, (n_layers, n_in, n_out, max_size) = lines.values(
        "numLayers, numInputs, numOutputs, maxLayerSize", 4, integers=True)
    if not 1 <= n_layers <= MAX_LAYERS:
        raise _err(path, line, f"numLayers {n_layers} is not in 1..{MAX_LAYERS}")
    line, sizes = lines.values("layer sizes", n_layers + 1, integers=True)
    for k, s in enumerate(sizes):
        if not 1 <= s <= MAX_LAYER_SIZE:
            raise _err(path, line, f"layer size {s} (position {k + 1}) is not in 1..{MAX_LAYER_SIZE}")
    if sizes[0] != n_in or sizes[-1] != n_out:
        raise _err(path, line, f"layer sizes run {sizes[0]}..{sizes[-1]}, the header says "
                               f"{n_in} inputs and {n_out} outputs")
    if max(sizes) != max_size:
        raise _err(path, line, f"the largest layer size is {max(sizes)}, the header's maxLayerSize {max_size}")
    lines.values("obsolete flag", 1)

    # Every count against the data present before anything is allocated: one line per weight row
    # and per bias, at least two bytes ("0,") per weight.
    weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    for l, (fan_in, units) in enumerate(zip(sizes, sizes[1:]), start=1):
        if fan_in * units > limits.MAX_TENSOR_ELEMENTS:
            raise _err(path, line, f"layer {l} is {fan_in} x {units}: {fan_in * units} weights, more than "
                                   f"{limits.MAX_TENSOR_ELEMENTS} per layer (limits.MAX_TENSOR_ELEMENTS)")
    if sum(sizes[1:]) > limits.MAX_NNET_NEURONS:
        raise _err(path, line, f"the layer sizes make {sum(sizes[1:])} neurons, more than {limits.MAX_NNET_NEURONS} "
                               "(limits.MAX_NNET_NEURONS)")
    if weights > limits.MAX_MODEL_ELEMENTS:
        raise _err(path, line, f"the layer sizes need {weights} weights, more than {limits.MAX_MODEL_ELEMENTS} "
                               "(limits.MAX_MODEL_ELEMENTS)")
    if 2 * weights > lines.size:
        raise _err(path, line, f"the layer sizes need {weights} weights, more than a {lines.size}-byte file holds")
    needed = 4 + 2 * sum(sizes[1:])
    if lines.left < needed:
        raise _err(path, lines.last_line, f"truncated: the layer sizes need {needed} more lines "
                                          f"(limits, normalisation, weights, biases), the file has {lines.left}")

    _, minimums = lines.values("input minimums", n_in)
    line_max, maximums = lines.values("input maximums", n_in)
    _, means = lines.values("means (one per input, then one for the outputs)", n_in + 1)
    line_ranges, ranges = lines.values("ranges (one per input, then one for the outputs)", n_in + 1)
    for i, (lo, hi) in enumerate(zip(minimums, maximums)):
        if lo > hi:
            raise _err(path, line_max, f"input {i + 1}: minimum {lo:g} is above maximum {hi:g}")
    for i, r in enumerate(ranges[:n_in]):
        if abs(r) < _FLOAT32_TINY:
            raise _err(path, line_ranges, f"input {i + 1}: range {r:g} cannot divide (zero or below float32's "
                                          "smallest normal number)")

    dense = []
    for l in range(n_layers):
        fan_in, units = sizes[l], sizes[l + 1]
        kernel = np.empty((fan_in, units), np.float64)
        for row in range(units):
            _, values = lines.values(f"weights into neuron {row + 1} (of {units})", fan_in, layer=l + 1)
            kernel[:, row] = values
        bias = np.empty(units, np.float64)
        for row in range(units):
            _, (value,) = lines.values(f"bias {row + 1} (of {units})", 1, layer=l + 1)
            bias[row] = value
        dense.append(Dense(name=f"layer_{l + 1}", kernel=kernel, bias=bias,
                           activation="relu" if l < n_layers - 1 else "linear", source_type="NNet layer"))
    if lines.left:
        line, _ = lines.next("trailing data")
        raise _err(path, line, f"{lines.left + 1} line(s) of data after the last layer's biases "
                               "(the layer sizes do not account for them)")

    def constant(name, op, values, source_type):
        return Elementwise(name=name, op=op, constants=((1, np.array(values, np.float64)),), source_type=source_type)

    layers = [constant("clamp_min", "max", minimums, "NNet input minimums"),
              constant("clamp_max", "min", maximums, "NNet input maximums"),
              constant("sub_mean", "sub", means[:n_in], "NNet input means"),
              constant("div_range", "div", ranges[:n_in], "NNet input ranges"),
              *dense,
              constant("mul_range", "mul", [ranges[n_in]] * n_out, "NNet output range"),
              constant("add_mean", "add", [means[n_in]] * n_out, "NNet output mean")]
    meta = {"format": "nnet", "layer_sizes": sizes, "source_files": [str(path)],
            "normalisation": "clamp to [min, max], (x - mean) / range; outputs y * range + mean (Reluplex C++)",
            "dtype": "float64"}
    return Model(name=c_identifier(Path(path).stem), input_shape=(n_in,), layers=layers,
                 source_files=(str(path),), meta=meta)
