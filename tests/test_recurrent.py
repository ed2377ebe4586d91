"""Recurrent models (issue 28): ONNX LSTM, GRU and RNN, PyTorch's exports of them and TFLite's
UNIDIRECTIONAL_SEQUENCE_LSTM, all through the IR's one Recurrent layer.

The IR reference (float32 and float64) is compared at the float32 floor with onnxruntime (the
onnx reference evaluator for layout 1, which onnxruntime does not run), with PyTorch's own outputs
(fixtures made by tests/data/onnx_recurrent/make_fixtures.py) and with LiteRT's (fixture made by
tests/data/tflite/make_fixtures.py) in the quick tier; the generated v2 C on the host in the e2e
tier; one LSTM and one GRU built for AVR, run on simavr and bounded by builtin-avr (e2e). What is
not supported is refused in one line naming the file and the node."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO
from nnbuild import codegen, frontends
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from test_onnx_forms import BACKENDS, FLOOR, c_run, relative

ort = pytest.importorskip("onnxruntime")
DATA = Path(__file__).resolve().parent / "data"
TORCH = sorted(p.stem for p in (DATA / "onnx_recurrent").glob("*.onnx"))
STEPS, FEATURES, HIDDEN = 5, 3, 4
#: gates of each ONNX recurrent op (W and R hold gates * hidden rows per direction)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_model(tmp_path, name, op="LSTM", direction="forward", layout=0, output="Y", attrs=None,
                    peepholes=False, initial=False, steps=STEPS, seed=0, extra_inputs=None, x_shape=None,
                    hidden=HIDDEN, features=FEATURES):
    """A one-node LSTM/GRU/RNN graph with random weights, input [steps, 1, F] (layout 0) or [1, steps, F]."""
    rng = np.random.default_rng(seed)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]

    def weights(*shape, scale=0.5):
        return (rng.normal(size=shape) * scale).astype(np.float32)
    inits = {"W": weights(dirs, gates * hidden, features), "R": weights(dirs, gates * hidden, hidden),
             "B": weights(dirs, 2 * gates * hidden)}
    inputs = ["x", "W", "R", "B"]
    if initial or peepholes:
        state = (dirs, 1, hidden) if layout == 0 else (1, dirs, hidden)
        inputs += ["", "h0"] + (["c0"] if op == "LSTM" else [])
        inits["h0"] = weights(*state, scale=0.3) if initial else np.zeros(state, np.float32)
        if op == "LSTM":
            inits["c0"] = weights(*state, scale=0.3) if initial else np.zeros(state, np.float32)
    if peepholes:
        inputs.append("P")
        inits["P"] = weights(dirs, 3 * hidden)
    if extra_inputs:
        inputs, inits = extra_inputs(inputs, inits)
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, inputs, outputs, name=f"{name}_node", hidden_size=hidden, direction=direction,
                            layout=layout, **(attrs or {}))
    shape = x_shape or ([steps, 1, features] if layout == 0 else [1, steps, features])
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def expected(path, samples):
    """onnxruntime's outputs, or the onnx reference evaluator's for layout 1 (onnxruntime refuses it)."""
    proto = onnx.load(str(path))
    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    layout = next((a.i for n in proto.graph.node for a in n.attribute if a.name == "layout"), 0)
    if layout == 1:
        from onnx.reference import ReferenceEvaluator
        session = ReferenceEvaluator(proto)
        return np.stack([np.asarray(session.run(None, {"x": s.reshape(shape)})[0]).reshape(-1) for s in samples])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, {"x": s.reshape(shape)})[0].reshape(-1) for s in samples])


def sequences(n=4, seed=5, steps=STEPS, features=FEATURES):
    return np.random.default_rng(seed).normal(size=(n, steps, features)).astype(np.float32)


def errors_of(tmp_path, model, samples, want, backend):
    """{backend: relative error} of the IR reference (float32, float64) or of the v2 C."""
    if backend == "c":
        return {"c": relative(c_run(tmp_path, model, samples), want)}
    out = {}
    for dtype in (np.float32, np.float64):
        got = reference.run(model, samples.reshape((len(samples),) + tuple(model.input_shape)).astype(dtype), dtype)
        out[np.dtype(dtype).name] = relative(np.asarray(got).reshape(len(samples), -1), want)
    return out


#: case name -> recurrent_model keywords
CASES = {
    "lstm": {},
    "lstm_reverse": {"direction": "reverse"},
    "lstm_bidirectional": {"direction": "bidirectional"},
    "lstm_last_hidden": {"output": "Y_h"},
    "lstm_last_cell": {"output": "Y_c", "direction": "bidirectional"},
    "lstm_clip": {"attrs": {"clip": 0.7}},
    "lstm_input_forget": {"attrs": {"input_forget": 1}},
    "lstm_peepholes": {"peepholes": True},
    "lstm_initial_state": {"initial": True, "direction": "bidirectional"},
    "lstm_activations": {"attrs": {"activations": ["Relu", "Tanh", "Sigmoid"]}},
    "lstm_layout1": {"layout": 1, "direction": "bidirectional", "output": "Y_h", "initial": True},
    "gru": {"op": "GRU"},
    "gru_linear_before_reset": {"op": "GRU", "attrs": {"linear_before_reset": 1}, "direction": "reverse"},
    "gru_bidirectional_last": {"op": "GRU", "direction": "bidirectional", "output": "Y_h"},
    "gru_clip_initial": {"op": "GRU", "initial": True, "attrs": {"clip": 0.5}},
    "gru_layout1": {"op": "GRU", "layout": 1},
    "rnn": {"op": "RNN"},
    "rnn_relu_reverse": {"op": "RNN", "direction": "reverse", "attrs": {"activations": ["Relu"]}},
    "rnn_bidirectional_last": {"op": "RNN", "direction": "bidirectional", "output": "Y_h", "initial": True},
    "rnn_sigmoid_clip": {"op": "RNN", "attrs": {"activations": ["Sigmoid"], "clip": 0.6}},
    "rnn_layout1": {"op": "RNN", "layout": 1, "direction": "bidirectional"},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_recurrent_matches_onnxruntime(tmp_path, case, backend):
    path = recurrent_model(tmp_path, case, **CASES[case])
    samples = sequences()
    model = frontends.load(path)
    assert model.input_shape == (STEPS, FEATURES)
    assert [layer.kind for layer in model.layers][0] == "recurrent"
    errors = errors_of(tmp_path, model, samples, expected(path, samples), backend)
    assert max(errors.values()) <= FLOOR, errors


def test_each_output_read_is_one_layer(tmp_path):
    """Y and Y_h of one node read together: two layers over the same input, each its own output."""
    path = recurrent_model(tmp_path, "two_outputs")
    proto = onnx.load(str(path))
    proto.graph.node.append(helper.make_node("Squeeze", ["Y", "axes"], ["ys"]))
    proto.graph.node.append(helper.make_node("Gather", ["ys", "last"], ["y_last"], axis=0))
    proto.graph.node.append(helper.make_node("Squeeze", ["Y_h", "axes0"], ["h"]))
    proto.graph.node.append(helper.make_node("Add", ["y_last", "h"], ["sum"]))
    proto.graph.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), "axes"),
                                    numpy_helper.from_array(np.array(-1, np.int64), "last"),
                                    numpy_helper.from_array(np.array([0], np.int64), "axes0")])
    proto.graph.output[0].name = "sum"
    path.write_bytes(proto.SerializeToString())
    model = frontends.load(path)
    assert [layer.kind for layer in model.layers].count("recurrent") == 2
    samples = sequences()
    errors = errors_of(tmp_path, model, samples, expected(path, samples), "reference")
    assert max(errors.values()) <= FLOOR, errors


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", TORCH)
def test_pytorch_exports_match_pytorch(tmp_path, name, backend):
    """torch.onnx's TorchScript and dynamo exports (Transpose, Squeeze, Reshape, Gather of the
    sequence around LSTM/GRU nodes of layout 0) against PyTorch's own outputs."""
    data = np.load(DATA / "onnx_recurrent" / f"{name}.npz")
    model = frontends.load(DATA / "onnx_recurrent" / f"{name}.onnx")
    assert model.input_shape == tuple(data["x"].shape[1:])
    errors = errors_of(tmp_path, model, data["x"], data["y"], backend)
    assert max(errors.values()) <= FLOOR, errors


