"""Keras HDF5 front-end, issue 12 layers: Conv1D, DepthwiseConv2D, SeparableConv2D, global pooling,
LeakyReLU, ELU, ReLU variants, Softmax(axis), UpSampling2D, Cropping, Multiply / Subtract / Maximum /
Minimum / Average and the fused activations beyond the basic five.

Goldens: tests/data/keras3/*.h5 and golden.npz were made once with real Keras 3.15.1 (torch backend)
by tests/data/keras3/make_goldens.py. Keras 2 spellings are written with h5py (keras_files) and
compared with plain numpy of Keras' documented semantics."""

from pathlib import Path

import numpy as np
import pytest

import keras_files as kf
from conftest import error_of
from nnbuild import frontends
from nnbuild.ir import reference

DATA = Path(__file__).resolve().parent / "data" / "keras3"
GOLDEN = np.load(DATA / "golden.npz")


def by_name(model, name):
    return next(l for l in model.layers if l.name == name)


# ----------------------------------------------------------------------------- Keras goldens


@pytest.mark.parametrize("name", ["conv1d", "cnn2d", "merge"])
def test_keras_golden_h5(name):
    model = frontends.load(DATA / f"{name}.h5")
    x, want = GOLDEN[f"{name}_x"], GOLDEN[f"{name}_y"]
    np.testing.assert_allclose(reference.run(model, x, np.float64), want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(reference.run(model, x, np.float32), want, rtol=1e-5, atol=2e-6)


def test_golden_ir_lowering():
    cnn = frontends.load(DATA / "cnn2d.h5")
    dw = by_name(cnn, "dw")
    assert dw.groups == 3 and dw.kernel.shape == (3, 3, 1, 6) and dw.padding == (1, 1, 1, 1)
    assert by_name(cnn, "sep_depthwise").groups == 6 and by_name(cnn, "sep_depthwise").bias is None
    assert by_name(cnn, "sep").kernel.shape == (1, 1, 12, 4)
    assert [(l.op, l.params) for l in cnn.layers if l.name == "sep_softplus"] == [("softplus", ())]
    up = by_name(cnn, "up_nearest")
    assert (up.mode, up.coordinate_mode, up.nearest_mode, up.scales) == ("nearest", "asymmetric", "floor",
                                                                          (2.0, 2.0, 1.0))
    up = by_name(cnn, "up_bilinear")
    assert (up.mode, up.coordinate_mode, up.scales) == ("linear", "half_pixel", (2.0, 3.0, 1.0))
    assert (by_name(cnn, "crop").starts, by_name(cnn, "crop").counts) == ((1, 0, 0), (11, 11, 4))
    assert (by_name(cnn, "leaky").op, by_name(cnn, "leaky").params) == ("leaky_relu", (pytest.approx(0.1),))
    assert (by_name(cnn, "elu").op, by_name(cnn, "elu").params) == ("elu", (0.5,))
    assert (by_name(cnn, "relu_max").op, by_name(cnn, "relu_max").params) == ("clip", (0.0, pytest.approx(0.9)))
    assert by_name(cnn, "softmax_h").kind == "softmax" and by_name(cnn, "softmax_h").axis == 0
    assert by_name(cnn, "pw_hard_sigmoid").params == (pytest.approx(1 / 6), 0.5)  # Keras 3: relu6(x + 3) / 6
    gmp = by_name(cnn, "gmp")
    assert (gmp.op, gmp.axes, gmp.keepdims) == ("max", (0, 1), False)
    one = frontends.load(DATA / "conv1d.h5")
    assert [l.kind for l in one.layers[:3]] == ["reshape", "conv2d", "reshape"]
    c2 = by_name(one, "c2")
    assert c2.padding == (0, 0, 4, 0) and c2.dilation == (1, 2)  # causal: 2 * (3 - 1) cells on the left
    assert by_name(one, "c2_clip").params == (0.0, 6.0)  # relu6
    assert one.shapes()[-1] == (3,)
    merge = frontends.load(DATA / "merge.h5")
    assert [by_name(merge, n).op for n in ("mul", "sub", "max", "min", "avg")] == ["mul", "sub", "max", "min", "mean"]
    assert merge.edges["max"] == ("a_exp", "b_leaky_relu", "c_hard_sigmoid")


# ----------------------------------------------------------------------------- Keras 2 spellings


def keras2_act(name, v):
    return {"linear": lambda: v, "relu": lambda: np.maximum(v, 0),
            "hard_sigmoid": lambda: np.clip(0.2 * v + 0.5, 0, 1), "exponential": lambda: np.exp(v),
            "softsign": lambda: v / (1 + np.abs(v)),
            "selu": lambda: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * (np.exp(v) - 1))}[name]()


def numpy_conv1d(x, k, b, stride=1, pad=(0, 0)):
    x = np.pad(x, ((0, 0), pad, (0, 0)))
    n, w, _ = x.shape
    out = (w - k.shape[0]) // stride + 1
    return np.stack([np.einsum("nkc,kcf->nf", x[:, i * stride:i * stride + k.shape[0]], k) for i in range(out)],
                    axis=1) + b


