"""Keras HDF5 front-end (MLPs and CNNs), read with h5py only: never imports TensorFlow or Keras.

Accepts (see docs formats.md section 1):
* a full-model `.h5` (`model.save`) from Keras 1.2.1, 2.x, tf_keras or Keras 3 (legacy h5):
  root attribute `model_config` + group `model_weights`;
* the Keras2C pair `architecture.json` (`model.to_json()`) + `weights.h5` (`save_weights`,
  the `model_weights` layout at the file root).

Supported layers: see SUPPORTED_LAYERS (Dropout is the identity at inference: dropped and recorded
in meta["ignored_layers"]). Some lower to several IR layers, the last one computing the Keras
layer's output: Conv1D is Reshape (W, C) -> (1, W, C), Conv2D, Reshape back; SeparableConv2D is a
depthwise Conv2D (groups = C) then a 1x1 Conv2D; an activation beyond ACTIVATIONS (EXTRA_ACTIVATIONS)
is the layer with a linear activation followed by a Unary layer named <layer>_<op>. Data is
channels-last. Models: Sequential (list or {"layers": [...]} config) and Functional/Model graphs (a
DAG with one input and one output; merge layers Add, Concatenate, Multiply, Subtract, Maximum,
Minimum, Average; each layer called once). Weights: the legacy layout (weight_names) or the Keras 3
one (layers/<key>/vars/<i>, Keras3Weights; also read by nnbuild.frontends.keras3). A chain loads as a chain Model (edges None); anything else
gets Model.edges. Every failure is a one-line NNBuildError naming the file and, where there is
one, the layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from nnbuild import files, limits
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir.graph import (ACTIVATIONS, Activation, Add, BatchNorm, Concatenate, Conv2D, Dense,
                              Elementwise, Flatten, Model, Pool2D, Reduce, Reshape, Resize, Slice, Softmax,
                              Recurrent, Unary, ZeroPadding2D, same_padding, weight_problem)


class _LazyH5py:
    """h5py, imported on first use: telling a model file's kind (every scons run) loads no HDF5."""

    def __getattr__(self, name):
        import h5py
        return getattr(h5py, name)


def _h5py_missing():
    try:  # h5py is a declared dependency; import errors surface as one line at load time.
        import h5py  # noqa: F401
    except ImportError:  # pragma: no cover
        return True
    return False


h5py = _LazyH5py()

#: read in a child process with a time limit (frontends.load): HDF5 can hang on a damaged file
ISOLATE = True

#: Layer classes this front-end turns into IR layers (or drops, for inference-only no-ops).
SUPPORTED_LAYERS = ("Activation", "Add", "Average", "AveragePooling2D", "BatchNormalization", "Concatenate",
                    "Conv1D", "Conv2D", "Cropping1D", "Cropping2D", "Dense", "DepthwiseConv2D", "Dropout",
                    "ELU", "Flatten", "GRU", "LSTM", "GlobalAveragePooling1D", "GlobalAveragePooling2D",
                    "GlobalMaxPooling1D", "GlobalMaxPooling2D", "InputLayer", "LeakyReLU", "MaxPooling2D",
                    "Maximum", "Minimum", "Multiply", "ReLU", "Reshape", "SeparableConv2D", "Softmax",
                    "Subtract", "UpSampling2D", "ZeroPadding2D")
#: Layers that are the identity at inference time.
_INFERENCE_NOOPS = ("Dropout",)


# --------------------------------------------------------------------------- small helpers


def _err(message: str, path, layer: Optional[str] = None) -> NNBuildError:
    """A one-line error (newlines from h5py/json messages folded) naming file and layer."""
    message = " ".join(str(message).split())
    return NNBuildError(message, path=path, item=f"layer '{layer}'" if layer else None)


def _text(value, path=None, what="attribute", layer=None) -> str:
    """An HDF5 attribute (str, bytes, numpy scalar) as str: h5py 2 gives bytes, h5py 3 str.
    Bytes that are not UTF-8 are an error naming `what` (or replaced, when path is None: meta only)."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            if path is None:
                return bytes(value).decode("utf-8", "replace")
            raise _err(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})", path, layer) from None
    return str(value)


def _attr(attrs, key: str, path, default=None):
    """An HDF5 attribute, its declared size checked before it is read (limits.MAX_ATTRIBUTE_BYTES)."""
    if key not in attrs:
        return default
    aid = attrs.get_id(key)
    size = int(np.prod(aid.shape or (), dtype=object)) * aid.dtype.itemsize
    if size > limits.MAX_ATTRIBUTE_BYTES:
        raise _err(f"attribute {key} declares {size} bytes, more than {limits.MAX_ATTRIBUTE_BYTES} "
                   "(limits.MAX_ATTRIBUTE_BYTES)", path)
    return attrs[key]


def _name_list(attrs, key: str, path, layer=None) -> Optional[List[str]]:
    """A list-of-names attribute, joining the `key0`, `key1`, ... pieces Keras writes when the
    attribute exceeds the 64 KiB HDF5 header limit. None if absent."""
    if key in attrs:
        chunks = [_attr(attrs, key, path)]
    else:
        chunks = []
        while f"{key}{len(chunks)}" in attrs:
            chunks.append(_attr(attrs, f"{key}{len(chunks)}", path))
        if not chunks:
            return None
    names = []
    for chunk in chunks:
        for v in np.atleast_1d(np.asarray(chunk)).ravel():
            text = _text(v, path, f"attribute {key}", layer)
            if text != "":
                names.append(text)
    return names


def _open_h5(path):
    """Open read-only; h5py's OSError (truncated, corrupt, not HDF5) becomes a one-line error."""
    if _h5py_missing():  # pragma: no cover
        raise _err("h5py is required to read Keras HDF5 files (pip install h5py)", path)
    try:
        size = Path(path).stat().st_size
        if size > limits.MAX_HDF5_BYTES:
            raise _err(f"file is {size} bytes, more than {limits.MAX_HDF5_BYTES} (limits.MAX_HDF5_BYTES)", path)
        return h5py.File(str(path), "r")
    except OSError as exc:
        raise _err(f"cannot read HDF5 (truncated or corrupt): {exc}", path) from None


def _json(text: str, path, what: str):
    """Parse untrusted JSON (files.parse_json: nesting bounded), one line naming the file on error."""
    return files.parse_json(text, what, path)


# --------------------------------------------------------------------------- typed config values
# Model configs are untrusted: every value is read through one of these, which refuse a wrong
# type or range with one line naming the file, the layer and the key (None means "not given").

_REQUIRED = object()


def _show(value) -> str:
    """A config value for an error message (quoted if a string, cut to 40 characters)."""
    if isinstance(value, str):
        text = f"'{value}'"
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _given(cfg, key, default, path, layer):
    value = cfg.get(key)
    if value is None and default is _REQUIRED:
        raise _err(f"config has no '{key}'", path, layer)
    return value


def _typed(cfg, key, path, layer, default, accepts, must_be, minimum=None, convert=None):
    """The config value `key` when `accepts` it and it is >= minimum (given), as `convert` makes it;
    `default` when absent (_given: an error when required); anything else one line naming the key."""
    value = _given(cfg, key, default, path, layer)
    if value is None:
        return default
    if not accepts(value):
        raise _err(f"{key} must be {must_be}, got {_show(value)}", path, layer)
    if minimum is not None and value < minimum:
        raise _err(f"{key} must be >= {minimum}, got {value}", path, layer)
    return convert(value) if convert else value


def _int(cfg: dict, key: str, path, layer, *, default=_REQUIRED, minimum: Optional[int] = 1):
    """An integer config value >= minimum (booleans and floats are refused)."""
    return _typed(cfg, key, path, layer, default, lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "an integer", minimum)


def _bool(cfg: dict, key: str, path, layer, *, default=_REQUIRED) -> bool:
    """A true/false config value: anything else (1, "false") is refused, never read as true."""
    return _typed(cfg, key, path, layer, default, lambda v: isinstance(v, bool), "true or false")


def _float(cfg: dict, key: str, path, layer, *, default=_REQUIRED, minimum: Optional[float] = None):
    """A finite number config value >= minimum."""
    return _typed(cfg, key, path, layer, default, lambda v: not isinstance(v, bool) and isinstance(v, (int, float))
                  and bool(np.isfinite(float(v))), "a finite number", minimum, float)


