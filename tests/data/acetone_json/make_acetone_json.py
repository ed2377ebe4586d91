"""Write the ACETONE JSON fixtures of tests/test_frontend_acetone_json.py from the documented format.

The format is what acetone-nnet 1.0's JSON_from_keras_model writes and its parser_JSON reads (see
nnbuild/frontends/acetone_json.py): a Keras to_json() object with config.data_format, and per layer
config.idx, size, input_shape / output_shape (batch first, 4-d channels-first), prev_layer_idx,
and the weights inline (Conv2D [in, kh, kw, filters], Dense [1, 1, in, units], BatchNormalization
gamma / beta / moving_mean / moving_var). Seeded weights; run `python3 tests/data/acetone_json/make_acetone_json.py`
to rewrite them (no Keras, no acetone-nnet needed).
"""

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def chw(shape):
    """A channels-last shape (no batch) as the file writes it: [null, C, H, W] or [null, n]."""
    shape = list(shape)
    return [None] + ([shape[2], shape[0], shape[1]] if len(shape) == 3 else shape)


class Writer:
    def __init__(self, input_shape, name="sequential", functional=False, dtype="float32"):
        self.rng = np.random.default_rng(7)
        self.functional, self.dtype = functional, dtype
        self.shapes = {0: tuple(input_shape)}
        cfg = {"batch_input_shape": [None] + list(input_shape), "dtype": dtype, "sparse": False,
               "ragged": False, "name": "input_1", "size": int(np.prod(input_shape)),
               "input_shape": chw(input_shape)}
        if functional:
            cfg.update(idx=0, output_shape=chw(input_shape), prev_layer_idx=[])
        self.layers = [{"class_name": "InputLayer", "config": cfg}]
        if functional:
            self.layers[0].update(name="input_1", inbound_nodes=[])
        self.name = name

    def weights(self, *shape, scale=0.5):
        return self.rng.normal(scale=scale, size=shape).round(6).tolist()

    def add(self, cls, out_shape, prev=None, extra=None, **config):
        idx = len(self.layers)
        prev = [idx - 1] if prev is None else list(prev)
        in_shapes = [self.shapes[p] for p in prev]
        cfg = dict(name=config.pop("name", f"{cls.lower()}_{idx}"), trainable=True, dtype=self.dtype, **config)
        cfg.update(idx=idx, size=int(np.prod(out_shape)),
                   input_shape=chw(in_shapes[0]) if len(prev) == 1 else [chw(s) for s in in_shapes],
                   output_shape=chw(out_shape), prev_layer_idx=prev)
        entry = {"class_name": cls, "config": cfg}
        if self.functional:
            entry.update(name=cfg["name"], inbound_nodes=[[[self.layers[p]["config"]["name"], 0, 0, {}] for p in prev]])
        entry.update(extra or {})
        self.layers.append(entry)
        self.shapes[idx] = tuple(out_shape)
        return idx

    def write(self, filename):
        doc = {"class_name": "Functional" if self.functional else "Sequential",
               "config": {"name": self.name, "layers": self.layers, "data_format": "channels_last"},
               "keras_version": "2.12.0", "backend": "tensorflow"}
        if self.functional:
            doc["config"]["input_layers"] = [["input_1", 0, 0]]
            doc["config"]["output_layers"] = [[self.layers[-1]["config"]["name"], 0, 0]]
        (HERE / filename).write_text(json.dumps(doc, indent=1) + "\n")


def conv_weights(w, cin, k, f):
    return {"weights": w.weights(cin, k, k, f), "biases": w.weights(f)}


def dense_weights(w, n, units):
    return {"weights": w.weights(1, 1, n, units), "biases": w.weights(units)}


