"""NNEF front-end (nnbuild.frontends.nnef_text): parser, .dat reader, NNEF -> ONNX translation
checked with onnxruntime, and the whole load through the IR reference."""

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from nnbuild import frontends
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_text as nnef

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

KERAS_GOLDEN = [-6.00199, -5.559069, 0.39786, 4.619772, -4.041964, 3.950669, -11.660199, -2.545813,
                -0.092761, -1.698758]


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


def session(proto):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def run(proto, x):
    s = session(proto)
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def write_model(folder, text, tensors=None):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.nnef").write_text(text)
    for label, array in (tensors or {}).items():
        path = folder / f"{label}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(nnef.dat_bytes(array))
    return folder


# ------------------------------------------------------------------------------------- parser

def test_parse_header_statements_and_literals():
    g = nnef.parse("""version 1.0;  # comment
extension tensor_ops, other;
graph net(a, b) -> (y, z)
{
    a = external<scalar>(shape = [1, 3]);   # trailing comment
    b = external(shape = [1, 3]);
    [y, z] = split(a, axis = 1, ratios = [1, 2], f = -1.5e-2, s = "dq", t = 'sq',
                   ok = true, no = false, pads = [(0, 1), (2, 3)], nested = [[1], []]);
}
""")
    assert (g.name, g.inputs, g.outputs, g.extensions) == ("net", ["a", "b"], ["y", "z"], ["tensor_ops", "other"])
    st = g.statements[2]
    assert st.outputs == ["y", "z"] and st.op == "split" and st.args == [nnef.Ref("a")]
    assert st.kwargs == {"axis": 1, "ratios": [1, 2], "f": -1.5e-2, "s": "dq", "t": "sq", "ok": True,
                         "no": False, "pads": [(0, 1), (2, 3)], "nested": [[1], []]}
    assert g.statements[0].dtype == "scalar" and g.statements[1].dtype is None
    assert (st.line, st.column) == (7, 14)


def test_parse_tuple_lhs():
    g = nnef.parse("version 1.0; graph g(x) -> (y) { (y, z) = f(x); }")
    assert g.statements[0].outputs == ["y", "z"]


@pytest.mark.parametrize("text, where", [
    ("version 1.0;\ngraph g(x) -> (y)\n{\n  y = relu(x)\n}", "line 5:1"),
    ("version 1.0;\ngraph g(x) -> (y) {\n  y = relu(x, $);\n}", "line 3:15"),
    ("version 2.0; graph g(x) -> (y) {}", "line 1:9"),
    ("graph g(x) -> (y) {}", "line 1:1"),
    ("version 1.0; graph g(x) -> (y) { y = f(x, a = 1, x); }", "line 1:50"),
    ("version 1.0; graph g(x) -> (y) { y = f(x);", "line 1:43"),
    ("version 1.0; fragment f() -> () {}", "line 1:14"),
])
def test_syntax_errors_are_one_line_with_position(tmp_path, text, where):
    folder = write_model(tmp_path / "bad.nnef", text)
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    message = one_line(exc)
    assert where in message and "syntax error" in message


def test_deep_nesting_refused():
    with pytest.raises(nnef.ParseError, match="nested deeper"):
        nnef.parse("version 1.0; graph g(x) -> (y) { y = f(x, a = " + "[" * 100 + "]" * 100 + "); }")


# ------------------------------------------------------------------------------------ .dat files

def test_dat_round_trip(tmp_path):
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    path = tmp_path / "t.dat"
    path.write_bytes(nnef.dat_bytes(array))
    assert path.stat().st_size == 128 + 24 * 4
    back = nnef.read_dat(path, (2, 3, 4))
    assert back.dtype == np.float32 and np.array_equal(back, array)
    assert len(nnef.dat_bytes(np.zeros((1, 6)))) == 152


def _refused(tmp_path, data, shape=None):
    path = tmp_path / "t.dat"
    path.write_bytes(data)
    with pytest.raises(NNBuildError) as exc:
        nnef.read_dat(path, shape)
    return one_line(exc)


def test_dat_truncated(tmp_path):
    data = nnef.dat_bytes(np.ones((2, 3)))
    assert "truncated" in _refused(tmp_path, data[:-1])
    assert "truncated" in _refused(tmp_path, data[:50])
    assert "trailing" in _refused(tmp_path, data + b"\0")


