"""The int8 precision (shape tflm): a full-integer TFLite model's generated C, compiled for the host
and run, equals TFLite Micro's int8 outputs (the goldens y_q of tests/data/tflite/, made by
make_fixtures.py with PyPI tflite-micro) and nnbuild.numerics.tflm_int8 bit for bit; what it
cannot generate is refused in one line; the precision's name, default and refusals."""

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, tflite_with_opcode
from nnbuild import kinds, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.frontends import tflite as tfl
from nnbuild.numerics import tflm_int8

DATA = REPO / "tests" / "data" / "tflite"
#: every int8 fixture; the int8 precision generates all of their operators
FIXTURES = ["mlp", "cnn", "core", "arith", "pooled", "conv1d", "merge", "mixed", "extra", "acts"]


def golden(name):
    with np.load(DATA / f"{name}_int8.npz") as gold:
        return gold["x_q"], gold["y_q"]


#: random int8 inputs a fixture's C also runs on, against nnbuild.numerics.tflm_int8 (beyond the goldens)
RANDOM_CASES = 24


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_generated_c_is_bit_exact_with_tflite_micro_and_the_numpy_model(tmp_path):
    """Every fixture's C (symbols prefixed by the model name, helpers static: they link together),
    compiled once for the host with its flags, run on the 8 fixture inputs: the int8 outputs are
    TFLite Micro's (y_q), which tflm_int8.run reproduces too (tests/test_tflm_int8.py); and on 24
    random int8 inputs each: the C and tflm_int8.run agree bit for bit. (The random inputs ran
    through a check program of each fixture of their own before; the int8 check program on the host
    is test_the_check_reads_the_quantized_members_of_the_data's and
    test_a_model_with_float32_ends_runs_bit_exact's.)"""
    board = pipeline.load_board("host")
    sources, lines, calls, cases = [], ["#include <stdio.h>"], [], {}
    for name in FIXTURES:
        x_q, y_q = golden(name)
        x_random = np.random.default_rng(7).integers(-128, 128, size=(RANDOM_CASES,) + x_q.shape[1:])
        cases[name] = np.concatenate([x_q.astype(np.int64), x_random])
        model = f"{name}_int8"
        files = pipeline.generate(DATA / f"{model}.tflite", tmp_path / name)
        sources += [f for f in files if f.suffix == ".c"]
        rows = ",\n".join("{" + ", ".join(str(int(v)) for v in x.reshape(-1)) + "}" for x in cases[name])
        lines += [f'#include "{name}/{model}.h"',
                  f"static const int8_t x_{name}[{len(cases[name])}][{x_q[0].size}] = {{{rows}}};"]
        calls.append(f"""    for (k = 0; k < {len(cases[name])}; ++k) {{
        int8_t y[{y_q[0].size}];
        {model}_infer(x_{name}[k], y);
        for (i = 0; i < {y_q[0].size}; ++i) printf("%d ", y[i]);
        printf("\\n");
    }}""")
    lines += ["int main(void)", "{", "    int k, i;", *calls, "    return 0;", "}", ""]
    (tmp_path / "main.c").write_text("\n".join(lines))
    program = board.compiler.build_executable(board, sources + [tmp_path / "main.c"], tmp_path / "all",
                                              include_dirs=[tmp_path] + [tmp_path / n for n in FIXTURES])
    out = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.splitlines()
    for name in FIXTURES:
        _, y_q = golden(name)
        got = np.array([[int(v) for v in out.pop(0).split()] for _ in range(len(cases[name]))])
        assert np.array_equal(got[:len(y_q)], y_q.reshape(len(y_q), -1)), name
        graph = tfl.read(DATA / f"{name}_int8.tflite")
        want = np.stack([tflm_int8.run(graph, row).reshape(-1) for row in cases[name][len(y_q):]])
        assert np.array_equal(got[len(y_q):], want), name


def int8_refusal(tmp_path, model, builtin, code):
    """(patched file, message) of precision int8 refusing tests/data/tflite/`model` with its operator
    code `builtin` rewritten to `code`; the refusal leaves no generated folder."""
    path = tflite_with_opcode(DATA / model, tmp_path / "m.tflite", builtin, code)
    with pytest.raises(NNBuildError) as error:
        pipeline.generate(path, tmp_path / "gen", precision="int8")
    assert not (tmp_path / "gen").exists()
    return path, str(error.value)


