"""ONNX forms read since issue 28 (inputs without a batch axis, MatMul(W, x), HardSwish, Gelu, Erf,
Sign, Shrink, LogSoftmax, Split, Expand, ConvTranspose, 3-D Conv/MaxPool, dilated MaxPool, external
data), each compared with onnxruntime on random inputs at the float32 floor: the IR reference in
float32 and float64 (quick tier), and the generated C on the host (`e2e`: v2, and v1/v3 for one case
of each mapping)."""

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from conftest import REPO, shared_file
from nnbuild import codegen, frontends
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from nnbuild.runners import CHECK_MAIN, check_main_defines, native
from test_frontend_onnx import make

ort = pytest.importorskip("onnxruntime")
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]
FLOOR = 1e-5


def save(tmp_path, name, nodes, in_shape, inits=(), opset=13, out_shape=None):
    """test_frontend_onnx.make with the output's shape left unknown unless given."""
    return make(tmp_path, name, nodes, in_shape, out_shape, inits, opset)


def onnxruntime_run(path, samples, batchless=False):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    feed = (lambda s: s) if batchless else (lambda s: s[None])
    return np.stack([session.run(None, {name: feed(s)})[0].reshape(-1) for s in samples])


#: generated C above this size compiles at -O0: v3's unrolled 3-D convolution and max pooling (350
#: and 510 KB of straight-line sums, 10 s CPU of gcc -O2 against 1.3 s at -O0); the comparison at
#: the float floor does not depend on the level (-ffp-contract=off, SSE arithmetic on x86-64), and
#: v3's strict -O2 compiles are test_c_warnings.py's and test_shape_v3_ops.py's
LARGE_C_BYTES = 256 << 10


def c_run(tmp_path, model, samples, shape="v2"):
    out = tmp_path / f"gen_{shape}"
    codegen.generate(model, out, shape=shape, storage="const", passes_log=[])
    exe = out / "check"
    level = "-O0" if (out / f"{model.name}.c").stat().st_size > LARGE_C_BYTES else "-O2"
    subprocess.run(["gcc", level, *WARNINGS, f"-I{out}",
                    *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size),
                    str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN), "-o",
                    str(exe), "-lm"], check=True, capture_output=True, text=True)
    return native.run_cases(exe, samples.reshape(len(samples), -1), model.output_size)


def relative(got, want):
    return float(np.max(np.abs(got.reshape(want.shape) - want))) / max(1.0, float(np.max(np.abs(want))))


#: the C of every case runs in the e2e tier (a gcc build each); the reference in the quick tier
BACKENDS = ["reference", pytest.param("c", marks=pytest.mark.e2e)]


def check(tmp_path, path, samples, batchless=False, c=True):
    """The IR reference (float32 and float64) and, if `c`, the v2 C against onnxruntime: the errors."""
    model = frontends.load(path)
    want = onnxruntime_run(path, samples, batchless)
    errors = {}
    for dtype in (np.float32, np.float64):
        got = reference.run(model, samples.reshape((len(samples),) + tuple(model.input_shape)).astype(dtype), dtype)
        errors[np.dtype(dtype).name] = relative(np.asarray(got).reshape(len(samples), -1), want)
    if c:
        errors["c"] = relative(c_run(tmp_path, model, samples), want)
    assert max(errors.values()) <= FLOOR, errors
    return model, errors


def samples_for(shape, n=4, seed=5, scale=1.0):
    return (np.random.default_rng(seed).normal(size=(n,) + tuple(shape)) * scale).astype(np.float32)


# ----------------------------------------------------------------------- no batch axis, MatMul(W, x)