def test_dat_wrong_magic_and_version(tmp_path):
    data = bytearray(nnef.dat_bytes(np.ones(3)))
    data[1] = 0xEE
    assert "magic" in _refused(tmp_path, bytes(data))
    data = bytearray(nnef.dat_bytes(np.ones(3)))
    data[2] = 2
    assert "version 2.0" in _refused(tmp_path, bytes(data))


@pytest.mark.parametrize("bits, code", [(8, 1), (16, 0), (64, 0), (32, 4), (32, 2), (1, 5)])
def test_dat_non_float32_refused(tmp_path, bits, code):
    data = bytearray(nnef.dat_bytes(np.ones(4)))
    struct.pack_into("<II", data, 44, bits, code)
    assert "32-bit float only" in _refused(tmp_path, bytes(data))


def test_dat_shape_mismatch_and_huge(tmp_path):
    assert "declared" in _refused(tmp_path, nnef.dat_bytes(np.ones((2, 3))), (3, 2))
    data = bytearray(nnef.dat_bytes(np.ones(4)))
    struct.pack_into("<I", data, 8, 9)
    assert "rank 9" in _refused(tmp_path, bytes(data))
    data = bytearray(nnef.dat_bytes(np.ones(4)))
    struct.pack_into("<II", data, 12, 1 << 30, 1 << 30)
    struct.pack_into("<I", data, 8, 2)
    assert "above the limit of 4,194,304 per tensor" in _refused(tmp_path, bytes(data))


def test_dat_nan_refused(tmp_path):
    assert "NaN" in _refused(tmp_path, nnef.dat_bytes(np.array([1.0, np.nan])))


# ------------------------------------------------------------------------------ labels, errors

@pytest.mark.parametrize("label", ["../w", "/etc/passwd", "a/../../w", "", "a\\b", "./w"])
def test_labels_stay_inside_the_folder(tmp_path, label):
    folder = write_model(tmp_path / "m.nnef", "version 1.0; graph g(x) -> (y) {\n"
                         "x = external(shape = [1, 2]);\n"
                         f"w = variable(shape = [1, 2], label = '{label}');\n y = add(x, w); }}")
    (tmp_path / "w.dat").write_bytes(nnef.dat_bytes(np.ones((1, 2))))
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    assert "label" in one_line(exc)


def test_sub_folder_label_and_dependencies(tmp_path):
    folder = write_model(tmp_path / "m.nnef", "version 1.0; graph g(x) -> (y) {\n"
                         "x = external(shape = [1, 2]);\n"
                         "w = variable(shape = [1, 2], label = 'sub/w');\n y = add(x, w); }",
                         {"sub/w": np.array([[1.0, 2.0]])})
    assert np.allclose(run(nnef.to_onnx(folder), np.zeros((1, 2), np.float32)), [[1, 2]])
    deps = nnef.implicit_dependencies(folder)
    assert deps == [str(folder / "graph.nnef"), str(folder / "sub" / "w.dat")]
    assert frontends.implicit_dependencies(folder) == deps


def test_unknown_op_named_in_one_line(tmp_path):
    folder = write_model(tmp_path / "m.nnef", "version 1.0; graph g(x) -> (y) {\n"
                         "x = external(shape = [1, 2]);\n  y = frobnicate(x); }")
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    assert "line 3:7: frobnicate: unsupported NNEF operation" in one_line(exc)


def test_non_scalar_external_refused(tmp_path):
    folder = write_model(tmp_path / "m.nnef", "version 1.0; graph g(x) -> (y) {\n"
                         "x = external<integer>(shape = [1, 2]);\n  y = copy(x); }")
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    assert "<integer>" in one_line(exc)


def test_format_registered():
    assert frontends.format_for("x/lenet5.nnef").module == "nnbuild.frontends.nnef_text"


# ------------------------------------------------------------------------- op translation (ORT)

