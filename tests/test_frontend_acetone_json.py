"""ACETONE JSON front-end: fixtures written from the documented format (tests/data/acetone_json/
make_acetone_json.py) give, through nnbuild's reference, what a plain numpy reading of ACETONE's
layer semantics gives (computed channels-first, as acetone-nnet does); `.json` dispatches by content;
malformed files are refused in one line naming the file and the layer."""

import json
from pathlib import Path

import numpy as np
import pytest

import keras_files as kf
from conftest import error_of
from nnbuild import frontends, limits
from nnbuild.frontends import acetone_json
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference

DATA = Path(__file__).resolve().parent / "data" / "acetone_json"


# ----------------------------------------------------------------------------- independent numpy


def _act(name, v):
    if name == "relu":
        return np.maximum(v, 0)
    if name == "tanh":
        return np.tanh(v)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-v))
    if name == "leaky_relu":
        return np.where(v < 0, 0.2 * v, v)
    if name == "softmax":
        e = np.exp(v - v.max())
        return e / e.sum()
    assert name == "linear"
    return v


def _pads(padding, h, w, k, s):
    """acetone-nnet's compute_padding ('same' as TensorFlow), as (top, bottom, left, right)."""
    if padding == "valid":
        return 0, 0, 0, 0
    ph = max(k - s, 0) if h % s == 0 else max(k - h % s, 0)
    pw = max(k - s, 0) if w % s == 0 else max(k - w % s, 0)
    return ph // 2, ph - ph // 2, pw // 2, pw - pw // 2


def acetone_numpy(doc, x_hwc):
    """One sample through the file's layers as ACETONE defines them: tensors channels-first (C, H, W),
    Conv2D weights [C, kh, kw, F], Dense weights [1, 1, in, units] on the flat vector, Flatten of a
    channels_last model in (H, W, C) order."""
    layers = doc["config"]["layers"]
    dtype = np.float32 if layers[0]["config"]["dtype"] == "float32" else np.float64

    def np_array(values):  # the file's numbers as the model's dtype holds them
        return np.asarray(values, dtype).astype(np.float64)

    out = {0: np.transpose(np.asarray(x_hwc, np.float64), (2, 0, 1)) if np.ndim(x_hwc) == 3
           else np.asarray(x_hwc, np.float64)}
    for entry in layers[1:]:
        cfg, cls = entry["config"], entry["class_name"]
        ins = [out[i] for i in cfg["prev_layer_idx"]]
        x = ins[0]
        if cls == "Conv2D":
            w, b = np_array(entry["weights"]), np_array(entry["biases"])
            c, h, wd = x.shape
            k, s = cfg["kernel_size"][0], cfg["strides"][0]
            t, bo, l, r = _pads(cfg["padding"], h, wd, k, s)
            xp = np.zeros((c, h + t + bo, wd + l + r))
            xp[:, t:t + h, l:l + wd] = x
            oh, ow = (h + t + bo - k) // s + 1, (wd + l + r - k) // s + 1
            y = np.zeros((w.shape[3], oh, ow))
            for f in range(w.shape[3]):
                for i in range(oh):
                    for j in range(ow):
                        y[f, i, j] = np.sum(w[:, :, :, f] * xp[:, i * s:i * s + k, j * s:j * s + k]) + b[f]
            y = _act(cfg["activation"], y)
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            c, h, wd = x.shape
            k, s = cfg["pool_size"][0], cfg["strides"][0]
            oh, ow = (h - k) // s + 1, (wd - k) // s + 1
            fn = np.max if cls == "MaxPooling2D" else np.mean
            y = np.array([[[fn(x[ch, i * s:i * s + k, j * s:j * s + k]) for j in range(ow)] for i in range(oh)]
                          for ch in range(c)])
        elif cls == "ZeroPadding2D":
            (t, bo), (l, r) = cfg["padding"]
            y = np.pad(x, ((0, 0), (t, bo), (l, r)))
        elif cls == "BatchNormalization":
            g, be, m, v = (np_array(entry[k])[:, None, None] for k in ("gamma", "beta", "moving_mean", "moving_var"))
            y = g * (x - m) / np.sqrt(v + cfg["epsilon"]) + be
        elif cls == "Flatten":
            y = np.transpose(x, (1, 2, 0)).reshape(-1)
        elif cls == "Dropout":
            y = x
        elif cls == "Dense":
            w, b = np_array(entry["weights"]), np_array(entry["biases"])
            y = _act(cfg["activation"], np.dot(x.reshape(-1), w)[0, 0] + b)
        elif cls == "Add":
            y = sum(ins)
        elif cls == "Multiply":
            y = np.prod(ins, axis=0)
        elif cls == "Subtract":
            y = ins[0] - ins[1]
        elif cls == "Maximum":
            y = np.max(ins, axis=0)
        elif cls == "Minimum":
            y = np.min(ins, axis=0)
        elif cls == "Average":
            y = np.mean(ins, axis=0)
        elif cls == "Concatenate":
            assert cfg["axis"] in (-1, 3)
            y = np.concatenate(ins, axis=0)   # the channels axis of (C, H, W)
        else:
            raise AssertionError(cls)
        out[cfg["idx"]] = y
    return out[layers[-1]["config"]["idx"]]