def nnet2onnx_form(tmp_path, nnet_path, normalise):
    """The ACAS Xu network as sisl/NNet's nnet2onnx writes it: X of shape [5], MatMul(W, X) + b,
    Relu, ..., y_out of shape [5]; `normalise` adds the .nnet's clamp and (x - mean) / range and
    y * range + mean as Max/Min/Sub/Div and Mul/Add nodes."""
    model = frontends.load(nnet_path)
    by_kind = {layer.name: layer for layer in model.layers}
    dense = [layer for layer in model.layers if layer.kind == "dense"]
    nodes, inits, last = [], [], "x"

    def const(op, layer_name):
        nonlocal last
        layer = by_kind[layer_name]
        inits.append((f"{layer_name}_c", np.asarray(layer.constants[0][1], np.float32)))
        nodes.append(helper.make_node(op, [last, f"{layer_name}_c"], [layer_name], name=layer_name))
        last = layer_name

    if normalise:
        for op, name in (("Max", "clamp_min"), ("Min", "clamp_max"), ("Sub", "sub_mean"), ("Div", "div_range")):
            const(op, name)
    for k, layer in enumerate(dense):
        inits += [(f"W{k}", np.asarray(layer.kernel, np.float32).T), (f"B{k}", np.asarray(layer.bias, np.float32))]
        nodes += [helper.make_node("MatMul", [f"W{k}", last], [f"M{k}"], name=f"MatMul_{k}"),
                  helper.make_node("Add", [f"M{k}", f"B{k}"], [f"A{k}"], name=f"Add_{k}")]
        last = f"A{k}"
        if k < len(dense) - 1:
            nodes.append(helper.make_node("Relu", [last], [f"R{k}"], name=f"Relu_{k}"))
            last = f"R{k}"
    if normalise:
        const("Mul", "mul_range")
        const("Add", "add_mean")
    nodes[-1].output[0] = "y"
    return save(tmp_path, "acas_" + ("normalised" if normalise else "raw"), nodes, [5], inits, 11, [5]), model


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_acas_xu_nnet2onnx_form_is_the_nnet_network(tmp_path, backend, normalise):
    path, nnet_model = nnet2onnx_form(tmp_path, shared_file("data", "nnet", "ACASXU_run2a_1_1_batch_2000.nnet"),
                                      normalise)
    x = samples_for((5,), n=6, seed=11, scale=0.5)
    model, _ = check(tmp_path, path, x, batchless=True, c=backend == "c")
    assert model.input_shape == (5,) and model.output_shape == (5,) and model.meta["batch_axis"] is False
    if normalise:
        # inside the clamp, the .nnet and its ONNX form are one network
        lo = np.asarray(nnet_model.layers[0].constants[0][1])
        hi = np.asarray(nnet_model.layers[1].constants[0][1])
        inside = (lo + (hi - lo) * np.random.default_rng(3).uniform(size=(6, 5))).astype(np.float32)
        a = reference.run(model, inside.astype(np.float64)).reshape(6, -1)
        b = reference.run(nnet_model, inside.astype(np.float64)).reshape(6, -1)
        assert relative(a, b) <= FLOOR


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_vector_times_matrix_without_batch_axis(tmp_path, backend):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Tanh", ["h"], ["y"], name="act")]
    path = save(tmp_path, "vecmat", nodes, [7], [("w", rng.normal(size=(7, 3)).astype(np.float32))], 13, [3])
    check(tmp_path, path, samples_for((7,)), batchless=True, c=backend == "c")


@pytest.mark.parametrize("nodes, inits, what", [
    ([helper.make_node("Softmax", ["x"], ["y"], name="sm")], [], "(Softmax): on an input without a batch axis"),
    ([helper.make_node("Add", ["x", "c"], ["y"], name="add")], [("c", np.zeros((2, 4), np.float32))],
     "(Add): constant operand of rank 2 exceeds the rank-1 input (no batch axis)"),
])
def test_batchless_refusals_in_one_line(tmp_path, nodes, inits, what):
    path = save(tmp_path, "bad", nodes, [4], inits, 13)
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and what in message and "bad.onnx" in message


# ----------------------------------------------------------------------- element-wise and activation ops

