"""Make the TFLite fixtures of tests/test_frontend_tflite.py and tests/test_tflm_int8.py: small Keras models converted by the
standard TFLite converter, in float32 and with full-integer int8 quantization, and the outputs of
each on fixed inputs from the runtimes users run them with.

TensorFlow is not a dependency of nnbuild: this script runs once, by hand, in its own virtual
environment, outside CI, and its outputs are committed:

    python3 -m venv /tmp/tflite-venv
    /tmp/tflite-venv/bin/pip install tensorflow-cpu tflite-micro ai-edge-litert
    /tmp/tflite-venv/bin/python tests/data/tflite/make_fixtures.py

It writes, beside itself, for each model M in MODELS:
* M_float32.tflite and M_float32.npz: x (float32 inputs [cases, ...]) and y (LiteRT's float32
  outputs, `ai_edge_litert.interpreter.Interpreter`, default kernels);
* mlp_float16.tflite and mlp_float16.npz: the MLP with float16 weights (the converter's float16
  quantization), LiteRT's outputs;
* M_int8.tflite and M_int8.npz: x (the same float inputs), x_q (x quantized with the input tensor's
  scale and zero point, int8), y_q (TFLite Micro's int8 outputs, PyPI `tflite-micro`, its Python
  interpreter over the reference kernels: the int8 reference of nnbuild, never LiteRT) and y (y_q
  dequantized with the output tensor's scale and zero point);
* with the argument `multiio`: multiio_int8_tflm.npz, TFLite Micro's outputs for the hand-built
  two-input, two-output multiio_int8.tflite (make_multiio.py) on seeded int8 cases;
* for each model M in RECURRENT_INT8 (Keras LSTMs through tf_keras, as RECURRENT): M_float32 and
  M_int8 as above, and M_int8_stress.npz: x_q (random int8 inputs over the whole range) and y_q
  (TFLite Micro's outputs), M_int8_stream.npz: the fixture's x_q and y_q from one interpreter
  invoked on the cases in turn without a reset (the LSTM state carried from case to case);
  `make_fixtures.py lstm_int8` writes them alone (TensorFlow 2.21's
  converter refuses the 16x8 quantization of this LSTM: "Quantization to 16x8-bit not yet supported
  for op: 'UNIDIRECTIONAL_SEQUENCE_LSTM'", so that variant has no fixture);
* fixtures.json: the versions of TensorFlow, LiteRT and TFLite Micro that made them;
* for each model M in RECURRENT, M_float32.tflite and M_float32.npz only (float32): a Keras LSTM
  becomes one fused UNIDIRECTIONAL_SEQUENCE_LSTM only from tf_keras (Keras 2: `pip install
  tf-keras`, run with TF_USE_LEGACY_KERAS=1, which this script sets; Keras 3 writes a WHILE loop
  instead). LiteRT keeps the LSTM state in variable tensors across invocations: every case is run
  from the zero state (`reset_all_variables` before each), as nnbuild's generated function computes.

`make_fixtures.py lstm` writes the RECURRENT fixtures alone; `make_fixtures.py acts` the STANDALONE
ones (int8 and float32, as MODELS) alone.

Every random number comes from fixed seeds, so a rerun with the same versions gives the same
models (the converter's output can still change between TensorFlow versions).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = 8


def mlp(keras):
    """Dense layers with relu, tanh, sigmoid and a softmax output."""
    x = keras.Input((8,), name="x")
    y = keras.layers.Dense(16, activation="relu")(x)
    y = keras.layers.Dense(12, activation="tanh")(y)
    y = keras.layers.Dense(8, activation="sigmoid")(y)
    y = keras.layers.Dense(4, activation="softmax")(y)
    return keras.Model(x, y, name="mlp")


def cnn(keras):
    """Conv2D, DepthwiseConv2D, max and average pooling, Reshape and Flatten, Dense."""
    x = keras.Input((12, 12, 2), name="x")
    y = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    y = keras.layers.DepthwiseConv2D(3, padding="valid", activation="relu6")(y)
    y = keras.layers.MaxPooling2D(2)(y)
    y = keras.layers.Conv2D(6, 3, strides=2, padding="same")(y)
    y = keras.layers.AveragePooling2D(2, padding="same")(y)
    y = keras.layers.Reshape((-1, 6))(y)
    y = keras.layers.Flatten()(y)
    y = keras.layers.Dense(5, activation="softmax")(y)
    return keras.Model(x, y, name="cnn")


def merge(keras):
    """Two branches joined by Add, Mul and Concatenate; ZeroPadding2D; global average pooling."""
    x = keras.Input((8, 8, 3), name="x")
    a = keras.layers.Conv2D(4, 3, padding="same")(x)
    b = keras.layers.ZeroPadding2D(((2, 0), (0, 2)))(x)  # not SAME: stays a PAD
    b = keras.layers.Conv2D(4, 3, activation="tanh")(b)
    s = keras.layers.Add()([a, b])
    p = keras.layers.Multiply()([a, b])
    y = keras.layers.Concatenate()([s, p])
    y = keras.layers.Conv2D(6, 1, activation="relu")(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="merge")


def conv1d(keras):
    """A 1-D convolution: the converter writes EXPAND_DIMS -> CONV_2D -> RESHAPE around it."""
    x = keras.Input((16, 2), name="x")
    y = keras.layers.Conv1D(4, 3, activation="relu")(x)
    y = keras.layers.MaxPooling1D(2)(y)
    y = keras.layers.Flatten()(y)
    y = keras.layers.Dense(3, activation="sigmoid")(y)
    return keras.Model(x, y, name="conv1d")


def extra(keras):
    """LeakyReLU, hard swish, Subtract, Maximum, Permute and GlobalMaxPooling2D (REDUCE_MAX)."""
    x = keras.Input((6, 6, 3), name="x")
    a = keras.layers.Conv2D(4, 3, padding="same")(x)
    a = keras.layers.LeakyReLU(negative_slope=0.2)(a)
    b = keras.layers.Conv2D(4, 1, activation="hard_swish")(x)
    s = keras.layers.Subtract()([a, b])
    m = keras.layers.Maximum()([a, b])
    y = keras.layers.Concatenate()([s, m])
    y = keras.layers.Permute((2, 1, 3))(y)
    y = keras.layers.Conv2D(5, 2, strides=2)(y)
    y = keras.layers.GlobalMaxPooling2D()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="extra")


def core(keras):
    """Only the integer-arithmetic operators (no softmax, tanh or logistic tables): convolutions,
    pooling, fully connected with fused relu/relu6."""
    x = keras.Input((10, 10, 2), name="x")
    y = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    y = keras.layers.DepthwiseConv2D(3, depth_multiplier=2, activation="relu6")(y)
    y = keras.layers.MaxPooling2D(2)(y)
    y = keras.layers.AveragePooling2D(2, padding="same")(y)
    y = keras.layers.Flatten()(y)
    y = keras.layers.Dense(6, activation="relu")(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="core")


def arith(keras):
    """Add, Multiply, Concatenate and ZeroPadding2D between convolutions, without lookup-table operators."""
    x = keras.Input((6, 6, 2), name="x")
    a = keras.layers.Conv2D(4, 3, padding="same")(x)
    b = keras.layers.Conv2D(4, 1, activation="relu")(x)
    y = keras.layers.Concatenate()([keras.layers.Add()([a, b]), keras.layers.Multiply()([a, b])])
    y = keras.layers.ZeroPadding2D(((1, 0), (0, 1)))(y)
    y = keras.layers.MaxPooling2D(2)(y)
    y = keras.layers.Flatten()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="arith")


def pooled(keras):
    """GlobalAveragePooling2D (MEAN over height and width) between a convolution and a dense layer."""
    x = keras.Input((5, 5, 3), name="x")
    y = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(x)
    y = keras.layers.GlobalAveragePooling2D()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="pooled")


def mixed(keras):
    """extra's operators without hard swish: LeakyReLU, Subtract, Maximum, Permute, GlobalMaxPooling2D."""
    x = keras.Input((6, 6, 3), name="x")
    a = keras.layers.Conv2D(4, 3, padding="same")(x)
    a = keras.layers.LeakyReLU(negative_slope=0.2)(a)
    b = keras.layers.Conv2D(4, 1)(x)
    y = keras.layers.Concatenate()([keras.layers.Subtract()([a, b]), keras.layers.Maximum()([a, b])])
    y = keras.layers.Permute((2, 1, 3))(y)
    y = keras.layers.Conv2D(5, 2, strides=2)(y)
    y = keras.layers.GlobalMaxPooling2D()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="mixed")


