"""Keras HDF5 front-end: real legacy files give their golden outputs, crafted files cover every
layout and every error (one line, naming the file and the layer)."""

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

import keras_files as kf
from nnbuild import frontends
from nnbuild.errors import NNBuildError
from nnbuild.frontends import keras_h5
from nnbuild.ir import reference
from nnbuild.ir.graph import Activation, Dense

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
EXAMPLES = REPO / "firmware_examples"


def shared(*parts):
    """A file of ../shared (third-party data is never copied into the repo); skip if absent."""
    path = SHARED.joinpath("data", *parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is not beside this checkout)")
    return path


def load_error(path) -> str:
    """The message of the NNBuildError that loading `path` raises, checked to be one line."""
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert Path(path).name in msg, msg
    return msg


def mlp(keras=2, bias=True):
    """A tiny 3 -> 4 relu -> 2 linear MLP spec with fixed weights."""
    rng = np.random.default_rng(0)
    k1, k2 = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    b1, b2 = (rng.normal(size=4), rng.normal(size=2)) if bias else (None, None)
    return [kf.dense("dense_1", k1, b1, "relu", input_dim=3, keras=keras),
            kf.dense("dense_2", k2, b2, "linear", keras=keras)]


def numpy_mlp(layers, x):
    """Independent float64 forward pass of relu/linear/tanh/sigmoid Dense specs."""
    acts = {"relu": lambda v: np.maximum(v, 0), "linear": lambda v: v, "tanh": np.tanh,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    for s in layers:
        w = dict(s["weights"])
        x = x @ w["kernel"].astype(np.float64) + (w["bias"].astype(np.float64) if "bias" in w else 0)
        x = acts[s["config"]["activation"]](x)
    return x


# ----------------------------------------------------------------------------- real files


@pytest.mark.parametrize("name, golden, sizes, version", [
    ("TD3_L61_128x128_C1.h5", -0.662313857, (61, 128, 128, 1), "2.1.0"),
    ("TD3_L21_64x64_C1.h5", -0.674091275, (21, 64, 64, 1), "2.3.1"),
])
def test_f1tenth_golden(name, golden, sizes, version):
    path = shared("f1tenth", name)
    model = frontends.load(path)
    assert model.name == Path(name).stem
    assert model.input_shape == (sizes[0],)
    assert [l.units for l in model.layers] == list(sizes[1:])
    assert all(isinstance(l, Dense) and l.activation == "tanh" for l in model.layers)
    assert model.layers[0].kernel.dtype == np.float32
    assert model.meta["keras_version"] == version and model.meta["format"] == "keras-h5"
    assert model.source_files == (str(path),)
    y = reference.run(model, np.full(sizes[0], 0.1))
    assert y.shape == (1,)
    assert abs(y[0] - golden) < 1e-8


def test_keras_1_2_1_golden():
    model = frontends.load(shared("keras", "KerasTestNetwork.h5"))
    assert model.meta["keras_version"] == "1.2.1"
    assert model.input_shape == (5,) and model.output_shape == (5,)
    assert [l.activation for l in model.layers] == ["relu"] * 6 + ["linear"]
    y = reference.run(model, [0.1, -0.2, 0.3, -0.4, 0.5])
    np.testing.assert_allclose(y, [0.146638, 0.144865, 0.115396, 0.15266, 0.137517], atol=1e-6)


def _verisig_yaml(path):
    """weights {layer: [out][in]} and offsets {layer: [out]} of Verisig's flow-style YAML."""
    text = path.read_text()
    offsets_text, weights_text = re.split(r"^weights:\s*$", text.split("offsets:", 1)[1], flags=re.M)
    nums = lambda s: np.array([float(v) for v in s.replace("\n", " ").split(",")])
    offsets = {int(k): nums(v) for k, v in re.findall(r"^  (\d+): \[([^\]]*)\]", offsets_text, re.M)}
    weights = {}
    for k, body in re.findall(r"^  (\d+):\s*$(.*?)(?=^  \d+:|\Z)", weights_text, re.M | re.S):
        weights[int(k)] = np.array([nums(row) for row in re.findall(r"\[([^\]]*)\]", body)])
    return weights, offsets


@pytest.mark.parametrize("stem", ["TD3_L21_64x64_C1", "TD3_L61_128x128_C1"])
def test_f1tenth_yaml_weights_equal_h5(stem):
    model = frontends.load(shared("f1tenth", stem + ".h5"))
    weights, offsets = _verisig_yaml(shared("f1tenth", stem + ".yml"))
    for i, layer in enumerate(model.layers, start=1):
        np.testing.assert_array_equal(weights[i].astype(np.float32), layer.kernel.T)
        np.testing.assert_array_equal(offsets[i].astype(np.float32), layer.bias)


def test_cnn_golden():
    """The real Keras 2.2.4 CNN loads (Conv2D, MaxPooling2D, Flatten) and gives its golden output."""
    model = frontends.load(shared("keras", "cnn_max_mnist2.h5"))
    assert [l.kind for l in model.layers] == ["conv2d", "conv2d", "pool2d", "flatten", "dense", "dense"]
    assert model.shapes()[1:4] == [(25, 25, 8), (22, 22, 4), (11, 11, 4)]
    x = np.array([((r * 28 + c) % 17) / 16 for r in range(28) for c in range(28)]).reshape(28, 28, 1)
    np.testing.assert_allclose(reference.run(model, x), [-6.00199, -5.559069, 0.39786, 4.619772, -4.041964,
                                                         3.950669, -11.660199, -2.545813, -0.092761, -1.698758],
                               atol=1e-5)


def test_truncated_real_file(tmp_path):
    bad = kf.truncated_copy(shared("f1tenth", "TD3_L21_64x64_C1.h5"), tmp_path / "cut.h5", 0.6)
    assert "cannot read HDF5 (truncated or corrupt)" in load_error(bad)


# ----------------------------------------------------------------------------- crafted layouts


@pytest.mark.parametrize("layout, style, keras", [
    ("keras1", "list", 1), ("keras2", "list", 2), ("keras2", "dict", 2), ("keras3", "dict", 3),
])
def test_layouts_give_same_function(tmp_path, layout, style, keras):
    layers = mlp(keras=keras)
    path = kf.write_full_model(tmp_path / "net.h5", layers, layout=layout, style=style)
    model = frontends.load(path)
    x = np.random.default_rng(1).uniform(-1, 1, (5, 3))
    np.testing.assert_allclose(reference.run(model, x), numpy_mlp(layers, x), rtol=1e-12)
    assert [l.name for l in model.layers] == ["dense_1", "dense_2"]


def test_keras3_legacy_with_input_layer(tmp_path):
    layers = [kf.input_layer("input_layer", (3,), keras=3)] + mlp(keras=3)
    del layers[1]["config"]["batch_input_shape"]
    path = kf.write_full_model(tmp_path / "k3.h5", layers, layout="keras3", keras_version="3.15.1")
    model = frontends.load(path)
    assert model.input_shape == (3,) and len(model.layers) == 2


@pytest.mark.parametrize("style", ["functional", "functional3"])
def test_functional_chain(tmp_path, style):
    layers = [kf.input_layer("input_1", (3,))] + mlp()
    del layers[1]["config"]["batch_input_shape"]
    model = frontends.load(kf.write_full_model(tmp_path / "f.h5", layers, style=style))
    assert model.meta["model_class"] in ("Model", "Functional")
    x = np.ones((1, 3))
    np.testing.assert_allclose(reference.run(model, x), numpy_mlp(layers[1:], x), rtol=1e-12)


def test_functional_non_chain_is_rejected(tmp_path):
    layers = [kf.input_layer("input_1", (3,))] + mlp()
    cfg = kf.model_config(layers, style="functional")
    cfg["config"]["layers"][2]["inbound_nodes"] = [[["input_1", 0, 0, {}], ["dense_1", 0, 0, {}]]]
    msg = load_error(kf.write_full_model(tmp_path / "branch.h5", layers, config=cfg))
    assert "'dense_2'" in msg and "Dense takes one input, but is fed by 2" in msg


def test_split_name_attributes(tmp_path):
    layers = mlp()
    path = kf.write_full_model(tmp_path / "split.h5", layers, split=True)
    with h5py.File(path) as f:
        assert "layer_names0" in f["model_weights"].attrs
    np.testing.assert_allclose(reference.run(frontends.load(path), np.ones(3)),
                               numpy_mlp(layers, np.ones(3)), rtol=1e-12)


@pytest.mark.parametrize("keras, layout", [(1, "keras1"), (2, "keras2")])
def test_dense_without_bias(tmp_path, keras, layout):
    layers = mlp(keras=keras, bias=False)
    model = frontends.load(kf.write_full_model(tmp_path / "nobias.h5", layers, layout=layout))
    assert all(l.bias is None for l in model.layers)
    x = np.linspace(-1, 1, 3)
    np.testing.assert_allclose(reference.run(model, x), numpy_mlp(layers, x), rtol=1e-12)


def test_activation_dropout_softmax(tmp_path):
    rng = np.random.default_rng(2)
    layers = [kf.dense("dense_1", rng.normal(size=(4, 8)), rng.normal(size=8), "tanh", input_dim=4),
              kf.dropout("dropout_1"),
              kf.dense("dense_2", rng.normal(size=(8, 3)), np.zeros(3), "linear"),
              kf.activation("activation_1", "softmax")]
    model = frontends.load(kf.write_full_model(tmp_path / "cls.h5", layers))
    assert [type(l) for l in model.layers] == [Dense, Dense, Activation]
    assert model.layers[2].activation == "softmax"
    assert model.meta["ignored_layers"] == [
        {"name": "dropout_1", "type": "Dropout", "reason": "identity at inference"}]
    y = reference.run(model, rng.uniform(-1, 1, (6, 4)))
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-12)
    assert (y > 0).all()


