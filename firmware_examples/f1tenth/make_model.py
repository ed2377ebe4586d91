"""Write the F1/10 example controller as a Keras2C pair, without TensorFlow.

Topology of the published F1/10 controller (Ivanov et al., HSCC 2020; 24,320 connections):
61 LiDAR inputs -> Dense 128 tanh -> Dense 128 tanh -> Dense 1 tanh. The weights are NOT the
published (GPLv3) ones: they are drawn from numpy default_rng(SEED), glorot-uniform kernels and
small uniform biases, so the example is redistributable and bit-reproducible.

Outputs (next to this script, or in --out DIR): architecture.json (= Keras 2.3.1
model.to_json(), sorted keys), weights.h5 (save_weights layout: root attrs layer_names,
backend, keras_version; groups dense_1/dense_1/kernel:0 ...), example.json. Re-running gives
byte-identical files (no HDF5 timestamps, fixed libver).
"""

import argparse
import json
from pathlib import Path

import h5py
import numpy as np

SEED = 20200421
SIZES = (61, 128, 128, 1)
ACTIVATION = "tanh"
KERAS_VERSION = "2.3.1"
BIAS_LIMIT = 0.05

# The F1/10 control period is 100 ms. float32 on the 20 MHz ATmega1284 takes ~400 ms (measured),
# so the example builds in q16-acc32 fixed point, which meets it with max error ~1e-3; give
# precision=float32 (or precision=auto) on the command line to compare.
EXAMPLE = {"model": "architecture.json", "precision": "q16-acc32", "deadline_ms": 100, "tolerance": 1e-3,
           "input_range": [-1.0, 1.0], "check_inputs": 32, "seed": 1}


def make_weights(seed=SEED):
    """[(name, kernel [in, out] float32, bias [out] float32)] for each Dense layer."""
    rng = np.random.default_rng(seed)
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(SIZES, SIZES[1:]), start=1):
        limit = np.sqrt(6.0 / (fan_in + fan_out))  # glorot-uniform, as Keras initialises Dense
        kernel = rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)
        bias = rng.uniform(-BIAS_LIMIT, BIAS_LIMIT, size=fan_out).astype(np.float32)
        layers.append((f"dense_{i}", kernel, bias))
    return layers


def dense_config(name, units, input_dim=None):
    """A Keras 2.3.1 Dense config (what model.to_json() writes)."""
    cfg = {
        "name": name, "trainable": True, "dtype": "float32", "units": int(units),
        "activation": ACTIVATION, "use_bias": True,
        "kernel_initializer": {"class_name": "VarianceScaling",
                               "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform",
                                          "seed": None}},
        "bias_initializer": {"class_name": "Zeros", "config": {}},
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None,
    }
    if input_dim is not None:
        cfg["batch_input_shape"] = [None, int(input_dim)]
    return cfg


def architecture(layers):
    """The model.to_json() object of the Sequential model."""
    cfgs = [{"class_name": "Dense",
             "config": dense_config(name, k.shape[1], k.shape[0] if i == 0 else None)}
            for i, (name, k, _) in enumerate(layers)]
    return {"class_name": "Sequential", "config": {"name": "sequential_1", "layers": cfgs},
            "keras_version": KERAS_VERSION, "backend": "tensorflow"}


def write_weights(path, layers):
    """save_weights() layout at the file root, reproducibly (no timestamps, fixed format)."""
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f.attrs["backend"] = np.bytes_(b"tensorflow")
        f.attrs["keras_version"] = np.bytes_(KERAS_VERSION.encode())
        f.attrs["layer_names"] = np.array([name.encode() for name, _, _ in layers])
        for name, kernel, bias in layers:
            g = f.create_group(name)
            g.attrs["weight_names"] = np.array([f"{name}/kernel:0".encode(), f"{name}/bias:0".encode()])
            sub = g.create_group(name)
            sub.create_dataset("kernel:0", data=kernel, track_times=False)
            sub.create_dataset("bias:0", data=bias, track_times=False)


def write_json(path, obj):
    """Stable JSON: sorted keys, 2-space indent, trailing newline."""
    Path(path).write_text(json.dumps(obj, sort_keys=True, indent=2) + "\n", encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    layers = make_weights()
    write_json(out / "architecture.json", architecture(layers))
    write_weights(out / "weights.h5", layers)
    write_json(out / "example.json", EXAMPLE)


if __name__ == "__main__":
    main()
