"""Write small Keras-format HDF5/JSON files with h5py only (no TensorFlow), for front-end tests.

A layer is a spec dict {"class_name", "config", "weights": [(short_name, array), ...]}; the
writers lay the weights out as Keras 1.2.1 (`<name>_W`), Keras 2 (`<name>/kernel:0`) or Keras 3
legacy h5 (`sequential/<name>/kernel`) would, see docs formats.md section 1.
"""

import json
import shutil
from pathlib import Path

import h5py
import numpy as np

_KERAS1_SUFFIX = {"kernel": "W", "bias": "b"}
_DTYPE_POLICY = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
                 "registered_name": None}


def edit_one_weight(path):
    """Add 0.25 to the first element of the first kernel dataset of the HDF5 model file `path`, in place."""
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and "kernel" in n else None)
        data = f[names[0]]
        data[0, 0] = data[0, 0] + np.float32(0.25)


def dense(name, kernel, bias=None, activation="linear", *, input_dim=None, keras=2):
    """A Dense layer spec; keras=1 uses the Keras 1 config keys (output_dim, bias)."""
    kernel = np.asarray(kernel, dtype=np.float32)
    units = int(kernel.shape[1])
    if keras == 1:
        cfg = {"name": name, "output_dim": units, "activation": activation, "bias": bias is not None,
               "init": "uniform", "trainable": True, "input_dim": int(kernel.shape[0])}
    else:
        cfg = {"name": name, "units": units, "activation": activation, "use_bias": bias is not None,
               "trainable": True,
               "dtype": _DTYPE_POLICY if keras == 3 else "float32",
               "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}}}
    if input_dim is not None:
        cfg["batch_input_shape"] = [None, int(input_dim)]
    weights = [("kernel", kernel)]
    if bias is not None:
        weights.append(("bias", np.asarray(bias, dtype=np.float32)))
    return {"class_name": "Dense", "config": cfg, "weights": weights}


def activation(name, act):
    """An Activation layer spec."""
    return {"class_name": "Activation", "config": {"name": name, "activation": act}, "weights": []}


def dropout(name, rate=0.5):
    """A Dropout layer spec (no weights)."""
    return {"class_name": "Dropout", "config": {"name": name, "rate": rate}, "weights": []}


def input_layer(name, shape, *, keras=2):
    """An InputLayer spec: batch_input_shape (Keras 1/2) or batch_shape (Keras 3)."""
    key = "batch_shape" if keras == 3 else "batch_input_shape"
    return {"class_name": "InputLayer",
            "config": {"name": name, key: [None] + list(shape), "dtype": "float32", "sparse": False},
            "weights": []}


def conv2d(name, kernel, bias, input_shape=None):
    """A Conv2D layer spec (kernel [kh, kw, in, out]) for the unsupported-layer error."""
    cfg = {"name": name, "filters": int(np.shape(kernel)[3]), "kernel_size": list(np.shape(kernel)[:2]),
           "strides": [1, 1], "padding": "valid", "activation": "relu", "use_bias": True}
    if input_shape is not None:
        cfg["batch_input_shape"] = [None] + list(input_shape)
    return {"class_name": "Conv2D", "config": cfg,
            "weights": [("kernel", np.asarray(kernel, np.float32)), ("bias", np.asarray(bias, np.float32))]}


def model_config(layers, *, style="dict", name="sequential_1"):
    """The model_config / to_json() object: style 'list' (Keras 1, 2.0-2.1 Sequential),
    'dict' (Keras 2.2+ Sequential), 'functional' (Keras 2 Model chain, inbound_nodes lists) or
    'functional3' (Keras 3 Functional chain, keras_history dicts)."""
    plain = [{"class_name": s["class_name"], "config": s["config"]} for s in layers]
    if style == "list":
        return {"class_name": "Sequential", "config": plain}
    if style == "dict":
        return {"class_name": "Sequential", "config": {"name": name, "layers": plain}}
    entries = []
    for i, s in enumerate(layers):
        entry = {"class_name": s["class_name"], "config": s["config"], "name": s["config"]["name"]}
        if i == 0:
            entry["inbound_nodes"] = []
        elif style == "functional":
            entry["inbound_nodes"] = [[[layers[i - 1]["config"]["name"], 0, 0, {}]]]
        else:
            entry["inbound_nodes"] = [{"args": [{"class_name": "__keras_tensor__", "config": {
                "shape": [None, 1], "dtype": "float32",
                "keras_history": [layers[i - 1]["config"]["name"], 0, 0]}}], "kwargs": {}}]
        entries.append(entry)
    first, last = layers[0]["config"]["name"], layers[-1]["config"]["name"]
    return {"class_name": "Functional" if style == "functional3" else "Model",
            "config": {"name": "model_1", "layers": entries,
                       "input_layers": [[first, 0, 0]], "output_layers": [[last, 0, 0]]}}


def _names(values):
    """Attribute array of fixed-length byte strings, as Keras 2 writes (empty -> float array)."""
    return np.array([v.encode() for v in values]) if values else np.array([], dtype=np.float64)


def _set_names(attrs, key, values, split):
    """Write a names attribute, optionally split into key0, key1 like Keras for > 64 KiB."""
    if split and len(values) > 1:
        half = (len(values) + 1) // 2
        attrs[f"{key}0"] = _names(values[:half])
        attrs[f"{key}1"] = _names(values[half:])
    else:
        attrs[key] = _names(values)


def write_layer_weights(root, layers, *, layout="keras2", split=False, keras_version="2.3.1",
                        skip=()):
    """Write the model_weights layout into `root` (an h5py group).

    layout: 'keras1' | 'keras2' | 'keras3'. `skip` lists '<layer>/<short>' datasets to leave
    out while keeping them in weight_names (to provoke a missing-dataset error).
    """
    root.attrs["backend"] = "tensorflow"
    root.attrs["keras_version"] = keras_version
    _set_names(root.attrs, "layer_names", [s["config"]["name"] for s in layers], split)
    for s in layers:
        name = s["config"]["name"]
        group = root.create_group(name)
        wnames = []
        for short, arr in s["weights"]:
            if layout == "keras1":
                wname, sub = f"{name}_{_KERAS1_SUFFIX[short]}", group
                dname = wname
            elif layout == "keras3":
                wname = f"sequential/{name}/{short}"
                sub, dname = group.require_group(f"sequential/{name}"), short
            else:
                wname = f"{name}/{short}:0"
                sub, dname = group.require_group(name), f"{short}:0"
            wnames.append(wname)
            if f"{name}/{short}" not in skip:
                sub.create_dataset(dname, data=arr, track_times=False)
        _set_names(group.attrs, "weight_names", wnames, split)
    if layout == "keras3":
        root.create_group("top_level_model_weights").attrs["weight_names"] = _names([])


def write_full_model(path, layers, *, style="dict", layout="keras2", keras_version="2.3.1",
                     split=False, config=None, skip=(), with_config=True):
    """A full-model .h5 as `model.save` writes it (model_config + model_weights)."""
    path = Path(path)
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f.attrs["keras_version"] = keras_version
        f.attrs["backend"] = "tensorflow"
        if with_config:
            cfg = config if config is not None else model_config(layers, style=style)
            f.attrs["model_config"] = json.dumps(cfg)
        write_layer_weights(f.create_group("model_weights"), layers, layout=layout, split=split,
                            keras_version=keras_version, skip=skip)
    return path


def write_pair(json_path, layers, *, weights_name=None, style="dict", layout="keras2",
               keras_version="2.3.1"):
    """A Keras2C pair: json (model.to_json()) + weights .h5 (save_weights, layout at the root).

    weights_name defaults to the convention: weights.h5 for architecture.json, else
    <stem>.weights.h5. Returns (json_path, weights_path).
    """
    json_path = Path(json_path)
    if weights_name is None:
        weights_name = "weights.h5" if json_path.name == "architecture.json" else json_path.stem + ".weights.h5"
    cfg = dict(model_config(layers, style=style), keras_version=keras_version, backend="tensorflow")
    json_path.write_text(json.dumps(cfg, sort_keys=True, indent=2) + "\n")
    wpath = json_path.with_name(weights_name)
    with h5py.File(wpath, "w", libver=("earliest", "v110")) as f:
        write_layer_weights(f, layers, layout=layout, keras_version=keras_version)
    return json_path, wpath


def truncated_copy(src, dst, fraction=0.5):
    """Copy the first `fraction` of src's bytes to dst (a truncated download)."""
    data = Path(src).read_bytes()
    Path(dst).write_bytes(data[: int(len(data) * fraction)])
    return Path(dst)


def copy(src, dst):
    """Plain copy into a temporary directory (never into the repo)."""
    shutil.copyfile(src, dst)
    return Path(dst)


# ----------------------------------------------------------------------------- any layer, graphs
# (issue 12: the layers beyond Dense/Conv2D, and Functional graphs with merge layers)


def layer(class_name, name, weights=(), **config):
    """Any layer spec: `config` as given plus the name; weights [(short_name, array), ...] in
    Keras' variable order (written as <name>/<short>:0 in the Keras 2 layout)."""
    return {"class_name": class_name, "config": dict(config, name=name),
            "weights": [(short, np.asarray(arr, np.float32)) for short, arr in weights]}


def graph_config(layers, inbound, *, output=None, keras=2):
    """A Functional model config whose layer `name` reads the layers inbound[name] (a list of names;
    the first layer, an InputLayer, reads nothing). Keras 2 inbound_nodes lists, or Keras 3
    keras_history dicts."""
    entries = []
    for s in layers:
        name = s["config"]["name"]
        srcs = inbound.get(name, [])
        entry = {"class_name": s["class_name"], "config": s["config"], "name": name}
        if not srcs:
            entry["inbound_nodes"] = []
        elif keras == 2:
            entry["inbound_nodes"] = [[[src, 0, 0, {}] for src in srcs]]
        else:
            tensors = [{"class_name": "__keras_tensor__", "config": {
                "shape": [None, 1], "dtype": "float32", "keras_history": [src, 0, 0]}} for src in srcs]
            entry["inbound_nodes"] = [{"args": [tensors] if len(tensors) > 1 else tensors, "kwargs": {}}]
            entry["module"] = "keras.layers"
        entries.append(entry)
    last = output or layers[-1]["config"]["name"]
    return {"class_name": "Functional" if keras == 3 else "Model",
            "config": {"name": "model_1", "layers": entries, "input_layers": [[layers[0]["config"]["name"], 0, 0]],
                       "output_layers": [[last, 0, 0]]}}