def test_weight_arrays_are_read_only(tmp_path):
    model = frontends.load(kf.write_full_model(tmp_path / "ro.h5", mlp()))
    with pytest.raises(ValueError):
        model.layers[0].kernel[0, 0] = 1.0


# ----------------------------------------------------------------------------- errors


def test_missing_model_config(tmp_path):
    msg = load_error(kf.write_full_model(tmp_path / "noconf.h5", mlp(), with_config=False))
    assert "missing model_config" in msg


def test_unknown_activation(tmp_path):
    layers = mlp()
    layers[1]["config"]["activation"] = "gelu"
    msg = load_error(kf.write_full_model(tmp_path / "gelu.h5", layers))
    assert "'dense_2'" in msg and "activation 'gelu'" in msg


def test_unknown_activation_in_activation_layer(tmp_path):
    layers = mlp() + [kf.activation("act_9", "swish")]
    msg = load_error(kf.write_full_model(tmp_path / "swish.h5", layers))
    assert "'act_9'" in msg and "'swish'" in msg


def test_wrong_kernel_shape(tmp_path):
    layers = mlp()
    layers[1] = kf.dense("dense_2", np.ones((5, 2)), np.zeros(2))
    msg = load_error(kf.write_full_model(tmp_path / "shape.h5", layers))
    assert "'dense_2'" in msg and "(5, 2)" in msg and "'dense_1'" in msg