def test_an_unsupported_int8_operator_is_refused_in_one_line(tmp_path):
    path, message = int8_refusal(tmp_path, "mlp_int8.tflite", 28, 50)      # TANH -> LOG_SOFTMAX
    assert "\n" not in message
    assert message.startswith(f"{path}: operator 2 (LOG_SOFTMAX): operator not supported in int8 (supported: ADD,")


def test_relu_n1_to_1_is_refused_for_want_of_a_tflite_micro_kernel(tmp_path):
    """TFLite Micro registers no RELU_N1_TO_1 (its interpreter refuses the model: "Didn't find op for
    builtin opcode 'RELU_N1_TO_1'"), so int8 has no reference for it."""
    path, message = int8_refusal(tmp_path, "mlp_int8.tflite", 28, 20)      # TANH -> RELU_N1_TO_1
    assert message == (f"{path}: operator 2 (RELU_N1_TO_1): TFLite Micro has no RELU_N1_TO_1 kernel, so "
                       "int8 has no reference to be bit-exact with")


def test_a_full_integer_model_is_generated_in_int8_only(tmp_path):
    """precision int8 is the default of a full-integer model and precision=auto's only candidate;
    another precision is refused in one line."""
    model = DATA / "mlp_int8.tflite"
    kind = kinds.of_file(model)
    assert kind.NAME == "int8" and kinds.default_precision(kind) == "int8"
    assert kinds.precision_candidates(kind, "auto", pipeline.load_board("avr")) == ["int8"]
    with pytest.raises(NNBuildError, match=r"^this model is full-integer quantized \(int8 input, output and weights\): "
                                           r"it is generated in precision int8 .*, not float32$"):
        pipeline.generate(model, tmp_path, precision="float32")


def test_a_float_model_is_refused_in_int8(tmp_path):
    model = DATA / "mlp_float32.tflite"
    assert kinds.of_file(model).NAME == "nn"
    assert "int8" not in kinds.precision_candidates(kinds.of_file(model), "auto", pipeline.load_board("host"))
    with pytest.raises(NNBuildError, match=r"^precision int8 is TFLite Micro's int8 arithmetic: it needs a "
                                           r"full-integer quantized \.tflite model"):
        pipeline.generate(model, tmp_path, precision="int8")


def test_the_header_states_the_io_quantization_and_the_code_is_static(tmp_path):
    pipeline.generate(DATA / "cnn_int8.tflite", tmp_path, storage="avr-progmem-far")
    header = (tmp_path / "cnn_int8.h").read_text()
    graph = tfl.read(DATA / "cnn_int8.tflite")
    q_in = graph.tensors[graph.inputs[0]].quantization
    assert f"#define CNN_INT8_INPUT_ZERO_POINT ({int(q_in.zero_points[0])})" in header
    assert "#define CNN_INT8_OUTPUT_SCALE 0.00390625f" in header
    assert "void cnn_int8_infer(const int8_t in[288], int8_t out[5]);" in header
    code = (tmp_path / "cnn_int8.c").read_text()
    assert "    int8_t arena[" in code    # the intermediate tensors live on the stack: no static state
    for banned in ("malloc", "int64_t", "long long", "/ count"):
        assert banned not in code
    weights = (tmp_path / "cnn_int8_weights.c").read_text()
    assert "CNN_INT8_FLASH" in weights and "PROGMEM" in (tmp_path / "cnn_int8_weights.h").read_text()
    facts = json.loads((tmp_path / "cnn_int8.flowfacts.json").read_text())
    assert facts["loops"] and all(loop["max_iterations"] >= 1 for loop in facts["loops"])
    # each operator is a function of its own (its loops with it), the entry calls them in order
    layers = {layer["name"] for layer in facts["layers"]}
    assert {loop["function"] for loop in facts["loops"]} == {f"nn_{name}" for name in layers} | {"nn_reciprocal"}
    assert all(layer["function"] == "cnn_int8_infer" for layer in facts["layers"])


@pytest.mark.e2e
def test_the_check_reads_the_quantized_members_of_the_data(tmp_path):
    """`nnbuild check --data` of an int8 model takes x_q and y_q where the file has them."""
    results = pipeline.check(str(DATA / "mlp_int8.tflite"), str(DATA / "mlp_int8.npz"), target="host",
                             tolerance=0.0)
    assert results["kind"] == "int8" and results["runs"]["host"]["max_abs_error"] == 0.0
    assert results["runs"]["host"]["vs_framework"] == 0.0