def test_ops_against_numpy(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 4)).astype(np.float32)
    mean, var = rng.standard_normal((1, 4)), rng.random((1, 4)) + 0.5
    folder = write_model(tmp_path / "ops.nnef", """version 1.0;
graph ops(x) -> (y, s, t, c, u)
{
    x = external<scalar>(shape = [1, 3, 6, 6]);
    w = variable<scalar>(shape = [4, 3, 3, 3], label = 'w');
    b = variable<scalar>(shape = [1, 4], label = 'b');
    m = variable<scalar>(shape = [1, 4], label = 'm');
    v = variable<scalar>(shape = [1, 4], label = 'v');
    c = conv(x, w, b, padding = [], stride = [1, 1]);
    bn = batch_normalization(c, m, v, epsilon = 0.001);
    a = add(bn, b);
    r = clamp(a, -1.0, 2.0);
    p = avg_pool(r, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], padding = [(0, 0), (0, 0), (1, 1), (1, 1)], border = 'ignore');
    q = box(r, size = [1, 1, 2, 2], stride = [1, 1, 2, 2], padding = [(0, 0), (0, 0), (0, 0), (0, 0)]);
    s = sigmoid(q);
    t = transpose(p, axes = [0, 2, 3, 1]);
    f = reshape(t, shape = [0, -1]);
    y = softmax(f, axes = [1]);
    r2 = reshape(r, shape = [4, 36], axis_start = 1, axis_count = 3);
    r3 = squeeze(r2, axes = [0]);
    u = unsqueeze(r3, axes = [1]);
}
""",
        {"w": w, "b": b, "m": mean, "v": var})
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    proto = nnef.to_onnx(folder)
    s = session(proto)
    y, sig, t, c, u = s.run(None, {"x": x})
    # numpy reference
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 4, 6, 6))
    for i in range(6):
        for j in range(6):
            conv[0, :, i, j] = np.tensordot(w, xp[0, :, i:i + 3, j:j + 3], axes=3)
    conv += b.reshape(1, 4, 1, 1)
    assert np.allclose(c, conv, atol=1e-4)
    bn = (conv - mean.reshape(1, 4, 1, 1)) / np.sqrt(var.reshape(1, 4, 1, 1) + 0.001)
    r = np.clip(bn + b.reshape(1, 4, 1, 1), -1, 2)
    box = r.reshape(1, 4, 3, 2, 3, 2).sum(axis=(3, 5))
    assert np.allclose(sig, 1 / (1 + np.exp(-box)), atol=1e-5)
    rp = np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ones = np.pad(np.ones((6, 6)), 1)
    pool = np.zeros((1, 4, 3, 3))
    for i in range(3):
        for j in range(3):
            win = (slice(2 * i, 2 * i + 3), slice(2 * j, 2 * j + 3))
            pool[0, :, i, j] = rp[0, :, win[0], win[1]].sum(axis=(1, 2)) / ones[win].sum()
    assert np.allclose(t, pool.transpose(0, 2, 3, 1), atol=1e-5)
    flat = pool.transpose(0, 2, 3, 1).reshape(1, -1)
    e = np.exp(flat - flat.max())
    assert np.allclose(y, e / e.sum(), atol=1e-6)
    assert np.allclose(u, r.reshape(4, 1, 36), atol=1e-5)


def test_linear_matmul_and_trailing_broadcast(tmp_path):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((1, 5)).astype(np.float32)
    folder = write_model(tmp_path / "lin.nnef", """version 1.0;
graph lin(x) -> (y, z, k)
{
    x = external(shape = [2, 3]);
    w = variable(shape = [5, 3], label = 'w');
    b = variable(shape = [1, 5], label = 'b');
    y = linear(x, w, b);
    z = matmul(x, w, transposeB = true);
    z2 = mul(z, 2.0);
    z3 = sub(1.0, z);
    k = concat([y, z2, z3], axis = 1);
}
""",
        {"w": w, "b": b})
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y, z, k = session(nnef.to_onnx(folder)).run(None, {"x": x})
    assert np.allclose(y, x @ w.T + b, atol=1e-5)
    assert np.allclose(z, x @ w.T, atol=1e-5)
    assert np.allclose(k, np.concatenate([y, 2 * z, 1 - z], axis=1), atol=1e-5)
    # NNEF broadcast: a [1, 4] bias on [1, 4, 2, 2] means [1, 4, 1, 1]
    folder = write_model(tmp_path / "bc.nnef", """version 1.0;
graph bc(x) -> (y) { x = external(shape = [1, 4, 2, 2]); c = variable(shape = [1, 4], label = 'c');
  y = add(x, c); }""", {"c": np.arange(4, dtype=np.float32).reshape(1, 4)})
    x = np.zeros((1, 4, 2, 2), np.float32)
    assert np.allclose(run(nnef.to_onnx(folder), x), np.arange(4).reshape(1, 4, 1, 1) + x)


