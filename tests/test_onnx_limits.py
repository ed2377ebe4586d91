"""Hostile ONNX files (issue 23): bounded cost before any allocation, every attribute validated,
non-finite pad values and literals. Each case is a file of a few bytes to a few KB that used to cost
gigabytes or minutes, or to generate C that does not compile; each is now refused in one line naming
the file, the node and the limit (nnbuild.limits), or generated correctly."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnbuild import frontends, limits, passes
from nnbuild.codegen.common import float_literal
from nnbuild.errors import NNBuildError
from nnbuild.ir import graph as g
from nnbuild.ir import rewrite


def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(tmp_path, name, nodes, inits=(), in_shape=(1, 4), out_shape=None, opset=13):
    graph = helper.make_graph(nodes, name, [value("x", list(in_shape))], [value("y", out_shape)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def refused(path):
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


# --------------------------------------------------------------------------- bounded cost


def test_unused_constant_bombs_are_never_evaluated(tmp_path):
    """64 unused ConstantOfShape of 2^24 elements each (3 KB; 4.2 GB before): dropped unread."""
    nodes = [helper.make_node("ConstantOfShape", [f"s{k}"], [f"c{k}"], name=f"cos{k}") for k in range(64)]
    path = save(tmp_path, "cos64", nodes + [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                [ints(f"s{k}", [1 << 24]) for k in range(64)])
    assert path.stat().st_size < 4096
    model = frontends.load(path)
    assert model.meta["unused_nodes_dropped"] == 64
    assert [layer.kind for layer in model.layers] == ["activation"]


def test_a_used_constant_bomb_is_refused_before_folding(tmp_path):
    path = save(tmp_path, "cos", [helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"),
                                  helper.make_node("Add", ["x", "c"], ["y"], name="add")], [ints("s", [1, 1 << 24])])
    message = refused(path)
    assert "node 'cos' (ConstantOfShape): constant folding would make 16777216 elements" in message
    assert f"(limit MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS})" in message


def test_the_constants_total_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_TOTAL_CONSTANT_ELEMENTS", 10)
    nodes = [helper.make_node("Add", ["x", "a"], ["t"], name="add1"),
             helper.make_node("Add", ["t", "b"], ["u"], name="add2"),
             helper.make_node("Add", ["u", "c"], ["y"], name="add3")]
    path = save(tmp_path, "total", nodes, [numpy_helper.from_array(np.ones(4, np.float32), k) for k in "abc"])
    message = refused(path)
    assert "initializer 'c' brings the constants to 12 elements (limit MAX_TOTAL_CONSTANT_ELEMENTS = 10)" in message


def test_a_tile_bomb_is_refused_before_any_allocation(tmp_path):
    """Tile repeats [1, 4M] in 89 bytes (1.5 GB, a 54 MB weights file, then an out-of-memory check)."""
    path = save(tmp_path, "tile", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")], [ints("r", [1, 1 << 22])])
    assert path.stat().st_size < 100
    message = refused(path)
    assert "node 'tile' (Tile): output shape (16777216,) has 16777216 elements" in message
    assert "limit MAX_TENSOR_ELEMENTS" in message


def test_the_computed_tensors_total_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_TOTAL_TENSOR_ELEMENTS", 10)
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="r1"), helper.make_node("Relu", ["t"], ["u"], name="r2"),
             helper.make_node("Relu", ["u"], ["y"], name="r3")]
    assert "node 'r3' (Relu): the computed tensors reach 12 elements (limit MAX_TOTAL_TENSOR_ELEMENTS = 10)" in \
        refused(save(tmp_path, "acts", nodes))


def test_an_initializer_declaring_a_billion_elements_is_refused_unread(tmp_path):
    big = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 15, 1 << 15], raw_data=b"\0" * 16)
    path = save(tmp_path, "declared", [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [big])
    assert "initializer 'w' would make 1073741824 elements (limit MAX_TENSOR_ELEMENTS" in refused(path)


def test_an_initializer_whose_data_disagrees_with_its_dims_is_one_line(tmp_path):
    bad = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\0" * 5)
    path = save(tmp_path, "short", [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [bad])
    assert "initializer 'w' cannot be read" in refused(path)


def test_external_data_outside_the_model_folder_is_not_read(tmp_path):
    ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    ext.external_data.add(key="location", value="/etc/passwd")
    path = save(tmp_path, "external", [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [ext])
    assert ("initializer 'w': external data location '/etc/passwd' is not a plain relative name inside the "
            "model's folder") in refused(path)


def test_external_data_declaring_a_huge_tensor_is_refused_before_reading(tmp_path):
    ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 15, 1 << 15],
                      data_location=TensorProto.EXTERNAL)
    ext.external_data.add(key="location", value="w.bin")
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    path = save(tmp_path, "external_huge", [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [ext])
    assert "initializer 'w' would make 1073741824 elements (limit MAX_TENSOR_ELEMENTS" in refused(path)


def test_the_model_file_size_is_capped_before_parsing(tmp_path, monkeypatch):
    path = save(tmp_path, "big", [helper.make_node("Relu", ["x"], ["y"], name="relu")])
    monkeypatch.setattr(limits, "MAX_MODEL_FILE_BYTES", 16)
    assert f"model file of {path.stat().st_size} bytes (limit MAX_MODEL_FILE_BYTES = 16)" in refused(path)


def test_an_input_sample_beyond_the_tensor_limit_is_refused(tmp_path):
    path = save(tmp_path, "wide", [helper.make_node("Relu", ["x"], ["y"], name="relu")], in_shape=(1, 1 << 23))
    assert "has more than 4194304 elements (limit MAX_TENSOR_ELEMENTS)" in refused(path)


@pytest.mark.parametrize("scales, sizes, expected", [
    ([1.0, 1.0, float("inf"), 1.0], None, "scales [1.0, 1.0, inf, 1.0] must be finite and > 0"),
    ([1.0, 1.0, float("nan"), 1.0], None, "scales [1.0, 1.0, nan, 1.0] must be finite and > 0"),
    (None, [1, 2, 1 << 20, 1 << 20], "output shape (2, 1048576, 1048576) has 2199023255552 elements (limit"),
    (None, [1, 2, 0, 4], "sizes [1, 2, 0, 4] must be >= 1"),
])
def test_resize_scales_and_sizes_are_bounded(tmp_path, scales, sizes, expected):
    inits = [numpy_helper.from_array(np.array(scales if scales else [], np.float32), "scales")]
    names = ["x", "", "scales"]
    if sizes:
        inits.append(ints("sizes", sizes))
        names = ["x", "", "", "sizes"]
    path = save(tmp_path, "resize", [helper.make_node("Resize", names, ["y"], name="rs")], inits, in_shape=(1, 2, 4, 4))
    assert "node 'rs' (Resize): " + expected in refused(path)


def test_a_chain_beyond_the_node_limit_is_refused_before_inference(tmp_path):
    """20,000 Relu (more than 300 s before): refused on the node count, before anything else."""
    nodes = [helper.make_node("Relu", [f"t{k}" if k else "x"], [f"t{k + 1}" if k < 19999 else "y"], name=f"r{k}")
             for k in range(20000)]
    assert f"20000 nodes (limit MAX_NODES = {limits.MAX_NODES})" in refused(save(tmp_path, "chain", nodes))


# --------------------------------------------------------------------------- linear passes


def dag():
    """input -> d1 -> a1 ; d1 -> d2 -> a2 ; add(a1, a2) -> a3: a producer with two readers."""
    kernel = np.ones((4, 4), np.float32)
    layers = [g.Dense("d1", kernel, None), g.Activation("a1", "relu"), g.Dense("d2", kernel, None),
              g.Activation("a2", "relu"), g.Elementwise("s", "add", ()), g.Activation("a3", "tanh")]
    edges = {"d1": ("input",), "a1": ("d1",), "d2": ("d1",), "a2": ("d2",), "s": ("a1", "a2"), "a3": ("s",)}
    return g.Model("dag", (4,), layers, edges=edges)


def test_the_index_answers_as_the_per_call_lookups():
    model = dag()
    index = rewrite.Index(model)
    for i in range(len(model.layers)):
        assert index.source(i) == rewrite.source_index(model, i)
        for j in range(len(model.layers)):
            assert index.only_reader(i, j) == rewrite.only_reader(model, i, j)
    assert [index.source(i) for i in range(6)] == [None, 0, 0, 2, None, 4]
    assert not index.only_reader(0, 1) and index.only_reader(2, 3)


def test_the_passes_fuse_a_long_chain_as_a_short_one():
    layers = [g.Dense("d", np.ones((4, 4), np.float32), None)] + [g.Activation(f"r{k}", "relu") for k in range(5000)]
    model, log = passes.run(g.Model("chain", (4,), layers))
    assert model.layers[0].activation == "relu" and len(model.layers) == 5000
    assert log[0].startswith("fuse_activation: Activation 'r0' (relu) fused into")


def test_the_passes_refuse_more_layers_than_the_limit(monkeypatch):
    monkeypatch.setattr(limits, "MAX_LAYERS", 3)
    layers = [g.Activation(f"r{k}", "relu") for k in range(4)]
    with pytest.raises(NNBuildError, match=r"m.onnx: 4 layers \(limit MAX_LAYERS = 3\)"):
        passes.run(g.Model("chain", (4,), layers, source_files=("m.onnx",)))


# --------------------------------------------------------------------------- attributes


W = numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")
CONV_IN = (1, 2, 5, 5)


@pytest.mark.parametrize("op, attrs, inputs, inits, expected", [
    ("Conv", {"auto_pad": "EVIL"}, ["x", "w"], [W], "attribute auto_pad 'EVIL' is not one of NOTSET, SAME_UPPER"),
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "same_upper"}, ["x"], [], "auto_pad 'same_upper' is not one"),
    ("AveragePool", {"kernel_shape": [2, 2], "count_include_pad": 2}, ["x"], [], "count_include_pad 2 is not 0 or 1"),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 1]}, ["x"], [], "strides [0, 1] has a value < 1"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}, ["x"], [], "pads [-1, 0, 0, 0] has a negative"),
    ("Conv", {"group": 0}, ["x", "w"], [W], "group [0] has a value < 1"),
    ("Conv", {"group": 3}, ["x", "w"], [W], "group 3 does not divide the 2 output channels"),
    ("Conv", {"kernel_shape": [2, 2]}, ["x", "w"], [W], "kernel_shape [2, 2] but weights of shape (2, 2, 3, 3)"),
    ("Conv", {"dilations": [1, -1]}, ["x", "w"], [W], "dilations [1, -1] has a value < 1"),
    ("LeakyRelu", {"alpha": float("inf")}, ["x"], [], "attribute alpha is inf (a finite number is required)"),
    ("Elu", {"alpha": float("-inf")}, ["x"], [], "attribute alpha is -inf"),
    ("Selu", {"gamma": float("nan")}, ["x"], [], "attribute gamma is nan"),
    ("HardSigmoid", {"beta": float("inf")}, ["x"], [], "attribute beta is inf"),
    ("LRN", {"size": 3, "bias": float("inf")}, ["x"], [], "attribute bias is inf"),
    ("LRN", {"size": 0}, ["x"], [], "size [0] has a value < 1"),
    ("ReduceMax", {"keepdims": 7}, ["x"], [], "keepdims 7 is not 0 or 1"),
    ("Pad", {"mode": "mirror"}, ["x", "p"], [ints("p", [0, 0, 1, 1, 0, 0, 1, 1])],
     "attribute mode 'mirror' is not one of constant, reflect, edge, wrap"),
    ("Pad", {}, ["x", "p"], [ints("p", [0, 0, -1, 0, 0, 0, 0, 0])], "negative pads"),
    ("Pad", {}, ["x", "p", "v"], [ints("p", [0, 0, 1, 1, 0, 0, 1, 1]),
                                  numpy_helper.from_array(np.array(np.nan, np.float32), "v")], "a NaN pad value"),
    ("Clip", {}, ["x", "lo"], [numpy_helper.from_array(np.array(np.inf, np.float32), "lo")], "clip parameter is infinite"),
    ("Conv", {"pads": [1, 1]}, ["x", "w"], [W], "2 pads for 2 spatial axes"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [1] * 6}, ["x"], [], "6 pads for 2 spatial axes"),
    ("Conv", {"strides": [1 << 62, 1]}, ["x", "w"], [W],
     "strides [4611686018427387904, 1] has a value beyond 4194304 (limit MAX_TENSOR_ELEMENTS)"),
    ("Unsqueeze", {}, ["x", "a"], [ints("a", [100])], "axes [100] out of range for a rank-5 output"),
    ("Dropout", {}, ["x", "r", "t"], [numpy_helper.from_array(np.array(0.5, np.float32), "r"),
                                      numpy_helper.from_array(np.array(True), "t")], "training_mode"),
])
def test_attributes_are_validated(tmp_path, op, attrs, inputs, inits, expected):
    path = save(tmp_path, "attr", [helper.make_node(op, inputs, ["y"], name="n", **attrs)], inits, in_shape=CONV_IN)
    message = refused(path)
    assert f"node 'n' ({op}): " in message and expected in message, message


@pytest.mark.parametrize("attrs, expected", [
    ({"mode": "evil"}, "attribute mode 'evil' is not one of nearest, linear, cubic"),
    ({"coordinate_transformation_mode": "evil */"}, "coordinate_transformation_mode 'evil */' is not one of"),
    ({"nearest_mode": "up"}, "nearest_mode 'up' is not one of round_prefer_floor"),
    ({"cubic_coeff_a": float("-inf")}, "attribute cubic_coeff_a is -inf"),
    ({"exclude_outside": 3}, "exclude_outside 3 is not 0 or 1"),
])
def test_resize_attributes_are_validated(tmp_path, attrs, expected):
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")]
    path = save(tmp_path, "rs", [helper.make_node("Resize", ["x", "", "s"], ["y"], name="n", **attrs)], inits,
                in_shape=CONV_IN)
    assert expected in refused(path)


def test_batch_normalization_training_mode_is_refused(tmp_path):
    inits = [numpy_helper.from_array(np.ones(2, np.float32), k) for k in ("g", "b", "m", "v")]
    path = save(tmp_path, "bn", [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="n",
                                                  training_mode=1)], inits, in_shape=CONV_IN, opset=15)
    assert "attribute training_mode=1 (nnbuild implements training_mode=0 only)" in refused(path)


def test_open_clip_bounds_and_infinite_pads_are_accepted(tmp_path):
    """-inf pads before a max pooling (PyTorch's export) load; so do Clip's own open bounds."""
    inits = [ints("p", [0, 0, 1, 1, 0, 0, 1, 1]), numpy_helper.from_array(np.array(-np.inf, np.float32), "v")]
    nodes = [helper.make_node("Pad", ["x", "p", "v"], ["t"], name="pad"),
             helper.make_node("MaxPool", ["t"], ["u"], name="pool", kernel_shape=[2, 2]),
             helper.make_node("Clip", ["u", "v"], ["y"], name="clip")]
    model = frontends.load(save(tmp_path, "pads", nodes, inits, in_shape=CONV_IN))
    pad = next(layer for layer in model.layers if layer.kind == "pad")
    assert pad.value == -math.inf


# --------------------------------------------------------------------------- float literals


@pytest.mark.parametrize("number, suffix, text", [
    (1.0, "f", "1.0f"), (0.1, "", "0.1"), (-0.0, "f", "-0.0f"), (1.40129846e-45, "f", "1.40129846e-45f"),
    (float("-inf"), "f", "(-INFINITY)"), (float("inf"), "", "INFINITY"), (float("nan"), "f", "NAN"),
    (1e-49, "f", "0.0f"), (-1e-49, "f", "-0.0f"), (1e-49, "", "1e-49"), (1e39, "f", "INFINITY"),
])
def test_float_literals_are_valid_c_for_every_value(number, suffix, text):
    assert float_literal(number, suffix) == text


@pytest.mark.e2e
@pytest.mark.parametrize("shape", ["v1", "v2", "v3"])
@pytest.mark.parametrize("fill", [-math.inf, math.inf])
def test_infinite_pads_before_max_pooling_check_bit_exact(tmp_path, run_cli, shape, fill):
    """PyTorch's -inf pad before a max pooling (and +inf): the C compiles (-Werror) and equals
    onnx's own reference evaluator exactly on the host."""
    from onnx.reference import ReferenceEvaluator
    inits = [ints("p", [0, 0, 1, 1, 0, 0, 1, 1]), numpy_helper.from_array(np.array(fill, np.float32), "v")]
    nodes = [helper.make_node("Pad", ["x", "p", "v"], ["t"], name="pad"),
             helper.make_node("MaxPool", ["t"], ["y"], name="pool", kernel_shape=[2, 2])]
    path = save(tmp_path, "padpool", nodes, inits, in_shape=(1, 2, 4, 4))
    evaluator = ReferenceEvaluator(str(path))
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 2, 4, 4)).astype(np.float32)
    y = np.stack([evaluator.run(None, {"x": sample})[0] for sample in x])
    assert np.isinf(y).any() == (fill > 0)
    np.savez(tmp_path / "data.npz", x=x.reshape(4, -1), y=y.reshape(4, -1))
    result = run_cli("check", str(path), "--data", str(tmp_path / "data.npz"), "--shape", shape, "--tolerance", "0",
                     "--build-dir", str(tmp_path / "build"))
    assert result.returncode == 0, result.stderr
    assert "max |C - y| = 0, max |C - reference| = 0" in result.stdout