#: every operator set on AVR (the 8-bit core, where int sizes differ most); the ARM cores run the
#: dense, convolution and standalone-activation sets (the example adds a whole CNN on all four boards)
#: cnn_int8 on avr, arm and stm32f407 is test_the_firmware_example_builds_with_its_gates': the
#: example holds the same .tflite and, in golden.npz, the same 8 inputs and TFLite Micro outputs;
#: its report's max_abs_error_by_run of 0 on each board is this check's (max |C - y| counts in it)
#: mlp and acts on avr, mlp on arm and acts on stm32f407 are test_the_wcet_bound_holds_the_measured_runs':
#: its whole build's semantic gate runs the same .npz at tolerance 0 on the same simulator, and its
#: report's max_abs_error of 0 is max(|C - y|, |C - reference|) there, this check's two numbers
BOARD_CHECKS = [("core", "avr"), ("merge", "avr"), ("acts", "arm"), ("mlp", "stm32f407")]


@pytest.mark.e2e
@pytest.mark.parametrize("name,board", BOARD_CHECKS)
def test_check_is_bit_exact_on_the_boards(name, board):
    """`nnbuild check` on simavr (AVR, weights in flash), qemu-arm and qemu-system-arm (Cortex-M4):
    the C's int8 outputs are TFLite Micro's for the 8 fixture inputs."""
    results = pipeline.check(str(DATA / f"{name}_int8.tflite"), str(DATA / f"{name}_int8.npz"), target=board,
                             tolerance=0.0)
    (run,) = results["runs"].values()
    assert run["max_abs_error"] == 0.0 and run["vs_framework"] == 0.0


@pytest.mark.e2e
@pytest.mark.parametrize("board,name", [("avr", "mlp"), ("arm", "mlp"), ("avr", "acts"), ("stm32f407", "acts")])
def test_the_wcet_bound_holds_the_measured_runs(board, name, tmp_path):
    """The whole build (semantic gate, memory, WCET: builtin-avr on AVR, OTAWA on ARM, builtin-thumb2
    on the Cortex-M4) of mlp_int8 and of acts_int8 (standalone RELU, RELU6, int8 QUANTIZE): a bound, at
    least every measured run, and no unbounded library routine reached."""
    assert_int8_build_within_the_bound(tmp_path, board, name)