# --------------------------------------------------------------------------------- real files

def test_lenet5_matches_onnx():
    folder = shared_file("data", "nnef", "lenet5.nnef")
    golden = shared_file("data", "nnef", "lenet5.onnx")
    proto = nnef.to_onnx(folder)
    onnx.checker.check_model(proto)
    x = np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)
    ref = ort.InferenceSession(str(golden), providers=["CPUExecutionProvider"])
    expected = ref.run(None, {ref.get_inputs()[0].name: x})[0]
    assert np.abs(run(proto, x) - expected).max() <= 1e-6 * np.abs(expected).max()
    deps = nnef.implicit_dependencies(folder)
    assert deps[0] == str(folder / "graph.nnef") and len(deps) == 11
    assert nnef.implicit_dependencies(folder / "graph.nnef") == deps


def test_cnn_max_mnist2_matches_keras_golden():
    folder = shared_file("data", "nnef", "cnn_max_mnist2.nnef")
    x = (np.arange(784) % 17 / 16).reshape(1, 28, 28, 1).astype(np.float32)
    y = run(nnef.to_onnx(folder), x)
    assert np.allclose(y.reshape(-1), KERAS_GOLDEN, atol=1e-4)
    assert int(np.argmax(y)) == 3


def _needs_convert():
    if importlib.util.find_spec("nnbuild.frontends.onnx_graph") is None:
        pytest.skip("nnbuild.frontends.onnx_graph is not there")
    from nnbuild.frontends import onnx_graph
    if not hasattr(onnx_graph, "convert"):
        pytest.skip("nnbuild.frontends.onnx_graph.convert is not there yet")


def test_lenet5_through_ir_reference():
    _needs_convert()
    from nnbuild.ir import reference
    folder = shared_file("data", "nnef", "lenet5.nnef")
    golden = shared_file("data", "nnef", "lenet5.onnx")
    model = frontends.load(folder)
    assert model.name == "lenet5"
    assert frontends.load(folder / "graph.nnef").name == "lenet5"
    x = np.random.default_rng(1).standard_normal((1, 1, 32, 32)).astype(np.float32)
    ref = ort.InferenceSession(str(golden), providers=["CPUExecutionProvider"])
    expected = ref.run(None, {ref.get_inputs()[0].name: x})[0].reshape(-1)
    y = np.asarray(reference.run(model, x[0])).reshape(-1)
    assert np.abs(y - expected).max() <= 1e-5 * np.abs(expected).max()


def test_cnn_max_mnist2_through_ir_reference():
    _needs_convert()
    from nnbuild.ir import reference
    model = frontends.load(shared_file("data", "nnef", "cnn_max_mnist2.nnef"))
    x = (np.arange(784) % 17 / 16).reshape(28, 28, 1)
    y = np.asarray(reference.run(model, x)).reshape(-1)
    assert np.allclose(y, KERAS_GOLDEN, atol=1e-4)


@pytest.mark.parametrize("op, fn", [
    ("relu(x)", lambda x: np.maximum(x, 0)),
    ("elu(x, alpha = 0.5)", lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1))),
    ("leaky_relu(x, alpha = 0.1)", lambda x: np.where(x > 0, x, 0.1 * x)),
    ("tanh(x)", np.tanh),
    ("exp(x)", np.exp),
    ("abs(x)", np.abs),
    ("neg(x)", np.negative),
    ("copy(x)", lambda x: x),
    ("sqrt(abs(x))", None),
    ("max(x, 0.25)", lambda x: np.maximum(x, 0.25)),
    ("div(x, 4.0)", lambda x: x / 4),
    ("clamp(x, -0.5, 0.5)", lambda x: np.clip(x, -0.5, 0.5)),
])
def test_elementwise(tmp_path, op, fn):
    if fn is None:  # NNEF has no nested invocations: a syntax error with its position
        folder = write_model(tmp_path / "e.nnef", f"version 1.0; graph e(x) -> (y) {{ x = external(shape = [2, 3]); y = {op}; }}")
        with pytest.raises(NNBuildError, match="syntax error at line 1:"):
            nnef.to_onnx(folder)
        return
    folder = write_model(tmp_path / "e.nnef", f"version 1.0; graph e(x) -> (y) {{ x = external(shape = [2, 3]); y = {op}; }}")
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    assert np.allclose(run(nnef.to_onnx(folder), x), fn(x), atol=1e-6)


