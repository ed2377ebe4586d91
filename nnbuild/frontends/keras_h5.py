"""Keras HDF5 front-end (MLPs and CNNs), read with h5py only: never imports TensorFlow or Keras.

Accepts (see docs formats.md section 1):
* a full-model `.h5` (`model.save`) from Keras 1.2.1, 2.x, tf_keras or Keras 3 (legacy h5):
  root attribute `model_config` + group `model_weights`;
* the Keras2C pair `architecture.json` (`model.to_json()`) + `weights.h5` (`save_weights`,
  the `model_weights` layout at the file root).

Supported layers: see SUPPORTED_LAYERS (Dropout is the identity at inference: dropped and recorded
in meta["ignored_layers"]). Data is channels-last. Models: Sequential (list or {"layers": [...]}
config) and Functional/Model graphs (a DAG with one input and one output; merge layers Add and
Concatenate; each layer called once). A chain loads as a chain Model (edges None); anything else
gets Model.edges. Every failure is a one-line NNBuildError naming the file and, where there is
one, the layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir.graph import (ACTIVATIONS, Activation, Add, BatchNorm, Concatenate, Conv2D, Dense,
                              Flatten, Model, Pool2D, Reshape, ZeroPadding2D, same_padding)

try:  # h5py is a declared dependency; import errors surface as one line at load time.
    import h5py
except ImportError:  # pragma: no cover
    h5py = None

#: Layer classes this front-end turns into IR layers (or drops, for inference-only no-ops).
SUPPORTED_LAYERS = ("Activation", "Add", "AveragePooling2D", "BatchNormalization", "Concatenate",
                    "Conv2D", "Dense", "Dropout", "Flatten", "InputLayer", "MaxPooling2D", "ReLU",
                    "Reshape", "Softmax", "ZeroPadding2D")
#: Layers that are the identity at inference time.
_INFERENCE_NOOPS = ("Dropout",)


# --------------------------------------------------------------------------- small helpers


def _err(message: str, path, layer: Optional[str] = None) -> NNBuildError:
    """A one-line error (newlines from h5py/json messages folded) naming file and layer."""
    message = " ".join(str(message).split())
    return NNBuildError(message, path=path, item=f"layer '{layer}'" if layer else None)


def _text(value) -> str:
    """An HDF5 attribute (str, bytes, numpy scalar) as str: h5py 2 gives bytes, h5py 3 str."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    return str(value)


def _name_list(attrs, key: str) -> Optional[List[str]]:
    """A list-of-names attribute, joining the `key0`, `key1`, ... pieces Keras writes when the
    attribute exceeds the 64 KiB HDF5 header limit. None if absent."""
    if key in attrs:
        chunks = [attrs[key]]
    else:
        chunks = []
        while f"{key}{len(chunks)}" in attrs:
            chunks.append(attrs[f"{key}{len(chunks)}"])
        if not chunks:
            return None
    names = []
    for chunk in chunks:
        names.extend(_text(v) for v in np.atleast_1d(np.asarray(chunk)).ravel() if _text(v) != "")
    return names


def _open_h5(path):
    """Open read-only; h5py's OSError (truncated, corrupt, not HDF5) becomes a one-line error."""
    if h5py is None:  # pragma: no cover
        raise _err("h5py is required to read Keras HDF5 files (pip install h5py)", path)
    try:
        return h5py.File(str(path), "r")
    except OSError as exc:
        raise _err(f"cannot read HDF5 (truncated or corrupt): {exc}", path) from None


def _json(text: str, path, what: str):
    """Parse JSON, turning a syntax error into a one-line error naming the file."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _err(f"{what} is not valid JSON ({exc})", path) from None


# --------------------------------------------------------------------------- model config


def _layer_name(entry: dict) -> str:
    """Layer name: config.name (all Keras versions), else the Functional entry's name."""
    cfg = entry.get("config") or {}
    return str(cfg.get("name") or entry.get("name") or "?")