def op_cases():
    """(name, nodes, input shape, initializers, opset, input scale)"""
    rng = np.random.default_rng(28)
    w = rng.normal(size=(6, 4)).astype(np.float32)

    def one(op, **attrs):
        return [helper.make_node(op, ["x"], ["y"], name=f"{op}_node", **attrs)]

    erf_gelu = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
                helper.make_node("Erf", ["d"], ["e"], name="erf"),
                helper.make_node("Add", ["e", "one"], ["a"], name="add"),
                helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
                helper.make_node("Mul", ["m", "half"], ["y"], name="mul_half")]
    split_concat = [helper.make_node("Split", ["x", "sizes"], ["s0", "s1", "s2"], name="split", axis=1),
                    helper.make_node("Relu", ["s0"], ["r0"], name="relu"),
                    helper.make_node("Neg", ["s2"], ["n2"], name="neg"),
                    helper.make_node("Concat", ["n2", "r0", "s1"], ["y"], name="concat", axis=1)]
    split_o11 = [helper.make_node("Split", ["x"], ["s0", "s1"], name="split", axis=-1, split=[1, 3]),
                 helper.make_node("Add", ["s1", "s1"], ["y"], name="add")]
    split_o18 = [helper.make_node("Split", ["x"], ["s0", "s1", "s2"], name="split", axis=2, num_outputs=3),
                 helper.make_node("Mul", ["s2", "s0"], ["y"], name="mul")]
    return [
        ("hardswish", one("HardSwish"), [1, 3, 5, 4], [], 14, 4.0),
        ("hardsigmoid", one("HardSigmoid", alpha=0.3, beta=0.4), [1, 3, 5, 4], [], 13, 4.0),
        ("erf", one("Erf"), [1, 2, 9], [], 13, 2.0),
        ("sign", one("Sign"), [1, 2, 9], [], 13, 2.0),
        ("shrink", one("Shrink", lambd=0.7, bias=0.2), [1, 2, 9], [], 13, 2.0),
        ("gelu_none", one("Gelu"), [1, 3, 7], [], 20, 3.0),
        ("gelu_tanh", one("Gelu", approximate="tanh"), [1, 3, 7], [], 20, 3.0),
        ("gelu_from_erf", erf_gelu, [1, 10], [("sqrt2", np.float32(np.sqrt(2))), ("one", np.float32(1)),
                                              ("half", np.float32(0.5))], 13, 3.0),
        ("logsoftmax_o13", one("LogSoftmax"), [1, 3, 6], [], 13, 3.0),
        ("logsoftmax_o13_axis1", one("LogSoftmax", axis=1), [1, 3, 6], [], 13, 3.0),
        ("logsoftmax_o11_coerce", one("LogSoftmax", axis=1), [1, 3, 2, 2], [], 11, 3.0),
        ("logsoftmax_after_dense", [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                                    helper.make_node("LogSoftmax", ["h"], ["y"], name="ls", axis=-1)],
         [1, 6], [("w", w)], 13, 1.0),
        ("split_concat_o13", split_concat, [1, 6, 3], [("sizes", np.array([1, 2, 3], np.int64))], 13, 1.0),
        ("split_o11_attr", split_o11, [1, 2, 4], [], 11, 1.0),
        ("split_o18_num_outputs", split_o18, [1, 2, 7], [], 18, 1.0),
        ("expand_channels", [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")], [1, 1, 4],
         [("shape", np.array([1, 3, 1, 4], np.int64))], 13, 1.0),
        ("expand_rows", [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")], [1, 3, 1],
         [("shape", np.array([3, 5], np.int64))], 13, 1.0),
    ]


OP_CASES = {c[0]: c for c in op_cases()}


@pytest.mark.parametrize("case", sorted(OP_CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_operator_matches_onnxruntime(tmp_path, backend, case):
    name, nodes, in_shape, inits, opset, scale = OP_CASES[case]
    path = save(tmp_path, name, nodes, in_shape, inits, opset)
    check(tmp_path, path, samples_for(in_shape[1:], scale=scale), c=backend == "c")


@pytest.mark.parametrize("nodes, inits, opset, what", [
    ([helper.make_node("Split", ["x", "s"], ["a", "y"], name="sp", axis=1)], [("s", np.array([1, 1], np.int64))],
     13, "(Split): split sizes [1, 1] for 2 outputs of an axis of size 3"),
    ([helper.make_node("Split", ["x"], ["a", "y"], name="sp", axis=0)], [], 13, "(Split): axis 0 is the batch axis"),
    ([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")], [("s", np.array([2, 3, 1], np.int64))], 13,
     "(Expand): expanding the batch axis"),
    ([helper.make_node("LogSoftmax", ["x"], ["y"], name="ls", axis=0)], [], 13,
     "(LogSoftmax): logsoftmax over the batch axis"),
])
def test_operator_refusals_in_one_line(tmp_path, nodes, inits, opset, what):
    path = save(tmp_path, "bad", nodes, [1, 3, 4], inits, opset)
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and what in message and "bad.onnx" in message, message


# ----------------------------------------------------------------------- ConvTranspose

def conv_transpose_cases():
    """(name, attrs, input shape, weight shape, bias)"""
    return [
        ("plain", {}, [1, 3, 4, 5], (3, 2, 3, 3), True),
        ("stride2_pads", {"strides": [2, 2], "pads": [1, 1, 1, 1]}, [1, 2, 4, 3], (2, 3, 3, 3), True),
        ("stride_output_padding", {"strides": [2, 3], "pads": [0, 1, 1, 0], "output_padding": [1, 2]},
         [1, 2, 3, 4], (2, 2, 2, 3), False),
        ("dilated_groups", {"dilations": [2, 1], "group": 2, "strides": [1, 2]}, [1, 4, 3, 3], (4, 3, 3, 2), True),
        ("large_pads", {"pads": [3, 2, 2, 3], "strides": [3, 3]}, [1, 2, 4, 4], (2, 2, 3, 3), True),
        ("valid_1d", {"strides": [2], "auto_pad": "VALID"}, [1, 3, 6], (3, 2, 4), True),
        ("pads_1d", {"strides": [3], "pads": [1, 2], "output_padding": [1]}, [1, 2, 5], (2, 4, 3), True),
    ]


@pytest.mark.parametrize("case", [c[0] for c in conv_transpose_cases()])
@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_transpose_matches_onnxruntime(tmp_path, backend, case):
    name, attrs, in_shape, w_shape, bias = next(c for c in conv_transpose_cases() if c[0] == case)
    rng = np.random.default_rng(7)
    inits = [("w", rng.normal(size=w_shape).astype(np.float32))]
    if bias:
        inits.append(("b", rng.normal(size=(w_shape[1] * attrs.get("group", 1),)).astype(np.float32)))
    nodes = [helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], name="ct", **attrs)]
    path = save(tmp_path, f"ct_{name}", nodes, in_shape, inits, 13)
    check(tmp_path, path, samples_for(in_shape[1:]), c=backend == "c")


def test_conv_transpose_output_shape_is_refused_in_one_line(tmp_path):
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="ct", auto_pad="SAME_UPPER", strides=[2, 2])]
    path = save(tmp_path, "bad", nodes, [1, 3, 4, 4], [("w", np.zeros((3, 2, 3, 3), np.float32))], 13)
    with pytest.raises(NNBuildError,
                       match=r"node 'ct' \(ConvTranspose\): auto_pad SAME_UPPER \(only NOTSET and VALID\)"):
        frontends.load(path)


# ----------------------------------------------------------------------- external data

def external_model(tmp_path, location="mlp.onnx.data"):
    """An MLP saved as torch.onnx.export saves it by default: every weight in `mlp.onnx.data`
    beside the model (onnx.save_model with save_as_external_data, one file, no size threshold)."""
    import onnx
    rng = np.random.default_rng(23)
    inits = [("w1", rng.normal(size=(6, 32)).astype(np.float32)), ("b1", rng.normal(size=32).astype(np.float32)),
             ("w2", rng.normal(size=(32, 3)).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b1"], ["a"], name="add1"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = save(folder, "mlp", nodes, [1, 6], inits, 17)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_external_data_beside_the_model_is_read(tmp_path, backend):
    import onnx
    path = external_model(tmp_path)
    data = path.parent / "mlp.onnx.data"
    assert data.exists() and all(t.data_location == 1 for t in onnx.load(str(path), load_external_data=False)
                                 .graph.initializer)
    model, _ = check(tmp_path, path, samples_for((6,)), c=backend == "c")
    assert str(data.resolve()) in model.source_files
    assert frontends.implicit_dependencies(str(path)) == [str(data)]


def edit_external(path, **changes):
    """Rewrite the first initializer's external_data entries (key -> value; None removes it)."""
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    tensor = model.graph.initializer[0]
    info = {e.key: e.value for e in tensor.external_data}
    info.update(changes)
    del tensor.external_data[:]
    for key, value in info.items():
        if value is not None:
            tensor.external_data.add(key=key, value=value)
    path.write_bytes(model.SerializeToString())


@pytest.mark.parametrize("changes, what", [
    ({"location": "/etc/passwd"}, "location '/etc/passwd' is not a plain relative name inside the model's folder"),
    ({"location": "../secret.bin"}, "location '../secret.bin' is not a plain relative name"),
    ({"location": "sub/../../secret.bin"}, "is not a plain relative name"),
    ({"location": "missing.data"}, "external data file 'missing.data' does not exist beside the model"),
    ({"location": "link.data"}, "external data file 'link.data' leads outside the model's folder"),
    ({"location": "folder"}, "external data 'folder' is not a regular file"),
    ({"offset": "999999"}, "runs past the end of 'mlp.onnx.data'"),
    ({"offset": "-4"}, "external data of 768 bytes at offset -4"),
    ({"length": "12"}, "external data of 12 bytes at offset 0, the tensor declares 768 bytes"),
    ({"offset": "x"}, "external data offset/length are not integers"),
    ({"funny": "1"}, "external data key 'funny' is not read by nnbuild"),
])
def test_external_data_outside_the_rules_is_refused_in_one_line(tmp_path, changes, what):
    path = external_model(tmp_path)
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    (path.parent / "link.data").symlink_to(tmp_path / "secret.bin")
    (path.parent / "folder").mkdir()
    edit_external(path, **changes)
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and what in message and "initializer 'w1'" in message and "mlp.onnx" in message, \
        message
    assert frontends.implicit_dependencies(str(path)) in ([], [str(path.parent / "mlp.onnx.data")])


# ----------------------------------------------------------------------- 3-D convolution and max pooling

def volume_cases():
    """(name, op, attrs, input shape, weight shape or None, bias)"""
    return [
        ("conv1d_same_lower", "Conv", {"auto_pad": "SAME_LOWER", "strides": [2]}, [1, 2, 9], (3, 2, 4), True),
        ("conv_plain", "Conv", {}, [1, 2, 4, 5, 6], (3, 2, 2, 3, 2), True),
        ("conv_strided_padded", "Conv", {"strides": [2, 3, 2], "pads": [1, 0, 2, 1, 2, 0]}, [1, 2, 5, 7, 6],
         (4, 2, 3, 3, 2), True),
        ("conv_dilated_groups", "Conv", {"dilations": [2, 2, 1], "group": 2}, [1, 4, 6, 6, 4], (4, 2, 2, 2, 3), False),
        ("conv_same_upper", "Conv", {"auto_pad": "SAME_UPPER", "strides": [1, 2, 2]}, [1, 3, 3, 5, 5],
         (2, 3, 3, 3, 3), True),
        ("maxpool2d_dilated", "MaxPool", {"kernel_shape": [3, 2], "dilations": [2, 3], "strides": [2, 1],
                                          "pads": [1, 0, 2, 1]}, [1, 2, 9, 8], None, False),
        ("maxpool1d_dilated", "MaxPool", {"kernel_shape": [3], "dilations": [2], "pads": [2, 1], "strides": [2]},
         [1, 3, 10], None, False),
        ("maxpool_plain", "MaxPool", {"kernel_shape": [2, 2, 2]}, [1, 3, 4, 4, 5], None, False),
        ("maxpool_strided_padded", "MaxPool", {"kernel_shape": [3, 2, 3], "strides": [2, 3, 2],
                                               "pads": [1, 1, 1, 1, 0, 2]}, [1, 2, 5, 7, 6], None, False),
    ]


@pytest.mark.parametrize("case", [c[0] for c in volume_cases()])
@pytest.mark.parametrize("backend", BACKENDS)
def test_volume_ops_match_onnxruntime(tmp_path, backend, case):
    name, op, attrs, in_shape, w_shape, bias = next(c for c in volume_cases() if c[0] == case)
    rng = np.random.default_rng(9)
    inits, names_ = [], ["x"]
    if w_shape:
        inits.append(("w", rng.normal(size=w_shape).astype(np.float32)))
        names_.append("w")
        if bias:
            inits.append(("b", rng.normal(size=(w_shape[0],)).astype(np.float32)))
            names_.append("b")
    nodes = [helper.make_node(op, names_, ["y"], name="vol", **attrs)]
    path = save(tmp_path, f"vol_{name}", nodes, in_shape, inits, 13)
    check(tmp_path, path, samples_for(in_shape[1:]), c=backend == "c")


def test_dilated_pooling_with_same_padding_is_refused_in_one_line(tmp_path):
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[3], dilations=[2],
                              auto_pad="SAME_UPPER")]
    path = save(tmp_path, "bad", nodes, [1, 2, 9], [], 13)
    with pytest.raises(NNBuildError, match=r"node 'mp' \(MaxPool\): pooling with dilations and auto_pad SAME"):
        frontends.load(path)


def test_volume_average_pooling_is_refused_in_one_line(tmp_path):
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], name="ap", kernel_shape=[2, 2, 2])]
    path = save(tmp_path, "bad", nodes, [1, 2, 3, 4, 4], [], 13)
    with pytest.raises(NNBuildError, match=r"node 'ap' \(AveragePool\): 3-D average pooling \(3-D max pooling only\)"):
        frontends.load(path)