def test_depthwise_conv_auto_padding_and_max_pool(tmp_path):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    folder = write_model(tmp_path / "dw.nnef", """version 1.0;
graph dw(x) -> (y, p)
{
    x = external(shape = [1, 2, 5, 5]);
    w = variable(shape = [2, 1, 3, 3], label = 'w');
    y = conv(x, w, 0.0, groups = 0, stride = [2, 2]);
    p = max_pool(x, size = [1, 1, 2, 2], stride = [1, 1, 2, 2], border = 'ignore');
}
""", {"w": w})
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    y, p = session(nnef.to_onnx(folder)).run(None, {"x": x})
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))   # same: total pad 2 -> 1 before, 1 after
    expected = np.array([[[[np.sum(xp[0, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[c, 0]) for j in range(3)]
                           for i in range(3)] for c in range(2)]])
    assert np.allclose(y, expected, atol=1e-5)
    xq = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=-np.inf)
    assert np.allclose(p, xq.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)))


@pytest.mark.parametrize("line, message", [
    ("y = max_pool(x, size = [1, 1, 2, 2], padding = [(0, 0), (0, 0), (1, 1), (1, 1)]);", "border 'constant'"),
    ("y = avg_pool(x, size = [2, 1, 2, 2]);", "batch and channel"),
    ("y = softmax(x, axes = [1, 2]);", "several axes"),
    ("y = elu(x, alpha = 'a');", "'alpha' takes no string"),
    ("y = mul(x, 1e300);", "float32"),
    ("y = relu(z);", "'z' is used before"),
    ("x = relu(x);", "assigned twice"),
    ("y = reshape(x, shape = [-1, -1]);", "not valid"),
    ("y = transpose(x, axes = [0, 0]);", "permutation"),
    ("y = pad(x, padding = [(0, 0), (0, 0), (1, 1), (1, 1)], border = 'reflect-even');", "border 'reflect-even'"),
    ("y = pad(x, padding = [(0, 0), (1, 1)]);", "(begin, end) pairs"),
    ("y = slice(x, axes = [2, 2], begin = [0, 0], end = [1, 1]);", "distinct axes"),
    ("y = slice(x, axes = [2], begin = [0], end = [1], stride = [-1]);", "positive"),
    ("y = sum_reduce(x, axes = [4]);", "distinct axes"),
    ("y = nearest_upsample(x, factor = [0, 2]);", "positive"),
    ("y = multilinear_upsample(x, factor = [2, 2], border = 'constant');", "border 'constant'"),
    ("y = multilinear_upsample(x, factor = [2, 2], method = 'cubic');", "method 'cubic'"),
    ("y = local_response_normalization(x, size = [1, 3, 3, 1]);", "across channels only"),
    ("y = tile(x, repeats = [1, 0, 1, 1]);", "positive"),
])
def test_translation_refusals(tmp_path, line, message):
    folder = write_model(tmp_path / "r.nnef", "version 1.0; graph r(x) -> (y) {\n"
                         f"x = external(shape = [1, 2, 4, 4]);\n{line}\n}}")
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    text = one_line(exc)
    assert message in text and "line 3:" in text


def test_mutated_graphs_fail_in_one_line(tmp_path):
    """Random edits of the real LeNet graph: either a model or one NNBuildError line, nothing else."""
    import random
    import shutil
    src = shared_file("data", "nnef", "lenet5.nnef")
    folder = tmp_path / "f.nnef"
    shutil.copytree(src, folder)
    text = (src / "graph.nnef").read_text()
    rng = random.Random(0)
    pieces = ["(", ")", "[", "]", ",", ";", "=", "-", "0", "-1", "1.5", "true", "'x'", "foo", "groups = 0",
              "padding = []", "axes = [1, 0]", "99999999999", "label = '../x'"]
    for _ in range(200):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(chars))
            roll = rng.random()
            if roll < 0.3:
                del chars[k]
            elif roll < 0.6:
                chars[k] = rng.choice(pieces)
            else:
                chars.insert(k, rng.choice(pieces))
        (folder / "graph.nnef").write_text("".join(chars))
        try:
            nnef.to_onnx(folder)
        except NNBuildError as exc:
            assert "\n" not in str(exc)


