"""Shared by the CNN examples' make_model.py: build a Keras model with seeded weights, save it as a
full-model .h5, and record golden outputs computed by Keras itself.

Run ONCE, in a throwaway environment that has Keras (never a dependency of nnbuild or its tests):

    python3 -m venv /tmp/kenv && /tmp/kenv/bin/pip install keras tensorflow-cpu h5py numpy
    /tmp/kenv/bin/python firmware_examples/lenet5/make_model.py

The TensorFlow backend is required, not torch: Keras 3.15's torch backend pads an asymmetric
'same' AveragePooling2D by replicating edge cells and counts them in the divisor (a 6x6 ramp
pooled 3x3/2 gives 10.667 where TF gives 10.5), which is not Keras' documented semantics.

Outputs beside the example's script: <name>.h5 (model.save, Keras 3 legacy HDF5), golden.npz
(x: seeded inputs [N, H, W, C] float32; y: Keras outputs [N, M] float32; keras_version, backend)
and example.json. Weights: every array drawn from numpy's default_rng(seed), uniform in
+-sqrt(6 / (fan_in + fan_out)) (Glorot), BatchNormalization statistics positive and away from 0.
"""

import json
import os
from pathlib import Path

import numpy as np

os.environ["KERAS_BACKEND"] = "tensorflow"  # see the module doc: not torch


def seeded_weights(model, seed):
    """Give every layer deterministic weights from one numpy generator (layer order, array order)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        arrays = layer.get_weights()
        if not arrays:
            continue
        cls = type(layer).__name__
        new = []
        for k, a in enumerate(arrays):
            if cls == "BatchNormalization":
                # gamma, beta, moving_mean, moving_variance (scale=center=True)
                lo, hi = [(0.5, 1.5), (-0.3, 0.3), (-0.5, 0.5), (0.2, 2.0)][k]
                new.append(rng.uniform(lo, hi, a.shape).astype(np.float32))
            elif a.ndim >= 2:
                fan_in = int(np.prod(a.shape[:-1]))
                limit = np.sqrt(6.0 / (fan_in + a.shape[-1]))
                new.append(rng.uniform(-limit, limit, a.shape).astype(np.float32))
            else:
                new.append(rng.uniform(-0.1, 0.1, a.shape).astype(np.float32))
        layer.set_weights(new)


def make(directory, name, build, example, seed, count, input_range):
    """Build, weight, save and evaluate one example model (see the module doc)."""
    import keras
    directory = Path(directory)
    model = build(keras)
    seeded_weights(model, seed)
    h5 = directory / f"{name}.h5"
    model.save(str(h5))
    rng = np.random.default_rng(seed + 1000)
    shape = tuple(model.input_shape[1:])
    x = rng.uniform(input_range[0], input_range[1], (count,) + shape).astype(np.float32)
    y = np.asarray(model.predict(x, verbose=0), dtype=np.float32).reshape(count, -1)
    np.savez_compressed(directory / "golden.npz", x=x, y=y, keras_version=keras.__version__,
                        backend=keras.backend.backend())
    with open(directory / "example.json", "w") as f:
        json.dump({"model": h5.name, **example}, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"{h5}: {model.count_params()} parameters; golden.npz: {count} Keras {keras.__version__} "
          f"({keras.backend.backend()}) outputs")