@pytest.mark.e2e
@pytest.mark.parametrize("shape", ["v1", "v3"])
def test_every_mapping_runs_on_the_other_shapes(tmp_path, shape):
    """One case per mapping (new unary ops, LogSoftmax, Split/Expand, strided ConvTranspose, 3-D
    Conv and MaxPool, dilated MaxPool) as v1 and v3 C against onnxruntime."""
    rng = np.random.default_rng(4)
    models = []
    for name in ("gelu_none", "gelu_tanh", "hardswish", "erf", "sign", "shrink", "logsoftmax_o13_axis1",
                 "split_concat_o13", "expand_rows"):
        _, nodes, in_shape, inits, opset, scale = OP_CASES[name]
        models.append((save(tmp_path, name, nodes, in_shape, inits, opset), in_shape[1:], scale))
    ct = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="ct", strides=[2, 3], pads=[0, 1, 1, 0],
                           output_padding=[1, 2])]
    models.append((save(tmp_path, "ct", ct, [1, 2, 3, 4], [("w", rng.normal(size=(2, 2, 2, 3)).astype(np.float32))]),
                   (2, 3, 4), 1.0))
    for name, op, attrs, in_shape, w_shape, _ in volume_cases():
        if name in ("conv_strided_padded", "maxpool_strided_padded", "maxpool2d_dilated"):
            inits = [("w", rng.normal(size=w_shape).astype(np.float32))] if w_shape else []
            nodes = [helper.make_node(op, ["x"] + (["w"] if w_shape else []), ["y"], name="vol", **attrs)]
            models.append((save(tmp_path, f"vol_{name}", nodes, in_shape, inits), in_shape[1:], 1.0))
    for path, in_shape, scale in models:
        model = frontends.load(path)
        x = samples_for(in_shape, scale=scale)
        sub = tmp_path / path.stem
        sub.mkdir()
        assert relative(c_run(sub, model, x, shape), onnxruntime_run(path, x)) <= FLOOR, path.stem


@pytest.mark.e2e
def test_erf_and_gelu_run_on_avr_without_a_library_erf(tmp_path):
    """avr-libc has no erf: the generated C computes it from the erfc fit there (nnbuild check on
    simavr against onnxruntime's outputs)."""
    from conftest import have
    if not have("avr-gcc", "simavr"):
        pytest.skip("avr-gcc/simavr not installed (bash scripts/setup.sh)")
    nodes = [helper.make_node("Gelu", ["x"], ["g"], name="gelu"), helper.make_node("Erf", ["g"], ["y"], name="erf")]
    path = save(tmp_path, "gelu_erf", nodes, [1, 12], [], 20)
    x = samples_for((12,), n=8, scale=3.0)
    np.savez(tmp_path / "data.npz", x=x, y=onnxruntime_run(path, x))
    done = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(path), "--data", str(tmp_path / "data.npz"),
                           "--target", "avr", "--wcet", "skip", "--tolerance", "1e-5"], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gelu_erf on simavr: 8 inputs" in done.stdout + done.stderr