def _inbound_names(entry: dict) -> List[str]:
    """Names of the layers feeding a Functional layer (Keras 1/2 lists and Keras 3 dicts)."""
    names: List[str] = []

    def walk(obj):
        if isinstance(obj, dict):
            cfg = obj.get("config")
            hist = cfg.get("keras_history") if isinstance(cfg, dict) else None
            if hist:  # Keras 3: {"class_name": "__keras_tensor__", "config": {"keras_history": ...}}
                names.append(str(hist[0]))
                return
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            # Keras 1/2 inbound tensor: [layer_name, node_index, tensor_index(, kwargs)]
            if len(obj) >= 3 and isinstance(obj[0], str) and isinstance(obj[1], int):
                names.append(obj[0])
                return
            for v in obj:
                walk(v)

    walk(entry.get("inbound_nodes", []))
    return names


def _node_count(entry: dict) -> int:
    """How many times a Functional layer is called (Keras 2 lists / Keras 3 dicts, one per call)."""
    return len(entry.get("inbound_nodes") or [])


def _end_names(value) -> List[str]:
    """Layer names of input_layers / output_layers: [[name, 0, 0], ...] or one [name, 0, 0]."""
    if not value:
        return []
    if isinstance(value, list) and len(value) >= 1 and isinstance(value[0], str):
        return [value[0]]
    return [str(v[0]) for v in value]


def _graph_layers(config: dict, path) -> Tuple[List[dict], dict, Optional[str]]:
    """(entries, {layer: inbound names}, output layer name) of a Functional/Model config."""
    entries = list(config.get("layers") or [])
    inbound = {}
    for entry in entries:
        name = _layer_name(entry)
        if _node_count(entry) > 1:
            raise _err(f"layer is called {_node_count(entry)} times (shared layers are not supported)",
                       path, name)
        inbound[name] = _inbound_names(entry)
    for key in ("input_layers", "output_layers"):
        ends = _end_names(config.get(key))
        if config.get(key) is not None and len(ends) != 1:
            raise _err(f"model has {len(ends)} {key.split('_')[0]}s; exactly one is supported", path)
    outputs = _end_names(config.get("output_layers"))
    return entries, inbound, (outputs[0] if outputs else None)


def _layer_entries(model_config, path) -> Tuple[str, List[dict], dict, Optional[dict], Optional[str]]:
    """(model class, layer entries in config order, the model-level config dict,
    {layer: inbound names} or None for a Sequential, output layer name or None)."""
    if not isinstance(model_config, dict) or "class_name" not in model_config:
        raise _err("model config has no 'class_name' (not a Keras model config)", path)
    cls = model_config["class_name"]
    config = model_config.get("config")
    if cls == "Sequential":
        if isinstance(config, list):  # Keras 1.x and 2.0/2.1
            return cls, config, {}, None, None
        if isinstance(config, dict) and isinstance(config.get("layers"), list):
            return cls, config["layers"], config, None, None
        raise _err("Sequential config has no layer list", path)
    if cls in ("Functional", "Model"):
        if not isinstance(config, dict):
            raise _err(f"{cls} config is not an object", path)
        entries, inbound, output = _graph_layers(config, path)
        return cls, entries, config, inbound, output
    raise _err(f"model class '{cls}' is not supported (supported: Sequential, Functional)", path)


def _shape_from(cfg: dict) -> Optional[Tuple]:
    """A layer's declared input shape without the batch axis (None if it declares none)."""
    for key in ("batch_input_shape", "batch_shape"):
        if cfg.get(key) is not None:
            return tuple(cfg[key][1:])
    if cfg.get("input_shape") is not None:
        return tuple(cfg["input_shape"])
    if cfg.get("input_dim") is not None:
        return (cfg["input_dim"],)
    return None