def test_first_kernel_must_match_declared_input(tmp_path):
    layers = mlp()
    layers[0]["config"]["batch_input_shape"] = [None, 7]
    msg = load_error(kf.write_full_model(tmp_path / "in.h5", layers))
    assert "'dense_1'" in msg and "model input" in msg


def test_missing_weight_dataset(tmp_path):
    path = kf.write_full_model(tmp_path / "hole.h5", mlp(), skip=("dense_2/bias",))
    msg = load_error(path)
    assert "'dense_2'" in msg and "missing weight dataset" in msg and "bias:0" in msg


def test_unsupported_layer_crafted(tmp_path):
    layers = [kf.conv2d("conv2d_1", np.ones((3, 3, 1, 2)), np.zeros(2), (8, 8, 1)),
              {"class_name": "SimpleRNN", "config": {"name": "rnn_1", "units": 4}, "weights": []}]
    msg = load_error(kf.write_full_model(tmp_path / "rnn.h5", layers))
    assert "layer 'rnn_1': SimpleRNN is not supported (supported: Activation, Add, " in msg


def test_not_hdf5(tmp_path):
    path = tmp_path / "text.h5"
    path.write_text("not an hdf5 file\n")
    assert "cannot read HDF5 (truncated or corrupt)" in load_error(path)