def test_keras2_conv1d_leaky_global_max(tmp_path):
    rng = np.random.default_rng(1)
    k1, b1 = rng.normal(size=(3, 3, 4)), rng.normal(size=4)
    k2, b2 = rng.normal(size=(2, 4, 5)), rng.normal(size=5)
    kd, bd = rng.normal(size=(5, 2)), rng.normal(size=2)
    layers = [kf.input_layer("in", (10, 3)),
              kf.layer("Conv1D", "c1", [("kernel", k1), ("bias", b1)], filters=4, kernel_size=[3], strides=[1],
                       padding="valid", data_format="channels_last", dilation_rate=[1], activation="hard_sigmoid",
                       use_bias=True),
              kf.layer("LeakyReLU", "lr", alpha=0.25),
              kf.layer("Conv1D", "c2", [("kernel", k2), ("bias", b2)], filters=5, kernel_size=2, strides=2,
                       padding="same", activation="linear", use_bias=True),
              kf.layer("GlobalMaxPooling1D", "gmp", data_format="channels_last"),
              kf.layer("Dense", "d", [("kernel", kd), ("bias", bd)], units=2, activation="softsign", use_bias=True)]
    path = kf.write_full_model(tmp_path / "k2conv1d.h5", layers, keras_version="2.11.0")
    model = frontends.load(path)
    x = rng.normal(size=(3, 10, 3))
    f32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731 - the file holds float32
    y = keras2_act("hard_sigmoid", numpy_conv1d(x, f32(k1), f32(b1)))
    y = np.where(y < 0, 0.25 * y, y)
    y = numpy_conv1d(y, f32(k2), f32(b2), stride=2, pad=(0, 0))  # width 8, k 2, stride 2: 'same' pads nothing
    y = keras2_act("softsign", y.max(axis=1) @ f32(kd) + f32(bd))
    np.testing.assert_allclose(reference.run(model, x), y, rtol=1e-9, atol=1e-12)
    assert by_name(model, "c1_hard_sigmoid").params == (0.2, 0.5)  # Keras 2's hard_sigmoid