def _activation_name(value, path, layer: str, cls: str) -> str:
    """A supported activation name; Keras 3 may serialise it as a dict."""
    if value is None:
        value = "linear"
    if isinstance(value, dict):
        inner = value.get("config")
        value = inner if isinstance(inner, str) else (inner or {}).get("name", value.get("class_name"))
    if value not in ACTIVATIONS:
        raise _err(f"activation '{value}' of {cls} is not supported "
                   f"(supported: {', '.join(ACTIVATIONS)})", path, layer)
    return str(value)


# --------------------------------------------------------------------------- weights


def _weights_root(f, path):
    """The group holding one subgroup per layer: `model_weights` in a full model, else the root."""
    if "layer_names" not in f.attrs and not any(k.startswith("layer_names") for k in f.attrs):
        if "model_weights" in f:
            return f["model_weights"]
        if "layers" in f and isinstance(f["layers"], h5py.Group):
            raise _err("Keras 3 weights layout (layers/*/vars) is not supported; "
                       "save with model.save('m.h5') or Keras 2 save_weights", path)
    return f


def _layer_weights(root, layer: str, wpath) -> List[Tuple[str, np.ndarray]]:
    """(name, array) of a layer's weights in `weight_names` order, resolved relative to its group."""
    if layer not in root or not isinstance(root[layer], h5py.Group):
        raise _err(f"missing weight group '{layer}'", wpath, layer)
    group = root[layer]
    names = _name_list(group.attrs, "weight_names")
    if names is None:
        raise _err(f"weight group '{group.name}' has no weight_names attribute", wpath, layer)
    out = []
    for name in names:
        obj = group.get(name)
        if not isinstance(obj, h5py.Dataset):
            raise _err(f"missing weight dataset '{group.name.lstrip('/')}/{name}'", wpath, layer)
        try:
            arr = np.array(obj[()])
        except OSError as exc:
            raise _err(f"cannot read HDF5 (truncated or corrupt): {exc}", wpath, layer) from None
        arr.flags.writeable = False  # IR weights are immutable, like the frozen layers
        out.append((name, arr))
    return out


# --------------------------------------------------------------------------- layer building


def _dense(entry: dict, prev_shape, prev_name, root, cpath, wpath) -> Dense:
    """IR Dense from a Keras Dense config + weights, checking every shape against the chain."""
    cfg = entry.get("config") or {}
    name = _layer_name(entry)
    units = cfg.get("units", cfg.get("output_dim"))
    use_bias = bool(cfg.get("use_bias", cfg.get("bias", True)))
    act = _activation_name(cfg.get("activation"), cpath, name, "Dense")
    weights = _layer_weights(root, name, wpath)
    want = 2 if use_bias else 1
    if len(weights) < want:
        missing = "bias" if len(weights) == 1 else "kernel"
        raise _err(f"missing weight dataset ({missing}): weight_names lists {len(weights)} "
                   f"dataset(s), Dense with use_bias={use_bias} needs {want}", wpath, name)
    if len(weights) > want:
        raise _err(f"{len(weights)} weight datasets for a Dense with use_bias={use_bias} "
                   f"(expected {want})", wpath, name)
    (kname, kernel), bias = weights[0], (weights[1][1] if use_bias else None)
    if kernel.ndim != 2:
        raise _err(f"kernel '{kname}' has shape {kernel.shape}, expected 2-D [inputs, units]", wpath, name)
    if prev_shape is not None and kernel.shape[0] != prev_shape[-1]:
        src = f"layer '{prev_name}'" if prev_name else "the model input"
        raise _err(f"kernel shape {kernel.shape} does not match the input size {prev_shape[-1]} "
                   f"from {src} (wrong shapes)", wpath, name)
    if units is not None and kernel.shape[1] != int(units):
        raise _err(f"kernel shape {kernel.shape} does not match units={units}", wpath, name)
    if bias is not None and bias.shape != (kernel.shape[1],):
        raise _err(f"bias shape {bias.shape} does not match units={kernel.shape[1]}", wpath, name)
    return Dense(name=name, kernel=kernel, bias=bias, activation=act, source_type="Dense")