@pytest.mark.parametrize("backend", BACKENDS)
def test_tflite_lstm_matches_litert(tmp_path, backend):
    """Two stacked Keras LSTMs converted to UNIDIRECTIONAL_SEQUENCE_LSTM, against LiteRT run from
    the zero state for every case."""
    data = np.load(DATA / "tflite" / "lstm_float32.npz")
    model = frontends.load(DATA / "tflite" / "lstm_float32.tflite")
    assert [layer.kind for layer in model.layers].count("recurrent") == 2
    errors = errors_of(tmp_path, model, data["x"], data["y"], backend)
    assert max(errors.values()) <= FLOOR, errors


def test_tflite_and_onnx_share_the_layer():
    """One recurrent code path: TFLite's LSTM is the IR's Recurrent (gates reordered to ONNX's)."""
    model = frontends.load(DATA / "tflite" / "lstm_float32.tflite")
    layer = next(layer for layer in model.layers if layer.kind == "recurrent")
    assert (layer.cell, layer.directions, layer.activations) == ("lstm", ("forward",), ("sigmoid", "tanh", "tanh"))
    assert layer.w.shape == (1, 4 * layer.hidden, 3) and layer.initial_h is None


def refusal(tmp_path, **keywords):
    with pytest.raises(NNBuildError) as info:
        frontends.load(recurrent_model(tmp_path, "refused", **keywords))
    message = str(info.value)
    assert "\n" not in message and "refused.onnx" in message
    return message