# ----------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("name", ["lenet", "mlp", "merge"])
def test_fixture_matches_acetone_semantics(name):
    path = DATA / f"{name}.json"
    doc = json.loads(path.read_text())
    model = frontends.load(path)
    assert model.meta["format"] == "acetone-json" and frontends.format_for(path).name == "acetone-json"
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(4,) + tuple(model.input_shape))
    got = reference.run(model, xs, np.float64)
    want = np.array([acetone_numpy(doc, x) for x in xs])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got32 = reference.run(model, xs, np.float32)
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-5)


def test_fixture_structure():
    lenet = frontends.load(DATA / "lenet.json")
    assert lenet.input_shape == (12, 12, 2)
    assert [l.source_type for l in lenet.layers][:3] == ["Conv2D", "AveragePooling2D", "ZeroPadding2D"]
    assert lenet.layers[3].padding == (0, 1, 1, 1) and lenet.layers[3].strides == (2, 2)
    assert lenet.layers[-1].activation == "softmax"
    assert lenet.layers[0].kernel.dtype == np.float32
    assert lenet.meta["ignored_layers"][0]["type"] == "Dropout"
    mlp = frontends.load(DATA / "mlp.json")
    assert mlp.layers[0].kernel.dtype == np.float64 and mlp.meta["dtype"] == "float64"
    assert [(l.kind, getattr(l, "op", None)) for l in mlp.layers] == [
        ("dense", None), ("dense", None), ("unary", "leaky_relu"), ("dense", None)]
    assert mlp.layers[2].params == (0.2,)
    merge = frontends.load(DATA / "merge.json")
    assert merge.edges is not None and merge.edges["cat"] == ("add", "mul", "sub", "max", "min", "avg")