def lenet():
    """Conv2D valid/same, strides, pooling, BatchNormalization, ZeroPadding2D, Flatten, Dense softmax."""
    w = Writer((12, 12, 2))
    w.add("Conv2D", (10, 10, 4), filters=4, kernel_size=[3, 3], strides=[1, 1], padding="valid",
          data_format="channels_last", dilation_rate=[1, 1], groups=1, activation="tanh", use_bias=True,
          extra=conv_weights(w, 2, 3, 4))
    w.add("AveragePooling2D", (5, 5, 4), pool_size=[2, 2], padding="valid", strides=[2, 2],
          data_format="channels_last")
    w.add("ZeroPadding2D", (6, 7, 4), padding=[[0, 1], [1, 1]], data_format="channels_last")
    w.add("Conv2D", (3, 4, 3), filters=3, kernel_size=[3, 3], strides=[2, 2], padding="same",
          data_format="channels_last", dilation_rate=[1, 1], groups=1, activation="relu", use_bias=True,
          extra=conv_weights(w, 4, 3, 3))
    w.add("BatchNormalization", (3, 4, 3), axis=[3], epsilon=0.001, momentum=0.99,
          extra={"gamma": w.weights(3), "beta": w.weights(3), "moving_mean": w.weights(3),
                 "moving_var": (np.abs(w.rng.normal(size=3)) + 0.5).round(6).tolist()})
    w.add("MaxPooling2D", (2, 3, 3), pool_size=[2, 2], padding="valid", strides=[1, 1],
          data_format="channels_last")
    w.add("Flatten", (18,), data_format="channels_last")
    w.add("Dropout", (18,), rate=0.2)
    w.add("Dense", (8,), units=8, activation="sigmoid", use_bias=True, extra=dense_weights(w, 18, 8))
    w.add("Dense", (5,), units=5, activation="softmax", use_bias=True, extra=dense_weights(w, 8, 5))
    w.write("lenet.json")


def mlp():
    """acetone-nnet's typical file (ACAS Xu style): Dense layers, relu, leaky_relu, linear."""
    w = Writer((5,), dtype="float64")
    w.add("Dense", (7,), units=7, activation="relu", use_bias=True, extra=dense_weights(w, 5, 7))
    w.add("Dense", (6,), units=6, activation="leaky_relu", use_bias=True, extra=dense_weights(w, 7, 6))
    w.add("Dense", (3,), units=3, activation="linear", use_bias=True, extra=dense_weights(w, 6, 3))
    w.write("mlp.json")


def merge():
    """A functional graph: every broadcast layer acetone-nnet's JSON reader knows, and Concatenate."""
    w = Writer((4, 4, 2), name="model", functional=True)
    conv = dict(kernel_size=[1, 1], strides=[1, 1], padding="valid", data_format="channels_last",
                dilation_rate=[1, 1], groups=1, use_bias=True)
    a = w.add("Conv2D", (4, 4, 3), prev=[0], filters=3, activation="relu", name="a", extra=conv_weights(w, 2, 1, 3), **conv)
    b = w.add("Conv2D", (4, 4, 3), prev=[0], filters=3, activation="tanh", name="b", extra=conv_weights(w, 2, 1, 3), **conv)
    c = w.add("Conv2D", (4, 4, 3), prev=[0], filters=3, activation="sigmoid", name="c", extra=conv_weights(w, 2, 1, 3), **conv)
    outs = [w.add("Add", (4, 4, 3), prev=[a, b, c], name="add"),
            w.add("Multiply", (4, 4, 3), prev=[a, b], name="mul"),
            w.add("Subtract", (4, 4, 3), prev=[b, c], name="sub"),
            w.add("Maximum", (4, 4, 3), prev=[a, c], name="max"),
            w.add("Minimum", (4, 4, 3), prev=[b, c], name="min"),
            w.add("Average", (4, 4, 3), prev=[a, b, c], name="avg")]
    cat = w.add("Concatenate", (4, 4, 18), prev=outs, axis=-1, name="cat")
    w.add("Flatten", (288,), prev=[cat], data_format="channels_last", name="flat")
    w.add("Dense", (4,), units=4, activation="linear", use_bias=True, name="out", extra=dense_weights(w, 288, 4))
    w.write("merge.json")


if __name__ == "__main__":
    lenet()
    mlp()
    merge()