def test_truncated_crafted(tmp_path):
    src = kf.write_full_model(tmp_path / "full.h5", mlp())
    assert "cannot read HDF5" in load_error(kf.truncated_copy(src, tmp_path / "half.h5", 0.5))


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(NNBuildError, match=r"model\.pt.*unknown model format '\.pt'"):
        frontends.load(tmp_path / "model.pt")
    with pytest.raises(NNBuildError, match=r"absent\.h5.*not found"):
        frontends.load(tmp_path / "absent.h5")


# ----------------------------------------------------------------------------- Keras2C pair


def test_pair_architecture_json(tmp_path):
    d = tmp_path / "my-ctrl"
    d.mkdir()
    layers = mlp()
    jpath, wpath = kf.write_pair(d / "architecture.json", layers)
    assert wpath.name == "weights.h5"
    model = frontends.load(jpath)
    assert model.name == "my_ctrl"
    assert model.meta["format"] == "keras-json"
    assert model.source_files == (str(jpath), str(wpath))
    assert frontends.implicit_dependencies(jpath) == [str(wpath)]
    np.testing.assert_allclose(reference.run(model, np.ones(3)), numpy_mlp(layers, np.ones(3)), rtol=1e-12)


@pytest.mark.parametrize("weights_name", ["ctrl.weights.h5", "ctrl_weights.h5"])
def test_pair_stem_conventions(tmp_path, weights_name):
    jpath, wpath = kf.write_pair(tmp_path / "ctrl.json", mlp(), weights_name=weights_name,
                                 layout="keras1", style="list")
    assert frontends.load(jpath).name == "ctrl"
    assert [p.name for p in keras_h5.weights_candidates(jpath)] == ["ctrl.weights.h5", "ctrl_weights.h5"]
    assert frontends.implicit_dependencies(jpath) == [str(wpath)]


def test_pair_missing_weights_names_both(tmp_path):
    jpath, wpath = kf.write_pair(tmp_path / "ctrl.json", mlp())
    wpath.unlink()
    msg = load_error(jpath)
    assert "ctrl.weights.h5" in msg and "ctrl_weights.h5" in msg
    # the scanner still reports the expected file so the build can flag or make it
    assert frontends.implicit_dependencies(jpath) == [str(wpath)]


def test_pair_errors_name_weights_file_and_layer(tmp_path):
    layers = mlp()
    jpath, wpath = kf.write_pair(tmp_path / "architecture.json", layers)
    with h5py.File(wpath, "a") as f:
        del f["dense_1/dense_1/kernel:0"]
    msg = load_error(jpath.with_name("weights.h5"))  # a weights file alone: no model_config
    assert "missing model_config" in msg
    msg = load_error(jpath)
    assert "weights.h5" in msg and "'dense_1'" in msg and "kernel:0" in msg


def test_pair_bad_json(tmp_path):
    path = tmp_path / "architecture.json"
    path.write_text("{not json")
    assert "not valid JSON" in load_error(path)


def test_implicit_dependencies_of_h5_is_empty():
    assert frontends.implicit_dependencies("anything/model.h5") == []


def test_formats_registry():
    names = {f.name: f for f in frontends.FORMATS}
    assert ".h5" in names["keras-h5"].suffixes and ".json" in names["keras-json"].suffixes
    suffixes = [s for f in frontends.FORMATS for s in f.suffixes]
    assert len(suffixes) == len(set(suffixes))
    assert frontends.format_for("X.HDF5").name == "keras-h5"


@pytest.mark.parametrize("text, ident", [
    ("TD3_L61_128x128_C1", "TD3_L61_128x128_C1"), ("my-model.v2", "my_model_v2"),
    ("3net", "m3net"), ("_x", "m_x"), ("int", "int_model"), ("", "model"),
])
def test_c_identifier(text, ident):
    assert frontends.c_identifier(text) == ident


# ----------------------------------------------------------------------------- examples


