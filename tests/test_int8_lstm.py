"""The int8 UNIDIRECTIONAL_SEQUENCE_LSTM (TFLite Micro's 8x8->16 kernel): nnbuild.numerics.tflm_int8
and the generated C (shape tflm) agree bit for bit with TFLite Micro's interpreter (PyPI
tflite-micro, the goldens of tests/data/tflite/make_fixtures.py) on the host, AVR, ARM and the
Cortex-M4, with a WCET bound; its variants are refused in one line."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from nnbuild import pipeline
from nnbuild.frontends import tflite as tfl
from nnbuild.frontends import tflite_int8
from nnbuild.numerics import tflm_int8
from test_int8_codegen import assert_int8_build_within_the_bound, int8_refusal

DATA = REPO / "tests" / "data" / "tflite"
#: kws_lstm: LSTM(12) over 10 x 8, its last step, Dense(4); seq_lstm: LSTM(16) over 12 x 9, the
#: whole sequence as the output; stacked_lstm: LSTM(8) -> LSTM(6) over 8 x 5, Dense(3)
FIXTURES = ["kws_lstm", "seq_lstm", "stacked_lstm"]
#: every fixture on AVR (the 8-bit core, where int sizes differ most); the ARM cores each run two.
#: kws_lstm on avr, arm and stm32f407 is test_the_wcet_bound_holds_the_measured_runs': its whole
#: build's semantic gate runs kws_lstm_int8.npz at tolerance 0 on the same simulator, and its
#: report's max_abs_error of 0 is max(|C - y|, |C - reference|) there, this check's two numbers
BOARD_CHECKS = [("seq_lstm", "avr"), ("stacked_lstm", "avr"), ("seq_lstm", "arm"), ("stacked_lstm", "stm32f407")]


def golden(name, stress=False):
    with np.load(DATA / f"{name}_int8{'_stress' if stress else ''}.npz") as gold:
        return gold["x_q"], gold["y_q"]


@pytest.mark.parametrize("stress", [False, True], ids=["fixture", "stress"])
@pytest.mark.parametrize("name", FIXTURES)
def test_the_numpy_model_is_bit_exact_with_tflite_micro(name, stress):
    """The 8 fixture inputs and 24 random int8 inputs over the whole range (saturated gates, the
    cell state at its limits): tflm_int8.run gives TFLite Micro's outputs, every step's hidden
    state for seq_lstm."""
    graph = tfl.read(DATA / f"{name}_int8.tflite")
    x_q, y_q = golden(name, stress)
    got = np.stack([tflm_int8.run(graph, x) for x in x_q])
    assert np.array_equal(got.reshape(len(x_q), -1), y_q.reshape(len(x_q), -1))


@pytest.mark.parametrize("name", FIXTURES)
def test_the_numpy_model_carries_the_state_as_tflite_micro(name):
    """The fixture cases through one TFLite Micro interpreter without a reset (the _stream
    goldens): tflm_int8.run with a states dict carries each LSTM's state from case to case."""
    graph = tfl.read(DATA / f"{name}_int8.tflite")
    with np.load(DATA / f"{name}_int8_stream.npz") as gold:
        x_q, y_q = gold["x_q"], gold["y_q"]
    states = {}
    got = np.stack([tflm_int8.run(graph, x, states) for x in x_q])
    assert np.array_equal(got.reshape(len(x_q), -1), y_q.reshape(len(x_q), -1))
    assert not np.array_equal(y_q, golden(name)[1])    # the carried state changes the outputs


def test_the_stress_cases_reach_the_saturations():
    """The stress inputs drive seq_lstm's cell state to its int16 limit (the saturating add and
    the clip at +-32767) and hidden states to both int8 limits: those clamps are checked against
    TFLite Micro, not only the middle of the range."""
    graph = tfl.read(DATA / "seq_lstm_int8.tflite")
    p = tflm_int8.lstm_params_of(graph, graph.operators[0])
    x_q, y_q = golden("seq_lstm", stress=True)
    largest = 0
    for x in x_q:
        h, c = np.full(p.hidden, p.hidden_zero_point), np.zeros(p.hidden, np.int64)
        for x_t in x.reshape(-1, p.features):
            h, c = tflm_int8.lstm_step(p, x_t, h, c)
            largest = max(largest, int(np.abs(c).max()))
    assert largest == p.cell_clip == 32767
    assert (y_q == 127).any() and (y_q == -128).any()