@pytest.mark.parametrize("keywords, words", [
    ({"attrs": {"activations": ["HardSigmoid", "Tanh", "Tanh"]}},
     "activation 'HardSigmoid' is not supported (supported: Sigmoid, Tanh, Relu)"),
    ({"attrs": {"activation_alpha": [0.5]}}, "attribute activation_alpha is not supported"),
    ({"attrs": {"activations": ["Sigmoid", "Tanh", "Tanh", "Relu", "Tanh", "Tanh"]}, "direction": "bidirectional"},
     "activations ['Sigmoid', 'Tanh', 'Tanh', 'Relu', 'Tanh', 'Tanh'] differ between the directions"),
    ({"x_shape": [STEPS, 2, FEATURES]}, "has batch 2 (nnbuild generates one sequence per call: batch 1)"),
    ({"x_shape": ["T", 1, FEATURES]}, "has a dynamic first dimension (sequence length or directions)"),
    ({"extra_inputs": lambda i, w: (i + ["lens"], {**w, "lens": np.array([3], np.int32)})},
     "sequence_lens other than the constant sequence length 5"),
    ({"direction": "sideways"}, "attribute direction 'sideways' is not one of forward, reverse"),
    ({"op": "RNN", "attrs": {"activations": ["Tanh", "Tanh"]}}, "2 activations for 1 direction(s) (expected 1)"),
    ({"op": "RNN", "attrs": {"activations": ["LeakyRelu"], "activation_alpha": [0.1]}},
     "attribute activation_alpha is not supported"),
    ({"op": "RNN", "attrs": {"activations": ["Softsign"]}}, "activation 'Softsign' is not supported"),
])
def test_refusals_name_file_and_node(tmp_path, keywords, words):
    message = refusal(tmp_path, **keywords)
    assert words in message and ("refused_node" in message or "input 'x'" in message), message


def state_model(tmp_path, op, direction):
    """x, h0 (and c0 for LSTM) as model inputs [.., 1, ..] (layout 0), Y_h (and Y_c) as outputs:
    a streaming caller feeds back the state it got."""
    rng = np.random.default_rng(17)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]

    def weights(*shape):
        return numpy_helper.from_array((rng.normal(size=shape) * 0.5).astype(np.float32))
    inits = [weights(dirs, gates * HIDDEN, FEATURES), weights(dirs, gates * HIDDEN, HIDDEN),
             weights(dirs, 2 * gates * HIDDEN)]
    for init, name in zip(inits, "WRB"):
        init.name = name
    states = ["h0", "c0"][:2 if op == "LSTM" else 1]
    outputs = ["Y_h", "Y_c"][:len(states)]
    node = helper.make_node(op, ["x", "W", "R", "B", ""] + states, ["Y"] + outputs, name="cell",
                            hidden_size=HIDDEN, direction=direction)
    values = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, FEATURES])] + [
        helper.make_tensor_value_info(s, TensorProto.FLOAT, [dirs, 1, HIDDEN]) for s in states]
    graph = helper.make_graph([node], f"state_{op.lower()}", values,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path = tmp_path / f"state_{op.lower()}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, direction", [("LSTM", "forward"), ("GRU", "bidirectional"), ("RNN", "bidirectional")])
