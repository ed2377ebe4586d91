"""Write the XOR example: a 2-2-1 network with hand-chosen weights, as a Keras 2 full-model .h5.

Hidden layer (ReLU):  h1 = relu(x1 + x2),  h2 = relu(x1 + x2 - 1)
Output (sigmoid):     y  = sigmoid(20*h1 - 40*h2 - 10)
On {0,1}^2 the pre-activation h1 - 2*h2 is 0, 1, 1, 0 (= XOR), so y = sigmoid(+-10):
below 5e-5 for XOR = 0 and above 0.99995 for XOR = 1. All weights are exact in float32.

Outputs (next to this script, or in --out DIR): xor.h5 (root attrs model_config,
keras_version, backend; group model_weights in the Keras 2 layout) and example.json.
Re-running gives byte-identical files (no HDF5 timestamps, fixed libver).
"""

import argparse
import json
from pathlib import Path

import h5py
import numpy as np

KERAS_VERSION = "2.3.1"

#: (name, kernel [in, out], bias [out], activation)
LAYERS = (
    ("dense_1", [[1.0, 1.0], [1.0, 1.0]], [0.0, -1.0], "relu"),
    ("dense_2", [[20.0], [-40.0]], [-10.0], "sigmoid"),
)

EXAMPLE = {"model": "xor.h5", "deadline_ms": 5, "tolerance": 1e-5,
           "input_range": [0.0, 1.0], "check_inputs": 16, "seed": 1}


def model_config():
    """The model_config of the Sequential model (Keras 2.2+ form: {"name", "layers"})."""
    layers = []
    for i, (name, kernel, _, act) in enumerate(LAYERS):
        cfg = {"name": name, "trainable": True, "dtype": "float32", "units": len(kernel[0]),
               "activation": act, "use_bias": True,
               "kernel_initializer": {"class_name": "Constant", "config": {"value": 0.0}},
               "bias_initializer": {"class_name": "Zeros", "config": {}},
               "kernel_regularizer": None, "bias_regularizer": None,
               "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None}
        if i == 0:
            cfg["batch_input_shape"] = [None, len(kernel)]
        layers.append({"class_name": "Dense", "config": cfg})
    return {"class_name": "Sequential", "config": {"name": "xor", "layers": layers}}


def write_model(path):
    """model.save() layout, reproducibly (no timestamps, fixed format, sorted-key config)."""
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f.attrs["keras_version"] = np.bytes_(KERAS_VERSION.encode())
        f.attrs["backend"] = np.bytes_(b"tensorflow")
        f.attrs["model_config"] = np.bytes_(json.dumps(model_config(), sort_keys=True).encode())
        mw = f.create_group("model_weights")
        mw.attrs["backend"] = np.bytes_(b"tensorflow")
        mw.attrs["keras_version"] = np.bytes_(KERAS_VERSION.encode())
        mw.attrs["layer_names"] = np.array([name.encode() for name, *_ in LAYERS])
        for name, kernel, bias, _ in LAYERS:
            g = mw.create_group(name)
            g.attrs["weight_names"] = np.array([f"{name}/kernel:0".encode(), f"{name}/bias:0".encode()])
            sub = g.create_group(name)
            sub.create_dataset("kernel:0", data=np.array(kernel, np.float32), track_times=False)
            sub.create_dataset("bias:0", data=np.array(bias, np.float32), track_times=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    write_model(out / "xor.h5")
    (out / "example.json").write_text(json.dumps(EXAMPLE, sort_keys=True, indent=2) + "\n",
                                      encoding="utf-8")


if __name__ == "__main__":
    main()