def test_the_int16_activations_follow_the_reference_formulas():
    """reference_integer_ops::Logistic and Tanh on int16: the middle, the ends of the table."""
    assert tflm_int8.sigmoid16(0) == 16384
    # an int16 input times 3 stays inside the table (its saturation needs |3x| >= 255 * 2^9)
    assert 32750 <= tflm_int8.sigmoid16(32767) < 32767 and 0 < tflm_int8.sigmoid16(-32768) <= 16
    assert tflm_int8._sigmoid_scaled(255 << 9) == 32767 and tflm_int8._sigmoid_scaled(-(255 << 9)) == 1
    assert tflm_int8.tanh16(0) == 0
    assert tflm_int8.tanh16(32767) == 32767 and tflm_int8.tanh16(-32768) == -32767
    x = np.arange(-32768, 32768, 97)
    assert np.all(np.diff(tflm_int8.sigmoid16(x)) >= 0) and np.all(np.diff(tflm_int8.tanh16(x)) >= 0)
    # sigmoid(1) and tanh(1) in Q0.15 from Q3.12 inputs, within the table's interpolation
    assert abs(tflm_int8.sigmoid16(4096) / 32768 - 1 / (1 + np.exp(-1))) < 2e-3
    assert abs(tflm_int8.tanh16(4096) / 32768 - np.tanh(1)) < 2e-3


def test_the_prepare_parameters_are_tflite_micros():
    """The cell tanh's input scaling (lstm_internal::Tanh then the zero-multiplier fix-up), the
    quantized cell clip (truncated, at most 32767) and the inter-gate multipliers."""
    assert tflm_int8.cell_tanh_scaling(-12) == (3, 0)
    assert tflm_int8.cell_tanh_scaling(-11) == (6, 0)
    assert tflm_int8.cell_tanh_scaling(-14) == (3, 2)
    assert tflm_int8.checked_log2(2.0 ** -14) == -14 and tflm_int8.checked_log2(6.1035156e-05) == -14
    assert tflm_int8.quantized_cell_clip(10.0, 2.0 ** -14) == 32767
    assert tflm_int8.quantized_cell_clip(0.5, 2.0 ** -14) == 8192
    assert tflm_int8.quantized_cell_clip(0.0, 2.0 ** -14) == 0
    graph = tfl.read(DATA / "kws_lstm_int8.tflite")
    p = tflm_int8.lstm_params_of(graph, graph.operators[0])
    assert p.forget_cell_mul == (1 << 30, -14) and p.input_cell_mul == (1 << 30, -15)
    assert p.cell_clip == 32767 and p.cell_tanh == (3, 2) and p.cell_activation == "tanh"


@pytest.mark.parametrize("shape,begin,end,strides,options", [
    ((1, 10, 12), (0, -1, 0), (1, 0, 12), (1, 1, 1), {"BeginMask": 5, "EndMask": 5, "ShrinkAxisMask": 2}),
    ((1, 10, 12), (0, 2, 1), (1, 9, 11), (1, 3, 2), {}),
    ((1, 10, 12), (0, 8, 0), (1, 1, 12), (1, -2, 1), {"BeginMask": 1, "EndMask": 1}),
])
def test_strided_slice_of_a_computed_tensor_is_numpys(shape, begin, end, strides, options):
    x = np.arange(int(np.prod(shape[1:]))).reshape(shape[1:])
    full = np.arange(int(np.prod(shape[1:]))).reshape(shape)
    index = []
    for k in range(len(shape)):
        if options.get("ShrinkAxisMask", 0) >> k & 1:
            index.append(begin[k])
            continue
        index.append(slice(None if options.get("BeginMask", 0) >> k & 1 else begin[k],
                           None if options.get("EndMask", 0) >> k & 1 else end[k], strides[k]))
    want = full[tuple(index)]
    assert np.array_equal(tflm_int8.strided_slice(x, np.array(begin), np.array(end), np.array(strides), options),
                          want.reshape(want.shape[1:]))


def refusal(graph, change):
    """The message of _checked_ops on kws_lstm_int8's graph with its LSTM operator or tensors changed
    by `change(graph, op) -> graph`."""
    with pytest.raises(tflite_int8.Problem) as error:
        tflite_int8._checked_ops(change(graph, graph.operators[0]))
    message = str(error.value)
    assert "\n" not in message and message.startswith("operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM): ")
    return message


def with_inputs(graph, op, **changes):
    inputs = list(op.inputs)
    for k, v in changes.items():
        inputs[int(k[1:])] = v
    ops = (dataclasses.replace(op, inputs=tuple(inputs)),) + graph.operators[1:]
    return dataclasses.replace(graph, operators=ops)


def with_tensor(graph, index, **changes):
    tensors = list(graph.tensors)
    tensors[index] = dataclasses.replace(tensors[index], **changes)
    return dataclasses.replace(graph, tensors=tuple(tensors))