def test_fixture_script_is_deterministic(tmp_path, monkeypatch):
    """The committed fixtures are what the script writes."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_acetone_json", DATA / "make_acetone_json.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.lenet(), module.mlp(), module.merge()
    for name in ("lenet", "mlp", "merge"):
        assert (tmp_path / f"{name}.json").read_text() == (DATA / f"{name}.json").read_text(), name


# ----------------------------------------------------------------------------- dispatch


def test_keras_json_still_loads_as_keras(tmp_path):
    layers = [kf.dense("dense_1", np.ones((3, 2)), np.zeros(2), "relu", input_dim=3)]
    jpath, _ = kf.write_pair(tmp_path / "architecture.json", layers)
    assert frontends.format_for(jpath).name == "keras-json"
    assert frontends.load(jpath).meta["format"] == "keras-json"
    assert frontends.implicit_dependencies(jpath)[0].endswith("weights.h5")


def test_acetone_json_has_no_implicit_dependencies():
    assert frontends.implicit_dependencies(DATA / "lenet.json") == []
    assert frontends.kind_of(DATA / "lenet.json") == "nn"


# ----------------------------------------------------------------------------- refusals


def edited(tmp_path, source, edit, name="bad.json"):
    doc = json.loads((DATA / source).read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def layer(doc, name):
    return next(l for l in doc["config"]["layers"] if l["config"]["name"] == name)


@pytest.mark.parametrize("source, edit, fragments", [
    ("mlp.json", lambda d: d["config"]["layers"][1].update(class_name="LSTM"),
     ["layer 'dense_1'", "LSTM is not supported"]),
    ("mlp.json", lambda d: d["config"]["layers"][1]["config"].update(activation="elu"),
     ["layer 'dense_1'", "activation 'elu'"]),
    ("mlp.json", lambda d: d["config"]["layers"][1].update(weights=[[1.0, 2.0]]),
     ["layer 'dense_1'", "weights shape (1, 2)"]),
    ("mlp.json", lambda d: d["config"]["layers"][1].pop("biases"), ["layer 'dense_1'", "no 'biases'"]),
    ("mlp.json", lambda d: d["config"]["layers"][2]["config"].update(prev_layer_idx=[5]),
     ["layer 'dense_2'", "prev_layer_idx [5]"]),
    ("mlp.json", lambda d: d["config"]["layers"][0]["config"].update(dtype="int"), ["dtype 'int'"]),
    ("mlp.json", lambda d: d["config"].update(data_format="channels_first"), ["data_format 'channels_first'"]),
    ("mlp.json", lambda d: d["config"]["layers"][0]["config"].update(size=6), ["size 6"]),
    ("lenet.json", lambda d: d["config"]["layers"][1]["config"].update(dilation_rate=[2, 2]),
     ["layer 'conv2d_1'", "dilation_rate > 1 is refused"]),
    ("lenet.json", lambda d: d["config"]["layers"][1]["config"].update(strides=[1, 2]),
     ["layer 'conv2d_1'", "differs per axis"]),
    ("lenet.json", lambda d: d["config"]["layers"][2]["config"].update(padding="same", strides=[3, 3]),
     ["layer 'averagepooling2d_2'", "padding that adds cells"]),
    ("lenet.json", lambda d: d["config"]["layers"][1]["weights"][0][0][0].__setitem__(0, float("nan")),
     ["layer 'conv2d_1'", "NaN"]),
    ("lenet.json", lambda d: d["config"]["layers"][1]["config"].update(output_shape=[None, 4, 9, 9]),
     ["layer 'conv2d_1'", "does not match the computed (10, 10, 4)"]),
    ("merge.json", lambda d: layer(d, "sub")["config"].update(prev_layer_idx=[1, 2, 3]),
     ["layer 'sub'", "Subtract needs 2 inputs, got 3"]),
])
def test_refusals_are_one_line(tmp_path, source, edit, fragments):
    msg = error_of(edited(tmp_path, source, edit))
    assert all(f in msg for f in fragments), msg


def test_not_json_and_no_layers(tmp_path):
    path = tmp_path / "junk.json"
    path.write_text('{"prev_layer_idx": [0], ')
    assert "not valid JSON" in error_of(path)
    path.write_text('{"config": {"layers": []}, "prev_layer_idx": 1}')
    assert "no config.layers list" in error_of(path)


# ----------------------------------------------------------------------------- host C


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["lenet", "merge"])
def test_host_c_matches_acetone_semantics(tmp_path, name):
    from test_frontend_keras3 import host_outputs
    path = DATA / f"{name}.json"
    model = frontends.load(path)
    xs = np.random.default_rng(9).normal(size=(3,) + tuple(model.input_shape)).astype(np.float32)
    got = host_outputs(tmp_path, model, xs)
    doc = json.loads(path.read_text())
    want = np.array([acetone_numpy(doc, x) for x in xs.astype(np.float64)]).reshape(3, -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weights_beyond_the_limits_are_refused_before_conversion(tmp_path, monkeypatch):
    """An inline array is sized from its first entries and checked against limits.py before numpy
    converts it: per tensor, and for all the file's weights together."""
    monkeypatch.setattr(limits, "MAX_TENSOR_ELEMENTS", 30)
    msg = error_of(edited(tmp_path, "mlp.json", lambda d: d["config"]["layers"][1].update(weights=[[[0.0] * 31]])))
    assert "layer 'dense_1': 'weights' holds 31 values, more than 30 per tensor (limits.MAX_TENSOR_ELEMENTS)" in msg
    monkeypatch.undo()
    monkeypatch.setattr(limits, "MAX_MODEL_ELEMENTS", 40)
    msg = error_of(edited(tmp_path, "mlp.json", lambda d: None))
    assert "more than 40 (limits.MAX_MODEL_ELEMENTS)" in msg


def test_size_and_depth_limits(tmp_path, monkeypatch):
    path = tmp_path / "deep.json"
    path.write_text('{"config": {"data_format": "channels_last", "layers": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    with pytest.raises(NNBuildError, match=r"deep.json: ACETONE JSON is nested too deeply \(more than 64 levels; "
                                           r"limits.MAX_JSON_DEPTH\)$"):
        acetone_json.load(path)
    monkeypatch.setattr(acetone_json, "MAX_BYTES", 1000)
    assert "more than 1000" in error_of(edited(tmp_path, "mlp.json", lambda d: None))
