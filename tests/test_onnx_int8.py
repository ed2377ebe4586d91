"""Statically quantized ONNX models (onnxruntime's quantize_static, QDQ and QOperator forms) in the
int8 precision: the reader (nnbuild.frontends.onnx_int8) gives the quantized graph the int8
generator and nnbuild.numerics.tflm_int8 take; the C compiled for the host equals tflm_int8.run bit
for bit; the difference from onnxruntime (float requantisation, round half to even) stays within
what docs/_notes/onnxq.md states; what is not int8's arithmetic is refused in one line."""

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from conftest import REPO
from nnbuild import frontends, kinds, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.numerics import tflm_int8

DATA = REPO / "tests" / "data" / "onnx_int8"
FIXTURES = ["mlp_qdq", "mlp_qop", "cnn_qdq", "cnn_qop", "matmul_qdq", "matmul_qop", "pool_qdq"]
#: the int8 operators each fixture reads to (TRANSPOSE: NCHW to channels-last; RESHAPE: views)
OPERATORS = {
    "mlp_qdq": ["FULLY_CONNECTED"] * 3, "mlp_qop": ["FULLY_CONNECTED"] * 3,
    "cnn_qdq": ["TRANSPOSE", "CONV_2D", "MAX_POOL_2D", "CONV_2D", "MEAN", "RESHAPE", "RESHAPE", "FULLY_CONNECTED"],
    "cnn_qop": ["TRANSPOSE", "CONV_2D", "MAX_POOL_2D", "CONV_2D", "MEAN", "RESHAPE", "RESHAPE", "FULLY_CONNECTED"],
    "matmul_qdq": ["FULLY_CONNECTED", "ADD", "FULLY_CONNECTED", "ADD"],
    "matmul_qop": ["FULLY_CONNECTED", "ADD", "FULLY_CONNECTED", "ADD", "SOFTMAX"],
    "pool_qdq": ["TRANSPOSE", "PAD", "CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "ADD", "TRANSPOSE", "RESHAPE",
                 "FULLY_CONNECTED"],
}
#: measured against onnxruntime (ORT_ENABLE_BASIC) on CASES inputs: (max int8 steps, outputs that differ)
DIFFERENCE = {"mlp_qdq": (1, 20), "mlp_qop": (1, 20), "cnn_qdq": (1, 68), "cnn_qop": (1, 68),
              "matmul_qdq": (2, 1), "matmul_qop": (2, 7), "mlp_relu_qdq": (1, 20), "pool_qdq": (6, 392)}
CASES = 200
#: the quick tier's C fixture (CONV_2D, MAX_POOL_2D, MEAN, FULLY_CONNECTED, TRANSPOSE); the rest run e2e
QUICK_C = ["cnn_qdq"]
#: e2e: slow in the numpy model (SOFTMAX's fixed-point exps, value by value in Python), or the
#: QOperator twin of a quick QDQ graph
SLOW = ("matmul_qop", "cnn_qop")


def cases(model, count=CASES, seed=5):
    """Seeded int8 inputs: odd cases uniform over [-128, 127], even ones quantized normal data."""
    from nnbuild.kinds.int8 import affine_quantize
    rng = np.random.default_rng(seed)
    scale, zero_point = model.io_quantization("input")
    return [rng.integers(-128, 128, model.input_shape) if k % 2 else
            affine_quantize(rng.normal(0, 1.5, model.input_shape), scale, zero_point).astype(np.int64)
            for k in range(count)]