def test_initial_state_inputs_are_arguments(tmp_path, op, direction, backend):
    """An initial state computed from the model's inputs is read from its tensor: the C function
    takes it as an argument (and returns Y_h/Y_c), so the state is the caller's, never hidden."""
    from test_multiio import build, feeds_for, within_floor
    from nnbuild.runners import native
    path = state_model(tmp_path, op, direction)
    model = frontends.load(path)
    assert [name for name, _ in model.inputs][1:] == ["h0", "c0"][:2 if op == "LSTM" else 1]
    x, want = feeds_for(path)
    if backend == "c":
        out, exe = build(tmp_path, model)
        header = (out / f"{model.name}.h").read_text()
        assert "const float in_h0[" in header and "float out_Y_h[" in header
        assert within_floor(native.run_cases(exe, x, model.output_size), want)
        return
    for dtype in (np.float32, np.float64):
        assert within_floor(reference.run_flat(model, x, dtype), want), dtype


def test_sequence_lens_equal_to_the_length_is_read(tmp_path):
    path = recurrent_model(tmp_path, "lens", extra_inputs=lambda i, w: (
        i + ["lens"], {**w, "lens": np.array([STEPS], np.int32)}))
    samples = sequences()
    errors = errors_of(tmp_path, frontends.load(path), samples, expected(path, samples), "reference")
    assert max(errors.values()) <= FLOOR


def test_a_sequence_tensor_elsewhere_is_refused(tmp_path):
    """Y keeps its batch axis third: an operator that does not track it refuses it in one line."""
    path = recurrent_model(tmp_path, "relu_on_y")
    proto = onnx.load(str(path))
    proto.graph.node.append(helper.make_node("Softmax", ["Y"], ["s"], name="soft", axis=-1))
    proto.graph.output[0].name = "s"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(NNBuildError, match=r"node 'soft' \(Softmax\): input 'Y' is a sequence tensor with its "
                                           r"batch axis at 2"):
        frontends.load(path)


def test_shapes_and_precisions_refused_in_one_line(tmp_path):
    model = frontends.load(recurrent_model(tmp_path, "shapes"))
    for shape, words in (("v3", "shape v3 does not generate LSTM"), ("v1", "shape v1 has no kernel for 'recurrent'")):
        with pytest.raises(NNBuildError, match=words):
            codegen.generate(model, tmp_path / shape, shape=shape, passes_log=[])
    assert "float32 and float64 only" in codegen.shape_refusal("v2", "q16", model)
    assert codegen.shape_refusal("auto", "q8", model) and codegen.shape_refusal("v2", "float32", model) is None


def test_generated_code_keeps_no_state_between_calls(tmp_path):
    """The state lives in the call's own locals (no static besides the activation arena) and
    starts from zero: a sequence gives the same output whatever ran before it."""
    model = frontends.load(recurrent_model(tmp_path, "stateless", output="Y_h"))
    codegen.generate(model, tmp_path / "gen", shape="v2", storage="const", passes_log=[])
    code = (tmp_path / "gen" / "stateless.c").read_text()
    body = code[code.index("void stateless_infer"):]
    assert "static" not in body and "float hs[8];" in body and "c[j] = 0.0f;" in body
    facts = json.loads((tmp_path / "gen" / "stateless.flowfacts.json").read_text())
    assert sorted({loop["max_iterations"] for loop in facts["loops"]}) == [FEATURES, HIDDEN, STEPS]