def _ints(value, n, what, path, layer) -> Tuple[int, ...]:
    """An int or a list of n ints (Keras accepts both for kernel_size, strides, ...)."""
    if isinstance(value, int):
        return (value,) * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise _err(f"{what} {value!r} is not an int or {n} ints", path, layer)


def _channels_last(cfg, cls, path, layer):
    fmt = cfg.get("data_format") or "channels_last"
    if fmt != "channels_last":
        raise _err(f"{cls} with data_format='{fmt}' is not supported (channels_last only)", path, layer)


def _padding_of(cfg, cls, in_shape, window, strides, dilation, path, layer) -> Tuple[int, int, int, int]:
    """Keras 'valid' -> no pads; 'same' -> TF's split, extra cell at the bottom/right."""
    mode = str(cfg.get("padding", "valid")).lower()
    if mode == "valid":
        return (0, 0, 0, 0)
    if mode == "same":
        if len(in_shape) != 3:
            raise _err(f"{cls} needs a (height, width, channels) input, got shape {in_shape}", path, layer)
        t, b = same_padding(in_shape[0], window[0], strides[0], dilation[0])
        l, r = same_padding(in_shape[1], window[1], strides[1], dilation[1])
        return (t, b, l, r)
    raise _err(f"{cls} padding '{mode}' is not supported (valid, same)", path, layer)


def _weights_by_count(root, name, wpath, cls, counts) -> List[np.ndarray]:
    """The layer's arrays, checking their number is one of `counts`."""
    weights = [a for _, a in _layer_weights(root, name, wpath)]
    if len(weights) not in counts:
        raise _err(f"{len(weights)} weight datasets for a {cls} (expected "
                   f"{' or '.join(map(str, counts))})", wpath, name)
    return weights


def _conv2d(entry, in_shape, root, cpath, wpath) -> Conv2D:
    cfg, name = entry.get("config") or {}, _layer_name(entry)
    _channels_last(cfg, "Conv2D", cpath, name)
    if int(cfg.get("groups", 1) or 1) != 1:
        raise _err(f"Conv2D with groups={cfg.get('groups')} is not supported", cpath, name)
    ksize = _ints(cfg.get("kernel_size"), 2, "kernel_size", cpath, name)
    strides = _ints(cfg.get("strides", 1), 2, "strides", cpath, name)
    dilation = _ints(cfg.get("dilation_rate", 1), 2, "dilation_rate", cpath, name)
    if max(strides) > 1 and max(dilation) > 1:
        raise _err("Conv2D with both strides and dilation_rate > 1 is not defined by Keras", cpath, name)
    use_bias = bool(cfg.get("use_bias", True))
    weights = _weights_by_count(root, name, wpath, f"Conv2D with use_bias={use_bias}", (2,) if use_bias else (1,))
    kernel, bias = weights[0], (weights[1] if use_bias else None)
    if kernel.ndim != 4 or tuple(kernel.shape[:2]) != ksize:
        raise _err(f"kernel shape {kernel.shape} does not match kernel_size={list(ksize)} "
                   "(expected [kh, kw, in, filters])", wpath, name)
    if cfg.get("filters") is not None and kernel.shape[3] != int(cfg["filters"]):
        raise _err(f"kernel shape {kernel.shape} does not match filters={cfg['filters']}", wpath, name)
    if bias is not None and bias.shape != (kernel.shape[3],):
        raise _err(f"bias shape {bias.shape} does not match filters={kernel.shape[3]}", wpath, name)
    act = _activation_name(cfg.get("activation"), cpath, name, "Conv2D")
    pads = _padding_of(cfg, "Conv2D", in_shape, ksize, strides, dilation, cpath, name)
    return Conv2D(name=name, kernel=kernel, bias=bias, strides=strides, dilation=dilation,
                  padding=pads, activation=act, source_type="Conv2D")