def assert_int8_build_within_the_bound(tmp_path, board, name):
    """The whole build of tests/data/tflite/`name`_int8.tflite for `board` (skipped where its WCET
    analyzer is missing): bit-exact on its data, a bound of at least every measured run."""
    from nnbuild import wcet
    board_ = pipeline.load_board(board)
    if wcet.unavailable_reason(board_):
        pytest.skip(wcet.unavailable_reason(board_))
    model = str(DATA / f"{name}_int8.tflite")
    the_plan = pipeline.plan(name=f"{name}_int8", model=model, board=board, kind=kinds.of_file(model),
                             data=str(DATA / f"{name}_int8.npz"), tolerance=0.0)
    pipeline.execute(the_plan, tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["precision"] == "int8" and report["max_abs_error"] == 0.0
    assert report["wcet_cycles"] >= report["measured_cycles"] > 0
    print(f"\n{name}_int8 on {board}: WCET {report['wcet_cycles']:,} cycles, measured {report['measured_cycles']:,}, "
          f"bound/measured {report['wcet_cycles'] / report['measured_cycles']:.3f}")


@pytest.mark.e2e
@pytest.mark.parametrize("board", ["avr", "arm", "stm32f407", "rp2040"])
def test_the_firmware_example_builds_with_its_gates(board, tmp_path):
    """`scons target=<board> model=tflite_cnn_int8`: firmware, bit-exact check runs, memory, WCET
    under the example's 200 ms deadline, gate.json."""
    from conftest import copy_project, have, scons
    if not have("avr-gcc" if board == "avr" else "arm-none-eabi-gcc"):
        pytest.skip(f"no cross-compiler for {board}")
    project = copy_project(tmp_path)
    result = scons(project, f"target={board}", "model=tflite_cnn_int8")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    build = project / "build" / board / "tflite_cnn_int8"
    report = json.loads((build / "report.json").read_text())
    assert report["precision"] == "int8" and report["shape"] == "tflm"
    assert set(report["max_abs_error_by_run"].values()) == {0.0}
    assert report["measured_cycles"] <= report["wcet_cycles"] and report["wcet_ms"] <= 200
    assert (build / "gate.json").is_file() and (build / "firmware.elf").is_file()


def with_float_ends(graph):
    """mlp_int8's graph as the converter writes it without inference_input/output_type = tf.int8:
    a float32 input QUANTIZEd to the int8 one, the int8 output DEQUANTIZEd to a float32 one."""
    import dataclasses
    tensors = list(graph.tensors)
    t_in, t_out = tensors[graph.inputs[0]], tensors[graph.outputs[0]]
    f_in = dataclasses.replace(t_in, index=len(tensors), name="x_float", type_name="float32", quantization=None)
    f_out = dataclasses.replace(t_out, index=len(tensors) + 1, name="y_float", type_name="float32", quantization=None)
    first = tfl.Operator(len(graph.operators), "QUANTIZE", 1, (f_in.index,), (t_in.index,), {})
    last = tfl.Operator(len(graph.operators) + 1, "DEQUANTIZE", 1, (t_out.index,), (f_out.index,), {})
    return dataclasses.replace(graph, tensors=tuple(tensors + [f_in, f_out]), inputs=(f_in.index,),
                               outputs=(f_out.index,), operators=(first,) + graph.operators + (last,))


def float_ends_model(tmp_path):
    """mlp_int8 with float32 ends, cut; its check arrays from float data: (model, arrays)."""
    from nnbuild.frontends import tflite_int8
    from nnbuild.ir.int8 import QuantizedModel
    graph = with_float_ends(tfl.read(DATA / "mlp_int8.tflite"))
    cut, ends = tflite_int8._int8_ends(graph)
    assert ends == ["input", "output"] and [op.op for op in cut.operators][0] == "FULLY_CONNECTED"
    model = QuantizedModel("mlp_ends", cut, tflite_int8._checked_ops(cut), source_files=("mlp_ends.tflite",),
                           meta={"float32_input": "QUANTIZE", "float32_output": "DEQUANTIZE"})
    x_q, y_q = golden("mlp")
    scale, zero = model.io_quantization("input")
    out_scale, out_zero = model.io_quantization("output")
    x = ((x_q.astype(np.float64) - zero) * scale).astype(np.float32)          # real inputs that quantize back
    y = ((y_q.astype(np.float64) - out_zero) * out_scale).astype(np.float32)  # DEQUANTIZE's outputs
    np.savez(tmp_path / "float.npz", x=x, y=y)
    arrays = kinds.get("int8").reference_arrays(model, 0, 1, (-1.0, 1.0), str(tmp_path / "float.npz"))
    assert np.array_equal(arrays["x"], x_q.reshape(len(x_q), -1).astype(np.float32))
    assert np.array_equal(arrays["y"], y_q.reshape(len(y_q), -1)) and np.array_equal(arrays["y_framework"], arrays["y"])
    return model, arrays


def test_float32_ends_are_cut_and_the_check_quantizes_float_data(tmp_path):
    """QUANTIZE/DEQUANTIZE at the ends are removed (the C API stays int8 on the tensors they link);
    float data is quantized as TFLite Micro's QUANTIZE does, float outputs compared once quantized."""
    model, _ = float_ends_model(tmp_path)
    assert model.input_size == 8 and model.output_size == 4


@pytest.mark.e2e
def test_a_model_with_float32_ends_runs_bit_exact(tmp_path):
    model, arrays = float_ends_model(tmp_path)
    program, _ = pipeline.build_check_program(model, "host", tmp_path / "build")
    got, _ = pipeline.run_cases("host", program, arrays["x"], model.output_size, kind="int8")
    assert np.array_equal(got, arrays["y"])


def test_a_float32_end_without_its_quantize_is_refused_in_one_line():
    from nnbuild.frontends import tflite_int8
    graph = with_float_ends(tfl.read(DATA / "mlp_int8.tflite"))
    import dataclasses
    graph = dataclasses.replace(graph, operators=graph.operators[1:])
    with pytest.raises(tflite_int8.Problem, match=r"^the float32 input 'x_float' is read by nothing \(one QUANTIZE"):
        tflite_int8._int8_ends(graph)


def test_a_damaged_int8_file_is_one_line(tmp_path):
    """The int8 sniff never raises: a truncated full-integer file reaches the reader's refusal."""
    path = tmp_path / "cut.tflite"
    path.write_bytes((DATA / "mlp_int8.tflite").read_bytes()[:600])
    with pytest.raises(NNBuildError) as error:
        pipeline.generate(path, tmp_path / "gen")
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)
    assert not (tmp_path / "gen").exists()