def _str(cfg: dict, key: str, path, layer, *, default=_REQUIRED) -> str:
    """A string config value."""
    return _typed(cfg, key, path, layer, default, lambda v: isinstance(v, str), "a string")


def _int_list(cfg: dict, key: str, n: int, path, layer, *, default=_REQUIRED, minimum: int = 1):
    """An int or a list of n ints, each >= minimum (Keras accepts both for kernel_size, strides)."""
    value = _given(cfg, key, default, path, layer)
    if value is None:
        value = default
    items = [value] * n if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(items, (list, tuple)) or len(items) != n
            or any(isinstance(v, bool) or not isinstance(v, int) for v in items)):
        raise _err(f"{key} {_show(value)} is not an integer or {n} integers", path, layer)
    if min(items) < minimum:
        raise _err(f"{key} {_show(value)} must be >= {minimum}", path, layer)
    return tuple(items)


# --------------------------------------------------------------------------- model config


def _layer_name(entry: dict) -> str:
    """Layer name: config.name (all Keras versions), else the Functional entry's name
    (entries are checked by _checked_entries first)."""
    return str(entry["config"].get("name") or entry.get("name") or "?")


#: Deepest inbound_nodes nesting read (Keras 3 Concatenate: about 7); deeper is malformed.
_MAX_NESTING = 32


def _inbound_names(entry: dict, path, layer) -> List[str]:
    """Names of the layers feeding a Functional layer (Keras 1/2 lists and Keras 3 dicts).
    Walked with an explicit stack: a hostile nesting depth is an error, not a RecursionError."""
    names: List[str] = []
    work = [(entry.get("inbound_nodes") or [], 0)]
    while work:
        obj, depth = work.pop()
        if depth > _MAX_NESTING:
            raise _err(f"inbound_nodes nested more than {_MAX_NESTING} levels deep", path, layer)
        if isinstance(obj, dict):
            cfg = obj.get("config")
            hist = cfg.get("keras_history") if isinstance(cfg, dict) else None
            if hist is not None:  # Keras 3: {"class_name": "__keras_tensor__", "config": {"keras_history": ...}}
                if not isinstance(hist, list) or not hist or not isinstance(hist[0], str):
                    raise _err(f"keras_history {_show(hist)} does not start with a layer name", path, layer)
                names.append(hist[0])
                continue
            work.extend((v, depth + 1) for v in reversed(list(obj.values())))
        elif isinstance(obj, list):
            # Keras 1/2 inbound tensor: [layer_name, node_index, tensor_index(, kwargs)]
            if (len(obj) >= 3 and isinstance(obj[0], str) and isinstance(obj[1], int)
                    and not isinstance(obj[1], bool)):
                names.append(obj[0])
                continue
            work.extend((v, depth + 1) for v in reversed(obj))
    return names


def _node_count(entry: dict, path, layer) -> int:
    """How many times a Functional layer is called (Keras 2 lists / Keras 3 dicts, one per call)."""
    nodes = entry.get("inbound_nodes")
    if nodes is None:
        return 0
    if not isinstance(nodes, list):
        raise _err(f"inbound_nodes must be a list, got {_show(nodes)}", path, layer)
    return len(nodes)


def _end_names(value, key, path) -> List[str]:
    """Layer names of input_layers / output_layers: [[name, 0, 0], ...] or one [name, 0, 0]."""
    if not value:
        return []
    if isinstance(value, list) and isinstance(value[0], str):
        return [value[0]]
    if not isinstance(value, list) or not all(isinstance(v, list) and v and isinstance(v[0], str)
                                              for v in value):
        raise _err(f"{key} {_show(value)} is not a list of [layer_name, node, tensor]", path)
    return [v[0] for v in value]


def _checked_entries(entries, path) -> List[dict]:
    """The layer entries, each checked to be {"class_name": str, "config": {...}} with a string name
    (config null means {}); returned as copies with config filled in."""
    if not isinstance(entries, list):
        raise _err(f"the model's layers must be a list, got {_show(entries)}", path)
    out = []
    for i, entry in enumerate(entries):
        where = f"#{i + 1}"
        if not isinstance(entry, dict):
            raise _err(f"layer entry {i + 1} is {_show(entry)}, not a layer object", path, where)
        cfg = entry.get("config")
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, dict):
            raise _err(f"config must be an object, got {_show(cfg)}", path, where)
        name = cfg.get("name") or entry.get("name")
        if name is not None and not isinstance(name, str):
            raise _err(f"layer name must be a string, got {_show(name)}", path, where)
        cls = entry.get("class_name")
        if not isinstance(cls, str):
            raise _err(f"class_name must be a string, got {_show(cls)}", path, name or where)
        out.append(dict(entry, config=cfg))
    return out


def _graph_layers(config: dict, path) -> Tuple[List[dict], dict, Optional[str]]:
    """(entries, {layer: inbound names}, output layer name) of a Functional/Model config."""
    entries = _checked_entries(config.get("layers") or [], path)
    inbound = {}
    for entry in entries:
        name = _layer_name(entry)
        count = _node_count(entry, path, name)
        if count > 1:
            raise _err(f"layer is called {count} times (shared layers are not supported)", path, name)
        inbound[name] = _inbound_names(entry, path, name)
    for key in ("input_layers", "output_layers"):
        ends = _end_names(config.get(key), key, path)
        if config.get(key) is not None and len(ends) != 1:
            raise _err(f"model has {len(ends)} {key.split('_')[0]}s; exactly one is supported", path)
    outputs = _end_names(config.get("output_layers"), "output_layers", path)
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
            return cls, _checked_entries(config, path), {}, None, None
        if isinstance(config, dict) and isinstance(config.get("layers"), list):
            return cls, _checked_entries(config["layers"], path), config, None, None
        raise _err("Sequential config has no layer list", path)
    if cls in ("Functional", "Model"):
        if not isinstance(config, dict):
            raise _err(f"{cls} config is not an object", path)
        entries, inbound, output = _graph_layers(config, path)
        return cls, entries, config, inbound, output
    raise _err(f"model class {_show(cls)} is not supported (supported: Sequential, Functional)", path)


def _dims(value, key, path, layer) -> Tuple[int, ...]:
    """A declared shape without the batch axis: positive integers (None = unknown is refused)."""
    if not isinstance(value, (list, tuple)) or not value:
        raise _err(f"{key} {_show(value)} is not a list of dimensions", path, layer)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in value):
        raise _err(f"input shape {_show(list(value))} ({key}) must be known positive integers "
                   "(not fully known?)", path, layer)
    return tuple(value)


def _shape_from(cfg: dict, path, layer) -> Optional[Tuple]:
    """A layer's declared input shape without the batch axis (None if it declares none)."""
    for key in ("batch_input_shape", "batch_shape"):
        value = cfg.get(key)
        if value is not None:
            if not isinstance(value, list) or len(value) < 2:
                raise _err(f"{key} {_show(value)} is not [batch, dimension, ...]", path, layer)
            return _dims(value[1:], key, path, layer)
    if cfg.get("input_shape") is not None:
        return _dims(cfg["input_shape"], "input_shape", path, layer)
    if cfg.get("input_dim") is not None:
        return (_int(cfg, "input_dim", path, layer),)
    return None


def _activation_text(value):
    """The activation's name as written (Keras 3 may serialise it as a dict); None means linear."""
    if value is None:
        return "linear"
    if isinstance(value, dict):
        inner = value.get("config")
        value = inner if isinstance(inner, str) else (
            inner.get("name", value.get("class_name")) if isinstance(inner, dict) else value.get("class_name"))
    return value


#: SELU's constants (Klambauer et al. 2017; Keras, ONNX)
_SELU = (1.6732632423543772848170429916717, 1.0507009873554804934193349852946)


def _unary_activation(value, keras3: bool):
    """(op, params) of the IR Unary layer computing a Keras activation beyond ACTIVATIONS, else None.
    hard_sigmoid changed in Keras 3: relu6(x + 3) / 6 (Keras 2: clip(0.2 x + 0.5, 0, 1))."""
    table = {"elu": ("elu", (1.0,)), "selu": ("selu", _SELU), "softplus": ("softplus", ()),
             "softsign": ("softsign", ()), "exponential": ("exp", ()), "leaky_relu": ("leaky_relu", (0.2,)),
             "relu6": ("clip", (0.0, 6.0)),
             "hard_sigmoid": ("hard_sigmoid", (1.0 / 6.0, 0.5) if keras3 else (0.2, 0.5))}
    return table.get(value) if isinstance(value, str) else None