def _pool2d(entry, cls, in_shape, cpath) -> Pool2D:
    cfg, name = entry.get("config") or {}, _layer_name(entry)
    _channels_last(cfg, cls, cpath, name)
    pool = _ints(cfg.get("pool_size", 2), 2, "pool_size", cpath, name)
    strides = _ints(cfg.get("strides") or pool, 2, "strides", cpath, name)
    pads = _padding_of(cfg, cls, in_shape, pool, strides, (1, 1), cpath, name)
    return Pool2D(name=name, mode="max" if cls == "MaxPooling2D" else "avg", pool=pool,
                  strides=strides, padding=pads, source_type=cls)


def _zeropad(entry, cpath) -> ZeroPadding2D:
    cfg, name = entry.get("config") or {}, _layer_name(entry)
    _channels_last(cfg, "ZeroPadding2D", cpath, name)
    pad = cfg.get("padding", 1)
    if isinstance(pad, int):
        pads = (pad,) * 4
    elif isinstance(pad, (list, tuple)) and len(pad) == 2 and all(isinstance(v, int) for v in pad):
        pads = (pad[0], pad[0], pad[1], pad[1])
    elif (isinstance(pad, (list, tuple)) and len(pad) == 2
          and all(isinstance(v, (list, tuple)) and len(v) == 2 for v in pad)):
        pads = (pad[0][0], pad[0][1], pad[1][0], pad[1][1])
    else:
        raise _err(f"ZeroPadding2D padding {pad!r} is not understood", cpath, name)
    return ZeroPadding2D(name=name, padding=tuple(int(v) for v in pads))


