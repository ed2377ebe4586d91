"""CifarNet: a small functional CNN on 24x24x3 CIFAR-10 crops (the crop size of TensorFlow's CIFAR-10
tutorial) that exercises every layer rule nnbuild must get right:

* conv1: 'same' padding with stride 2 on an even size (24 -> 12; TF pads bottom/right only, the
  Keras2C issue 14 case), no bias, then BatchNormalization and a separate ReLU Activation;
* MaxPooling2D 3x3 stride 2 'same' (padding ignored by max), AveragePooling2D 3x3 stride 2 'same'
  on an even size (the padded cells are excluded from the divisor);
* a residual block (Add), a dilated conv (dilation 2, 'same'), an explicit asymmetric
  ZeroPadding2D before a 2x2 'valid' conv, and a channel Concatenate;
* Flatten (channels-last order), Dense relu, Dropout (identity at inference), Dense softmax.

Seeded weights; golden outputs from Keras (see ../make_keras_example.py for how to run this once).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from make_keras_example import make  # noqa: E402

EXAMPLE = {"tolerance": 1e-5, "input_range": [-1.0, 1.0], "check_inputs": 6, "seed": 1, "deadline_ms": None}


def build(keras):
    L = keras.layers
    x = keras.Input((24, 24, 3), name="image")
    c1 = L.Conv2D(8, 3, strides=2, padding="same", use_bias=False, name="conv1")(x)
    b1 = L.BatchNormalization(name="bn1")(c1)
    a1 = L.Activation("relu", name="relu1")(b1)
    p1 = L.MaxPooling2D(3, strides=2, padding="same", name="pool1")(a1)
    c2a = L.Conv2D(8, 3, padding="same", activation="relu", name="conv2a")(p1)
    c2b = L.Conv2D(8, 3, padding="same", name="conv2b")(c2a)
    r = L.Add(name="residual")([p1, c2b])
    ra = L.Activation("relu", name="relu2")(r)
    d = L.Conv2D(8, 3, dilation_rate=2, padding="same", activation="tanh", name="dilated")(ra)
    z = L.ZeroPadding2D(((1, 0), (0, 1)), name="pad")(ra)
    e = L.Conv2D(8, 2, padding="valid", activation="sigmoid", name="conv2x2")(z)
    cat = L.Concatenate(name="concat")([d, e])
    ap = L.AveragePooling2D(3, strides=2, padding="same", name="pool2")(cat)
    f = L.Flatten(name="flat")(ap)
    h = L.Dense(32, activation="relu", name="fc1")(f)
    h = L.Dropout(0.5, name="drop")(h)
    y = L.Dense(10, activation="softmax", name="fc2")(h)
    return keras.Model(x, y, name="cifarnet")


if __name__ == "__main__":
    make(HERE, "cifarnet", build, EXAMPLE, seed=7, count=6, input_range=(-1.0, 1.0))