#: Activation names accepted anywhere (the IR's own, then those lowered to a Unary layer).
EXTRA_ACTIVATIONS = ("elu", "selu", "softplus", "softsign", "hard_sigmoid", "exponential", "leaky_relu", "relu6")


def _activation_name(value, path, layer: str, cls: str) -> str:
    """A supported activation name; Keras 3 may serialise it as a dict."""
    value = _activation_text(value)
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise _err(f"activation {_show(value)} of {cls} is not supported "
                   f"(supported: {', '.join(ACTIVATIONS + EXTRA_ACTIVATIONS)})", path, layer)
    return value


# --------------------------------------------------------------------------- weights


def _weights_root(f, path):
    """The group holding one subgroup per layer: `model_weights` in a full model, else the root."""
    if "layer_names" not in f.attrs and not any(k.startswith("layer_names") for k in f.attrs):
        if isinstance(f.get("model_weights"), h5py.Group):
            return f["model_weights"]
        if "layers" in f and isinstance(f["layers"], h5py.Group):
            return keras3_weights(f["layers"], path)
    return f


def keras3_weights(layers_group, wpath):
    """The weights root of a Keras 3 layout, made once the layer entries are known (see _model)."""
    return lambda entries: Keras3Weights(layers_group, [(_layer_name(e), e["class_name"]) for e in entries],
                                         wpath)


class Keras3Weights:
    """The Keras 3 weights layout (`model.weights.h5` of a .keras archive, or `save_weights` in
    Keras 3): `layers/<key>/vars/0, 1, ...` in the layer's variable order. The key is the layer's
    name in snake_case class form ('conv1d', 'dense_1'), not its name: the `vars` group's `name`
    attribute (written by recent Keras 3 releases) gives the layer name; without it, keys are matched
    by class and order as Keras assigns them."""

    def __init__(self, layers_group, class_names, wpath):
        self.wpath = wpath
        self.budget = Budget(wpath)
        self.groups = {}
        for key in layers_group:
            obj = layers_group.get(key)
            vars_ = obj.get("vars") if isinstance(obj, h5py.Group) else None
            if isinstance(vars_, h5py.Group) and "name" in vars_.attrs:
                self.groups.setdefault(_text(_attr(vars_.attrs, "name", wpath), wpath, "vars name attribute"),
                                       _cell_vars(obj, vars_))
        counts = {}
        for layer, cls in class_names:  # older Keras 3: snake_case class name, _1, _2 ... by order
            base = _snake(cls)
            key = base if counts.get(base, 0) == 0 else f"{base}_{counts[base]}"
            counts[base] = counts.get(base, 0) + 1
            obj = layers_group.get(key)
            if layer not in self.groups and isinstance(obj, h5py.Group) and isinstance(obj.get("vars"), h5py.Group):
                self.groups[layer] = _cell_vars(obj, obj["vars"])

    def group(self, layer):
        return self.groups.get(layer)


def _cell_vars(layer_group, vars_):
    """A recurrent layer (LSTM, GRU) keeps no variables of its own: they are its cell's
    (`layers/<key>/cell/vars`); any other layer's are its `vars`."""
    cell = layer_group.get("cell")
    if len(vars_) == 0 and isinstance(cell, h5py.Group) and isinstance(cell.get("vars"), h5py.Group):
        return cell["vars"]
    return vars_


class LegacyWeights:
    """The Keras 1/2 weights layout: one group per layer (its attribute weight_names lists its
    datasets, relative to the group), under `model_weights` or at the root of a weights file."""

    def __init__(self, root, wpath):
        self.root, self.wpath, self.budget = root, wpath, Budget(wpath)

    def group(self, layer):
        try:
            group = self.root.get(layer) if layer not in (".", "..") and "\0" not in layer else None
        except (KeyError, ValueError, OSError, RuntimeError) as exc:
            raise _err(f"cannot read weight group: {exc}", self.wpath, layer) from None
        if not isinstance(group, h5py.Group):
            raise _err(f"missing weight group '{layer}'", self.wpath, layer)
        return group


def _snake(name: str) -> str:
    """Keras' to_snake_case of a class name (Conv1D -> conv1d, BatchNormalization -> batch_normalization)."""
    import re
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _keras3_names(group) -> List[str]:
    """The variable dataset names of a Keras 3 `vars` group, in order: 0, 1, 2, ..."""
    keys = list(group.keys())
    if sorted(keys) != [str(i) for i in range(len(keys))]:
        raise ValueError(f"vars group '{group.name}' holds {sorted(keys)[:6]}, not 0, 1, 2, ...")
    return [str(i) for i in range(len(keys))]


def _layer_weights(root, layer: str, wpath, cls: str = "layer") -> List[Tuple[str, "Stored"]]:
    """(name, Stored) of a layer's weights in `weight_names` order, resolved relative to its group,
    checked from their headers (Stored): read each with .read() once its shape is checked."""
    if isinstance(root, Keras3Weights):
        group = root.group(layer)
        if group is None:
            raise _err(f"missing weight group: no layers/*/vars group is layer '{layer}' "
                       "(Keras 3 weights layout)", wpath, layer)
        try:
            names = _keras3_names(group)
        except ValueError as exc:
            raise _err(str(exc), wpath, layer) from None
        return _read_arrays(group, names, wpath, layer, cls, root.budget)
    group = root.group(layer)
    names = _name_list(group.attrs, "weight_names", wpath, layer)
    if names is None:
        raise _err(f"weight group '{group.name}' has no weight_names attribute", wpath, layer)
    return _read_arrays(group, names, wpath, layer, cls, root.budget)


def _read_arrays(group, names, wpath, layer, cls, budget) -> List[Tuple[str, "Stored"]]:
    """The weights `names` of `group`, each checked from its header only (see Stored): the caller
    checks their declared shapes against the layer's config, then reads them."""
    out = []
    for name in names:
        shown = f"{group.name.lstrip('/')}/{name}"
        try:
            obj = group.get(name) if "\0" not in name else None
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise _err(f"cannot read weight dataset '{shown}' (truncated or corrupt): {exc}",
                       wpath, layer) from None
        if not isinstance(obj, h5py.Dataset):
            raise _err(f"missing weight dataset '{shown}'", wpath, layer)
        out.append((name, Stored(obj, shown, wpath, layer, cls, budget)))
    return out


#: HDF5 filters read: built into libhdf5 (deflate, shuffle, fletcher32, szip, nbit, scaleoffset) and
#: h5py's lzf. Any other id would make libhdf5 load a plugin library from its plugin path.
_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset", 32000: "lzf"}


def _quoted(text, limit=200) -> str:
    """A path named by a hostile file, quoted and cut (the error line stays short)."""
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def _storage_problem(dset) -> Optional[str]:
    """Why a dataset's bytes are not (only) in this file, or would load code, else None."""
    if dset.is_virtual:
        return "is a virtual dataset (its data is mapped from other datasets or files)"
    external = dset.external
    if external:
        return f"keeps its data in an external file ({_quoted(external[0][0])})"
    plist = dset.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        code = plist.get_filter(i)[0]
        if code not in _FILTERS:
            return f"uses HDF5 filter {code}, not one built into HDF5 (a plugin)"
    return None


def check_hdf5(f, path):
    """Refuse an HDF5 file that reaches outside itself, before any dataset is read: external
    links, user-defined links, external raw storage, virtual datasets, plugin filters, anywhere in
    the file; at most MAX_HDF5_OBJECTS links walked. Soft links stay inside the file (they name a
    path in it, and no link in it leaves it)."""
    seen, problems = [0], []

    def problem(name, link) -> Optional[str]:
        if isinstance(link, h5py.ExternalLink):
            return (f"'{name}' is an external link to {_quoted(link.filename)}:{_quoted(link.path)} "
                    "(only data inside the model file is read)")
        if isinstance(link, h5py.SoftLink):
            return None
        if not isinstance(link, h5py.HardLink):
            return f"'{name}' is a user-defined HDF5 link (only data inside the model file is read)"
        obj = f.get(name)
        storage = _storage_problem(obj) if isinstance(obj, h5py.Dataset) else None
        return f"dataset '{name}' {storage}: refused (only data inside the model file is read)" if storage else None

    def visit(name, link):  # an exception raised here would not cross h5py's C iteration: stop by returning
        seen[0] += 1
        if seen[0] > limits.MAX_HDF5_OBJECTS:
            problems.append(f"holds more than {limits.MAX_HDF5_OBJECTS} HDF5 links (limits.MAX_HDF5_OBJECTS)")
        else:
            try:
                found = problem(name, link)
            except (OSError, KeyError, ValueError, RuntimeError) as exc:
                found = f"'{name}' cannot be read (truncated or corrupt): {exc}"
            if found:
                problems.append(found)
        return True if problems else None

    f.visititems_links(visit)
    if problems:
        raise _err(problems[0], path)


