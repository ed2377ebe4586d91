"""TFLite front-end: the fixtures of tests/data/tflite/ (Keras models converted by the TFLite
converter; make_fixtures.py says how they were made) load into the IR and give LiteRT's float32
outputs; the reader keeps every tensor's quantization for the int8 work; full-integer int8 models,
unsupported operators and damaged files are refused in one line naming the file. The e2e tier
runs `nnbuild generate` and `nnbuild check` on the host (every float32 fixture) and on AVR (the MLP)
against the LiteRT goldens at the float32 tolerance."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, needs_avr
from nnbuild import frontends
from nnbuild.errors import NNBuildError
from nnbuild.frontends import tflite as tfl
from nnbuild.ir import reference

DATA = REPO / "tests" / "data" / "tflite"
MODELS = ("mlp", "cnn", "merge", "conv1d", "extra", "core", "arith", "pooled", "mixed", "acts")
#: float fixtures: (model, precision of the file)
FLOATS = tuple((name, "float32") for name in MODELS) + (("mlp", "float16"),)
#: the operators the converter wrote for each fixture (file order)
OPERATORS = {
    "mlp": ["FULLY_CONNECTED", "FULLY_CONNECTED", "TANH", "FULLY_CONNECTED", "LOGISTIC", "FULLY_CONNECTED",
            "SOFTMAX"],
    "cnn": ["CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "CONV_2D", "AVERAGE_POOL_2D", "SHAPE", "STRIDED_SLICE",
            "PACK", "RESHAPE", "SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE", "FULLY_CONNECTED", "SOFTMAX"],
    "merge": ["CONV_2D", "PAD", "CONV_2D", "TANH", "ADD", "MUL", "CONCATENATION", "CONV_2D", "MEAN",
              "FULLY_CONNECTED"],
    "conv1d": ["EXPAND_DIMS", "CONV_2D", "RESHAPE", "EXPAND_DIMS", "MAX_POOL_2D", "RESHAPE", "SHAPE",
               "STRIDED_SLICE", "PACK", "RESHAPE", "FULLY_CONNECTED", "LOGISTIC"],
    "extra": ["CONV_2D", "LEAKY_RELU", "CONV_2D", "HARD_SWISH", "MAXIMUM", "SUB", "CONCATENATION", "TRANSPOSE",
              "CONV_2D", "REDUCE_MAX", "FULLY_CONNECTED"],
    "core": ["CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "SHAPE", "STRIDED_SLICE", "PACK",
             "RESHAPE", "FULLY_CONNECTED", "FULLY_CONNECTED"],
    "arith": ["CONV_2D", "CONV_2D", "ADD", "MUL", "CONCATENATION", "PAD", "MAX_POOL_2D", "SHAPE", "STRIDED_SLICE",
              "PACK", "RESHAPE", "FULLY_CONNECTED"],
    "pooled": ["CONV_2D", "MEAN", "FULLY_CONNECTED"],
    "mixed": ["CONV_2D", "LEAKY_RELU", "CONV_2D", "MAXIMUM", "SUB", "CONCATENATION", "TRANSPOSE", "CONV_2D",
              "REDUCE_MAX", "FULLY_CONNECTED"],
    "acts": ["CONV_2D", "MUL", "CONV_2D", "CONCATENATION", "RELU", "CONCATENATION", "RELU6", "CONCATENATION",
             "MAX_POOL_2D", "SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE", "FULLY_CONNECTED"],
}


def fixture(name, precision="float32"):
    return DATA / f"{name}_{precision}.tflite"


def goldens(name, precision="float32"):
    with np.load(DATA / f"{name}_{precision}.npz") as data:
        return {k: data[k] for k in data.files}


def one_line_error(path, match):
    with pytest.raises(NNBuildError) as error:
        frontends.load(path)
    text = str(error.value)
    assert "\n" not in text and text.startswith(str(path)), text
    assert match in text, text
    return text


# ----------------------------------------------------------------------------- float32 fixtures


@pytest.mark.parametrize("name", MODELS)
def test_fixture_operators_are_what_the_converter_writes(name):
    graph = tfl.read(fixture(name))
    assert [op.op for op in graph.operators] == OPERATORS[name]


@pytest.mark.parametrize("name,precision", FLOATS)
def test_reference_of_the_loaded_model_gives_litert_outputs(name, precision):
    model = frontends.load(fixture(name, precision))
    gold = goldens(name, precision)
    x = gold["x"].reshape((len(gold["x"]),) + tuple(model.input_shape))
    got = reference.run(model, x.astype(np.float32), np.float32).reshape(len(x), -1)
    assert np.max(np.abs(got - gold["y"].reshape(len(x), -1))) <= 1e-5


def test_mlp_is_a_chain_of_dense_layers_with_its_activations():
    model = frontends.load(fixture("mlp"))
    assert model.edges is None  # a chain: the MLP code shape takes it
    assert [(layer.kind, getattr(layer, "activation", None)) for layer in model.layers] == [
        ("dense", "relu"), ("dense", "linear"), ("activation", "tanh"), ("dense", "linear"),
        ("activation", "sigmoid"), ("dense", "linear"), ("activation", "softmax")]
    assert model.input_shape == (8,) and model.output_shape == (4,)


def test_reshape_shape_arithmetic_is_folded():
    """SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE leaves two reshapes and no layer for the arithmetic."""
    model = frontends.load(fixture("cnn"))
    shapes = model.tensor_shapes()
    reshapes = [(layer.source_type, shapes[layer.name]) for layer in model.layers if layer.kind == "reshape"]
    assert reshapes == [("RESHAPE", (4, 6)), ("RESHAPE", (24,))]  # Keras Reshape((-1, 6)), then Flatten
    assert len(model.layers) == 10  # 15 operators: the 6 of the shape arithmetic leave no layer


def test_float16_weights_are_dequantized_at_load():
    """The converter's float16 quantization: DEQUANTIZE of each weight folded into a float32 constant."""
    graph = tfl.read(fixture("mlp", "float16"))
    assert [op.op for op in graph.operators][:4] == ["DEQUANTIZE"] * 4
    model = frontends.load(fixture("mlp", "float16"))
    assert model.edges is None and [layer.kind for layer in model.layers].count("dense") == 4
    kernel = model.layers[0].kernel
    assert kernel.dtype == np.float32 and np.array_equal(kernel, kernel.astype(np.float16).astype(np.float32))