def test_f1tenth_example():
    model = frontends.load(EXAMPLES / "f1tenth" / "architecture.json")
    assert model.name == "f1tenth"
    assert model.input_shape == (61,)
    assert [l.units for l in model.layers] == [128, 128, 1]
    assert all(l.activation == "tanh" for l in model.layers)
    assert sum(l.kernel.size for l in model.layers) == 24320
    example = json.loads((EXAMPLES / "f1tenth" / "example.json").read_text())
    assert example["model"] == "architecture.json" and example["tolerance"] <= 1e-3
    assert example["input_range"] == [-1.0, 1.0]


def test_xor_example_computes_xor():
    model = frontends.load(EXAMPLES / "xor" / "xor.h5")
    assert model.name == "xor" and model.input_shape == (2,)
    cases = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float)
    for dtype in (np.float64, np.float32):
        y = reference.run(model, cases, dtype)[:, 0]
        assert (y[[0, 3]] < 1e-4).all() and (y[[1, 2]] > 1 - 1e-4).all()
    example = json.loads((EXAMPLES / "xor" / "example.json").read_text())
    assert example["model"] == "xor.h5" and example["tolerance"] == 1e-5
    assert example["input_range"] == [0.0, 1.0]


@pytest.mark.parametrize("example, outputs", [
    ("f1tenth", ["architecture.json", "weights.h5", "example.json"]),
    ("xor", ["xor.h5", "example.json"]),
])
def test_examples_are_byte_reproducible(tmp_path, monkeypatch, example, outputs):
    """The script run as `python make_model.py --out DIR` would run it (as __main__, those
    arguments), in this process: h5py and numpy are imported already."""
    import runpy
    script = EXAMPLES / example / "make_model.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(tmp_path)])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        assert exit_.code in (0, None), exit_.code
    for name in outputs:
        assert (tmp_path / name).read_bytes() == (EXAMPLES / example / name).read_bytes(), name


def test_pair_truncated_weights_names_both(tmp_path):
    jpath, wpath = kf.write_pair(tmp_path / "architecture.json", mlp())
    kf.truncated_copy(wpath, tmp_path / "cut.h5", 0.5)
    (tmp_path / "cut.h5").replace(wpath)
    msg = load_error(jpath)
    assert "weights.h5" in msg and "cannot read HDF5 (truncated or corrupt)" in msg


# ----------------------------------------------------------------------------- hostile inputs (issue 9)