class Stored:
    """A weight dataset checked from its header, not read yet: inside the file (check_hdf5), real
    floating point, an array with no zero-size axis, and within the size limits (limits.py).
    `shape` and `ndim` are the declared ones; `read()` reads it (once its shape has been checked
    against the config), counting it against the file's weights budget."""

    def __init__(self, dset, shown, wpath, layer, cls, budget):
        self.dset, self.shown, self.wpath, self.layer, self.cls = dset, shown, wpath, layer, cls
        self.budget = budget
        problem = _storage_problem(dset)
        if problem:
            raise self._refuse(f"{problem}: refused (only data inside the model file is read)")
        shape, dtype = dset.shape, dset.dtype
        if shape is None or len(shape) == 0:
            raise self._refuse("is a scalar or empty, not an array")
        if dtype.kind != "f" or dtype.itemsize > 8:
            raise self._refuse(f"is not a float16/32/64 array (dtype {dtype})")
        self.shape, self.ndim = tuple(int(d) for d in shape), len(shape)
        if 0 in self.shape:
            raise self._refuse(f"has a zero-size dimension (shape {self.shape})")
        self.size = int(np.prod(self.shape, dtype=object))
        self.nbytes = self.size * dtype.itemsize
        if self.size > limits.MAX_TENSOR_ELEMENTS:
            raise self._refuse(f"declares shape {self.shape}: {self.size} elements, more than "
                               f"{limits.MAX_TENSOR_ELEMENTS} per tensor (limits.MAX_TENSOR_ELEMENTS)")
        if self.nbytes > limits.MAX_TENSOR_BYTES:
            raise self._refuse(f"declares {self.nbytes} bytes, more than {limits.MAX_TENSOR_BYTES} per tensor "
                               "(limits.MAX_TENSOR_BYTES)")
        chunk = int(np.prod(dset.chunks, dtype=object)) * dtype.itemsize if dset.chunks else 0
        if chunk > limits.MAX_TENSOR_BYTES:
            raise self._refuse(f"declares chunks {dset.chunks} of {chunk} bytes, more than "
                               f"{limits.MAX_TENSOR_BYTES} (limits.MAX_TENSOR_BYTES)")

    def _refuse(self, message) -> NNBuildError:
        return _err(f"{self.cls} weight '{self.shown}' {message}", self.wpath, self.layer)

    def read(self) -> np.ndarray:
        """The array (read-only), checked finite and float32-representable."""
        self.budget.spend(self)
        try:
            arr = np.array(self.dset[()])
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise _err(f"cannot read weight dataset '{self.shown}' (truncated or corrupt): {exc}",
                       self.wpath, self.layer) from None
        problem = weight_problem(arr)
        if problem:
            raise self._refuse(problem)
        arr.flags.writeable = False  # IR weights are immutable, like the frozen layers
        return arr


class Budget:
    """What the weights read from one file have cost so far (a dataset named by several layers,
    through hard links, counts each time it is read)."""

    def __init__(self, wpath):
        self.wpath, self.elements, self.nbytes = wpath, 0, 0

    def spend(self, stored):
        self.elements += stored.size
        self.nbytes += stored.nbytes
        if self.elements > limits.MAX_MODEL_ELEMENTS:
            raise stored._refuse(f"brings the weights read from this file to {self.elements} elements, more than "
                                 f"{limits.MAX_MODEL_ELEMENTS} (limits.MAX_MODEL_ELEMENTS)")
        if self.nbytes > limits.MAX_MODEL_BYTES:
            raise stored._refuse(f"brings the weights read from this file to {self.nbytes} bytes, more than "
                                 f"{limits.MAX_MODEL_BYTES} (limits.MAX_MODEL_BYTES)")


# --------------------------------------------------------------------------- layer building


def _dense(entry: dict, prev_shape, prev_name, root, cpath, wpath) -> Dense:
    """IR Dense from a Keras Dense config + weights, checking every shape against the chain."""
    cfg = entry["config"]
    name = _layer_name(entry)
    units = _int(cfg, "units", cpath, name, default=None)
    if units is None:
        units = _int(cfg, "output_dim", cpath, name, default=None)  # Keras 1
    use_bias = _bool(cfg, "use_bias", cpath, name,
                     default=_bool(cfg, "bias", cpath, name, default=True))  # Keras 1: bias
    act = _activation_name(cfg.get("activation"), cpath, name, "Dense")
    weights = _layer_weights(root, name, wpath, "Dense")
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
    if units is not None and kernel.shape[1] != units:
        raise _err(f"kernel shape {kernel.shape} does not match units={units}", wpath, name)
    if bias is not None and bias.shape != (kernel.shape[1],):
        raise _err(f"bias shape {bias.shape} does not match units={kernel.shape[1]}", wpath, name)
    return Dense(name=name, kernel=kernel.read(), bias=bias.read() if bias is not None else None, activation=act,
                 source_type="Dense")


#: Keras recurrent activations nnbuild's Recurrent layer computes
_RECURRENT_ACTIVATIONS = ("sigmoid", "tanh", "relu")


def _recurrent(entry, cls, in_shape, root, cpath, wpath) -> List:
    """LSTM or GRU over the sequence [steps, features] onto the IR's Recurrent layer (ONNX's gate
    order: Keras's LSTM i, f, c, o becomes i, o, f, c; GRU z, r, h stays; reset_after is ONNX's
    linear_before_reset), then a Reshape to Keras's output ([steps, units] or [units]). Every call
    starts from the zero state (stateful=False)."""
    cfg = entry["config"]
    name = _layer_name(entry)
    units = _int(cfg, "units", cpath, name)
    for key in ("stateful", "return_state", "time_major"):
        if _bool(cfg, key, cpath, name, default=False):
            raise _err(f"{cls} with {key}=True is not supported (one sequence per call from the zero state, "
                       "one output)", cpath, name)
    sequences = _bool(cfg, "return_sequences", cpath, name, default=False)
    backwards = _bool(cfg, "go_backwards", cpath, name, default=False)
    if backwards and sequences:
        raise _err(f"{cls} with go_backwards and return_sequences is not supported (the reversed sequence)",
                   cpath, name)
    acts = []
    for key, default in (("recurrent_activation", "sigmoid"), ("activation", "tanh")):
        value = _activation_text(cfg.get(key, default))
        if value not in _RECURRENT_ACTIVATIONS:
            raise _err(f"{key} {_show(value)} of {cls} is not supported (supported: "
                       f"{', '.join(_RECURRENT_ACTIVATIONS)})", cpath, name)
        acts.append(value)
    if len(in_shape) != 2:
        raise _err(f"{cls} reads a sequence [steps, features], got shape {in_shape}", cpath, name)
    steps, features = in_shape
    use_bias = _bool(cfg, "use_bias", cpath, name, default=True)
    gates = 4 if cls == "LSTM" else 3
    reset_after = cls == "GRU" and _bool(cfg, "reset_after", cpath, name, default=True)
    weights = _weights_by_count(root, name, wpath, cls, (3,) if use_bias else (2,))
    kernel, recurrent = weights[0], weights[1]
    bias_shape = ((2, gates * units) if reset_after else (gates * units,))
    for stored, shape, what in ((kernel, (features, gates * units), "kernel"),
                                (recurrent, (units, gates * units), "recurrent_kernel")) + (
                                    ((weights[2], bias_shape, "bias"),) if use_bias else ()):
        if tuple(stored.shape) != shape:
            raise _err(f"{what} has shape {tuple(stored.shape)}, expected {shape}", wpath, name)
    w, r = _read(kernel).T.astype(np.float32), _read(recurrent).T.astype(np.float32)
    b = _read(weights[2]).astype(np.float64) if use_bias else np.zeros(bias_shape)
    rbias = None
    if cls == "LSTM":
        order = [0, 3, 1, 2]   # Keras i, f, c, o -> i, o, f, c

        def gate_rows(m):
            return np.concatenate([m[k * units:(k + 1) * units] for k in order])
        w, r, bias = gate_rows(w), gate_rows(r), gate_rows(b)
        activations = (acts[0], acts[1], acts[1])
    else:
        if reset_after:
            bias = np.concatenate([b[0, :2 * units] + b[1, :2 * units], b[0, 2 * units:]])
            rbias = b[1, 2 * units:]
        else:
            bias, rbias = b, np.zeros(units)
        activations = (acts[0], acts[1])
    layer = Recurrent(name=name, cell=cls.lower(), directions=("reverse" if backwards else "forward",),
                      w=w[None], r=r[None], bias=bias.astype(np.float32)[None],
                      rbias=None if rbias is None else rbias.astype(np.float32)[None],
                      activations=activations, linear_before_reset=reset_after,
                      output="sequence" if sequences else "last", source_type=cls)
    out = (steps, units) if sequences else (units,)
    return [layer, Reshape(name=f"{name}_output", target_shape=out, source_type=cls)]