def test_lstm_variants_the_kernel_does_not_compute_are_refused_in_one_line():
    graph = tfl.read(DATA / "kws_lstm_int8.tflite")
    op = graph.operators[0]
    assert "no CIFG" in refusal(graph, lambda g, o: with_inputs(g, o, k1=-1, k5=-1, k12=-1))
    assert "peephole" in refusal(graph, lambda g, o: with_inputs(g, o, k10=o.inputs[12]))
    assert "time-major" in refusal(graph, lambda g, o: dataclasses.replace(
        g, operators=(dataclasses.replace(o, options=dict(o.options, TimeMajor=True)),) + g.operators[1:]))
    assert "cell activation RELU" in refusal(graph, lambda g, o: dataclasses.replace(
        g, operators=(dataclasses.replace(o, options=dict(o.options, FusedActivationFunction=1)),) + g.operators[1:]))
    w = graph.tensors[op.inputs[2]]
    per_channel = tfl.Quantization(np.full(12, w.quantization.scales[0]), np.zeros(12, np.int64), 0)
    assert "per tensor" in refusal(graph, lambda g, o: with_tensor(g, o.inputs[2], quantization=per_channel))
    assert "int16x8" in refusal(graph, lambda g, o: with_tensor(g, o.inputs[2], type_name="int16"))
    # TFLite Micro's 16x8 kernel: int16 activations (the converter of TensorFlow 2.21 does not write it)
    with pytest.raises(tflite_int8.Problem, match=r"^the model's input 'serving_default_x:0' is int16, not int8"):
        tflite_int8._checked_ops(with_tensor(graph, op.inputs[0], type_name="int16"))
    assert "int16 cell state" in refusal(graph, lambda g, o: with_tensor(g, o.inputs[19], type_name="int8"))
    assert "constant values" in refusal(graph, lambda g, o: with_tensor(g, o.inputs[18],
                                                                         data=np.zeros((1, 12), np.int8)))


def test_a_bidirectional_lstm_is_refused_naming_the_operator(tmp_path):
    """TFLite Micro has no BIDIRECTIONAL_SEQUENCE_LSTM kernel: no reference to be bit-exact with."""
    # UNIDIRECTIONAL_SEQUENCE_LSTM -> BIDIRECTIONAL_SEQUENCE_LSTM
    path, message = int8_refusal(tmp_path, "kws_lstm_int8.tflite", 44, 52)
    assert message == (f"{path}: operator 0 (BIDIRECTIONAL_SEQUENCE_LSTM): TFLite Micro has no "
                       "BIDIRECTIONAL_SEQUENCE_LSTM kernel, so int8 has no reference to be bit-exact with")


def test_the_c_api_makes_the_state_explicit(tmp_path):
    """No static state: `_infer` computes a whole sequence from the reset state in its own locals;
    the state type, `_reset` and `_infer_state` (Invoke() without a reset) are declared."""
    pipeline.generate(DATA / "kws_lstm_int8.tflite", tmp_path, storage="avr-progmem-far")
    header = (tmp_path / "kws_lstm_int8.h").read_text()
    code = (tmp_path / "kws_lstm_int8.c").read_text()
    assert "each call computes one whole sequence" in header
    assert "    int8_t h_unidirectional_sequence_lstm_0[12];" in header
    assert "    int16_t c_unidirectional_sequence_lstm_0[12];" in header
    assert "void kws_lstm_int8_reset(kws_lstm_int8_state *state);" in header
    assert ("void kws_lstm_int8_infer_state(const int8_t in[80], int8_t out[4], kws_lstm_int8_state *state);"
            in header)
    assert "    kws_lstm_int8_state state;" in code and "    kws_lstm_int8_reset(&state);" in code
    file_scope = [line for line in code.splitlines()
                  if line.endswith(";") and not line.startswith((" ", "#", "typedef"))]
    assert file_scope == [], file_scope
    weights = (tmp_path / "kws_lstm_int8_weights.c").read_text()
    assert "const uint16_t kws_lstm_int8_sigmoid16[256] KWS_LSTM_INT8_FLASH" in weights


def host_outputs(model, tmp_path, x_q, n_out):
    program, _ = pipeline.build_check_program(model, "host", tmp_path)
    outputs, _ = pipeline.run_cases("host", program, np.asarray(x_q, np.float32).reshape(len(x_q), -1), n_out,
                                    kind="int8")
    return np.asarray(outputs)


