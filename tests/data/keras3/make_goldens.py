"""Make the Keras fixtures of tests/test_frontend_keras_layers.py and tests/test_frontend_keras3.py.

Run ONCE with real Keras, outside nnbuild and CI (nnbuild never imports Keras):

    python3 -m venv /tmp/keras-venv
    /tmp/keras-venv/bin/pip install torch==2.13.0 keras h5py numpy
    KERAS_BACKEND=torch /tmp/keras-venv/bin/python tests/data/keras3/make_goldens.py

It builds small models with the layers of issue 12 (seeded weights), saves each as a Keras 3
archive (<name>.keras) and as a legacy full-model HDF5 (<name>.h5), and records inputs and
Keras' outputs in golden.npz (<name>_x, <name>_y). The committed files were made with Keras
3.15.1 on the torch 2.13.0 (CPU) backend.
"""

import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers as L  # noqa: E402

HERE = Path(__file__).resolve().parent


def conv1d():
    i = keras.Input((16, 3))
    x = L.Conv1D(4, 3, padding="same", activation="elu", name="c1")(i)
    x = L.Conv1D(5, 3, padding="causal", dilation_rate=2, activation="relu6", name="c2")(x)
    x = L.Conv1D(4, 2, strides=2, name="c3")(x)
    x = L.Cropping1D((1, 2), name="crop")(x)
    x = L.GlobalAveragePooling1D(name="gap")(x)
    y = L.Dense(3, activation="selu", name="d")(x)
    return keras.Model(i, y, name="conv1d")


def cnn2d():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu", name="dw"),
        L.SeparableConv2D(4, 3, depth_multiplier=2, activation="softplus", name="sep"),
        L.UpSampling2D(2, name="up_nearest"),
        L.Cropping2D(((1, 0), (0, 1)), name="crop"),
        L.LeakyReLU(negative_slope=0.1, name="leaky"),
        L.MaxPooling2D(name="pool"),
        L.Conv2D(3, 1, activation="hard_sigmoid", name="pw"),
        L.UpSampling2D((2, 3), interpolation="bilinear", name="up_bilinear"),
        L.ELU(alpha=0.5, name="elu"),
        L.ReLU(max_value=0.9, name="relu_max"),
        L.Softmax(axis=1, name="softmax_h"),
        L.GlobalMaxPooling2D(name="gmp"),
        L.Dense(2, activation="softsign", name="out"),
    ], name="cnn2d")


def merge():
    i = keras.Input((6,))
    a = L.Dense(4, activation="exponential", name="a")(i)
    b = L.Dense(4, activation="leaky_relu", name="b")(i)
    c = L.Dense(4, activation="hard_sigmoid", name="c")(i)
    m = L.Multiply(name="mul")([a, b])
    s = L.Subtract(name="sub")([a, c])
    mx = L.Maximum(name="max")([a, b, c])
    mn = L.Minimum(name="min")([b, c])
    av = L.Average(name="avg")([a, b, c])
    x = L.Concatenate(name="cat")([m, s, mx, mn, av])
    x = L.Dense(3, activation="tanh", name="d")(x)
    y = L.ReLU(negative_slope=0.1, name="leaky")(x)
    return keras.Model(i, y, name="merge")


def main():
    rng = np.random.default_rng(12)
    keras.utils.set_random_seed(12)
    goldens = {}
    for make in (conv1d, cnn2d, merge):
        model = make()
        for w in model.weights:  # non-trivial biases too
            w.assign(rng.normal(scale=0.5, size=w.shape).astype("float32"))
        name = make.__name__
        x = rng.normal(size=(4,) + tuple(model.input_shape[1:])).astype("float32")
        goldens[f"{name}_x"] = x
        goldens[f"{name}_y"] = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        model.save(HERE / f"{name}.keras")
        model.save(HERE / f"{name}.h5")
    np.savez(HERE / "golden.npz", **goldens)
    print("keras", keras.__version__, "backend", keras.backend.backend(), sorted(goldens))


if __name__ == "__main__":
    main()