def _channels_last(cfg, cls, path, layer):
    fmt = _str(cfg, "data_format", path, layer, default="channels_last")
    if fmt != "channels_last":
        raise _err(f"{cls} with data_format='{fmt}' is not supported (channels_last only)", path, layer)


def _padding_of(cfg, cls, in_shape, window, strides, dilation, path, layer) -> Tuple[int, int, int, int]:
    """Keras 'valid' -> no pads; 'same' -> TF's split, extra cell at the bottom/right."""
    mode = _str(cfg, "padding", path, layer, default="valid").lower()
    if mode == "valid":
        return (0, 0, 0, 0)
    if mode == "same":
        if len(in_shape) != 3:
            raise _err(f"{cls} needs a (height, width, channels) input, got shape {in_shape}", path, layer)
        t, b = same_padding(in_shape[0], window[0], strides[0], dilation[0])
        l, r = same_padding(in_shape[1], window[1], strides[1], dilation[1])
        return (t, b, l, r)
    raise _err(f"{cls} padding {_show(mode)} is not supported (valid, same)", path, layer)


def _weights_by_count(root, name, wpath, cls, counts, what=None) -> List["Stored"]:
    """The layer's weights (not read yet), checking their number is one of `counts`."""
    weights = [a for _, a in _layer_weights(root, name, wpath, cls)]
    if len(weights) not in counts:
        raise _err(f"{len(weights)} weight datasets for a {what or cls} (expected "
                   f"{' or '.join(map(str, counts))})", wpath, name)
    return weights


def _conv2d(entry, in_shape, root, cpath, wpath, cls="Conv2D") -> List:
    """Conv2D, or Conv1D as Reshape (W, C) -> (1, W, C), Conv2D with a 1-row kernel, Reshape back."""
    cfg, name = entry["config"], _layer_name(entry)
    rank = 1 if cls == "Conv1D" else 2
    _channels_last(cfg, cls, cpath, name)
    if len(in_shape) != rank + 1:
        what = "(width, channels)" if rank == 1 else "(height, width, channels)"
        raise _err(f"{cls} needs a {what} input, got shape {tuple(in_shape)}", cpath, name)
    groups = _int(cfg, "groups", cpath, name, default=1)
    ksize = _int_list(cfg, "kernel_size", rank, cpath, name)
    strides = _int_list(cfg, "strides", rank, cpath, name, default=1)
    dilation = _int_list(cfg, "dilation_rate", rank, cpath, name, default=1)
    if max(strides) > 1 and max(dilation) > 1:
        raise _err(f"{cls} with both strides and dilation_rate > 1 is not defined by Keras", cpath, name)
    filters = _int(cfg, "filters", cpath, name, default=None)
    use_bias = _bool(cfg, "use_bias", cpath, name, default=True)
    act = _activation_name(cfg.get("activation"), cpath, name, cls)
    weights = _weights_by_count(root, name, wpath, cls, (2,) if use_bias else (1,),
                                f"{cls} with use_bias={use_bias}")
    kernel, bias = weights[0], (weights[1] if use_bias else None)
    layout = "[k, in / groups, filters]" if rank == 1 else "[kh, kw, in / groups, filters]"
    if kernel.ndim != rank + 2 or tuple(kernel.shape[:rank]) != ksize:
        raise _err(f"kernel shape {kernel.shape} does not match kernel_size={list(ksize)} "
                   f"(expected {layout})", wpath, name)
    if filters is not None and kernel.shape[-1] != filters:
        raise _err(f"kernel shape {kernel.shape} does not match filters={filters}", wpath, name)
    if bias is not None and bias.shape != (kernel.shape[-1],):
        raise _err(f"bias shape {bias.shape} does not match filters={kernel.shape[-1]}", wpath, name)
    kernel, bias = kernel.read(), (bias.read() if bias is not None else None)
    if rank == 2:
        pads = _padding_of(cfg, cls, in_shape, ksize, strides, dilation, cpath, name)
        return [Conv2D(name=name, kernel=kernel, bias=bias, strides=strides, dilation=dilation,
                       padding=pads, activation=act, source_type=cls, groups=groups)]
    mode = _str(cfg, "padding", cpath, name, default="valid").lower()
    if mode == "valid":
        left, right = 0, 0
    elif mode == "same":
        left, right = same_padding(in_shape[0], ksize[0], strides[0], dilation[0])
    elif mode == "causal":
        left, right = dilation[0] * (ksize[0] - 1), 0
    else:
        raise _err(f"{cls} padding {_show(mode)} is not supported (valid, same, causal)", cpath, name)
    kernel2 = kernel.reshape((1,) + kernel.shape)
    kernel2.flags.writeable = False
    conv = Conv2D(name=name, kernel=kernel2, bias=bias, strides=(1, strides[0]), dilation=(1, dilation[0]),
                  padding=(0, 0, left, right), activation=act, source_type=cls, groups=groups)
    out = conv.output_shape((1,) + tuple(in_shape))
    return [Reshape(name=f"{name}_to2d", target_shape=(1,) + tuple(in_shape), source_type=cls), conv,
            Reshape(name=f"{name}_to1d", target_shape=tuple(out[1:]), source_type=cls)]


def _depthwise(entry, cls, in_shape, root, cpath, wpath) -> List:
    """DepthwiseConv2D (channel c times depth_multiplier M gives outputs c*M .. c*M+M-1) as a Conv2D
    with groups = C; SeparableConv2D as that depthwise Conv2D (no bias) then a 1x1 Conv2D."""
    cfg, name = entry["config"], _layer_name(entry)
    _channels_last(cfg, cls, cpath, name)
    if len(in_shape) != 3:
        raise _err(f"{cls} needs a (height, width, channels) input, got shape {tuple(in_shape)}", cpath, name)
    ksize = _int_list(cfg, "kernel_size", 2, cpath, name)
    strides = _int_list(cfg, "strides", 2, cpath, name, default=1)
    dilation = _int_list(cfg, "dilation_rate", 2, cpath, name, default=1)
    if max(strides) > 1 and max(dilation) > 1:
        raise _err(f"{cls} with both strides and dilation_rate > 1 is not defined by Keras", cpath, name)
    multiplier = _int(cfg, "depth_multiplier", cpath, name, default=1)
    use_bias = _bool(cfg, "use_bias", cpath, name, default=True)
    act = _activation_name(cfg.get("activation"), cpath, name, cls)
    separable = cls == "SeparableConv2D"
    want = 1 + separable + use_bias
    weights = _weights_by_count(root, name, wpath, cls, (want,), f"{cls} with use_bias={use_bias}")
    channels = in_shape[2]
    depthwise = weights[0]
    if depthwise.shape != ksize + (channels, multiplier):
        raise _err(f"depthwise kernel shape {depthwise.shape} does not match kernel_size={list(ksize)}, "
                   f"{channels} input channels and depth_multiplier={multiplier} "
                   "(expected [kh, kw, channels, depth_multiplier])", wpath, name)
    bias = weights[-1] if use_bias else None
    pads = _padding_of(cfg, cls, in_shape, ksize, strides, dilation, cpath, name)
    if not separable:
        if bias is not None and bias.shape != (channels * multiplier,):
            raise _err(f"bias shape {bias.shape} does not match {channels * multiplier} outputs", wpath, name)
        kernel, bias = _depthwise_kernel(depthwise, ksize, channels * multiplier), _read(bias)
        return [Conv2D(name=name, kernel=kernel, bias=bias, strides=strides, dilation=dilation, padding=pads,
                       activation=act, source_type=cls, groups=channels)]
    pointwise = weights[1]
    filters = _int(cfg, "filters", cpath, name, default=None)
    if pointwise.ndim != 4 or pointwise.shape[:3] != (1, 1, channels * multiplier):
        raise _err(f"pointwise kernel shape {pointwise.shape} is not [1, 1, {channels * multiplier}, filters]",
                   wpath, name)
    if filters is not None and pointwise.shape[3] != filters:
        raise _err(f"pointwise kernel shape {pointwise.shape} does not match filters={filters}", wpath, name)
    if bias is not None and bias.shape != (pointwise.shape[3],):
        raise _err(f"bias shape {bias.shape} does not match filters={pointwise.shape[3]}", wpath, name)
    kernel, pointwise, bias = _depthwise_kernel(depthwise, ksize, channels * multiplier), pointwise.read(), _read(bias)
    return [Conv2D(name=f"{name}_depthwise", kernel=kernel, bias=None, strides=strides, dilation=dilation,
                   padding=pads, source_type=cls, groups=channels),
            Conv2D(name=name, kernel=pointwise, bias=bias, activation=act, source_type=cls)]