def lstm(keras):
    """Two stacked LSTMs (the first returns its sequence, the second its last step), then Dense."""
    x = keras.Input((8, 3), batch_size=1, name="x")  # a free batch axis keeps the LSTM unfused
    y = keras.layers.LSTM(6, return_sequences=True)(x)
    y = keras.layers.LSTM(5)(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="lstm")


def acts(keras):
    """Standalone RELU, RELU6 and an int8-to-int8 QUANTIZE: the converter cannot fuse a ReLU after a
    Concatenate, and requantizes a tensor that two concatenations need at different scales."""
    x = keras.Input((6, 6, 2), name="x")
    a = keras.layers.Conv2D(4, 3, padding="same")(x)
    b = keras.layers.Conv2D(4, 1)(x)
    c = keras.layers.Multiply()([b, b])
    y1 = keras.layers.ReLU(6.0)(keras.layers.Concatenate()([a, b]))
    y2 = keras.layers.ReLU()(keras.layers.Concatenate()([a, c]))
    y = keras.layers.Concatenate()([y1, y2])
    y = keras.layers.MaxPooling2D(2)(y)
    y = keras.layers.Flatten()(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="acts")


def kws_lstm(keras):
    """Keyword-spotting-like: 10 frames of 8 features through an LSTM of 12 units (its last step),
    then Dense. Full-integer int8: one UNIDIRECTIONAL_SEQUENCE_LSTM with int8 input, output and
    weights, int16 cell state, int32 biases, then STRIDED_SLICE (the last step) and
    FULLY_CONNECTED."""
    x = keras.Input((10, 8), batch_size=1, name="x")
    y = keras.layers.LSTM(12)(x)
    y = keras.layers.Dense(4)(y)
    return keras.Model(x, y, name="kws_lstm")