@pytest.mark.e2e
@pytest.mark.parametrize("name", FIXTURES)
def test_the_host_c_is_bit_exact_with_tflite_micro(name, tmp_path):
    """The fixture and stress goldens, and 16 more random inputs against the numpy model."""
    model = DATA / f"{name}_int8.tflite"
    program, _ = pipeline.build_check_program(model, "host", tmp_path)
    for stress in (False, True):
        x_q, y_q = golden(name, stress)
        outputs, _ = pipeline.run_cases("host", program, np.asarray(x_q, np.float32).reshape(len(x_q), -1),
                                        y_q[0].size, kind="int8")
        assert np.array_equal(np.asarray(outputs), y_q.reshape(len(y_q), -1).astype(np.float32))
    x = np.random.default_rng(5).integers(-128, 128, size=(16,) + x_q.shape[1:])
    outputs, _ = pipeline.run_cases("host", program, x.astype(np.float32).reshape(len(x), -1), y_q[0].size,
                                    kind="int8")
    graph = tfl.read(model)
    assert np.array_equal(np.asarray(outputs), np.stack([tflm_int8.run(graph, row).reshape(-1) for row in x]))


@pytest.mark.e2e
@pytest.mark.parametrize("name", FIXTURES)
def test_infer_state_carries_the_state_as_tflite_micro(name, tmp_path):
    """A host program: `_reset` once, `_infer_state` on the fixture cases in turn gives the _stream
    goldens (one TFLite Micro interpreter, no reset); `_infer` then still gives the reset goldens."""
    model = f"{name}_int8"
    files = pipeline.generate(DATA / f"{model}.tflite", tmp_path / "gen")
    with np.load(DATA / f"{model}_stream.npz") as gold:
        x_q, y_stream = gold["x_q"], gold["y_q"]
    _, y_reset = golden(name)
    rows = ",\n".join("{" + ", ".join(str(int(v)) for v in x.reshape(-1)) + "}" for x in x_q)
    n_out = y_stream[0].size
    (tmp_path / "main.c").write_text(f"""#include <stdio.h>
#include "{model}.h"
static const int8_t x[{len(x_q)}][{x_q[0].size}] = {{{rows}}};
int main(void)
{{
    {model}_state state;
    int8_t y[{n_out}];
    int k, i;
    {model}_reset(&state);
    for (k = 0; k < {len(x_q)}; ++k) {{
        {model}_infer_state(x[k], y, &state);
        for (i = 0; i < {n_out}; ++i) printf("%d ", y[i]);
        printf("\\n");
    }}
    for (k = 0; k < {len(x_q)}; ++k) {{
        {model}_infer(x[k], y);
        for (i = 0; i < {n_out}; ++i) printf("%d ", y[i]);
        printf("\\n");
    }}
    return 0;
}}
""")
    board = pipeline.load_board("host")
    program = board.compiler.build_executable(board, [f for f in files if f.suffix == ".c"] + [tmp_path / "main.c"],
                                              tmp_path / "stream", include_dirs=[tmp_path / "gen"])
    out = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.splitlines()
    got = np.array([[int(v) for v in line.split()] for line in out])
    assert np.array_equal(got[:len(x_q)], y_stream.reshape(len(x_q), -1))
    assert np.array_equal(got[len(x_q):], y_reset.reshape(len(x_q), -1))


@pytest.mark.e2e
@pytest.mark.parametrize("name,board", BOARD_CHECKS)
def test_check_is_bit_exact_on_the_boards(name, board):
    """`nnbuild check` on simavr (weights and the sigmoid table in flash), qemu-arm and
    qemu-system-arm (Cortex-M4): TFLite Micro's outputs for the fixture inputs."""
    results = pipeline.check(str(DATA / f"{name}_int8.tflite"), str(DATA / f"{name}_int8.npz"), target=board,
                             tolerance=0.0)
    (run,) = results["runs"].values()
    assert run["max_abs_error"] == 0.0 and run["vs_framework"] == 0.0


@pytest.mark.e2e
def test_the_cli_check_on_avr_is_bit_exact(tmp_path):
    result = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(DATA / "kws_lstm_int8.tflite"), "--data",
                             str(DATA / "kws_lstm_int8_stress.npz"), "--target", "avr"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "kws_lstm_int8 on simavr: 24 int8 inputs, bit-exact with TFLite Micro's int8 kernels" in result.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("board", ["avr", "arm", "stm32f407"])
def test_the_wcet_bound_holds_the_measured_runs(board, tmp_path):
    """The whole build of kws_lstm_int8 (semantic gate, memory, WCET: builtin-avr, OTAWA on ARM,
    builtin-thumb2 on the Cortex-M4): a bound of at least every measured run."""
    assert_int8_build_within_the_bound(tmp_path, board, "kws_lstm")