def _read(stored):
    return stored.read() if stored is not None else None


def _depthwise_kernel(depthwise, ksize, outputs) -> np.ndarray:
    """A depthwise kernel [kh, kw, channels, multiplier] read, as the grouped Conv2D's [kh, kw, 1, outputs]."""
    kernel = depthwise.read().reshape(ksize + (1, outputs))
    kernel.flags.writeable = False
    return kernel


def _global_pool(entry, cls, in_shape, cpath) -> Reduce:
    """GlobalAverage/MaxPooling1D/2D: mean or max over the spatial axes (keepdims as configured)."""
    cfg, name = entry["config"], _layer_name(entry)
    _channels_last(cfg, cls, cpath, name)
    rank = 1 if cls.endswith("1D") else 2
    if len(in_shape) != rank + 1:
        raise _err(f"{cls} needs a rank-{rank + 1} channels-last input, got shape {tuple(in_shape)}", cpath, name)
    keepdims = _bool(cfg, "keepdims", cpath, name, default=False)
    return Reduce(name=name, op="mean" if "Average" in cls else "max", axes=tuple(range(rank)),
                  keepdims=keepdims, source_type=cls)


def _upsampling(entry, in_shape, cpath) -> Resize:
    """UpSampling2D: nearest repeats each cell (Resize nearest/asymmetric/floor); bilinear is
    tf.image.resize / torch interpolate without align_corners (Resize linear/half_pixel)."""
    cfg, name = entry["config"], _layer_name(entry)
    _channels_last(cfg, "UpSampling2D", cpath, name)
    if len(in_shape) != 3:
        raise _err(f"UpSampling2D needs a (height, width, channels) input, got shape {tuple(in_shape)}",
                   cpath, name)
    size = _int_list(cfg, "size", 2, cpath, name, default=2)
    mode = _str(cfg, "interpolation", cpath, name, default="nearest")
    h, w, c = in_shape
    sizes, scales = (h * size[0], w * size[1], c), (float(size[0]), float(size[1]), 1.0)
    if mode == "nearest":
        return Resize(name=name, sizes=sizes, scales=scales, mode="nearest", coordinate_mode="asymmetric",
                      nearest_mode="floor", source_type="UpSampling2D")
    if mode == "bilinear":
        return Resize(name=name, sizes=sizes, scales=scales, mode="linear", coordinate_mode="half_pixel",
                      source_type="UpSampling2D")
    raise _err(f"UpSampling2D interpolation {_show(mode)} is not supported (nearest, bilinear)", cpath, name)


def _cropping(entry, cls, in_shape, cpath) -> Slice:
    """Cropping1D/2D: a Slice keeping the middle cells of the spatial axes."""
    cfg, name = entry["config"], _layer_name(entry)
    rank = 1 if cls == "Cropping1D" else 2
    if rank == 2:
        _channels_last(cfg, cls, cpath, name)
    if len(in_shape) != rank + 1:
        raise _err(f"{cls} needs a rank-{rank + 1} channels-last input, got shape {tuple(in_shape)}", cpath, name)
    crop = cfg.get("cropping", 1 if rank == 2 else [1, 1])

    def ints(values):
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)

    if rank == 1 and isinstance(crop, list) and len(crop) == 2 and ints(crop):
        pairs = [tuple(crop)]
    elif rank == 2 and isinstance(crop, int) and ints([crop]):
        pairs = [(crop, crop), (crop, crop)]
    elif rank == 2 and isinstance(crop, list) and len(crop) == 2 and ints(crop):
        pairs = [(crop[0], crop[0]), (crop[1], crop[1])]
    elif (rank == 2 and isinstance(crop, list) and len(crop) == 2
          and all(isinstance(v, list) and len(v) == 2 and ints(v) for v in crop)):
        pairs = [tuple(crop[0]), tuple(crop[1])]
    else:
        raise _err(f"{cls} cropping {_show(crop)} is not " + ("2 integers >= 0" if rank == 1 else
                   "an integer >= 0, 2 of them or 2 pairs of them"), cpath, name)
    counts = [n - b - a for n, (b, a) in zip(in_shape, pairs)]
    if min(counts) < 1:
        raise _err(f"{cls} cropping {_show(crop)} leaves nothing of the input {tuple(in_shape)}", cpath, name)
    return Slice(name=name, starts=tuple(b for b, _ in pairs) + (0,), steps=(1,) * (rank + 1),
                 counts=tuple(counts) + (in_shape[-1],), source_type=cls)


def _pool2d(entry, cls, in_shape, cpath) -> Pool2D:
    cfg, name = entry["config"], _layer_name(entry)
    _channels_last(cfg, cls, cpath, name)
    pool = _int_list(cfg, "pool_size", 2, cpath, name, default=2)
    strides = _int_list(cfg, "strides", 2, cpath, name, default=list(pool))
    pads = _padding_of(cfg, cls, in_shape, pool, strides, (1, 1), cpath, name)
    return Pool2D(name=name, mode="max" if cls == "MaxPooling2D" else "avg", pool=pool,
                  strides=strides, padding=pads, source_type=cls)


def _zeropad(entry, cpath) -> ZeroPadding2D:
    cfg, name = entry["config"], _layer_name(entry)
    _channels_last(cfg, "ZeroPadding2D", cpath, name)
    pad = cfg.get("padding", 1)

    def ints(values):
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)

    if isinstance(pad, int) and ints([pad]):
        pads = (pad,) * 4
    elif isinstance(pad, list) and len(pad) == 2 and ints(pad):
        pads = (pad[0], pad[0], pad[1], pad[1])
    elif (isinstance(pad, list) and len(pad) == 2
          and all(isinstance(v, list) and len(v) == 2 and ints(v) for v in pad)):
        pads = (pad[0][0], pad[0][1], pad[1][0], pad[1][1])
    else:
        raise _err(f"ZeroPadding2D padding {_show(pad)} is not an integer >= 0, 2 of them "
                   "or 2 pairs of them", cpath, name)
    return ZeroPadding2D(name=name, padding=pads)