@pytest.mark.e2e
def test_scons_builds_an_nnef_folder_and_rebuilds_on_a_changed_tensor(tmp_path):
    """model= may name a *.nnef folder: SCons reads its graph.nnef, the scanner adds every .dat, so an
    edited weight tensor regenerates the C and nothing else is rebuilt twice."""
    import shutil
    from conftest import copy_project, scons
    (tmp_path / "p").mkdir()
    project = copy_project(tmp_path / "p")
    folder = tmp_path / "lenet.nnef"
    shutil.copytree(shared_file("data", "nnef", "lenet5.nnef"), folder)
    first = scons(project, "target=host", f"model={folder}")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "max error" in first.stdout and (project / "build/host/lenet/gen/lenet.c").is_file()
    again = scons(project, "target=host", f"model={folder}")
    assert "Generating C" not in again.stdout and "Compiling" not in again.stdout, again.stdout
    dat = sorted(folder.rglob("*.dat"))[-1]
    data = bytearray(dat.read_bytes())
    data[-4:] = np.float32(0.125).tobytes()  # one weight changed, header untouched
    dat.write_bytes(bytes(data))
    changed = scons(project, "target=host", f"model={folder}")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "Generating C" in changed.stdout


# ------------------------------------------------------------- pad, slice, tile, reduce, resample, LRN

def _lrn(x, n, alpha, beta, bias):
    """NNEF local_response_normalization: bias + alpha * box(sqr(x), [1, n, 1, 1], normalize) with
    'same' padding (floor((n - 1) / 2) before), then x / sigma ^ beta."""
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), ((n - 1) // 2, n // 2), (0, 0), (0, 0)))
    box = np.stack([sq[:, c:c + n].sum(axis=1) for c in range(x.shape[1])], axis=1) / n
    return x / (bias + alpha * box) ** beta


def _linear_up(x, f, method):
    """multilinear_upsample along the last two axes, one axis at a time (border replicate)."""
    for axis in (2, 3):
        n = x.shape[axis]
        o = np.arange(n * f)
        src = {"symmetric": (o + 0.5) / f - 0.5, "asymmetric": o / f,
               "aligned": o * (n - 1) / max(n * f - 1, 1)}[method]
        src = np.clip(src, 0, n - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (src - lo).reshape([-1 if a == axis else 1 for a in range(4)])
        x = np.take(x, lo, axis=axis) * (1 - w) + np.take(x, hi, axis=axis) * w
    return x


NEW_OPS = [
    ("pad(x, padding = [(0, 0), (0, 0), (1, 2), (2, 0)], value = 1.5)",
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 0)), constant_values=1.5)),
    ("pad(x, padding = [(0, 0), (1, 0), (2, 1), (0, 3)], border = 'replicate')",
     lambda x: np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 3)), mode="edge")),
    ("pad(x, padding = [(0, 0), (0, 0), (3, 1), (1, 2)], border = 'reflect')",
     lambda x: np.pad(x, ((0, 0), (0, 0), (3, 1), (1, 2)), mode="reflect")),
    ("slice(x, axes = [2, 3], begin = [1, -4], end = [0, -1])", lambda x: x[:, :, 1:, -4:-1]),
    ("slice(x, axes = [1, 3], begin = [1, 0], end = [3, 5], stride = [1, 2])", lambda x: x[:, 1:3, :, 0:5:2]),
    ("tile(x, repeats = [1, 2, 1, 3])", lambda x: np.tile(x, (1, 2, 1, 3))),
    ("sum_reduce(x, axes = [2, 3])", lambda x: x.sum(axis=(2, 3), keepdims=True)),
    ("sum_reduce(x, axes = [1], normalize = true)", lambda x: x.mean(axis=1, keepdims=True)),
    ("mean_reduce(x, axes = [3])", lambda x: x.mean(axis=3, keepdims=True)),
    ("max_reduce(x, axes = [1, 2])", lambda x: x.max(axis=(1, 2), keepdims=True)),
    ("min_reduce(x, axes = [2])", lambda x: x.min(axis=2, keepdims=True)),
    ("nearest_upsample(x, factor = [2, 3])", lambda x: x.repeat(2, axis=2).repeat(3, axis=3)),
    ("multilinear_upsample(x, factor = [2, 2])", lambda x: _linear_up(x, 2, "symmetric")),
    ("multilinear_upsample(x, factor = [3, 3], method = 'asymmetric')", lambda x: _linear_up(x, 3, "asymmetric")),
    ("multilinear_upsample(x, factor = [2, 2], method = 'aligned')", lambda x: _linear_up(x, 2, "aligned")),
    ("local_response_normalization(x, size = [1, 3, 1, 1], alpha = 0.5, beta = 0.75, bias = 2.0)",
     lambda x: _lrn(x, 3, 0.5, 0.75, 2.0)),
    ("local_response_normalization(x, size = [1, 4, 1, 1])", lambda x: _lrn(x, 4, 1.0, 0.5, 1.0)),
    ("softplus(x)", lambda x: np.log1p(np.exp(x))),
]