# ----------------------------------------------------------------------------- int8: read for precision int8


@pytest.mark.parametrize("name", MODELS)
def test_int8_fixture_loads_as_a_quantized_model(name):
    """A full-integer fixture is told from a float one by its int8 input and output: the int8 front-end
    (nnbuild.frontends.tflite_int8) hands it to precision int8 with its quantization."""
    model = frontends.load(fixture(name, "int8"))
    assert model.kind == "int8" and model.graph.tensors[model.graph.inputs[0]].type_name == "int8"
    one_line_error_of_float_reader = "quantized models are read as full-integer int8 models"
    with pytest.raises(NNBuildError, match=one_line_error_of_float_reader):
        tfl.load(fixture(name, "int8"))


def test_reader_keeps_the_quantization_of_an_int8_model():
    """What the int8 precision needs: per-tensor scale/zero point of activations, per-channel
    scales along axis 0 for convolution filters, int32 biases."""
    graph = tfl.read(fixture("cnn", "int8"))
    gold = goldens("cnn", "int8")
    x = graph.tensors[graph.inputs[0]]
    assert x.type_name == "int8" and x.quantization.scales.shape == (1,)
    expected = np.clip(np.round(gold["x"] / x.quantization.scales[0]) + x.quantization.zero_points[0], -128, 127)
    assert np.array_equal(expected.astype(np.int8), gold["x_q"])
    conv = next(op for op in graph.operators if op.op == "CONV_2D")
    weights, bias = graph.tensors[conv.inputs[1]], graph.tensors[conv.inputs[2]]
    assert weights.type_name == "int8" and weights.data.dtype == np.int8
    assert weights.quantization.per_channel and weights.quantization.axis == 0
    assert weights.quantization.scales.shape == (weights.shape[0],)
    assert not weights.quantization.zero_points.any()
    assert bias.type_name == "int32" and bias.data.shape == (weights.shape[0],)


# ----------------------------------------------------------------------------- damaged files


def _model(data):
    import tflite
    return tflite.Model.GetRootAsModel(bytearray(data), 0)


def _field(table, slot):
    """Absolute position of a table field (vtable slot 4 + 2 * field number)."""
    offset = table._tab.Offset(slot)
    assert offset, f"field {slot} absent"
    return table._tab.Pos + offset


def _patched(tmp_path, data, position, fmt, value, name="damaged.tflite"):
    data = bytearray(data)
    struct.pack_into(fmt, data, position, value)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def test_unsupported_operator_is_refused_naming_its_index_and_name(tmp_path):
    data = fixture("mlp").read_bytes()
    model = _model(data)
    code = next(model.OperatorCodes(k) for k in range(model.OperatorCodesLength())
                if max(model.OperatorCodes(k).BuiltinCode(), model.OperatorCodes(k).DeprecatedBuiltinCode()) == 28)
    path = _patched(tmp_path, data, _field(code, 10), "<i", 50)  # TANH -> LOG_SOFTMAX
    data = path.read_bytes()
    path = _patched(tmp_path, data, _field(code, 4), "<b", 50)
    one_line_error(path, "operator 2 (LOG_SOFTMAX): operator not supported")


@pytest.mark.parametrize("cut", [0, 3, 8, 64, 500, 1500, 3000, -1])
def test_truncated_file_is_refused_in_one_line(tmp_path, cut):
    data = fixture("mlp").read_bytes()
    path = tmp_path / "cut.tflite"
    path.write_bytes(data[:cut])
    one_line_error(path, "")