def onnxruntime_int8(path_or_bytes, model, inputs):
    """onnxruntime's int8 outputs: the input given as its dequantized value (the QuantizeLinear
    gives back x_q exactly), the float output quantized back (exact: it is a DequantizeLinear's)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    # ORT_ENABLE_EXTENDED's QDQ fusion runs s8 activations as u8 on x86 (pmaddubsw saturates): not ONNX's
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(path_or_bytes if isinstance(path_or_bytes, bytes) else str(path_or_bytes),
                                   options, providers=["CPUExecutionProvider"])
    xs, xz = model.io_quantization("input")
    ys, yz = model.io_quantization("output")
    name = session.get_inputs()[0].name
    out = []
    for x_q in inputs:
        x = (np.float32(xs) * (np.asarray(x_q, np.float32) - xz))[None].astype(np.float32)
        y = session.run(None, {name: x})[0].reshape(-1)
        out.append(np.round(y / np.float32(ys)) + yz)
    return np.array(out, np.int64)


def relu_model(tmp_path):
    """mlp_qdq with an explicit Relu between the first Gemm and its QuantizeLinear (onnxruntime
    drops it; a hand-written QDQ graph keeps it): read as the fused RELU."""
    model = onnx.load(DATA / "mlp_qdq.onnx")
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    gemm.output[0], name = gemm.output[0] + "_pre", gemm.output[0]
    model.graph.node.append(helper.make_node("Relu", [gemm.output[0]], [name]))
    path = tmp_path / "mlp_relu_qdq.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("name", FIXTURES)
def test_the_fixtures_read_to_the_int8_graph(name):
    model = frontends.load(DATA / f"{name}.onnx")
    assert model.kind == "int8" and [op["op"] for op in model.ops] == OPERATORS[name]
    assert model.meta["float32_input"] == "QUANTIZE" and model.meta["float32_output"] == "DEQUANTIZE"
    assert kinds.of_file(DATA / f"{name}.onnx").NAME == "int8"


def test_a_relu_before_the_quantize_is_the_fused_range(tmp_path):
    model = frontends.load(relu_model(tmp_path))
    assert [op["fused"] for op in model.ops] == [1, 0, 0]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n in SLOW else n
                                  for n in FIXTURES + ["mlp_relu_qdq"]])
def test_the_difference_from_onnxruntime_is_the_documented_one(name, tmp_path):
    """TFLite Micro's fixed-point requantisation vs onnxruntime's float one: at most the steps and
    the count of differing outputs docs/_notes/onnxq.md states."""
    path = relu_model(tmp_path) if name == "mlp_relu_qdq" else DATA / f"{name}.onnx"
    model = frontends.load(path)
    inputs = cases(model)
    ours = np.array([tflm_int8.run(model.graph, x).reshape(-1) for x in inputs], np.int64)
    theirs = onnxruntime_int8(path, model, inputs)
    steps, differing = int(np.abs(ours - theirs).max()), int((ours != theirs).sum())
    assert (steps, differing) == DIFFERENCE[name], (steps, differing, ours.size)


def _host_c_is_bit_exact(names, tmp_path):
    for name in names:
        model, _ = pipeline.load_model(str(DATA / f"{name}.onnx"))
        inputs = cases(model, 24, seed=9)
        program, _ = pipeline.build_check_program(model, "host", tmp_path / name)
        got, _ = pipeline.run_cases("host", program, np.array([x.reshape(-1) for x in inputs], np.float32),
                                    model.output_size, kind="int8")
        want = np.array([tflm_int8.run(model.graph, x).reshape(-1) for x in inputs])
        assert np.array_equal(np.asarray(got), want), name


def test_the_host_c_is_bit_exact_with_the_numpy_model(tmp_path):
    """The C of one fixture per graph shape, compiled for the host, on 24 seeded int8 inputs:
    tflm_int8.run's outputs."""
    _host_c_is_bit_exact(QUICK_C, tmp_path)


@pytest.mark.e2e
def test_the_host_c_of_every_fixture_is_bit_exact_with_the_numpy_model(tmp_path):
    _host_c_is_bit_exact([name for name in FIXTURES if name not in QUICK_C], tmp_path)


# ----------------------------------------------------------------------------------------- refusals


def _edited(tmp_path, name, edit, source="mlp_qdq"):
    model = onnx.load(DATA / f"{source}.onnx")
    edit(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _initializer(model, name, values):
    for k, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.asarray(values), name))
            return
    raise KeyError(name)


def _refusal(path):
    with pytest.raises(NNBuildError) as caught:
        pipeline.generate(path, path.parent / "gen")
    text = str(caught.value)
    assert "\n" not in text and str(path.name) in text and "Traceback" not in text
    assert not (path.parent / "gen").exists() or not any((path.parent / "gen").iterdir())
    return text


def _float_mlp(tmp_path):
    import sys
    sys.path.insert(0, str(DATA))
    try:
        import make_fixtures
    finally:
        sys.path.remove(str(DATA))
    graph, _ = make_fixtures.float_mlp(np.random.default_rng(1))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "float_mlp.onnx"
    onnx.save(model, path)
    return path


def test_asymmetric_convolution_weights_are_refused(tmp_path):
    path = _edited(tmp_path, "asym", lambda m: _initializer(m, "c1_zero_point", np.full(6, 3, np.int8)), "cnn_qdq")
    assert "node 8 'r1' (Conv): the weights are asymmetric (zero point 3)" in _refusal(path)