@pytest.mark.parametrize("op, fn", NEW_OPS, ids=[op.split("(")[0] + str(i) for i, (op, _) in enumerate(NEW_OPS)])
def test_tensor_ops_match_the_nnef_definitions(tmp_path, op, fn):
    """Translated graph (onnxruntime) and the IR reference both equal numpy written from NNEF's stdlib."""
    from nnbuild.ir import reference
    folder = write_model(tmp_path / "t.nnef",
                         f"version 1.0; graph t(x) -> (y) {{ x = external(shape = [1, 5, 5, 7]); y = {op}; }}")
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((1, 5, 5, 7)).astype(np.float32)
        want = fn(x.astype(np.float64))
        if "size = [1, 4," not in op:  # onnxruntime's LRN takes odd sizes only (ONNX allows even ones)
            got = run(nnef.to_onnx(folder), x)
            assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5 * max(1, np.abs(want).max())
        y = np.asarray(reference.run(frontends.load(folder), x[0])).reshape(want.shape)
        assert np.abs(y - want).max() <= 1e-5 * max(1, np.abs(want).max())


@pytest.mark.e2e
def test_tensor_ops_generated_c_matches_the_nnef_definitions(tmp_path):
    """One NNEF graph chaining every new op, through the v2 C on the host."""
    from test_frontend_onnx import build_and_run
    folder = write_model(tmp_path / "chain.nnef", """version 1.0;
graph chain(x) -> (y)
{
    x = external(shape = [1, 3, 4, 5]);
    p = pad(x, padding = [(0, 0), (0, 0), (1, 1), (2, 1)], border = 'reflect');
    l = local_response_normalization(p, size = [1, 3, 1, 1], alpha = 0.2, beta = 0.75, bias = 1.5);
    u = multilinear_upsample(l, factor = [2, 2]);
    n = nearest_upsample(u, factor = [1, 2]);
    s = slice(n, axes = [2, 3], begin = [1, -9], end = [-1, 0], stride = [2, 3]);
    t = tile(s, repeats = [1, 1, 2, 1]);
    m = max_reduce(t, axes = [1]);
    y = add(sum_reduce(t, axes = [3], normalize = true), m);
}
""")
    with pytest.raises(NNBuildError, match="syntax error"):  # nested invocation: NNEF's flat form only
        nnef.to_onnx(folder)
    text = (folder / "graph.nnef").read_text().replace(
        "    y = add(sum_reduce(t, axes = [3], normalize = true), m);",
        "    r = sum_reduce(t, axes = [3], normalize = true);\n    y = add(r, m);")
    (folder / "graph.nnef").write_text(text)
    model = frontends.load(folder)
    x = np.random.default_rng(2).standard_normal((6, 1, 3, 4, 5)).astype(np.float32)
    proto = nnef.to_onnx(folder)
    want = np.stack([run(proto, xi) for xi in x]).reshape(len(x), -1)
    y = build_and_run(tmp_path, model, x)
    assert np.abs(y - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))
