"""Models of several inputs and outputs: the IR lists each, the reference takes and gives each,
the generated C API takes one argument per input and per output (named from the model's checked
identifiers, in the model's order), the check program splits its flat vectors into them, check
data may hold one array per argument. Checked against onnxruntime at the float32 floor; the e2e
tier compiles every float shape and runs `nnbuild check` on AVR. The fixed-point precisions (shapes
v1, v2 and v3) take and return each argument too, bit for bit their numpy model (graph_bitexact.run_graph),
on the host, on AVR (with a WCET bound) and on qemu-arm."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, have, needs_avr
from nnbuild import codegen, frontends, passes
from nnbuild.checks import data as check_data
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from nnbuild.kinds import nn
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]
FLOOR = 1e-5
TFLITE = REPO / "tests" / "data" / "tflite" / "multiio_float32.tflite"


def _save(tmp_path, name, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def two_by_two(tmp_path, name="mio"):
    """Inputs a, b [1, 4] -> outputs relu((a + b) @ W) [1, 3] and a * b [1, 4]."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "W")
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("MatMul", ["s", "W"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Mul", ["a", "b"], ["p"], name="mul")]
    return _save(tmp_path, name, nodes, [("a", [1, 4]), ("b", [1, 4])], ["r", "p"], [w])


def conv_and_side(tmp_path, name="cside"):
    """An image x [1, 2, 5, 5] and a vector v [1, 3]: conv(x) + a pooled branch, and tanh(v); the
    first output (the conv) is also read by a later layer."""
    rng = np.random.default_rng(1)
    k = numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "K")
    nodes = [helper.make_node("Conv", ["x", "K"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["cr"], name="crelu"),
             helper.make_node("GlobalAveragePool", ["cr"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["gf"], name="flat"),
             helper.make_node("Add", ["gf", "v"], ["mix"], name="mix"),
             helper.make_node("Tanh", ["v"], ["t"], name="tanh")]
    return _save(tmp_path, name, nodes, [("x", [1, 2, 5, 5]), ("v", [1, 3])], ["c", "mix", "t"], [k])


def fixed_friendly(tmp_path, name="fio"):
    """Inputs a [1, 4], b [1, 3] -> outputs relu(a @ Wa) [1, 3] (also read by a later layer),
    concat(it, tanh(b @ Wb)) @ Wc [1, 2] and tanh(b @ Wb) [1, 3]: layers every fixed-point plan has,
    outputs of three formats."""
    rng = np.random.default_rng(4)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.6).astype(np.float32), name)
    nodes = [helper.make_node("MatMul", ["a", "Wa"], ["ma"], name="da"),
             helper.make_node("Relu", ["ma"], ["ra"], name="ra"),
             helper.make_node("MatMul", ["b", "Wb"], ["mb"], name="db"),
             helper.make_node("Tanh", ["mb"], ["tb"], name="tb"),
             helper.make_node("Concat", ["ra", "tb"], ["cat"], name="cat", axis=1),
             helper.make_node("MatMul", ["cat", "Wc"], ["y"], name="dc")]
    return _save(tmp_path, name, nodes, [("a", [1, 4]), ("b", [1, 3])], ["ra", "y", "tb"],
                 [weight("Wa", 4, 3), weight("Wb", 3, 3), weight("Wc", 6, 2)])


def feeds_for(path, seed=3, cases=4):
    """(onnxruntime's {name: [cases, ...]} inputs, its outputs per case concatenated: [cases, n])."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    rows_in, rows_out = [], []
    for _ in range(cases):
        feeds = {i.name: rng.uniform(-2, 2, i.shape).astype(np.float32) for i in session.get_inputs()}
        rows_in.append(np.concatenate([feeds[i.name].ravel() for i in session.get_inputs()]))
        rows_out.append(np.concatenate([np.asarray(o).ravel() for o in session.run(None, feeds)]))
    return np.array(rows_in, np.float32), np.array(rows_out, np.float64)


def within_floor(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want))) <= FLOOR * max(1.0, float(np.max(np.abs(want))))


def build(tmp_path, model, shape="v2", precision="float32", input_range=None):
    out = tmp_path / f"gen_{shape}_{precision}"
    codegen.generate(model, out, shape=shape, precision=precision, passes_log=[], input_range=input_range)
    exe = out / "check"
    subprocess.run(["gcc", "-O1", *WARNINGS, f"-I{out}",
                    *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size,
                                        model.output_size, several_io=model.several_io),
                    str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN),
                    "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    return out, exe


# ----------------------------------------------------------------------------- IR and reference


def test_ir_lists_every_input_and_output_in_the_model_order(tmp_path):
    model = frontends.load(two_by_two(tmp_path))
    assert [n for n, _ in model.inputs] == ["a", "b"] and model.several_io
    assert [model.io_labels[t] for t in model.outputs] == ["r", "p"]
    assert (model.input_size, model.output_size) == (8, 7)
    args = model.arguments()
    assert [(a["name"], a["size"], a["offset"]) for a in args] == [
        ("in_a", 4, 0), ("in_b", 4, 4), ("out_r", 3, 0), ("out_p", 4, 3)]


@pytest.mark.parametrize("make", [two_by_two, conv_and_side])
def test_reference_gives_onnxruntime_outputs(tmp_path, make):
    path = make(tmp_path)
    model = frontends.load(path)
    x, want = feeds_for(path)
    for dtype in (np.float32, np.float64):
        assert within_floor(reference.run_flat(model, x, dtype), want), dtype
    # one array per input in, one array per output out
    parts = [x[:, a["offset"]:a["offset"] + a["size"]].reshape((len(x),) + a["shape"])
             for a in model.arguments() if a["role"] == "in"]
    outs = reference.run(model, parts)
    assert isinstance(outs, list) and len(outs) == len(model.outputs)
    assert within_floor(np.concatenate([o.reshape(len(x), -1) for o in outs], axis=1), want)


def test_reference_refuses_a_wrong_number_of_input_arrays(tmp_path):
    model = frontends.load(two_by_two(tmp_path))
    with pytest.raises(NNBuildError, match="1 input arrays for the model's 2 inputs"):
        reference.run(model, [np.zeros(4)])


def test_passes_keep_an_output_that_a_later_layer_reads(tmp_path):
    """conv's output is a model output and relu reads it: fuse_activation must not fuse the relu
    into the conv (the caller reads the conv's own values)."""
    path = conv_and_side(tmp_path)
    model, _ = passes.run(frontends.load(path))
    x, want = feeds_for(path)
    assert within_floor(reference.run_flat(model, x), want)
    assert any(layer.kind == "activation" or layer.kind == "unary" for layer in model.layers)


# ----------------------------------------------------------------------------- the C API


def test_header_takes_one_argument_per_input_and_output(tmp_path):
    model = frontends.load(two_by_two(tmp_path))
    codegen.generate(model, tmp_path / "gen", shape="v2")
    header = (tmp_path / "gen" / "mio.h").read_text()
    assert "void mio_infer(const float in_a[4], const float in_b[4], float out_r[3], float out_p[4]);" in header
    for macro in ("MIO_INPUTS 8", "MIO_OUTPUTS 7", "MIO_INPUT_COUNT 2", "MIO_OUTPUT_COUNT 2", "MIO_IN_A 4",
                  "MIO_OUT_R 3", "MIO_INFER_ARGS(in, out) (in) + 0, (in) + 4, (out) + 0, (out) + 3"):
        assert f"#define {macro}" in header, macro
    assert "out_p: output 'p', shape 4" in header


def test_argument_names_are_checked_identifiers_unique_upper_cased(tmp_path):
    nodes = [helper.make_node("Relu", ["in-1"], ["y"], name="r1"), helper.make_node("Neg", ["IN_1"], ["Y"], name="n")]
    path = _save(tmp_path, "odd", nodes, [("in-1", [1, 2]), ("IN_1", [1, 2])], ["y", "Y"])
    model = frontends.load(path)
    assert [a["name"] for a in model.arguments()] == ["in_in_1", "in_IN_1_2", "out_y", "out_Y_2"]
    codegen.generate(model, tmp_path / "gen", shape="v2")
    header = (tmp_path / "gen" / "odd.h").read_text()
    assert "#define ODD_IN_IN_1 2" in header and "#define ODD_IN_IN_1_2 2" in header


@pytest.mark.e2e  # gcc
def test_hostile_input_and_output_names_stay_inert(tmp_path):
    """Names from the file reach C as checked identifiers (arguments, macros) or inert comment text."""
    evil_in, evil_out = "a*/ int pwned; /*", "y\n#define X 1"
    nodes = [helper.make_node("Add", [evil_in, "b"], [evil_out], name="add"),
             helper.make_node("Neg", ["b"], ["z"], name="neg")]
    model = frontends.load(_save(tmp_path, "evil", nodes, [(evil_in, [1, 2]), ("b", [1, 2])], [evil_out, "z"]))
    out, exe = build(tmp_path, model, "v2")
    header = (out / "evil.h").read_text()
    assert "*/ int pwned" not in header and "\n#define X" not in header
    assert "void evil_infer(const float in_a___int_pwned____[2], const float in_b[2], float out_y__define_X_1[2], " \
           "float out_z[2]);" in header
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    assert native.run_cases(exe, x, 4).tolist() == [[4.0, 6.0, -3.0, -4.0]]


def test_generated_c_matches_onnxruntime(tmp_path):
    """The quick tier's one compile (v2); every shape and precision: the e2e test below."""
    path = two_by_two(tmp_path)
    model = frontends.load(path)
    x, want = feeds_for(path)
    _, exe = build(tmp_path, model, "v2")
    assert within_floor(native.run_cases(exe, x, model.output_size), want)


@pytest.mark.e2e
@pytest.mark.parametrize("shape", ["v1", "v2", "v3"])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_every_float_shape_matches_onnxruntime_with_passes(tmp_path, shape, precision):
    path = conv_and_side(tmp_path)
    model, log = passes.run(frontends.load(path))
    x, want = feeds_for(path)
    _, exe = build(tmp_path, model, shape, precision)
    assert within_floor(native.run_cases(exe, x, model.output_size), want)


@pytest.mark.e2e  # gcc
def test_single_io_header_and_check_defines_are_unchanged(tmp_path):
    """A one-input one-output model keeps `in`/`out`; the check program's extra defines name a
    macro its header does not define (0 in #if): it still calls infer(in, out)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = frontends.load(_save(tmp_path, "one", nodes, [("x", [1, 3])], ["y"]))
    assert not model.several_io
    codegen.generate(model, tmp_path / "gen", shape="v2")
    header = (tmp_path / "gen" / "one.h").read_text()
    assert "void one_infer(const float in[3], float out[3]);" in header and "INFER_ARGS" not in header
    defines = dict(nn.check_defines("one"))
    assert defines["NN_INPUT_COUNT"] == "ONE_INPUT_COUNT" and defines["NN_ARGS"] == "ONE_INFER_ARGS"
    exe = tmp_path / "check"
    subprocess.run(["gcc", *WARNINGS, f"-I{tmp_path / 'gen'}", *[f"-D{k}={v}" for k, v in defines.items()],
                    str(tmp_path / "gen" / "one.c"), str(tmp_path / "gen" / "one_weights.c"), str(CHECK_MAIN),
                    "-o", str(exe), "-lm"], check=True)
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    assert native.run_cases(exe, x, 3).tolist() == [[0.0, 0.5, 2.0]]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("shape,precision,match", [
    ("v2", "fix16", "shape v2 does not generate precision 'fix16'"),
    ("mlp", "float32", "shape mlp generates one input to one output; model 'mio' has 2 inputs and 2 outputs"),
])
def test_what_cannot_take_several_arguments_is_refused_in_one_line(tmp_path, shape, precision, match):
    model = frontends.load(two_by_two(tmp_path))
    with pytest.raises(NNBuildError) as error:
        codegen.generate(model, tmp_path / "gen", shape=shape, precision=precision, input_range=(-1, 1))
    assert match in str(error.value) and "\n" not in str(error.value)


def test_an_output_that_is_an_input_is_refused(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    path = _save(tmp_path, "pass", nodes, [("x", [1, 3])], ["y", "x"])
    with pytest.raises(NNBuildError, match="output 'x' is input 'x' itself") as error:
        frontends.load(path)
    assert "pass.onnx" in str(error.value) and "\n" not in str(error.value)


def test_two_outputs_holding_the_same_values_are_refused(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r"),
             helper.make_node("Flatten", ["y"], ["z"], name="f", axis=1)]
    model = frontends.load(_save(tmp_path, "same", nodes, [("x", [1, 3])], ["y", "z"]))
    with pytest.raises(NNBuildError, match="outputs out_y and out_z hold the same values"):
        codegen.generate(model, tmp_path / "gen", shape="v2")


# ----------------------------------------------------------------------------- check data


def test_check_data_takes_one_array_per_argument_or_the_flat_rows(tmp_path):
    model = frontends.load(two_by_two(tmp_path))
    parts = check_data.parts_of(model)
    a, b = np.arange(8.0).reshape(2, 4), -np.arange(8.0).reshape(2, 4)
    np.savez(tmp_path / "split.npz", in_a=a, in_b=b, out_r=np.zeros((2, 3)), out_p=a * b)
    x, y = check_data.load(tmp_path / "split.npz", 8, 7, parts=parts)
    assert x.tolist() == np.concatenate([a, b], axis=1).tolist() and y[:, 3:].tolist() == (a * b).tolist()
    np.savez(tmp_path / "flat.npz", x=np.concatenate([a, b], axis=1))
    x2, y2 = check_data.load(tmp_path / "flat.npz", 8, 7, parts=parts)
    assert x2.tolist() == x.tolist() and y2 is None


@pytest.mark.parametrize("arrays,match", [
    ({"x": np.zeros((1, 8)), "in_a": np.zeros((1, 4))}, "both 'x' and 'in_a'"),
    ({"in_a": np.zeros((1, 4))}, "no 'in_b' beside 'in_a'"),
    ({"in_a": np.zeros((1, 4)), "in_b": np.zeros((2, 4))}, "'in_b' has 2 cases, 'in_a' 1"),
    ({"in_a": np.zeros((1, 5)), "in_b": np.zeros((1, 4))}, "argument in_a takes 4 values per case"),
])
def test_check_data_refusals_are_one_line(tmp_path, arrays, match):
    model = frontends.load(two_by_two(tmp_path))
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(NNBuildError) as error:
        check_data.load(tmp_path / "bad.npz", 8, 7, parts=check_data.parts_of(model))
    assert match in str(error.value) and "\n" not in str(error.value)


# ----------------------------------------------------------------------------- TFLite


def _fixture_weights():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_multiio", TFLITE.with_name("make_multiio.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build() == TFLITE.read_bytes()   # the committed fixture is what the script writes
    return module.W, module.BIAS


def test_tflite_inputs_and_outputs_are_separate_arguments(tmp_path):
    w, bias = _fixture_weights()
    model = frontends.load(TFLITE)
    assert [(a["name"], a["shape"]) for a in model.arguments()] == [
        ("in_a", (4,)), ("in_b", (4,)), ("out_dense", (3,)), ("out_product", (4,))]
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-2, 2, (6, 4)).astype(np.float32), rng.uniform(-2, 2, (6, 4)).astype(np.float32)
    want = np.concatenate([np.maximum((a + b) @ w.T + bias, 0), a * b], axis=1).astype(np.float64)
    x = np.concatenate([a, b], axis=1)
    assert within_floor(reference.run_flat(model, x, np.float32), want)
    codegen.generate(model, tmp_path / "gen", shape="v2")
    assert ("void multiio_float32_infer(const float in_a[4], const float in_b[4], float out_dense[3], "
            "float out_product[4]);") in (tmp_path / "gen" / "multiio_float32.h").read_text()


@pytest.mark.e2e  # gcc
def test_tflite_model_runs_as_c(tmp_path):
    w, bias = _fixture_weights()
    model = frontends.load(TFLITE)
    rng = np.random.default_rng(6)
    a, b = rng.uniform(-2, 2, (6, 4)).astype(np.float32), rng.uniform(-2, 2, (6, 4)).astype(np.float32)
    want = np.concatenate([np.maximum((a + b) @ w.T + bias, 0), a * b], axis=1).astype(np.float64)
    _, exe = build(tmp_path, model, "v1")
    assert within_floor(native.run_cases(exe, np.concatenate([a, b], axis=1), model.output_size), want)


# ----------------------------------------------------------------------------- e2e: nnbuild check


def _cli(*args):
    """`nnbuild` in its own process (the tests after the first run it in this one: run_cli)."""
    return subprocess.run([sys.executable, "-m", "nnbuild", *args], cwd=REPO, capture_output=True, text=True)


@pytest.mark.e2e
@needs_avr
def test_nnbuild_check_on_avr_with_one_array_per_argument(tmp_path):
    """`nnbuild check` of a model of two inputs and two outputs on AVR (simavr), its check data
    one array per argument with onnxruntime's outputs: the AVR run matches them."""
    path = two_by_two(tmp_path)
    model = frontends.load(path)
    x, want = feeds_for(path, cases=6)
    arrays = {a["name"]: (x if a["role"] == "in" else want)[:, a["offset"]:a["offset"] + a["size"]]
              for a in model.arguments()}
    np.savez(tmp_path / "data.npz", **arrays)
    run = _cli("check", str(path), "--data", str(tmp_path / "data.npz"), "--target", "avr", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    runs = json.loads(run.stdout)["semantic"]["runs"]
    avr = next(v for k, v in runs.items() if k != "host")
    assert avr["vs_framework"] <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), runs
    assert [o["output"] for o in avr["max_abs_error_by_output"]] == ["out_r", "out_p"], avr


@pytest.mark.e2e
@pytest.mark.parametrize("target,shape,tools", [("arm", "v1", ("arm-none-eabi-gcc", "qemu-arm")),
                                                ("stm32f407", "v3", ("arm-none-eabi-gcc", "qemu-system-arm"))])
def test_nnbuild_check_on_the_qemu_runners_with_the_flat_x(tmp_path, target, shape, tools, run_cli):
    """The qemu-arm and qemu-system-arm runners pass the same flat vectors; check data as the flat x
    and y (every input's values one after the other, every output's)."""
    if not have(*tools):
        pytest.skip(f"needs {', '.join(tools)}")
    path = two_by_two(tmp_path)
    x, want = feeds_for(path, cases=3)
    np.savez(tmp_path / "data.npz", x=x, y=want)
    run = run_cli("check", str(path), "--data", str(tmp_path / "data.npz"), "--target", target, "--shape", shape,
               "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    runs = json.loads(run.stdout)["semantic"]["runs"]
    assert all(r["vs_framework"] <= 1e-5 * max(1.0, float(np.max(np.abs(want)))) for r in runs.values()), runs
    assert all([o["output"] for o in r["max_abs_error_by_output"]] == ["out_r", "out_p"] for r in runs.values()), runs


# ----------------------------------------------------------------------------- fixed point


FIXED_RANGE = (-2.0, 2.0)


def fixed_cases(path, cases=6):
    """Inputs beyond the declared range too (the code clamps them, as the numpy model does)."""
    x, _ = feeds_for(path, cases=cases)
    return np.concatenate([x, np.random.default_rng(8).uniform(-3, 3, (cases, x.shape[1])).astype(np.float32)])


def test_fixed_point_plan_keeps_every_input_and_output(tmp_path):
    from nnbuild.numerics import graph_plan
    model = frontends.load(fixed_friendly(tmp_path))
    plan = graph_plan.quantize_graph(model, "q16", FIXED_RANGE)
    assert [n for n, _ in plan.inputs] == ["a", "b"] and list(plan.output_names) == list(model.outputs)
    assert len({f.frac for f in plan.output_formats}) == 3   # three output conversions
    codegen.generate(model, tmp_path / "gen", shape="v2", precision="q16", input_range=FIXED_RANGE)
    header = (tmp_path / "gen" / "fio.h").read_text()
    assert "void fio_infer(const float in_a[4], const float in_b[3], float out_ra[3], float out_y[2], " \
           "float out_tb[3]);" in header


@pytest.mark.parametrize("shape,precision", [("v2", "q16"), pytest.param("v1", "q16", marks=pytest.mark.e2e),
                                             pytest.param("v1", "q8", marks=pytest.mark.e2e),
                                             pytest.param("v2", "q16-acc32", marks=pytest.mark.e2e),
                                             pytest.param("v2", "q8", marks=pytest.mark.e2e),
                                             pytest.param("v3", "q16-acc32", marks=pytest.mark.e2e),
                                             pytest.param("v3", "q8", marks=pytest.mark.e2e)])
def test_fixed_point_c_is_its_numpy_model_bit_for_bit(tmp_path, shape, precision):
    from nnbuild.numerics import graph_bitexact, graph_plan
    path = fixed_friendly(tmp_path)
    model = frontends.load(path)
    x = fixed_cases(path)
    _, exe = build(tmp_path, model, shape, precision, input_range=FIXED_RANGE)
    got = native.run_cases(exe, x, model.output_size).astype(np.float32)
    want = graph_bitexact.run_graph(graph_plan.quantize_graph(model, precision, FIXED_RANGE), x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.e2e
@needs_avr
@pytest.mark.parametrize("shape", ["v1", "v2", "v3"])
def test_fixed_point_on_avr_bit_exact_and_bounded(tmp_path, shape, run_cli):
    """`nnbuild check` in q16-acc32 on AVR: the simavr outputs are the numpy model's bit for bit and
    builtin-avr bounds the inference."""
    from nnbuild.numerics import graph_bitexact, graph_plan
    path = fixed_friendly(tmp_path)
    model, _ = passes.run(frontends.load(path))   # what `nnbuild check` generates from (activations fused)
    x, _ = feeds_for(path, cases=6)   # within the declared range: the gate compares with the float64 reference
    want = graph_bitexact.run_graph(graph_plan.quantize_graph(model, "q16-acc32", FIXED_RANGE), x)
    np.savez(tmp_path / "data.npz", x=x)
    build_dir = tmp_path / "build"
    run = run_cli("check", str(path), "--data", str(tmp_path / "data.npz"), "--target", "avr", "--precision",
               "q16-acc32", "--range=-2,2", "--shape", shape, "--build-dir", str(build_dir))
    assert run.returncode == 0, run.stdout + run.stderr
    record = np.load(build_dir / "run_simavr.npz")
    got = np.asarray(record["outputs"], np.float32).reshape(want.shape)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    bound = run_cli("wcet", str(build_dir / "check.elf"), "--board", "avr", "--entry", "fio_infer", "--flowfacts",
                 str(build_dir / "gen" / "fio.flowfacts.json"), "-o", str(tmp_path / "wcet.json"))
    assert bound.returncode == 0, bound.stderr
    cycles = json.loads((tmp_path / "wcet.json").read_text())["cycles"]
    print(f"\n{shape} q16-acc32 on AVR: measured max {int(record['cycles'].max())} cycles, bound {cycles}")
    # v1's generic kernels are bounded by their largest entry's loops (every entry charged the same)
    assert record["cycles"].max() <= cycles <= (1.5 if shape == "v1" else 1.1) * record["cycles"].max()


@pytest.mark.e2e
def test_fixed_point_on_qemu_arm(tmp_path, run_cli):
    if not have("arm-none-eabi-gcc", "qemu-arm"):
        pytest.skip("needs arm-none-eabi-gcc, qemu-arm")
    path = fixed_friendly(tmp_path)
    x, want = feeds_for(path, cases=4)
    np.savez(tmp_path / "data.npz", x=x, y=want)
    run = run_cli("check", str(path), "--data", str(tmp_path / "data.npz"), "--target", "arm", "--precision", "q8",
               "--range=-2,2", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    runs = json.loads(run.stdout)["semantic"]["runs"]
    assert all([o["output"] for o in r["max_abs_error_by_output"]] == ["out_ra", "out_y", "out_tb"]
               for r in runs.values()), runs


# ----------------------------------------------------------------------------- int8 (shape tflm)


TFLITE_INT8 = REPO / "tests" / "data" / "tflite" / "multiio_int8.tflite"


def int8_cases(count=8):
    x = np.random.default_rng(1).integers(-128, 128, (count, 8))
    x[0], x[1] = -128, 127
    return x


def test_int8_fixture_is_what_the_script_writes():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_multiio", TFLITE.with_name("make_multiio.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build(int8=True) == TFLITE_INT8.read_bytes()


def test_int8_arguments_keep_their_own_quantization(tmp_path):
    """Each input and output of a full-integer model is an int8 argument with its own scale and zero
    point (header macros); the bit-exact model takes and gives each."""
    from nnbuild.numerics import tflm_int8
    model = frontends.load(TFLITE_INT8)
    assert model.several_io and (model.input_size, model.output_size) == (8, 7)
    assert [(a["name"], a["zero_point"]) for a in model.arguments()] == [
        ("in_a", 0), ("in_b", 3), ("out_dense", -128), ("out_product", 2)]
    codegen.generate(model, tmp_path / "gen", shape="tflm", precision="int8")
    header = (tmp_path / "gen" / "multiio_int8.h").read_text()
    assert "void multiio_int8_infer(const int8_t in_a[4], const int8_t in_b[4], int8_t out_dense[3], " \
           "int8_t out_product[4]);" in header
    for macro in ("MULTIIO_INT8_IN_B_ZERO_POINT (3)", "MULTIIO_INT8_OUT_PRODUCT_SCALE 0.125f",
                  "MULTIIO_INT8_INFER_ARGS(in, out) (in) + 0, (in) + 4, (out) + 0, (out) + 3"):
        assert f"#define {macro}" in header, macro
    dense, product = tflm_int8.run(model.graph, [np.full(4, 16), np.full(4, 23)])   # a = 1.0, b = 1.0
    assert product.tolist() == [10] * 4   # 1.0 * 1.0 at scale 1/8, zero point 2


TFLM_GOLDENS = TFLITE_INT8.with_name("multiio_int8_tflm.npz")


def test_int8_model_is_tflite_micro_bit_for_bit():
    """The bit-exact model against TFLite Micro's own interpreter (goldens made by
    `make_fixtures.py multiio` in TensorFlow's environment), each argument in and out."""
    from nnbuild.numerics import tflm_int8
    model = frontends.load(TFLITE_INT8)
    golden = np.load(TFLM_GOLDENS)
    for case in range(len(golden["in_a"])):
        dense, product = tflm_int8.run(model.graph, [golden["in_a"][case], golden["in_b"][case]])
        assert np.array_equal(np.asarray(dense).ravel(), golden["out_dense"][case]), case
        assert np.array_equal(np.asarray(product).ravel(), golden["out_product"][case]), case


@pytest.mark.e2e  # gcc
def test_int8_c_is_tflm_bit_for_bit_on_the_host(tmp_path):
    from nnbuild.kinds import int8 as int8_kind
    model = frontends.load(TFLITE_INT8)
    out = tmp_path / "gen"
    codegen.generate(model, out, shape="tflm", precision="int8")
    exe = tmp_path / "check"
    subprocess.run(["gcc", "-O1", *WARNINGS, f"-I{out}",
                    *[f"-D{k}={v}" for k, v in int8_kind.check_defines(model.name)],
                    str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(int8_kind.check_main()),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    x = int8_cases()
    want = int8_kind.reference_arrays(model, 0, 0, None, None)   # no cases: the arrays' layout
    assert want["output_names"].tolist() == ["out_dense", "out_product"]
    expected = np.stack([int8_kind._run_flat(model, row) for row in x])
    assert np.array_equal(native.run_cases(exe, x.astype(np.float32), model.output_size), expected)
    golden = np.load(TFLM_GOLDENS)
    tflm_in = np.hstack([golden["in_a"], golden["in_b"]]).astype(np.float32)
    tflm_out = np.hstack([golden["out_dense"], golden["out_product"]])
    assert np.array_equal(native.run_cases(exe, tflm_in, model.output_size), tflm_out)


@pytest.mark.e2e
@needs_avr
def test_int8_on_avr_with_one_array_per_argument_bit_exact_and_bounded(tmp_path, run_cli):
    x = int8_cases()
    np.savez(tmp_path / "data.npz", in_a=x[:, :4].astype(np.int8), in_b=x[:, 4:].astype(np.int8))
    build_dir = tmp_path / "build"
    run = run_cli("check", str(TFLITE_INT8), "--data", str(tmp_path / "data.npz"), "--target", "avr", "--build-dir",
               str(build_dir), "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    avr = next(v for k, v in json.loads(run.stdout)["semantic"]["runs"].items() if k != "host")
    assert avr["max_abs_error"] == 0 and [o["output"] for o in avr["max_abs_error_by_output"]] == [
        "out_dense", "out_product"], avr
    bound = run_cli("wcet", str(build_dir / "check.elf"), "--board", "avr", "--entry", "multiio_int8_infer",
                 "--flowfacts", str(build_dir / "gen" / "multiio_int8.flowfacts.json"), "-o", str(tmp_path / "w.json"))
    assert bound.returncode == 0, bound.stderr
    cycles = np.load(build_dir / "run_simavr.npz")["cycles"]
    assert cycles.max() <= json.loads((tmp_path / "w.json").read_text())["cycles"] < 2 * cycles.max()


@pytest.mark.e2e
def test_int8_on_qemu_arm(tmp_path, run_cli):
    if not have("arm-none-eabi-gcc", "qemu-arm"):
        pytest.skip("needs arm-none-eabi-gcc, qemu-arm")
    x = int8_cases(4)
    np.savez(tmp_path / "data.npz", x=x.astype(np.float32))
    run = run_cli("check", str(TFLITE_INT8), "--data", str(tmp_path / "data.npz"), "--target", "arm", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert all(r["max_abs_error"] == 0 for r in json.loads(run.stdout)["semantic"]["runs"].values())