def _axis(value, rank, cls, path, layer) -> int:
    """A Keras axis (batch axis = 0, negative from the end) as a 0-based axis without the batch."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int):
        raise _err(f"{cls} axis {value!r} is not supported (one axis)", path, layer)
    axis = value + rank if value < 0 else value - 1
    if not 0 <= axis < rank:
        raise _err(f"{cls} axis {value} is out of range for a rank-{rank} input", path, layer)
    return axis


def _batchnorm(entry, in_shape, root, cpath, wpath) -> BatchNorm:
    cfg, name = entry.get("config") or {}, _layer_name(entry)
    axis = _axis(cfg.get("axis", -1), len(in_shape), "BatchNormalization", cpath, name)
    if axis != len(in_shape) - 1:
        raise _err(f"BatchNormalization over axis {cfg.get('axis')} is not supported "
                   "(the last, channels axis only)", cpath, name)
    scale, center = bool(cfg.get("scale", True)), bool(cfg.get("center", True))
    want = 2 + scale + center
    arrays = _weights_by_count(root, name, wpath, f"BatchNormalization with scale={scale}, center={center}", (want,))
    n = in_shape[-1]
    gamma = arrays.pop(0) if scale else np.ones(n, np.float32)
    beta = arrays.pop(0) if center else np.zeros(n, np.float32)
    mean, var = arrays
    for label, arr in (("gamma", gamma), ("beta", beta), ("moving_mean", mean), ("moving_variance", var)):
        if arr.shape != (n,):
            raise _err(f"{label} has shape {arr.shape}, the input has {n} channels", wpath, name)
    return BatchNorm(name=name, gamma=gamma, beta=beta, mean=mean, variance=var,
                     epsilon=float(cfg.get("epsilon", 1e-3)))


def _relu_layer(entry, cpath) -> Activation:
    """keras.layers.ReLU with its default arguments is relu; anything else is refused."""
    cfg, name = entry.get("config") or {}, _layer_name(entry)
    if cfg.get("max_value") is not None or float(cfg.get("negative_slope", 0) or 0) != 0 \
            or float(cfg.get("threshold", 0) or 0) != 0:
        raise _err("ReLU with max_value, negative_slope or threshold is not supported", cpath, name)
    return Activation(name=name, activation="relu", source_type="ReLU")


def _layer(entry, in_shapes, prev_names, root, cpath, wpath):
    """The IR layer of one Keras layer entry, given its input shapes."""
    cls = entry.get("class_name")
    cfg = entry.get("config") or {}
    name = _layer_name(entry)
    merge = cls in ("Add", "Concatenate")
    if not merge and len(in_shapes) != 1:
        raise _err(f"{cls} takes one input, but is fed by {len(in_shapes)} "
                   f"({', '.join(n or 'the model input' for n in prev_names)})", cpath, name)
    shape = in_shapes[0]
    if cls == "Dense":
        return _dense(entry, shape, prev_names[0], root, cpath, wpath)
    if cls == "Activation":
        act = _activation_name(cfg.get("activation"), cpath, name, "Activation")
        return Activation(name=name, activation=act, source_type="Activation")
    if cls == "ReLU":
        return _relu_layer(entry, cpath)
    if cls == "Softmax":
        if _axis(cfg.get("axis", -1), len(shape), cls, cpath, name) != len(shape) - 1:
            raise _err("Softmax over an axis other than the last is not supported", cpath, name)
        return Activation(name=name, activation="softmax", source_type="Softmax")
    if cls == "Conv2D":
        return _conv2d(entry, shape, root, cpath, wpath)
    if cls in ("MaxPooling2D", "AveragePooling2D"):
        return _pool2d(entry, cls, shape, cpath)
    if cls == "ZeroPadding2D":
        return _zeropad(entry, cpath)
    if cls == "BatchNormalization":
        return _batchnorm(entry, shape, root, cpath, wpath)
    if cls == "Flatten":
        _channels_last(cfg, cls, cpath, name)
        return Flatten(name=name)
    if cls == "Reshape":
        target = tuple(cfg.get("target_shape") or ())
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1]))
            target = tuple(int(np.prod(shape)) // max(known, 1) if d == -1 else d for d in target)
        return Reshape(name=name, target_shape=tuple(int(d) for d in target))
    if cls == "Add":
        return Add(name=name)
    if cls == "Concatenate":
        return Concatenate(name=name, axis=_axis(cfg.get("axis", -1), len(shape), cls, cpath, name))
    raise _err(f"{cls} is not supported (supported: {', '.join(SUPPORTED_LAYERS)})", cpath, name)


def _input_shape(entries, root, cpath, wpath, top_config) -> Tuple[int, ...]:
    """The model input shape: the first layer's declared shape, Keras 3 build_input_shape, or the
    first Dense kernel."""
    build = top_config.get("build_input_shape")  # Keras 3 Sequential without InputLayer
    input_shape = tuple(build[1:]) if build else None
    entry = entries[0]
    cls, name = entry.get("class_name"), _layer_name(entry)
    input_shape = _shape_from(entry.get("config") or {}) or input_shape
    if input_shape is None and cls == "Dense":  # no declared shape: the kernel says it
        input_shape = (int(_layer_weights(root, name, wpath)[0][1].shape[0]),)
    if input_shape is None:
        raise _err("cannot determine the input shape (no batch_input_shape, "
                   "batch_shape or InputLayer)", cpath, name)
    if any(not isinstance(d, int) or d <= 0 for d in input_shape):
        raise _err(f"input shape {input_shape} is not fully known", cpath, name)
    return tuple(int(d) for d in input_shape)


def _build(entries, root, cpath, wpath, top_config, inbound=None, output=None):
    """(input shape, IR layers, ignored layers, edges or None, input tensor name), in order.

    `inbound` (Functional) gives each layer's input layer names; without it each layer reads the
    previous one (Sequential). Dropout and InputLayer make no IR layer: their output is renamed to
    their input. Layers the output does not depend on are dropped."""
    if not entries:
        raise _err("model has no layers", cpath)
    input_shape = _input_shape(entries, root, cpath, wpath, top_config)
    first = entries[0]
    input_name = _layer_name(first) if first.get("class_name") == "InputLayer" else "input"
    alias = {}                       # dropped layer name -> the tensor it passes on
    shapes = {input_name: input_shape}
    layers, sources, ignored = [], {}, []
    previous = input_name
    for i, entry in enumerate(entries):
        cls, name = entry.get("class_name"), _layer_name(entry)
        if cls == "InputLayer":
            if i != 0:
                raise _err("InputLayer must be the first layer (one model input only)", cpath, name)
            continue
        if name in shapes or name in alias:
            raise _err("duplicate layer name", cpath, name)
        if inbound is None:
            srcs = [previous]
        else:
            srcs = [alias.get(n, n) for n in inbound.get(name, [])]
            if not srcs and i == 0:
                srcs = [input_name]
            missing = [n for n in srcs if n not in shapes]
            if missing or not srcs:
                raise _err(f"reads {missing or 'nothing'}, which no earlier layer produces "
                           "(layers must be in topological order with one model input)", cpath, name)
        if cls in _INFERENCE_NOOPS:
            if len(srcs) != 1:
                raise _err(f"{cls} takes one input, but is fed by {len(srcs)}", cpath, name)
            ignored.append({"name": name, "type": cls, "reason": "identity at inference"})
            alias[name] = srcs[0]
            previous = srcs[0]
            continue
        shown = [None if s == input_name else s for s in srcs]
        layer = _layer(entry, [shapes[s] for s in srcs], shown, root, cpath, wpath)
        try:
            shapes[name] = tuple(int(d) for d in layer.output_shape(*[shapes[s] for s in srcs]))
        except ValueError as exc:
            src = ", ".join(f"layer '{s}'" if s != input_name else "the model input" for s in srcs)
            raise _err(f"{exc} (input from {src}; inconsistent shapes)", cpath, name) from None
        layers.append(layer)
        sources[name] = tuple(srcs)
        previous = name
    if not layers:
        raise _err("model has no computing layer", cpath)
    out = alias.get(output, output) if output else layers[-1].name
    if out not in sources:
        raise _err(f"output '{output}' is not a computing layer of the model", cpath)
    layers, sources = _prune(layers, sources, out, ignored)
    chain = all(sources[l.name] == ((layers[k - 1].name,) if k else (input_name,))
                for k, l in enumerate(layers))
    return input_shape, layers, ignored, (None if chain else sources), input_name


def _prune(layers, sources, out, ignored):
    """Keep the layers `out` depends on (in order, `out` last); record the others as ignored."""
    needed, work = set(), [out]
    while work:
        name = work.pop()
        if name in sources and name not in needed:
            needed.add(name)
            work.extend(sources[name])
    kept = [l for l in layers if l.name in needed]
    for l in layers:
        if l.name not in needed:
            ignored.append({"name": l.name, "type": l.source_type, "reason": "output does not depend on it"})
    if kept[-1].name != out:  # a topological order with the output last
        kept = [l for l in kept if l.name != out] + [l for l in kept if l.name == out]
    return kept, {l.name: sources[l.name] for l in kept}


def _model(name, model_config, root, cpath, wpath, meta) -> Model:
    """Assemble the IR Model and its traceability meta."""
    cls, entries, top, inbound, output = _layer_entries(model_config, cpath)
    input_shape, layers, ignored, edges, input_name = _build(entries, root, cpath, wpath, top, inbound, output)
    sources = tuple(dict.fromkeys(str(p) for p in (cpath, wpath)))
    meta = dict(meta, model_class=cls, source_files=list(sources), ignored_layers=ignored)
    return Model(name=c_identifier(name), input_shape=input_shape, layers=layers,
                 source_files=sources, meta=meta, edges=edges, input_name=input_name)


# --------------------------------------------------------------------------- public entry points


def load_full_model(path) -> Model:
    """Read a full-model .h5 (root attr model_config + group model_weights)."""
    with _open_h5(path) as f:
        try:
            raw = f.attrs.get("model_config")
            if raw is None:
                raise _err("missing model_config attribute (a weights-only file? load its "
                           "architecture .json instead, with this file next to it)", path)
            config = _json(_text(raw), path, "model_config")
            if "model_weights" not in f:
                raise _err("missing model_weights group (model saved without weights?)", path)
            meta = {
                "format": "keras-h5",
                "keras_version": _text(f.attrs.get("keras_version", "unknown")),
                "backend": _text(f.attrs.get("backend", "unknown")),
            }
            return _model(Path(path).stem, config, f["model_weights"], path, path, meta)
        except OSError as exc:
            raise _err(f"cannot read HDF5 (truncated or corrupt): {exc}", path) from None


def weights_candidates(json_path) -> List[Path]:
    """Where the weights of a Keras2C architecture json may be, preferred first."""
    p = Path(json_path)
    if p.name == "architecture.json":
        return [p.with_name("weights.h5")]
    return [p.with_name(p.stem + ".weights.h5"), p.with_name(p.stem + "_weights.h5")]


def weights_file(json_path) -> Path:
    """The existing weights file of a Keras2C json, or an error naming the json and the file(s)."""
    candidates = weights_candidates(json_path)
    for c in candidates:
        if c.exists():
            return c
    raise _err(f"weights file not found: expected {' or '.join(str(c) for c in candidates)}",
               json_path)


def load_pair(json_path) -> Model:
    """Read the Keras2C pair: architecture json + its weights .h5 (model_weights layout at root)."""
    jpath = Path(json_path)
    try:
        text = jpath.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(f"cannot read model json ({exc})", json_path) from None
    config = _json(text, json_path, "architecture json")
    wpath = weights_file(json_path)
    name = jpath.resolve().parent.name if jpath.name == "architecture.json" else jpath.stem
    try:
        with _open_h5(wpath) as f:
            return _pair_model(f, name, config, json_path, wpath)
    except NNBuildError as exc:
        raise _with_json(exc, wpath, json_path) from None


def _pair_model(f, name, config, json_path, wpath) -> Model:
    """The Model of a pair once its weights file is open (h5py read errors become one line)."""
    version = config.get("keras_version", "unknown") if isinstance(config, dict) else "unknown"
    try:
        meta = {
            "format": "keras-json",
            "keras_version": _text(f.attrs.get("keras_version", version)),
            "backend": _text(f.attrs.get("backend", "unknown")),
        }
        return _model(name, config, _weights_root(f, wpath), json_path, wpath, meta)
    except OSError as exc:
        raise _err(f"cannot read HDF5 (truncated or corrupt): {exc}", wpath) from None


def _with_json(exc: NNBuildError, wpath, json_path) -> NNBuildError:
    """An error about the weights file, also naming the json the user actually built from."""
    if exc.path != str(wpath):
        return exc
    prefix = ": ".join(p for p in (exc.path, exc.item) if p) + ": "
    message = str(exc)[len(prefix):] if str(exc).startswith(prefix) else str(exc)
    return NNBuildError(f"{message} (weights of {json_path})", path=exc.path, item=exc.item)


def load(path) -> Model:
    """Front-end entry point: a .json is a Keras2C pair, anything else a full-model .h5."""
    if Path(path).suffix.lower() == ".json":
        return load_pair(path)
    return load_full_model(path)


def implicit_dependencies(path) -> List[str]:
    """The weights file of a Keras2C json (expected name if missing); nothing for a .h5."""
    if Path(path).suffix.lower() != ".json":
        return []
    candidates = weights_candidates(path)
    found = [c for c in candidates if c.exists()]
    return [str(found[0] if found else candidates[0])]
