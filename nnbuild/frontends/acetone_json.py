"""ACETONE JSON front-end: the format acetone-nnet reads (importers/JSON_importer/parser_JSON.py) and
writes (JSON_from_keras_model.py). Read with json only.

The format (documented by acetone-nnet's writer, 1.0): a Keras `model.to_json()` object whose
`config` gains `data_format` and whose layers gain, in their `config`: `idx` (position in the
layer list, the input layer first), `size` (output elements), `input_shape` / `output_shape`
(with the batch axis; 4-d shapes in channels-first order N, C, H, W) and `prev_layer_idx` (the
idx of the layers it reads). Weights are inline: Dense and Conv2D `weights` and `biases`
(Conv2D weights [in, kh, kw, filters], Dense weights [1, 1, in, units]: the Keras kernel with axis
2 moved first), BatchNormalization `gamma`, `beta`, `moving_mean`, `moving_var`. The first
layer's `dtype` is the model's ("float32" / "float64"; "int" is refused). Activations: linear,
relu, sigmoid, tanh, softmax (a separate Softmax layer in acetone-nnet) and leaky_relu (slope 0.2).
Dropout and Reshape are skipped by acetone-nnet (its tensors are flat buffers): Dropout is the
identity; a Reshape is kept as the Keras Reshape it is.

The model nnbuild loads is the Keras model the file describes: tensors channels-last (H, W, C)
as in Keras (acetone-nnet computes channels-first internally and its Flatten reorders to Keras'
order, so the Dense layers see the same vectors). Only `data_format: channels_last` is read
(acetone-nnet's writer always writes it). Every failure is one line naming the file and the layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import numpy as np

from nnbuild import files, limits
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir.graph import (Add, BatchNorm, Concatenate, Conv2D, Dense, Elementwise, Flatten,
                              Model, Pool2D, Reshape, Unary, ZeroPadding2D, same_padding, weight_problem)

#: Layer classes read (InputLayer first; Dropout skipped).
SUPPORTED_LAYERS = ("Add", "Average", "AveragePooling2D", "BatchNormalization", "Concatenate", "Conv2D",
                    "Dense", "Dropout", "Flatten", "InputLayer", "MaxPooling2D", "Maximum", "Minimum",
                    "Multiply", "Reshape", "Subtract", "ZeroPadding2D")
#: Activations acetone-nnet's JSON parser knows (leaky_relu with its fixed slope 0.2).
ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax", "leaky_relu")
LEAKY_SLOPE = 0.2
#: largest file read (bytes): the weights are inline, and parsed JSON costs several times its size
MAX_BYTES = limits.MAX_JSON_BYTES
_MERGE = {"Add": "add", "Multiply": "mul", "Subtract": "sub", "Maximum": "max", "Minimum": "min",
          "Average": "mean"}


def _err(message, path, layer=None) -> NNBuildError:
    return NNBuildError(" ".join(str(message).split()), path=path, item=f"layer '{layer}'" if layer else None)


def _show(value) -> str:
    if isinstance(value, str):
        return f"'{value}'" if len(value) <= 38 else f"'{value[:35]}...'"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """Typed access to one layer's config, refusing wrong values in one line; `budget` counts the
    weights converted so far for the whole file (shared by every layer's reader)."""

    def __init__(self, path, layer, cfg, budget):
        self.path, self.layer, self.cfg, self.budget = path, layer, cfg, budget

    def fail(self, message):
        return _err(message, self.path, self.layer)

    def get(self, key, default=None, required=False):
        value = self.cfg.get(key)
        if value is None:
            if required:
                raise self.fail(f"config has no '{key}'")
            return default
        return value

    def int(self, key, default=None, minimum=1):
        value = self.get(key, default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{key} must be an integer >= {minimum}, got {_show(value)}")
        return value

    def square(self, key, default=None):
        """acetone-nnet reads only element 0 of kernel sizes and strides: both must be equal."""
        value = self.get(key, default, required=default is None)
        items = [value, value] if isinstance(value, int) else value
        if (not isinstance(items, list) or len(items) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items)):
            raise self.fail(f"{key} {_show(value)} is not 2 integers >= 1")
        if items[0] != items[1]:
            raise self.fail(f"{key} {_show(value)} differs per axis (acetone-nnet reads only the first)")
        return items[0]

    def float(self, key, default=None, minimum=None):
        value = self.get(key, default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise self.fail(f"{key} must be a finite number, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(f"{key} must be >= {minimum}, got {value}")
        return float(value)

    def array(self, entry, key, dtype):
        value = entry.get(key)
        if value is None:
            raise self.fail(f"has no '{key}' array")
        self._spend(key, _declared_size(value))
        try:
            arr = np.array(value, dtype=np.float64)
        except (ValueError, TypeError, OverflowError, RecursionError):
            raise self.fail(f"'{key}' is not a rectangular array of numbers") from None
        problem = weight_problem(arr)
        if problem:
            raise self.fail(f"'{key}' {problem}")
        arr = arr.astype(dtype)
        arr.flags.writeable = False
        return arr


    def _spend(self, key, size):
        """Refuse an array beyond the limits before it is converted (limits.py)."""
        if size > limits.MAX_TENSOR_ELEMENTS:
            raise self.fail(f"'{key}' holds {size} values, more than {limits.MAX_TENSOR_ELEMENTS} per tensor "
                            "(limits.MAX_TENSOR_ELEMENTS)")
        self.budget[0] += size
        if self.budget[0] > limits.MAX_MODEL_ELEMENTS:
            raise self.fail(f"'{key}' brings the weights of the file to {self.budget[0]} values, more than "
                            f"{limits.MAX_MODEL_ELEMENTS} (limits.MAX_MODEL_ELEMENTS)")


def _declared_size(value) -> int:
    """The element count of a nested list, from its first entries (the shape np.array will find if
    it is rectangular; a ragged one is refused by the conversion)."""
    size = 1
    while isinstance(value, list):
        size *= len(value)
        value = value[0] if value else None
    return size


def _keras_shape(value, reader, key) -> tuple:
    """A shape of the file (batch first; 4-d channels-first) as nnbuild's channels-last, no batch."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        value = value[0]  # a Functional InputLayer: a list of one shape
    if (not isinstance(value, list) or len(value) < 2
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in value[1:])):
        raise reader.fail(f"{key} {_show(value)} is not [batch, dimension, ...] of positive integers")
    dims = tuple(value[1:])
    return (dims[1], dims[2], dims[0]) if len(dims) == 3 else dims


def _activation(reader) -> str:
    act = reader.get("activation", "linear")
    if act not in ACTIVATIONS:
        raise reader.fail(f"activation {_show(act)} is not one of acetone-nnet's ({', '.join(ACTIVATIONS)})")
    return act


def _padding(reader, shape, kernel, stride) -> tuple:
    """'valid', 'same' (TF's split, extra cell bottom/right) or acetone-nnet's explicit
    [top, left, bottom, right] -> (top, bottom, left, right)."""
    pad = reader.get("padding", "valid")
    if pad == "valid":
        return (0, 0, 0, 0)
    if pad == "same":
        if len(shape) != 3:
            raise reader.fail(f"'same' padding needs a (height, width, channels) input, got {shape}")
        return same_padding(shape[0], kernel[0], stride) + same_padding(shape[1], kernel[1], stride)
    if (isinstance(pad, list) and len(pad) == 4
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pad)):
        return (pad[0], pad[2], pad[1], pad[3])
    raise reader.fail(f"padding {_show(pad)} is not 'valid', 'same' or [top, left, bottom, right]")


def _layer(entry, cls, reader, shapes, dtype, index) -> List:
    """IR layers of one ACETONE layer (its last one computes the layer's output)."""
    name = reader.layer
    shape = shapes[0]
    if cls not in _MERGE and cls != "Concatenate" and len(shapes) != 1:
        raise reader.fail(f"{cls} takes one input, got {len(shapes)} (prev_layer_idx)")
    act = _activation(reader) if cls in ("Dense", "Conv2D") else "linear"
    extra = []
    if act == "leaky_relu":
        act = "linear"
        extra = [Unary(name=f"{name}_leaky_relu", op="leaky_relu", params=(LEAKY_SLOPE,), source_type=cls)]
    if cls == "Dense":
        if len(shape) != 1:
            raise reader.fail(f"Dense reads a flat vector, got a tensor of shape {shape} (add a Flatten)")
        w = reader.array(entry, "weights", dtype)
        units = reader.int("units")
        if w.shape[-2:] != (shape[0], units) or any(d != 1 for d in w.shape[:-2]):
            raise reader.fail(f"weights shape {w.shape} is not [1, 1, {shape[0]}, {units}] "
                              f"(inputs {shape[0]}, units {units})")
        b = reader.array(entry, "biases", dtype)
        if b.shape != (units,):
            raise reader.fail(f"biases shape {b.shape} is not ({units},)")
        kernel = w.reshape(shape[0], units)
        kernel.flags.writeable = False
        return [Dense(name=name, kernel=kernel, bias=b, activation=act)] + extra
    if cls == "Conv2D":
        if len(shape) != 3:
            raise reader.fail(f"Conv2D needs a (channels, height, width) input, got {shape} (channels-last)")
        kh, kw = reader.get("kernel_size", required=True) if isinstance(reader.get("kernel_size"), list) \
            else [reader.int("kernel_size")] * 2
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (kh, kw)):
            raise reader.fail(f"kernel_size {_show(reader.get('kernel_size'))} is not 2 integers >= 1")
        stride = reader.square("strides", [1, 1])
        if reader.square("dilation_rate", [1, 1]) != 1:
            raise reader.fail("dilation_rate > 1 is refused: acetone-nnet's reference ignores it and its "
                              "'same' padding for it differs from Keras'")
        if reader.int("groups", 1) != 1:
            raise reader.fail("groups > 1 is refused (acetone-nnet's JSON reader has no groups)")
        filters = reader.int("filters")
        w = reader.array(entry, "weights", dtype)
        if w.shape != (shape[2], kh, kw, filters):
            raise reader.fail(f"weights shape {w.shape} is not [in {shape[2]}, kh {kh}, kw {kw}, "
                              f"filters {filters}]")
        b = reader.array(entry, "biases", dtype)
        if b.shape != (filters,):
            raise reader.fail(f"biases shape {b.shape} is not ({filters},)")
        kernel = np.transpose(w, (1, 2, 0, 3)).copy()
        kernel.flags.writeable = False
        pads = _padding(reader, shape, (kh, kw), stride)
        return [Conv2D(name=name, kernel=kernel, bias=b, strides=(stride, stride), padding=pads,
                       activation=act)] + extra
    if cls in ("MaxPooling2D", "AveragePooling2D"):
        if len(shape) != 3:
            raise reader.fail(f"{cls} needs a (channels, height, width) input, got {shape} (channels-last)")
        pool = reader.square("pool_size", [2, 2])
        stride = reader.square("strides", [pool, pool])
        pads = _padding(reader, shape, (pool, pool), stride)
        if any(pads):
            raise reader.fail(f"{cls} with padding that adds cells {pads} is refused (acetone-nnet pads with "
                              "zeros that count in the window, Keras does not)")
        return [Pool2D(name=name, mode="max" if cls == "MaxPooling2D" else "avg", pool=(pool, pool),
                       strides=(stride, stride), source_type=cls)]
    if cls == "Flatten":
        return [Flatten(name=name)]
    if cls == "Reshape":
        target = reader.get("target_shape", required=True)
        if (not isinstance(target, list) or not target
                or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in target)):
            raise reader.fail(f"target_shape {_show(target)} is not positive integers")
        return [Reshape(name=name, target_shape=tuple(target))]
    if cls == "ZeroPadding2D":
        pad = reader.get("padding", 1)
        ok = (lambda vs: all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vs))
        if isinstance(pad, int) and ok([pad]):
            pads = (pad,) * 4
        elif isinstance(pad, list) and len(pad) == 2 and ok(pad):
            pads = (pad[0], pad[0], pad[1], pad[1])
        elif isinstance(pad, list) and len(pad) == 2 and all(isinstance(p, list) and len(p) == 2 and ok(p)
                                                              for p in pad):
            pads = (pad[0][0], pad[0][1], pad[1][0], pad[1][1])
        else:
            raise reader.fail(f"padding {_show(pad)} is not an integer >= 0, 2 or 2 pairs of them")
        return [ZeroPadding2D(name=name, padding=pads)]
    if cls == "BatchNormalization":
        n = shape[-1]
        arrays = [reader.array(entry, key, dtype) for key in ("gamma", "beta", "moving_mean", "moving_var")]
        if any(a.shape != (n,) for a in arrays):
            raise reader.fail(f"gamma, beta, moving_mean, moving_var must each have {n} values (channels), "
                              f"got {[a.shape for a in arrays]}")
        return [BatchNorm(name=name, gamma=arrays[0], beta=arrays[1], mean=arrays[2], variance=arrays[3],
                          epsilon=reader.float("epsilon", 1e-3, minimum=0))]
    if cls == "Concatenate":
        if len(shapes) < 2:
            raise reader.fail(f"Concatenate needs at least 2 inputs, got {len(shapes)}")
        axis = reader.get("axis", -1)
        rank = len(shape)
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= (axis if axis < 0 else axis - 1) < rank:
            raise reader.fail(f"axis {_show(axis)} is out of range for rank-{rank} inputs (Keras axis, batch 0)")
        return [Concatenate(name=name, axis=axis % rank if axis < 0 else axis - 1)]
    if cls in _MERGE:
        if len(shapes) < 2 or (cls == "Subtract" and len(shapes) != 2):
            raise reader.fail(f"{cls} needs {'2' if cls == 'Subtract' else 'at least 2'} inputs, got {len(shapes)}")
        if any(s != shape for s in shapes):
            raise reader.fail(f"{cls} inputs of different shapes {list(shapes)} are refused "
                              "(acetone-nnet broadcasts them in its channels-first order)")
        if cls == "Add":
            return [Add(name=name)]
        return [Elementwise(name=name, op=_MERGE[cls], source_type=cls)]
    raise reader.fail(f"{cls} is not supported (supported: {', '.join(SUPPORTED_LAYERS)})")


def _dtype(first, path):
    dtype = first.get("dtype", "float32")
    if isinstance(dtype, dict):  # a Keras 3 DTypePolicy
        dtype = (dtype.get("config") or {}).get("name")
    if dtype == "float32":
        return np.float32
    if dtype == "float64":
        return np.float64
    raise _err(f"model dtype {_show(dtype)} is not supported (float32, float64)", path, first.get("name"))


def load(path) -> Model:
    """Read an ACETONE JSON file into an IR model."""
    doc = files.read_json(path, "ACETONE JSON", max_bytes=MAX_BYTES)
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("layers"), list) or not config["layers"]:
        raise _err("not an ACETONE JSON model: no config.layers list", path)
    data_format = config.get("data_format")
    if data_format != "channels_last":
        raise _err(f"data_format {_show(data_format)} is not supported (channels_last, as acetone-nnet "
                   "writes)", path)
    entries = config["layers"]
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict) \
                or not isinstance(entry.get("class_name"), str):
            raise _err(f"layer entry {i} is not {{class_name, config}}", path, f"#{i}")
    first = entries[0]["config"]
    dtype = _dtype(first, path)
    budget = [0]
    reader = _Reader(path, str(first.get("name") or "input"), first, budget)
    input_shape = _keras_shape(first.get("input_shape"), reader, "input_shape")
    size = reader.int("size")
    if size != int(np.prod(input_shape)):
        raise reader.fail(f"size {size} is not the input shape's {int(np.prod(input_shape))} elements")
    input_name = "input"
    tensors = {0: input_name}       # ACETONE idx -> the IR tensor holding that layer's output
    shapes = {input_name: input_shape}
    layers, edges, ignored, names = [], {}, [], {input_name}
    for position, entry in enumerate(entries[1:], start=1):
        cfg, cls = entry["config"], entry["class_name"]
        name = c_identifier(str(cfg.get("name") or f"layer_{position}"))
        reader = _Reader(path, name, cfg, budget)
        idx = reader.int("idx", position, minimum=1)
        prev = reader.get("prev_layer_idx", [idx - 1])
        if (not isinstance(prev, list) or not prev
                or any(isinstance(p, bool) or not isinstance(p, int) for p in prev)):
            raise reader.fail(f"prev_layer_idx {_show(prev)} is not a list of layer indices")
        missing = [p for p in prev if p not in tensors]
        if missing:
            raise reader.fail(f"prev_layer_idx {prev} names layer(s) {missing} that no earlier layer is "
                              "(layers must be in order, the input is 0)")
        if idx in tensors:
            raise reader.fail(f"idx {idx} is used twice")
        srcs = [tensors[p] for p in prev]
        if cls == "Dropout":
            if len(srcs) != 1:
                raise reader.fail(f"Dropout takes one input, got {len(srcs)}")
            tensors[idx] = srcs[0]
            ignored.append({"name": name, "type": cls, "reason": "identity at inference"})
            continue
        if name in names:
            raise reader.fail("duplicate layer name")
        in_shapes = [shapes[s] for s in srcs]
        try:
            produced = _layer(entry, cls, reader, in_shapes, dtype, idx)
        except ValueError as exc:  # an IR layer refused its parameters
            raise reader.fail(f"{cls} {exc}") from None
        for layer in produced:
            if layer.name in names and layer.name != name:
                raise reader.fail(f"the name '{layer.name}' is already taken")
            try:
                shapes[layer.name] = tuple(int(d) for d in layer.output_shape(*[shapes[s] for s in srcs]))
            except ValueError as exc:
                raise reader.fail(f"{cls}: {exc}") from None
            names.add(layer.name)
            layers.append(layer)
            edges[layer.name] = tuple(srcs)
            srcs = [layer.name]
        declared = cfg.get("output_shape")
        if declared is not None:
            want = _keras_shape(declared, reader, "output_shape")
            if want != shapes[srcs[0]]:
                raise reader.fail(f"output_shape {_show(declared)} (channels-first) does not match the computed "
                                  f"{shapes[srcs[0]]} (channels-last)")
        tensors[idx] = srcs[0]
    if not layers:
        raise _err("model has no computing layer", path)
    chain = all(edges[l.name] == ((layers[k - 1].name,) if k else (input_name,)) for k, l in enumerate(layers))
    consumers = {s for srcs in edges.values() for s in srcs}
    outputs = [l.name for l in layers if l.name not in consumers]
    if outputs != [layers[-1].name]:
        raise _err(f"model has {len(outputs)} outputs ({', '.join(outputs)}); exactly one, the last layer, "
                   "is supported", path)
    meta = {"format": "acetone-json", "keras_version": str(doc.get("keras_version", "unknown")),
            "data_format": data_format, "dtype": np.dtype(dtype).name, "source_files": [str(path)],
            "ignored_layers": ignored}
    return Model(name=c_identifier(Path(path).stem), input_shape=input_shape, layers=layers,
                 source_files=(str(path),), meta=meta, edges=None if chain else edges, input_name=input_name)