def hostile_error(path) -> str:
    """The one-line NNBuildError of loading `path`, starting with the file path, no warning printed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NNBuildError) as info:
            frontends.load(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg


def cnn_layers():
    """InputLayer (6, 6, 2) -> Conv2D 'c' -> MaxPooling2D 'p' -> ZeroPadding2D 'z' -> BatchNormalization
    'bn' -> Reshape 'r' -> Flatten 'f' -> Dense 'd'."""
    rng = np.random.default_rng(3)
    w = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    bn = {"class_name": "BatchNormalization", "config": {"name": "bn", "axis": -1, "epsilon": 1e-3},
          "weights": [("gamma", w(3)), ("beta", w(3)), ("moving_mean", w(3)), ("moving_variance", np.abs(w(3)) + 1)]}
    return [kf.input_layer("in", (6, 6, 2)), kf.conv2d("c", w(3, 3, 2, 3), w(3)),
            {"class_name": "MaxPooling2D", "config": {"name": "p", "pool_size": [2, 2]}, "weights": []},
            {"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": [[1, 0], [0, 1]]}, "weights": []},
            bn,
            {"class_name": "Reshape", "config": {"name": "r", "target_shape": [3, 9]}, "weights": []},
            {"class_name": "Flatten", "config": {"name": "f"}, "weights": []},
            kf.dense("d", w(27, 2), w(2))]


def by_name(layers, name):
    return next(s for s in layers if s["config"]["name"] == name)


def test_hostile_base_models_load(tmp_path):
    """The models the hostile cases below mutate are valid (so each case fails for its own reason)."""
    assert frontends.load(kf.write_full_model(tmp_path / "cnn.h5", cnn_layers())).output_shape == (2,)
    assert frontends.load(kf.write_full_model(tmp_path / "mlp.h5", mlp())).output_shape == (2,)


@pytest.mark.parametrize("units", [0])
def test_zero_unit_dense_is_refused_at_load(tmp_path, units):
    """Defect 5: a 0-unit Dense loaded, then gcc failed on a zero-size array."""
    layers = mlp()
    layers[1] = kf.dense("dense_2", np.zeros((4, units)), np.zeros(units))
    msg = hostile_error(kf.write_full_model(tmp_path / "zero.h5", layers))
    assert "layer 'dense_2'" in msg and "units must be >= 1, got 0" in msg
    layers[1]["config"].pop("units")  # without the config key, the kernel's zero dimension is refused
    msg = hostile_error(kf.write_full_model(tmp_path / "zero2.h5", layers))
    assert "layer 'dense_2'" in msg and "Dense weight" in msg and "zero-size dimension (shape (4, 0))" in msg


@pytest.mark.parametrize("edit, fragments", [
    (lambda ls: by_name(ls, "c").update(weights=[("kernel", np.zeros((3, 3, 2, 0), np.float32)),
                                                 ("bias", np.zeros(0, np.float32))]),
     ["layer 'c'", "Conv2D weight", "zero-size dimension"]),
    (lambda ls: by_name(ls, "in")["config"].update(batch_input_shape=[None, 6, 0, 2]),
     ["layer 'in'", "must be known positive integers"]),
    (lambda ls: by_name(ls, "r")["config"].update(target_shape=[27, 0]), ["layer 'r'", "target_shape [27, 0]"]),
])
def test_zero_size_dimensions_of_any_layer_are_refused(tmp_path, edit, fragments):
    """Defect 5 for every layer kind: kernels, declared shapes and reshape targets."""
    layers = cnn_layers()
    edit(layers)
    msg = hostile_error(kf.write_full_model(tmp_path / "zero.h5", layers))
    assert all(f in msg for f in fragments), msg


def set_layer(index, value):
    def edit(cfg):
        cfg["config"]["layers"][index] = value
    return edit


def set_cfg(index, **values):
    def edit(cfg):
        cfg["config"]["layers"][index]["config"].update(values)
    return edit


@pytest.mark.parametrize("edit, fragments", [
    (set_cfg(1, units="4"), ["layer 'dense_2'", "units must be an integer, got '4'"]),
    (set_cfg(1, use_bias=1), ["layer 'dense_2'", "use_bias must be true or false, got 1"]),
    (set_cfg(1, use_bias="false"), ["layer 'dense_2'", "use_bias must be true or false, got 'false'"]),
    (set_layer(1, None), ["layer '#2'", "layer entry 2 is null"]),
    (set_layer(1, "Dense"), ["layer '#2'", "layer entry 2 is 'Dense', not a layer object"]),
    (set_cfg(1, name=["dense_2"]), ["layer '#2'", "layer name must be a string"]),
    (set_cfg(1, activation={"config": ["relu"]}), ["layer 'dense_2'", "activation", "not supported"]),
    (set_cfg(0, batch_input_shape=7), ["layer 'dense_1'", "batch_input_shape 7"]),
])
def test_bad_mlp_config_values_are_one_line_naming_the_layer(tmp_path, edit, fragments):
    """Defect 6: wrong types in a config were ValueError/AttributeError tracebacks, a string flag was
    read as true."""
    layers = mlp()
    cfg = json.loads(json.dumps(kf.model_config(layers)))  # a copy: the weights keep their names
    edit(cfg)
    msg = hostile_error(kf.write_full_model(tmp_path / "bad.h5", layers, config=cfg))
    assert all(f in msg for f in fragments), msg


@pytest.mark.parametrize("name, values, fragments", [
    ("c", {"strides": 0}, ["strides 0 must be >= 1"]),
    ("c", {"kernel_size": [3, True]}, ["kernel_size [3, true] is not an integer or 2 integers"]),
    ("c", {"filters": 3.0}, ["filters must be an integer, got 3.0"]),
    ("p", {"pool_size": 0}, ["pool_size 0 must be >= 1"]),
    ("p", {"strides": [1, -1]}, ["strides [1, -1] must be >= 1"]),
    ("p", {"padding": 5}, ["padding must be a string, got 5"]),
    ("z", {"padding": -1}, ["padding -1 is not an integer >= 0"]),
    ("z", {"padding": [[1, -2], [0, 0]]}, ["padding [[1, -2], [0, 0]]"]),
    ("r", {"target_shape": [-2, -2]}, ["target_shape [-2, -2] must be positive integers and at most one -1"]),
    ("r", {"target_shape": [-1, -1]}, ["at most one -1"]),
    ("r", {"target_shape": [4, -1]}, ["cannot reshape (3, 3, 3) to (4, -1)"]),
    ("r", {"target_shape": [2, 9]}, ["Reshape: cannot reshape (3, 3, 3) to (2, 9)"]),
    ("bn", {"epsilon": "1e-3"}, ["epsilon must be a finite number, got '1e-3'"]),
    ("bn", {"scale": "true"}, ["scale must be true or false"]),
    ("bn", {"axis": [1, 2]}, ["axis [1, 2] is not supported"]),
])
def test_bad_cnn_config_values_are_one_line_naming_the_layer(tmp_path, name, values, fragments):
    """Defect 6: stride 0, pool size 0 and negative padding were IR ValueErrors; Reshape [-2, -2]
    passed `generate` and failed later."""
    layers = cnn_layers()
    by_name(layers, name)["config"].update(values)
    msg = hostile_error(kf.write_full_model(tmp_path / "bad.h5", layers))
    assert f"layer '{name}'" in msg and all(f in msg for f in fragments), msg


def test_deeply_nested_inbound_nodes_and_json_are_one_line(tmp_path):
    """Defect 6: inputs nested 5,000 deep were a RecursionError (in our walk, or in json itself)."""
    layers = mlp()
    cfg = kf.model_config(layers, style="functional")
    nested = ["dense_1", 0, 0, {}]
    for _ in range(5000):
        nested = [nested]
    cfg["config"]["layers"][1]["inbound_nodes"] = nested
    path = tmp_path / "deep.h5"
    kf.write_full_model(path, layers, config={})
    with h5py.File(path, "a") as f:  # json.dumps of 5,000 levels itself recurses too deep
        f.attrs["model_config"] = "[" * 5000 + "]" * 5000
    assert "model_config is nested too deeply" in hostile_error(path)
    text = json.dumps(cfg["config"]["layers"][0])
    deep = ('{"class_name": "Model", "config": {"name": "m", "input_layers": [["dense_1", 0, 0]], '
            '"output_layers": [["dense_2", 0, 0]], "layers": [' + text + ', {"class_name": "Dense", '
            '"name": "dense_2", "config": ' + json.dumps(layers[1]["config"]) + ', "inbound_nodes": '
            + "[" * 40 + '["dense_1", 0, 0, {}]' + "]" * 40 + "}]}}")
    with h5py.File(path, "a") as f:
        f.attrs["model_config"] = deep
    msg = hostile_error(path)
    assert "layer 'dense_2'" in msg and "inbound_nodes nested more than 32 levels deep" in msg
    with h5py.File(path, "a") as f:  # 900 levels: json itself parses them, the depth limit refuses
        f.attrs["model_config"] = deep.replace("[" * 40, "[" * 900).replace("]" * 40, "]" * 900)
    assert "model_config is nested too deeply (more than 64 levels; limits.MAX_JSON_DEPTH)" in hostile_error(path)


def test_invalid_utf8_config_is_one_line(tmp_path):
    """Defect 6: invalid UTF-8 in model_config was a UnicodeDecodeError traceback."""
    path = kf.write_full_model(tmp_path / "utf.h5", mlp())
    with h5py.File(path, "a") as f:
        raw = f.attrs["model_config"]
        raw = raw.encode() if isinstance(raw, str) else bytes(raw)
        f.attrs["model_config"] = np.bytes_(raw.replace(b"dense_2", b"dense\xff2"))
    assert "model_config is not valid UTF-8 (invalid start byte at byte" in hostile_error(path)
    jpath, _ = kf.write_pair(tmp_path / "architecture.json", mlp())
    jpath.write_bytes(jpath.read_bytes().replace(b"dense_2", b"dense\xff2"))
    assert "cannot read model json" in hostile_error(jpath)


def test_negative_batchnorm_variance_names_the_batchnorm_without_warnings(tmp_path):
    """Defect 7: two RuntimeWarnings were printed and the error blamed the Dense it was folded into."""
    layers = cnn_layers()
    bn = by_name(layers, "bn")
    bn["weights"][3] = ("moving_variance", np.array([1.0, -0.5, 1.0], np.float32))
    msg = hostile_error(kf.write_full_model(tmp_path / "bn.h5", layers))
    assert "layer 'bn': BatchNormalization moving_variance + epsilon must be > 0 (channel 1: variance -0.5" in msg


@pytest.mark.parametrize("value, fragment", [(np.nan, "holds NaN"), (-np.inf, "holds infinity"),
                                             (1e300, "holds 1e+300, beyond the float32 range")])
def test_bad_weight_values_name_the_real_layer_type_without_warnings(tmp_path, value, fragment):
    """Defect 7: a NaN in a Conv2D kernel was reported as Dense 'c'; float64 weights beyond float32
    printed an overflow warning before the error."""
    layers = cnn_layers()
    conv = by_name(layers, "c")
    kernel = conv["weights"][0][1].astype(np.float64)
    kernel[1, 2, 0, 1] = value
    conv["weights"][0] = ("kernel", kernel)
    msg = hostile_error(kf.write_full_model(tmp_path / "w.h5", layers))
    assert "layer 'c': Conv2D weight '" in msg and f"c/kernel:0' {fragment}" in msg, msg


def test_ir_validation_covers_every_front_end():
    """The load-time validation pass (run by frontends.load for every format) on IR models built
    directly: zero-size kernels, NaN, negative variance and impossible shapes name the layer."""
    from nnbuild.ir.graph import BatchNorm, LayerProblem, Model, Reshape, validate
    ok = np.ones((2, 2), np.float32)
    cases = [
        (Model("m", (2,), [Dense("d", np.ones((2, 0), np.float32), None)]), "d", "Dense kernel has a zero-size"),
        (Model("m", (2,), [Dense("d", ok * np.nan, None)]), "d", "Dense kernel holds NaN"),
        (Model("m", (2,), [BatchNorm("b", ok[0], ok[0], ok[0], -ok[0], 1e-3)]), "b",
         "BatchNormalization moving_variance + epsilon must be > 0"),
        (Model("m", (2,), [Reshape("r", (3,))]), "r", "Reshape: cannot reshape (2,) to (3,)"),
        (Model("m", (2,), [Dense("d", ok, ok[0, :1])]), "d", "bias has shape (1,), expected (2,)"),
        (Model("m", (0,), [Dense("d", ok, None)]), None, "input shape (0,)"),
    ]
    for model, layer, fragment in cases:
        with pytest.raises(LayerProblem) as info:
            validate(model)
        assert info.value.layer == layer and fragment in str(info.value), str(info.value)
    assert validate(Model("m", (2,), [Dense("d", ok, ok[0])])).output_shape == (2,)


@pytest.mark.e2e
def test_cli_generate_prints_one_line_and_writes_nothing(tmp_path):
    """Defect 6 as reported: `python -m nnbuild generate X.h5 -o D` printed tracebacks."""
    layers = mlp()
    cfg = kf.model_config(layers)
    cfg["config"]["layers"][1]["config"]["units"] = "many"
    path = kf.write_full_model(tmp_path / "X.h5", layers, config=cfg)
    run = subprocess.run([sys.executable, "-m", "nnbuild", "generate", str(path), "-o", str(tmp_path / "D")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        f"nnbuild: error: {path}: layer 'dense_2': units must be an integer, got 'many'"]
    assert not (tmp_path / "D").exists()


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_a_file_that_makes_hdf5_loop_is_one_line_after_the_time_limit(tmp_path, monkeypatch):
    """tests/data/hdf5_loop.h5 is a byte-damaged Keras file (found by the fuzz test) on which the HDF5
    C library loops forever reading model_config, ignoring signals. The loader runs in a child
    process with a time limit: one line, exit 2, nothing written."""
    import subprocess
    import sys
    bad = Path(__file__).parent / "data" / "hdf5_loop.h5"
    out = tmp_path / "out"
    env = dict(os.environ, NNBUILD_LOAD_TIMEOUT="1")
    run = subprocess.run([sys.executable, "-m", "nnbuild", "generate", str(bad), "-o", str(out)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "hdf5_loop.h5: reading the file did not finish in 1 s" in run.stderr
    assert not out.exists()