#: float32 only (see the module doc)
RECURRENT = {"lstm": lstm}

def seq_lstm(keras):
    """An LSTM of 16 units over 12 steps of 9 features whose whole output sequence is the model's
    output: every step's hidden state is compared."""
    x = keras.Input((12, 9), batch_size=1, name="x")
    y = keras.layers.LSTM(16, return_sequences=True)(x)
    return keras.Model(x, y, name="seq_lstm")


def stacked_lstm(keras):
    """Two stacked LSTMs (8 units returning the sequence, then 6 returning the last step) over 8
    steps of 5 features, then Dense: the second LSTM reads the first's int8 sequence."""
    x = keras.Input((8, 5), batch_size=1, name="x")
    y = keras.layers.LSTM(8, return_sequences=True)(x)
    y = keras.layers.LSTM(6)(y)
    y = keras.layers.Dense(3)(y)
    return keras.Model(x, y, name="stacked_lstm")


#: int8 recurrent models through tf_keras (see the module doc), from seed 17 (in this order)
RECURRENT_INT8 = {"kws_lstm": kws_lstm, "seq_lstm": seq_lstm, "stacked_lstm": stacked_lstm}
#: random int8 inputs over the whole range per int8 recurrent model (M_int8_stress.npz): they
#: drive the gates into the sigmoid table's saturation and the cell state to its int16 limits
STRESS_CASES = 24

#: made with their own seed after MODELS, so adding one leaves the others' weights unchanged
STANDALONE = {"acts": acts}