def test_buffer_beyond_the_file_is_refused(tmp_path):
    data = fixture("mlp").read_bytes()
    model = _model(data)
    buffer = next(model.Buffers(k) for k in range(model.BuffersLength()) if model.Buffers(k).DataLength() > 0)
    length_at = buffer._tab.Vector(buffer._tab.Offset(4)) - 4
    path = _patched(tmp_path, data, length_at, "<I", len(data) + 1000)
    one_line_error(path, "bytes, beyond the file")


def test_buffer_of_the_wrong_size_is_refused(tmp_path):
    data = fixture("mlp").read_bytes()
    model = _model(data)
    buffer = next(model.Buffers(k) for k in range(model.BuffersLength()) if model.Buffers(k).DataLength() > 8)
    length_at = buffer._tab.Vector(buffer._tab.Offset(4)) - 4
    path = _patched(tmp_path, data, length_at, "<I", buffer.DataLength() - 4)
    one_line_error(path, "needs")


def test_tensor_naming_a_missing_buffer_is_refused(tmp_path):
    data = fixture("mlp").read_bytes()
    sub = _model(data).Subgraphs(0)
    tensor = next(sub.Tensors(k) for k in range(sub.TensorsLength()) if sub.Tensors(k).Buffer() > 0)
    path = _patched(tmp_path, data, _field(tensor, 8), "<I", 10 ** 6)
    one_line_error(path, "refers to buffer 1000000")


def test_huge_declared_tensor_is_refused_before_allocating(tmp_path):
    data = fixture("mlp").read_bytes()
    sub = _model(data).Subgraphs(0)
    tensor = sub.Tensors(sub.Inputs(0))
    first_dim = tensor._tab.Vector(tensor._tab.Offset(4)) + 4
    path = _patched(tmp_path, data, first_dim, "<i", 2 ** 30)
    one_line_error(path, "elements (limit MAX_TENSOR_ELEMENTS = 4194304)")


def test_not_a_tflite_file_is_refused(tmp_path):
    path = tmp_path / "text.tflite"
    path.write_text("hello, I am not a flatbuffer\n")
    one_line_error(path, "not a TFLite model")


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_mutated_files_load_or_are_refused_in_one_line(tmp_path, name):
    """Seeded byte damage anywhere in the file: a model or one NNBuildError line, never another exception."""
    data = fixture(name).read_bytes()
    rng = np.random.default_rng(28)
    path = tmp_path / "mutated.tflite"
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(80):
        mutated = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            mutated[at] = int(rng.integers(0, 256)) if rng.random() < 0.5 else 0xFF
        path.write_bytes(bytes(mutated))
        try:
            frontends.load(path)
            outcomes["loaded"] += 1
        except NNBuildError as error:
            assert "\n" not in str(error) and str(error).startswith(str(path)), str(error)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes


def test_suffix_is_registered():
    assert frontends.format_for("m.tflite").name == "tflite"
    assert frontends.format_for("M.TFLITE").module == "nnbuild.frontends.tflite"


# ----------------------------------------------------------------------------- e2e: generated C


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nnbuild", *args], cwd=REPO, capture_output=True, text=True)


@pytest.mark.e2e
@pytest.mark.parametrize("name,precision", FLOATS)
def test_generate_and_check_on_the_host_give_the_litert_outputs(tmp_path, name, precision, run_cli):
    """`nnbuild generate` and `nnbuild check` in this process (run_cli: the same main, no interpreter
    start); the two tests below run `nnbuild check` in its own process."""
    generated = run_cli("generate", str(fixture(name, precision)), "-o", str(tmp_path / "gen"))
    assert generated.returncode == 0, generated.stderr
    assert (tmp_path / "gen" / f"{name}_{precision}.c").is_file()
    run = run_cli("check", str(fixture(name, precision)), "--data", str(DATA / f"{name}_{precision}.npz"), "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    host = json.loads(run.stdout)["semantic"]["runs"]["host"]
    assert host["vs_framework"] <= 1e-4, host  # measured: 6e-8 or less


@pytest.mark.e2e
@needs_avr
def test_mlp_checks_on_avr_against_litert():
    run = _cli("check", str(fixture("mlp")), "--data", str(DATA / "mlp_float32.npz"), "--target", "avr", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    runs = json.loads(run.stdout)["semantic"]["runs"]
    avr = next(v for k, v in runs.items() if k != "host")
    assert avr["vs_framework"] <= 1e-4, runs  # measured: 6e-8


@pytest.mark.e2e
def test_int8_model_checks_bit_exact_on_the_host():
    run = _cli("check", str(fixture("mlp", "int8")), "--data", str(DATA / "mlp_int8.npz"))
    assert run.returncode == 0, run.stderr
    assert "bit-exact with TFLite Micro's int8 kernels (max |C - y| = 0" in run.stdout