def _axis(value, rank, cls, path, layer) -> int:
    """A Keras axis (batch axis = 0, negative from the end) as a 0-based axis without the batch."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(f"{cls} axis {_show(value)} is not supported (one axis)", path, layer)
    axis = value + rank if value < 0 else value - 1
    if not 0 <= axis < rank:
        raise _err(f"{cls} axis {value} is out of range for a rank-{rank} input", path, layer)
    return axis


def _batchnorm(entry, in_shape, root, cpath, wpath) -> BatchNorm:
    cfg, name = entry["config"], _layer_name(entry)
    axis = _axis(cfg.get("axis", -1), len(in_shape), "BatchNormalization", cpath, name)
    if axis != len(in_shape) - 1:
        raise _err(f"BatchNormalization over axis {_show(cfg.get('axis'))} is not supported "
                   "(the last, channels axis only)", cpath, name)
    scale = _bool(cfg, "scale", cpath, name, default=True)
    center = _bool(cfg, "center", cpath, name, default=True)
    epsilon = _float(cfg, "epsilon", cpath, name, default=1e-3, minimum=0)
    want = 2 + scale + center
    arrays = _weights_by_count(root, name, wpath, "BatchNormalization", (want,),
                               f"BatchNormalization with scale={scale}, center={center}")
    n = in_shape[-1]
    labels = ["gamma"] * scale + ["beta"] * center + ["moving_mean", "moving_variance"]
    for label, stored in zip(labels, arrays):  # declared shapes first: nothing is read before they match
        if stored.shape != (n,):
            raise _err(f"{label} has shape {stored.shape}, the input has {n} channels", wpath, name)
    arrays = [stored.read() for stored in arrays]
    gamma = arrays.pop(0) if scale else np.ones(n, np.float32)
    beta = arrays.pop(0) if center else np.zeros(n, np.float32)
    mean, var = arrays
    bad = np.flatnonzero(~(var.astype(np.float64) + epsilon > 0))
    if bad.size:
        raise _err(f"BatchNormalization moving_variance + epsilon must be > 0 (channel {int(bad[0])}: "
                   f"variance {float(var[bad[0]]):.6g}, epsilon {epsilon:.6g})", wpath, name)
    return BatchNorm(name=name, gamma=gamma, beta=beta, mean=mean, variance=var, epsilon=epsilon)


def _relu_layer(entry, cpath):
    """keras.layers.ReLU: f(x) = max_value for x >= max_value, x for threshold <= x < max_value,
    negative_slope * (x - threshold) below. Lowered when threshold is 0: relu, clip(0, max_value),
    leaky_relu(negative_slope); other combinations are refused."""
    cfg, name = entry["config"], _layer_name(entry)
    max_value = _float(cfg, "max_value", cpath, name, default=None)
    slope = _float(cfg, "negative_slope", cpath, name, default=0.0)
    threshold = _float(cfg, "threshold", cpath, name, default=0.0)
    if max_value is not None and max_value < 0:
        raise _err(f"ReLU max_value must be >= 0, got {max_value:g}", cpath, name)
    if threshold != 0:
        raise _err(f"ReLU with threshold={threshold:g} is not supported (no IR layer computes it; "
                   "threshold 0 only)", cpath, name)
    if slope == 0 and max_value is None:
        return Activation(name=name, activation="relu", source_type="ReLU")
    if slope == 0:
        return Unary(name=name, op="clip", params=(0.0, max_value), source_type="ReLU")
    if max_value is None:
        return Unary(name=name, op="leaky_relu", params=(slope,), source_type="ReLU")
    raise _err("ReLU with both negative_slope and max_value is not supported", cpath, name)


def _leaky_relu(entry, cpath) -> Unary:
    """LeakyReLU: Keras 3 negative_slope, Keras 2 alpha (default 0.3 in both)."""
    cfg, name = entry["config"], _layer_name(entry)
    key = "negative_slope" if cfg.get("negative_slope") is not None else "alpha"
    return Unary(name=name, op="leaky_relu", params=(_float(cfg, key, cpath, name, default=0.3),),
                 source_type="LeakyReLU")


def _softmax_layer(entry, shape, cpath):
    """Softmax(axis): the last axis is the Activation (as before), any other one axis IR Softmax."""
    cfg, name = entry["config"], _layer_name(entry)
    axis = _axis(cfg.get("axis", -1), len(shape), "Softmax", cpath, name)
    if axis == len(shape) - 1:
        return Activation(name=name, activation="softmax", source_type="Softmax")
    return Softmax(name=name, axis=axis, source_type="Softmax")


#: Keras merge layers computed by the IR Elementwise layer.
_ELEMENTWISE = {"Multiply": "mul", "Subtract": "sub", "Maximum": "max", "Minimum": "min", "Average": "mean"}


def _merge(entry, cls, in_shapes, cpath):
    name = _layer_name(entry)
    if len(in_shapes) < 2 or (cls == "Subtract" and len(in_shapes) != 2):
        raise _err(f"{cls} takes {'exactly' if cls == 'Subtract' else 'at least'} 2 inputs, "
                   f"got {len(in_shapes)}", cpath, name)
    if cls == "Add":
        return Add(name=name)
    if len({len(s) for s in in_shapes}) != 1:
        raise _err(f"{cls} inputs of different ranks {[tuple(s) for s in in_shapes]} are not supported",
                   cpath, name)
    return Elementwise(name=name, op=_ELEMENTWISE[cls], source_type=cls)


def _reshape(entry, shape, cpath) -> Reshape:
    """Keras Reshape: target_shape of positive integers, at most one -1 (inferred)."""
    cfg, name = entry["config"], _layer_name(entry)
    target = cfg.get("target_shape")
    if (not isinstance(target, list) or not target
            or any(isinstance(d, bool) or not isinstance(d, int) or (d < 1 and d != -1) for d in target)
            or target.count(-1) > 1):
        raise _err(f"Reshape target_shape {_show(target)} must be positive integers and at most one -1",
                   cpath, name)
    size = int(np.prod(shape, dtype=object))
    known = int(np.prod([d for d in target if d != -1], dtype=object))
    if -1 in target:
        if size % known:
            raise _err(f"cannot reshape {tuple(shape)} to {tuple(target)}", cpath, name)
        target = [size // known if d == -1 else d for d in target]
    return Reshape(name=name, target_shape=tuple(target))


#: Layers that take several inputs.
_MERGES = ("Add", "Concatenate") + tuple(_ELEMENTWISE)
#: Layers with a fused `activation` (a Keras activation beyond ACTIVATIONS becomes a Unary after them).
_FUSED = ("Dense", "Conv1D", "Conv2D", "DepthwiseConv2D", "SeparableConv2D")


def _layer(entry, in_shapes, prev_names, root, cpath, wpath, keras3=False) -> List:
    """The IR layers of one Keras layer entry, given its input shapes: most give one, Conv1D and
    SeparableConv2D several, and an activation beyond ACTIVATIONS adds a Unary layer after them.
    The last one computes the Keras layer's output."""
    cls = entry["class_name"]
    cfg = entry["config"]
    name = _layer_name(entry)
    if cls not in _MERGES and len(in_shapes) != 1:
        raise _err(f"{cls} takes one input, but is fed by {len(in_shapes)} "
                   f"({', '.join(n or 'the model input' for n in prev_names)})", cpath, name)
    unary = None
    if cls in _FUSED + ("Activation",):
        unary = _unary_activation(_activation_text(cfg.get("activation")), keras3)
        if unary is not None:
            if cls == "Activation":
                return [Unary(name=name, op=unary[0], params=unary[1], source_type="Activation")]
            entry = dict(entry, config=dict(cfg, activation="linear"))
            cfg = entry["config"]
    layers = _one_layer(entry, cls, cfg, name, in_shapes, prev_names, root, cpath, wpath)
    layers = layers if isinstance(layers, list) else [layers]
    if unary is not None:
        layers.append(Unary(name=f"{name}_{unary[0]}", op=unary[0], params=unary[1], source_type=cls))
    return layers


def _one_layer(entry, cls, cfg, name, in_shapes, prev_names, root, cpath, wpath):
    shape = in_shapes[0]
    if cls == "Dense":
        return _dense(entry, shape, prev_names[0], root, cpath, wpath)
    if cls == "Activation":
        act = _activation_name(cfg.get("activation"), cpath, name, "Activation")
        return Activation(name=name, activation=act, source_type="Activation")
    if cls == "ReLU":
        return _relu_layer(entry, cpath)
    if cls == "LeakyReLU":
        return _leaky_relu(entry, cpath)
    if cls == "ELU":
        return Unary(name=name, op="elu", params=(_float(cfg, "alpha", cpath, name, default=1.0),),
                     source_type="ELU")
    if cls == "Softmax":
        return _softmax_layer(entry, shape, cpath)
    if cls in ("Conv1D", "Conv2D"):
        return _conv2d(entry, shape, root, cpath, wpath, cls)
    if cls in ("DepthwiseConv2D", "SeparableConv2D"):
        return _depthwise(entry, cls, shape, root, cpath, wpath)
    if cls in ("MaxPooling2D", "AveragePooling2D"):
        return _pool2d(entry, cls, shape, cpath)
    if cls in ("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D", "GlobalMaxPooling2D"):
        return _global_pool(entry, cls, shape, cpath)
    if cls == "UpSampling2D":
        return _upsampling(entry, shape, cpath)
    if cls in ("Cropping1D", "Cropping2D"):
        return _cropping(entry, cls, shape, cpath)
    if cls == "ZeroPadding2D":
        return _zeropad(entry, cpath)
    if cls == "BatchNormalization":
        return _batchnorm(entry, shape, root, cpath, wpath)
    if cls == "Flatten":
        _channels_last(cfg, cls, cpath, name)
        return Flatten(name=name)
    if cls == "Reshape":
        return _reshape(entry, shape, cpath)
    if cls in ("LSTM", "GRU"):
        return _recurrent(entry, cls, shape, root, cpath, wpath)
    if cls == "Concatenate":
        return Concatenate(name=name, axis=_axis(cfg.get("axis", -1), len(shape), cls, cpath, name))
    if cls in _MERGES:
        return _merge(entry, cls, in_shapes, cpath)
    raise _err(f"{cls} is not supported (supported: {', '.join(SUPPORTED_LAYERS)})", cpath, name)