def test_uint8_activations_are_refused(tmp_path):
    from onnxruntime import quantization as q
    path = tmp_path / "u8.onnx"

    class Reader:
        items = iter([{"x": np.ones((1, 12), np.float32) * k} for k in range(4)])

        def get_next(self):
            return next(self.items, None)
    q.quantize_static(str(_float_mlp(tmp_path)), str(path), Reader(), quant_format=q.QuantFormat.QDQ,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    assert "is uint8 (uint8 activations are not int8's arithmetic)" in _refusal(path)


def test_dynamic_quantization_is_refused(tmp_path):
    from onnxruntime import quantization as q
    path = tmp_path / "dynamic.onnx"
    q.quantize_dynamic(str(_float_mlp(tmp_path)), str(path), weight_type=q.QuantType.QInt8)
    text = _refusal(path)
    assert "(DynamicQuantizeLinear): dynamic quantization" in text


def test_a_scale_that_is_not_a_constant_is_refused(tmp_path):
    def edit(model):
        model.graph.node.insert(0, helper.make_node("Identity", ["r1_scale"], ["r1_scale_run"]))
        for node in model.graph.node:
            if node.op_type == "QuantizeLinear" and node.input[1] == "r1_scale":
                node.input[1] = "r1_scale_run"
    text = _refusal(_edited(tmp_path, "scale", edit))
    assert "'r1_scale_run' is not a constant" in text


def test_softmax_not_quantized_as_tflite_micro_needs_is_refused(tmp_path):
    text = _refusal(_copy(tmp_path, "softmax_qdq"))
    assert "(Softmax): Softmax output quantized with scale 0.0039215" in text and "1/256" in text


def _copy(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    path.write_bytes((DATA / f"{name}.onnx").read_bytes())
    return path


def test_an_unsupported_operator_is_refused(tmp_path):
    def edit(model):
        gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
        gemm.op_type = "Sigmoid"
        del gemm.input[1:]
        del gemm.attribute[:]
    text = _refusal(_edited(tmp_path, "sigmoid", edit))
    assert "(Sigmoid): operator not supported in int8 (supported: " in text


def test_a_float_model_is_still_read_by_the_float_front_end(tmp_path):
    assert frontends.format_for(_float_mlp(tmp_path)).name == "onnx"
    assert frontends.format_for(DATA / "mlp_qdq.onnx").name == "onnx-int8"


# ----------------------------------------------------------------------------------------- end to end


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["mlp_qdq", "cnn_qdq"])
def test_check_on_avr_passes_with_a_wcet_bound(run_cli, tmp_path, name):
    """`nnbuild check <name>.onnx --target avr`: bit-exact on simavr, and the whole build's WCET
    bound (builtin-avr) holds the measured runs (the report of the chosen candidate's build, which
    precision=auto runs as SCons targets: the Python API's whole build of an int8 model is
    test_int8_codegen's test_the_wcet_bound_holds_the_measured_runs)."""
    model = DATA / f"{name}.onnx"
    done = run_cli("check", model, "--data", DATA / f"{name}.npz", "--target", "avr", "--precision", "auto",
                   "--build-dir", tmp_path / "cli", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "0 (host), 0 (simavr) int8 steps vs TFLite Micro's int8 kernels" in done.stdout + done.stderr
    assert "precision=auto: int8 chosen, WCET" in done.stdout + done.stderr
    report = json.loads((tmp_path / "cli" / "build" / "report.json").read_text())
    assert report["precision"] == "int8" and report["max_abs_error"] == 0.0 and report["target"] == "avr"
    assert report["wcet_cycles"] >= report["measured_cycles"] > 0
    print(f"\n{name} on avr: WCET {report['wcet_cycles']:,} cycles, measured {report['measured_cycles']:,}")


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["cnn_qop", "matmul_qop", "pool_qdq"])
def test_check_on_avr_is_bit_exact(run_cli, tmp_path, name):
    done = run_cli("check", DATA / f"{name}.onnx", "--data", DATA / f"{name}.npz", "--target", "avr",
                   "--build-dir", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{name} on simavr: 8 int8 inputs, bit-exact" in done.stdout + done.stderr


def _damage(kind):
    def edit(model):
        conv = next(n for n in model.graph.node if n.op_type == "Conv")
        if kind == "pads":
            next(a for a in conv.attribute if a.name == "pads").ints[:] = [1, 1, 100, 1]
        elif kind == "strides":
            conv.attribute.append(helper.make_attribute("strides", [0, 1]))
        else:
            del next(n for n in model.graph.node if n.op_type == "QuantizeLinear").input[1:]
    return edit


@pytest.mark.parametrize("kind, words", [
    ("pads", "node 8 'r1' (Conv): pads [1, 1, 100, 1] for a kernel reaching 3x3 cells"),
    ("strides", "node 8 'r1' (Conv): strides [0, 1] (two positive integers expected)"),
    ("inputs", "(QuantizeLinear): 1 inputs and 1 outputs (x, scale and zero point to one output expected)"),
])
def test_damaged_attributes_are_one_line(tmp_path, kind, words):
    assert words in _refusal(_edited(tmp_path, kind, _damage(kind), "cnn_qdq"))