def test_keras2_depthwise_upsampling_cropping_global_average(tmp_path):
    rng = np.random.default_rng(2)
    kd, bd = rng.normal(size=(3, 3, 2, 2)), rng.normal(size=4)
    layers = [kf.input_layer("in", (6, 5, 2)),
              kf.layer("DepthwiseConv2D", "dw", [("depthwise_kernel", kd), ("bias", bd)], kernel_size=[3, 3],
                       strides=[2, 2], padding="same", depth_multiplier=2, data_format="channels_last",
                       dilation_rate=[1, 1], activation="selu", use_bias=True),
              kf.layer("UpSampling2D", "up", size=[2, 3], data_format="channels_last", interpolation="nearest"),
              kf.layer("Cropping2D", "crop", cropping=1, data_format="channels_last"),
              kf.layer("GlobalAveragePooling2D", "gap", data_format="channels_last", keepdims=True)]
    model = frontends.load(kf.write_full_model(tmp_path / "k2dw.h5", layers, keras_version="2.11.0"))
    x = rng.normal(size=(2, 6, 5, 2))
    k = kd.astype(np.float32).astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 1), (1, 1), (0, 0)))   # TF 'same' for 6x5, kernel 3, stride 2
    y = np.zeros((2, 3, 3, 4))
    for i in range(3):
        for j in range(3):
            patch = xp[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :]          # n, 3, 3, c
            for c in range(2):
                for m in range(2):
                    y[:, i, j, c * 2 + m] = np.sum(patch[..., c] * k[:, :, c, m], axis=(1, 2))
    y = keras2_act("selu", y + bd.astype(np.float32))
    y = np.repeat(np.repeat(y, 2, axis=1), 3, axis=2)[:, 1:-1, 1:-1, :]
    y = y.mean(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(reference.run(model, x), y, rtol=1e-9, atol=1e-12)
    assert model.output_shape == (1, 1, 4)


def test_keras2_functional_merges(tmp_path):
    rng = np.random.default_rng(3)
    ka, kb = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    layers = [kf.input_layer("in", (4,)),
              kf.layer("Dense", "a", [("kernel", ka)], units=3, activation="linear", use_bias=False),
              kf.layer("Dense", "b", [("kernel", kb)], units=3, activation="exponential", use_bias=False),
              kf.layer("Subtract", "sub"), kf.layer("Maximum", "mx"), kf.layer("Minimum", "mn"),
              kf.layer("Average", "avg"), kf.layer("Multiply", "mul"),
              kf.layer("ReLU", "r6", max_value=6.0, negative_slope=0.0, threshold=0.0)]
    inbound = {"a": ["in"], "b": ["in"], "sub": ["a", "b"], "mx": ["a", "b"], "mn": ["a", "b"],
               "avg": ["sub", "mx", "mn"], "mul": ["avg", "a"], "r6": ["mul"]}
    for keras in (2, 3):
        cfg = kf.graph_config(layers, inbound, keras=keras)
        path = kf.write_full_model(tmp_path / f"merge{keras}.h5", layers, config=cfg,
                                   keras_version=f"{keras}.11.0")
        model = frontends.load(path)
        x = rng.normal(size=(5, 4))
        a = x @ ka.astype(np.float32)
        b = np.exp(x @ kb.astype(np.float32))
        avg = ((a - b) + np.maximum(a, b) + np.minimum(a, b)) / 3
        np.testing.assert_allclose(reference.run(model, x), np.clip(avg * a, 0, 6), rtol=1e-9, atol=1e-12)


def test_activation_layer_and_softmax_last_axis(tmp_path):
    layers = [kf.input_layer("in", (3, 4)),
              kf.layer("Activation", "act", activation="elu"),
              kf.layer("Softmax", "sm", axis=-1),
              kf.layer("ReLU", "leaky", negative_slope=0.3),
              kf.layer("ELU", "e")]
    model = frontends.load(kf.write_full_model(tmp_path / "acts.h5", layers))
    assert [(l.kind, getattr(l, "op", None)) for l in model.layers] == [
        ("unary", "elu"), ("activation", None), ("unary", "leaky_relu"), ("unary", "elu")]
    assert model.layers[3].params == (1.0,)


# ----------------------------------------------------------------------------- refusals


def one(layer, shape=(4, 4, 2)):
    return [kf.input_layer("in", shape), layer]


@pytest.mark.parametrize("layers, fragments", [
    (one(kf.layer("ReLU", "r", threshold=0.5)), ["layer 'r'", "ReLU with threshold=0.5 is not supported"]),
    (one(kf.layer("ReLU", "r", max_value=2.0, negative_slope=0.1)),
     ["layer 'r'", "ReLU with both negative_slope and max_value"]),
    (one(kf.layer("ReLU", "r", max_value=-1.0)), ["layer 'r'", "max_value must be >= 0"]),
    (one(kf.layer("UpSampling2D", "u", size=[2, 2], interpolation="bicubic")),
     ["layer 'u'", "UpSampling2D interpolation 'bicubic' is not supported"]),
    (one(kf.layer("Activation", "g", activation="gelu")), ["layer 'g'", "activation 'gelu'", "not supported"]),
    (one(kf.layer("SimpleRNN", "g", units=3)), ["layer 'g'", "SimpleRNN is not supported (supported: "]),
    (one(kf.layer("Conv1D", "c", [("kernel", np.ones((2, 2, 3))), ("bias", np.ones(3))], filters=3,
                  kernel_size=[2], data_format="channels_first"), (5, 2)),
     ["layer 'c'", "Conv1D with data_format='channels_first' is not supported"]),
    (one(kf.layer("Conv1D", "c", [("kernel", np.ones((2, 2, 3))), ("bias", np.ones(3))], filters=3,
                  kernel_size=[2])),
     ["layer 'c'", "Conv1D needs a (width, channels) input, got shape (4, 4, 2)"]),
    (one(kf.layer("DepthwiseConv2D", "dw", [("depthwise_kernel", np.ones((3, 3, 2, 2))), ("bias", np.ones(4))],
                  kernel_size=[3, 3], depth_multiplier=3)),
     ["layer 'dw'", "depthwise kernel shape (3, 3, 2, 2)", "depth_multiplier=3"]),
    (one(kf.layer("Cropping2D", "cr", cropping=[[2, 2], [0, 0]])), ["layer 'cr'", "leaves nothing"]),
    (one(kf.layer("Softmax", "s", axis=[1, 2])), ["layer 's'", "Softmax axis [1, 2] is not supported"]),
    (one(kf.layer("GlobalAveragePooling2D", "g", data_format="channels_first")),
     ["layer 'g'", "channels_last only"]),
])
def test_refusals_name_file_layer_and_class(tmp_path, layers, fragments):
    msg = error_of(kf.write_full_model(tmp_path / "bad.h5", layers))
    assert all(f in msg for f in fragments), msg


def test_subtract_takes_two_inputs(tmp_path):
    layers = [kf.input_layer("in", (3,)), kf.layer("Subtract", "s")]
    cfg = kf.graph_config(layers, {"s": ["in", "in", "in"]})
    msg = error_of(kf.write_full_model(tmp_path / "sub3.h5", layers, config=cfg))
    assert "layer 's'" in msg and "Subtract takes exactly 2 inputs, got 3" in msg


def test_lowered_name_clash_is_refused(tmp_path):
    layers = [kf.input_layer("in", (3,)),
              kf.layer("Dense", "d", [("kernel", np.ones((3, 2)))], units=2, activation="elu", use_bias=False),
              kf.layer("Activation", "d_elu", activation="relu")]
    msg = error_of(kf.write_full_model(tmp_path / "clash.h5", layers))
    assert "layer 'd'" in msg and "'d_elu'" in msg and "already taken" in msg
