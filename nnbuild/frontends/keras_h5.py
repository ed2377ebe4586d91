"""Keras HDF5 front-end (MLPs), read with h5py only: never imports TensorFlow or Keras.

Accepts (see docs formats.md section 1):
* a full-model `.h5` (`model.save`) from Keras 1.2.1, 2.x, tf_keras or Keras 3 (legacy h5):
  root attribute `model_config` + group `model_weights`;
* the Keras2C pair `architecture.json` (`model.to_json()`) + `weights.h5` (`save_weights`,
  the `model_weights` layout at the file root).

Supported layers: InputLayer, Dense, Activation, Dropout (identity at inference, dropped and
recorded in meta["ignored_layers"]). Models: Sequential (list or {"layers": [...]} config) and
Functional/Model graphs that are a simple chain. Every failure is a one-line NNBuildError
naming the file and, where there is one, the layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.frontends import c_identifier
from nnbuild.ir.graph import ACTIVATIONS, Activation, Dense, Model

try:  # h5py is a declared dependency; import errors surface as one line at load time.
    import h5py
except ImportError:  # pragma: no cover
    h5py = None

#: Layer classes this front-end turns into IR layers (or drops, for inference-only no-ops).
SUPPORTED_LAYERS = ("Activation", "Dense", "Dropout", "InputLayer")
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


def _chain_layers(config: dict, path) -> List[dict]:
    """The layer entries of a Functional/Model config, checked to be one simple chain."""
    entries = list(config.get("layers") or [])
    for prev, entry in zip(entries, entries[1:]):
        inbound = _inbound_names(entry)
        if inbound != [_layer_name(prev)]:
            raise _err(
                f"takes inputs from {inbound or 'nothing'}, not only from the previous layer "
                f"'{_layer_name(prev)}': only simple chains of layers are supported",
                path, _layer_name(entry))
    for key in ("input_layers", "output_layers"):
        ends = config.get(key)
        if ends is not None and len(ends) != 1:
            raise _err(f"model has {len(ends)} {key.split('_')[0]}s; exactly one is supported", path)
    return entries


def _layer_entries(model_config, path) -> Tuple[str, List[dict], dict]:
    """(model class, layer entries in execution order, the model-level config dict)."""
    if not isinstance(model_config, dict) or "class_name" not in model_config:
        raise _err("model config has no 'class_name' (not a Keras model config)", path)
    cls = model_config["class_name"]
    config = model_config.get("config")
    if cls == "Sequential":
        if isinstance(config, list):  # Keras 1.x and 2.0/2.1
            return cls, config, {}
        if isinstance(config, dict) and isinstance(config.get("layers"), list):
            return cls, config["layers"], config
        raise _err("Sequential config has no layer list", path)
    if cls in ("Functional", "Model"):
        if not isinstance(config, dict):
            raise _err(f"{cls} config is not an object", path)
        return cls, _chain_layers(config, path), config
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
    if prev_shape is not None and len(prev_shape) != 1:
        raise _err(f"Dense on a rank-{len(prev_shape)} input {prev_shape} is not supported "
                   "by the MLP front-end (flat vector inputs only)", cpath, name)
    if prev_shape is not None and kernel.shape[0] != prev_shape[0]:
        src = f"layer '{prev_name}'" if prev_name else "the model input"
        raise _err(f"kernel shape {kernel.shape} does not match the input size {prev_shape[0]} "
                   f"from {src} (wrong shapes)", wpath, name)
    if units is not None and kernel.shape[1] != int(units):
        raise _err(f"kernel shape {kernel.shape} does not match units={units}", wpath, name)
    if bias is not None and bias.shape != (kernel.shape[1],):
        raise _err(f"bias shape {bias.shape} does not match units={kernel.shape[1]}", wpath, name)
    return Dense(name=name, kernel=kernel, bias=bias, activation=act, source_type="Dense")


def _build(entries, root, cpath, wpath, top_config) -> Tuple[Tuple[int, ...], list, list]:
    """(input shape, IR layers, ignored layers) from the layer entries, in order."""
    build = top_config.get("build_input_shape")  # Keras 3 Sequential without InputLayer
    input_shape = tuple(build[1:]) if build else None
    shape, prev_name, layers, ignored = None, None, [], []
    for i, entry in enumerate(entries):
        cls = entry.get("class_name")
        cfg = entry.get("config") or {}
        name = _layer_name(entry)
        declared = _shape_from(cfg)
        if i == 0:
            input_shape = declared or input_shape
            if input_shape is None and cls == "Dense":  # no declared shape: the kernel says it
                input_shape = (int(_layer_weights(root, name, wpath)[0][1].shape[0]),)
            if input_shape is None:
                raise _err("cannot determine the input shape (no batch_input_shape, "
                           "batch_shape or InputLayer)", cpath, name)
            if any(not isinstance(d, int) or d <= 0 for d in input_shape):
                raise _err(f"input shape {input_shape} is not fully known", cpath, name)
            shape = tuple(input_shape)
        if cls == "InputLayer":
            if i != 0:
                raise _err("InputLayer must be the first layer", cpath, name)
            continue
        if cls == "Dense":
            layer = _dense(entry, shape, prev_name, root, cpath, wpath)
        elif cls == "Activation":
            act = _activation_name(cfg.get("activation"), cpath, name, "Activation")
            layer = Activation(name=name, activation=act, source_type="Activation")
        elif cls in _INFERENCE_NOOPS:
            ignored.append({"name": name, "type": cls, "reason": "identity at inference"})
            continue
        else:
            raise _err(f"{cls} is not supported by the MLP front-end "
                       f"(supported: {', '.join(SUPPORTED_LAYERS)})", cpath, name)
        layers.append(layer)
        shape = tuple(layer.output_shape(shape))
        prev_name = name
    if not layers:
        raise _err("model has no computing layer (Dense or Activation)", cpath)
    return tuple(int(d) for d in input_shape), layers, ignored


def _model(name, model_config, root, cpath, wpath, meta) -> Model:
    """Assemble the IR Model and its traceability meta."""
    cls, entries, top = _layer_entries(model_config, cpath)
    input_shape, layers, ignored = _build(entries, root, cpath, wpath, top)
    sources = tuple(dict.fromkeys(str(p) for p in (cpath, wpath)))
    meta = dict(meta, model_class=cls, source_files=list(sources), ignored_layers=ignored)
    return Model(name=c_identifier(name), input_shape=input_shape, layers=layers,
                 source_files=sources, meta=meta)


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