MODELS = {"mlp": mlp, "cnn": cnn, "merge": merge, "conv1d": conv1d, "extra": extra, "core": core, "arith": arith,
          "pooled": pooled, "mixed": mixed}


def convert(tf, model, shape, int8, float16=False):
    """The TFLite flatbuffer of a Keras model, as users make it: `TFLiteConverter.from_keras_model`
    (the batch axis stays free, so a Reshape becomes the SHAPE -> STRIDED_SLICE -> PACK arithmetic)."""
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if float16:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    if int8:
        rng = np.random.default_rng(7)

        def representative():
            for _ in range(64):
                yield [rng.normal(0, 1, (1,) + shape).astype(np.float32)]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def litert_outputs(blob, x):
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=blob)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(inp["index"], (1,) + x.shape[1:])
    interpreter.allocate_tensors()
    rows = []
    for case in x:
        interpreter.reset_all_variables()   # a recurrent model's state: zero for every case
        interpreter.set_tensor(inp["index"], case[None])
        interpreter.invoke()
        rows.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.stack(rows)


def tflm_outputs(blob, x_q, reset=True):
    """TFLite Micro's outputs, each case from a fresh interpreter (`reset`: a recurrent model's
    state from its reset value), else every case from one interpreter in turn (the state carried
    over from the case before, as Invoke() keeps variable tensors)."""
    from tflite_micro.python.tflite_micro import runtime
    rows = []
    interpreter = None
    for case in x_q:
        if reset or interpreter is None:
            interpreter = runtime.Interpreter.from_bytes(blob)
        interpreter.set_input(case[None], 0)
        interpreter.invoke()
        rows.append(np.array(interpreter.get_output(0))[0].copy())
    return np.stack(rows)


def quantization(blob):
    """(input scale, input zero point, output scale, output zero point) from LiteRT's details."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=blob)
    (si, zi), (so, zo) = (d["quantization"] for d in (interpreter.get_input_details()[0],
                                                    interpreter.get_output_details()[0]))
    return si, zi, so, zo


def recurrent_fixtures():
    """The RECURRENT models through tf_keras (Keras 2), float32 with LiteRT's outputs."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras
    tf_keras.utils.set_random_seed(3)
    for name, build in RECURRENT.items():
        model = build(tf_keras)
        shape = tuple(model.input_shape[1:])
        float32_fixture(tf, name, model, shape, np.random.default_rng(13).normal(0, 1, (CASES,) + shape))
        print(name, "written")