def _input_shape(entries, root, cpath, wpath, top_config) -> Tuple[int, ...]:
    """The model input shape: the first layer's declared shape, Keras 3 build_input_shape, or the
    first Dense kernel."""
    entry = entries[0]
    cls, name = entry["class_name"], _layer_name(entry)
    input_shape = _shape_from(entry["config"], cpath, name)
    build = top_config.get("build_input_shape")  # Keras 3 Sequential without InputLayer
    if input_shape is None and build is not None:
        if not isinstance(build, list) or len(build) < 2:
            raise _err(f"build_input_shape {_show(build)} is not [batch, dimension, ...]", cpath)
        input_shape = _dims(build[1:], "build_input_shape", cpath, name)
    if input_shape is None and cls == "Dense":  # no declared shape: the kernel says it
        weights = _layer_weights(root, name, wpath, "Dense")
        if weights and weights[0][1].ndim == 2:
            input_shape = (int(weights[0][1].shape[0]),)
    if input_shape is None:
        raise _err("cannot determine the input shape (no batch_input_shape, "
                   "batch_shape or InputLayer)", cpath, name)
    return input_shape


def _build(entries, root, cpath, wpath, top_config, inbound=None, output=None, keras3=False):
    """(input shape, IR layers, ignored layers, edges or None, input tensor name), in order.

    `inbound` (Functional) gives each layer's input layer names; without it each layer reads the
    previous one (Sequential). Dropout and InputLayer make no IR layer: their output is renamed to
    their input. Layers the output does not depend on are dropped."""
    if not entries:
        raise _err("model has no layers", cpath)
    input_shape = _input_shape(entries, root, cpath, wpath, top_config)
    first = entries[0]
    input_name = _layer_name(first) if first["class_name"] == "InputLayer" else "input"
    alias = {}                       # dropped (or lowered) layer name -> the tensor it passes on
    keras_names = {_layer_name(e) for e in entries}
    shapes = {input_name: input_shape}
    layers, sources, ignored = [], {}, []
    previous = input_name
    for i, entry in enumerate(entries):
        cls, name = entry["class_name"], _layer_name(entry)
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
        try:
            produced = _layer(entry, [shapes[s] for s in srcs], shown, root, cpath, wpath, keras3)
        except ValueError as exc:  # an IR layer refused its parameters (NNBuildError is no ValueError)
            raise _err(f"{cls} {exc}", cpath, name) from None
        for layer in produced:  # one Keras layer may give several IR layers, each reading the one before
            if layer.name != name and (layer.name in shapes or layer.name in alias
                                       or layer.name in keras_names):
                raise _err(f"the name '{layer.name}' of a layer {cls} is lowered to is already taken",
                           cpath, name)
            try:
                shapes[layer.name] = tuple(int(d) for d in layer.output_shape(*[shapes[s] for s in srcs]))
            except ValueError as exc:
                src = ", ".join(f"layer '{s}'" if s != input_name else "the model input" for s in srcs)
                raise _err(f"{cls}: {exc} (input from {src}; inconsistent shapes)", cpath, name) from None
            layers.append(layer)
            sources[layer.name] = tuple(srcs)
            srcs = [layer.name]
        if produced[-1].name != name:
            alias[name] = produced[-1].name
        previous = produced[-1].name
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


def _is_keras3(version, entries) -> bool:
    """Keras 3 wrote it (its version, else its config style: entries carry a 'module')."""
    version = str(version or "")
    if version[:1].isdigit():
        return version.split(".")[0] == "3"
    return any("module" in e for e in entries)


def _model(name, model_config, root, cpath, wpath, meta) -> Model:
    """Assemble the IR Model and its traceability meta."""
    cls, entries, top, inbound, output = _layer_entries(model_config, cpath)
    keras3 = _is_keras3(meta.get("keras_version"), entries)
    # the Keras 3 weights layout needs the layer list to map its keys
    root = root(entries) if callable(root) else LegacyWeights(root, wpath)
    input_shape, layers, ignored, edges, input_name = _build(entries, root, cpath, wpath, top, inbound, output,
                                                             keras3)
    sources = tuple(dict.fromkeys(str(p) for p in (cpath, wpath)))
    meta = dict(meta, model_class=cls, source_files=list(sources), ignored_layers=ignored)
    return Model(name=c_identifier(name), input_shape=input_shape, layers=layers,
                 source_files=sources, meta=meta, edges=edges, input_name=input_name)


# --------------------------------------------------------------------------- public entry points


def load_full_model(path) -> Model:
    """Read a full-model .h5 (root attr model_config + group model_weights)."""
    with _open_h5(path) as f:
        try:
            check_hdf5(f, path)
            raw = _attr(f.attrs, "model_config", path)
            if raw is None:
                raise _err("missing model_config attribute (a weights-only file? load its "
                           "architecture .json instead, with this file next to it)", path)
            config = _json(_text(raw, path, "model_config"), path, "model_config")
            if not isinstance(f.get("model_weights"), h5py.Group):
                raise _err("missing model_weights group (model saved without weights?)", path)
            meta = {
                "format": "keras-h5",
                "keras_version": _text(_attr(f.attrs, "keras_version", path, "unknown")),
                "backend": _text(_attr(f.attrs, "backend", path, "unknown")),
            }
            return _model(Path(path).stem, config, f["model_weights"], path, path, meta)
        except (OSError, RuntimeError) as exc:  # h5py on a corrupt file
            if isinstance(exc, RecursionError):
                raise
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
    config = files.read_json(json_path, "model json")
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
        check_hdf5(f, wpath)
        meta = {
            "format": "keras-json",
            "keras_version": _text(_attr(f.attrs, "keras_version", wpath, version)),
            "backend": _text(_attr(f.attrs, "backend", wpath, "unknown")),
        }
        return _model(name, config, _weights_root(f, wpath), json_path, wpath, meta)
    except (OSError, RuntimeError) as exc:  # h5py on a corrupt file
        if isinstance(exc, RecursionError):
            raise
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


# --------------------------------------------------------------------------- writing


def write_dense(path, name, layers):
    """A Keras 2 full-model .h5 (Sequential of Dense layers, as model.save writes it) that this
    reader loads back: `layers` = [(layer name, kernel [in][out], bias [out], activation)]. The
    JIT exports trained Gravity programs with it, so every nnbuild target can build them."""
    import h5py

    specs = []
    for index, (layer, kernel, bias, activation) in enumerate(layers):
        config = {"name": layer, "units": int(np.shape(kernel)[1]), "activation": activation, "use_bias": True,
                  "trainable": True, "dtype": "float32"}
        if index == 0:
            config["batch_input_shape"] = [None, int(np.shape(kernel)[0])]
        specs.append((layer, config, np.asarray(kernel, np.float32), np.asarray(bias, np.float32)))
    model_config = {"class_name": "Sequential",
                    "config": {"name": name, "layers": [{"class_name": "Dense", "config": c} for _, c, _, _ in specs]}}
    with files.atomic(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110")) as f:
            f.attrs["keras_version"] = "2.3.1"
            f.attrs["backend"] = "tensorflow"
            f.attrs["model_config"] = json.dumps(model_config, sort_keys=True)
            root = f.create_group("model_weights")
            root.attrs["keras_version"] = "2.3.1"
            root.attrs["backend"] = "tensorflow"
            root.attrs["layer_names"] = np.array([s[0].encode() for s in specs])
            for layer, _, kernel, bias in specs:
                group = root.create_group(layer)
                group.attrs["weight_names"] = np.array([f"{layer}/kernel:0".encode(), f"{layer}/bias:0".encode()])
                sub = group.create_group(layer)
                sub.create_dataset("kernel:0", data=kernel, track_times=False)
                sub.create_dataset("bias:0", data=bias, track_times=False)