@pytest.mark.e2e
def test_repeated_calls_give_one_answer(tmp_path):
    """The same sequence twice, with another between them, on the host: three identical answers
    where a hidden state would differ."""
    model = frontends.load(recurrent_model(tmp_path, "repeat", op="GRU", output="Y_h"))
    samples = sequences(3)
    samples[2] = samples[0]
    got = c_run(tmp_path, model, samples)
    assert np.array_equal(got[0], got[2]) and not np.array_equal(got[0], got[1])


@pytest.mark.e2e
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_avr_run_and_wcet_bound(tmp_path, op):
    """One LSTM, one GRU and one RNN (8 steps, 4 features, 8 units, last hidden state) checked on simavr and
    bounded by builtin-avr: the bound covers every measured run. (`nnbuild check` runs as a command;
    the bound is wcet.analyze in this process, what `nnbuild wcet` runs: that command's own runs are
    test_multiio.py's.)"""
    from nnbuild import pipeline, wcet
    import shutil
    if not shutil.which("avr-gcc"):
        pytest.skip("avr-gcc missing")
    path = recurrent_model(tmp_path, op.lower(), op=op, output="Y_h", steps=8, seed=3, hidden=8, features=4)
    samples = sequences(4, steps=8, features=4)
    np.savez(tmp_path / "data.npz", x=samples, y=expected(path, samples))
    build = tmp_path / "build"
    run = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(path), "--data", str(tmp_path / "data.npz"),
                          "--target", "avr", "--build-dir", str(build)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    cycles = np.load(build / "run_simavr.npz")["cycles"]
    name = op.lower()
    facts = json.loads((build / "gen" / f"{name}.flowfacts.json").read_text())
    bound = wcet.analyze(pipeline.load_board("avr"), build / "check.elf", f"{name}_infer", facts, tmp_path).cycles
    print(f"\n{op} on AVR: measured max {int(cycles.max())} cycles, bound {bound} ({bound / cycles.max():.2f}x)")
    assert cycles.max() <= bound < 3 * cycles.max()


KERAS = sorted(p.name for p in (DATA / "keras_recurrent").iterdir() if p.suffix in (".h5", ".keras"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERAS)
def test_keras_lstm_gru_match_keras(tmp_path, name, backend):
    """Keras 2 .h5 (LSTM returning its sequence into a reset_after GRU; a GRU without reset_after
    into a go_backwards relu LSTM) and a Keras 3 .keras archive, against Keras's predict."""
    data = np.load(DATA / "keras_recurrent" / (Path(name).stem + ".npz"))
    model = frontends.load(DATA / "keras_recurrent" / name)
    assert [layer.kind for layer in model.layers].count("recurrent") == 2
    errors = errors_of(tmp_path, model, data["x"], data["y"], backend)
    assert max(errors.values()) <= FLOOR, errors


@pytest.mark.parametrize("change, words", [
    (lambda op: {"options": {**op.options, "TimeMajor": True}}, "time_major"),
    (lambda op: {"options": {**op.options, "FusedActivationFunction": 0}}, "cell activation NONE (supported: TANH"),
    (lambda op: {"inputs": op.inputs[:16] + (op.inputs[2],) + op.inputs[17:]}, "projection or layer-normalisation"),
    (lambda op: {"inputs": op.inputs[:1] + (op.inputs[5],) + op.inputs[2:]}, "input 1 has shape (5, 5), expected (5, 6)"),
])
def test_tflite_lstm_refusals(change, words):
    """The second LSTM of the fixture, changed in the read graph: one line naming file and operator."""
    import dataclasses
    from nnbuild.frontends import tflite
    path = DATA / "tflite" / "lstm_float32.tflite"
    graph = tflite.read(path)
    lstms = [op for op in graph.operators if op.op == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    changed = dataclasses.replace(lstms[1], **change(lstms[1]))
    graph = dataclasses.replace(graph, operators=tuple(changed if op is lstms[1] else op for op in graph.operators))
    with pytest.raises(tflite.Problem) as info:
        tflite._Converter(graph, path).run("lstm")
    assert f"operator {lstms[1].index} (UNIDIRECTIONAL_SEQUENCE_LSTM): " in str(info.value)
    assert words in str(info.value) and "\n" not in str(info.value)