def recurrent_int8_fixtures():
    """The RECURRENT_INT8 models through tf_keras (Keras 2), full-integer int8 with TFLite Micro's
    outputs (each case from a fresh interpreter: the LSTM state from its reset value), and float32
    beside them with LiteRT's."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras
    tf_keras.utils.set_random_seed(17)
    for name, build in RECURRENT_INT8.items():
        model = build(tf_keras)
        shape = tuple(model.input_shape[1:])
        x = float32_fixture(tf, name, model, shape, np.random.default_rng(19).normal(0, 1, (CASES,) + shape))
        blob = convert(tf, model, shape, int8=True)
        int8_fixture(name, blob, x)
        x_q = np.random.default_rng(23).integers(-128, 128, (STRESS_CASES,) + shape).astype(np.int8)
        np.savez(HERE / f"{name}_int8_stress.npz", x_q=x_q, y_q=tflm_outputs(blob, x_q))
        with np.load(HERE / f"{name}_int8.npz") as fixture:
            x_q = fixture["x_q"]
        np.savez(HERE / f"{name}_int8_stream.npz", x_q=x_q, y_q=tflm_outputs(blob, x_q, reset=False))
        print(name, "written")


def float32_fixture(tf, name, model, shape, x):
    """M_float32.tflite and M_float32.npz (x, LiteRT's float32 outputs); returns x as float32."""
    x = x.astype(np.float32)
    blob = convert(tf, model, shape, int8=False)
    (HERE / f"{name}_float32.tflite").write_bytes(blob)
    np.savez(HERE / f"{name}_float32.npz", x=x, y=litert_outputs(blob, x))
    return x


def int8_fixture(name, blob, x):
    """M_int8.tflite and M_int8.npz (x, x_q, y_q from TFLite Micro, y dequantized)."""
    (HERE / f"{name}_int8.tflite").write_bytes(blob)
    si, zi, so, zo = quantization(blob)
    x_q = np.clip(np.round(x / si) + zi, -128, 127).astype(np.int8)
    y_q = tflm_outputs(blob, x_q)
    y = ((y_q.astype(np.float64) - zo) * so).astype(np.float32)
    np.savez(HERE / f"{name}_int8.npz", x=x, x_q=x_q, y_q=y_q, y=y)


def multiio_goldens():
    """multiio_int8_tflm.npz: TFLite Micro's outputs for the hand-built two-input, two-output
    multiio_int8.tflite (written by make_multiio.py) on seeded int8 cases, one interpreter per case."""
    from tflite_micro.python.tflite_micro import runtime
    blob = (HERE / "multiio_int8.tflite").read_bytes()
    rng = np.random.default_rng(3)
    in_a, in_b = (rng.integers(-128, 128, (CASES, 4)).astype(np.int8) for _ in range(2))
    in_a[0], in_b[0], in_a[1], in_b[1] = -128, -128, 127, 127
    dense, product = [], []
    for a, b in zip(in_a, in_b):
        interpreter = runtime.Interpreter.from_bytes(blob)
        interpreter.set_input(a[None], 0)
        interpreter.set_input(b[None], 1)
        interpreter.invoke()
        dense.append(np.array(interpreter.get_output(0))[0].copy())
        product.append(np.array(interpreter.get_output(1))[0].copy())
    np.savez(HERE / "multiio_int8_tflm.npz", in_a=in_a, in_b=in_b, out_dense=np.stack(dense),
             out_product=np.stack(product))


def main():
    if sys.argv[1:] == ["multiio"]:
        multiio_goldens()
        return
    if sys.argv[1:] == ["lstm"]:
        recurrent_fixtures()
        return
    if sys.argv[1:] == ["lstm_int8"]:
        recurrent_int8_fixtures()
        return
    if sys.argv[1:] == ["acts"]:
        import tensorflow as tf
        standalone_fixtures(tf)
        return
    recurrent_fixtures()   # first: it sets TF_USE_LEGACY_KERAS before TensorFlow is imported
    recurrent_int8_fixtures()
    import tensorflow as tf
    import ai_edge_litert
    import tflite_micro
    tf.keras.utils.set_random_seed(1)
    feedforward_fixtures(tf, MODELS)
    standalone_fixtures(tf)
    versions = {"tensorflow": tf.__version__, "ai-edge-litert": getattr(ai_edge_litert, "__version__", "?"),
                "tflite-micro": getattr(tflite_micro, "__version__", "?")}
    (HERE / "fixtures.json").write_text(json.dumps(versions, indent=1, sort_keys=True) + "\n")


def standalone_fixtures(tf):
    """The STANDALONE models, from seed 5."""
    tf.keras.utils.set_random_seed(5)
    feedforward_fixtures(tf, STANDALONE)


def feedforward_fixtures(tf, models):
    """float32 and int8 fixtures of each model (see the module doc)."""
    for name, build in models.items():
        model = build(tf.keras)
        shape = tuple(model.input_shape[1:])
        x = float32_fixture(tf, name, model, shape, np.random.default_rng(11).normal(0, 1, (CASES,) + shape))
        if name == "mlp":  # float16 weights: DEQUANTIZE of constants ahead of float32 operators
            blob = convert(tf, model, shape, int8=False, float16=True)
            (HERE / f"{name}_float16.tflite").write_bytes(blob)
            np.savez(HERE / f"{name}_float16.npz", x=x, y=litert_outputs(blob, x))
        int8_fixture(name, convert(tf, model, shape, int8=True), x)
        print(name, "written")


if __name__ == "__main__":
    main()
