"""Make the Keras recurrent fixtures of tests/test_recurrent.py: small LSTM/GRU models saved by
Keras 2 (tf_keras, `model.save("m.h5")`) and Keras's own outputs on fixed inputs.

TensorFlow is not a dependency of nnbuild: this script runs once, by hand, in its own virtual
environment, outside CI, and its outputs are committed:

    python3 -m venv /tmp/tflite-venv
    /tmp/tflite-venv/bin/pip install tensorflow-cpu tf-keras
    /tmp/tflite-venv/bin/python tests/data/keras_recurrent/make_fixtures.py

It writes, beside itself, for each model M in MODELS: M.h5 and M.npz with x (inputs
[cases, steps, features]) and y (Keras's `predict` outputs [cases, ...]); and the `stacked` model
built and saved by Keras 3 as a `.keras` archive (its recurrent weights under `cell/vars`):
stacked_keras3.keras and stacked_keras3.npz.
"""

import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = 4


def stacked(keras):
    """LSTM returning its sequence, GRU (reset_after, Keras 2's default) its last state, Dense."""
    x = keras.Input((7, 3), name="x")
    y = keras.layers.LSTM(6, return_sequences=True)(x)
    y = keras.layers.GRU(5)(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="stacked")


def variants(keras):
    """GRU without reset_after returning its sequence, an LSTM reading it backwards with relu."""
    x = keras.Input((6, 4), name="x")
    y = keras.layers.GRU(5, reset_after=False, return_sequences=True)(x)
    y = keras.layers.LSTM(4, go_backwards=True, activation="relu")(y)
    return keras.Model(x, y, name="variants")


MODELS = {"stacked": stacked, "variants": variants}


def save(model, path, k):
    for layer in model.layers:   # non-zero biases, so every bias term is exercised
        weights = layer.get_weights()
        if weights:
            rng = np.random.default_rng(30 + k)
            layer.set_weights([w + rng.normal(0, 0.2, w.shape).astype(np.float32) for w in weights])
    model.save(path)
    x = np.random.default_rng(40 + k).normal(0, 1, (CASES,) + tuple(model.input_shape[1:])).astype(np.float32)
    np.savez(path.with_suffix(".npz"), x=x, y=model.predict(x, verbose=0))
    print(path.name, "written")


def main():
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import keras
    import tf_keras
    for k, (name, build) in enumerate(MODELS.items()):
        tf_keras.utils.set_random_seed(20 + k)
        save(build(tf_keras), HERE / f"{name}.h5", k)
    keras.utils.set_random_seed(20)
    save(stacked(keras), HERE / "stacked_keras3.keras", 0)
    (HERE / "fixtures.txt").write_text(f"tf_keras {tf_keras.__version__}, keras {keras.__version__}\n")


if __name__ == "__main__":
    main()
