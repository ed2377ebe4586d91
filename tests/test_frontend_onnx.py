"""ONNX front-end (issue 12): per operator, models made with onnx.helper over seeds, opsets and
awkward settings, loaded by nnbuild and compared with onnxruntime (never with our own numpy alone):
the reference executor on every case, the generated v2 C on the host for a selection; the real
LeNet-5 from ../shared; refusals in one line naming the node and its op."""

import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import shared_file
from nnbuild import codegen, frontends
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

ort = pytest.importorskip("onnxruntime")
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]


def f32(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def make(tmp_path, name, nodes, in_shape, out_shape, inits=(), opset=13):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def onnxruntime_run(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])


def node(op, inputs, **attrs):
    return helper.make_node(op, inputs, ["y"], name=f"{op}_node", **attrs)


def cases(rng):
    """(name, nodes, input shape, initializers, opset, positive inputs)"""
    c = []
    for opset in (9, 13):
        c.append((f"conv_pads_stride_o{opset}", [node("Conv", ["x", "w", "b"], pads=[1, 0, 2, 1], strides=[2, 1])],
                  [1, 3, 7, 6], [("w", f32(rng, 4, 3, 3, 2)), ("b", f32(rng, 4))], opset, False))
    c += [
        ("conv_groups_dilation", [node("Conv", ["x", "w"], group=2, dilations=[2, 1], pads=[1, 1, 1, 1])],
         [1, 4, 7, 6], [("w", f32(rng, 6, 2, 3, 3))], 11, False),
        ("conv_depthwise_same", [node("Conv", ["x", "w", "b"], group=3, auto_pad="SAME_UPPER", strides=[2, 2])],
         [1, 3, 8, 7], [("w", f32(rng, 3, 1, 3, 3)), ("b", f32(rng, 3))], 13, False),
        ("conv1d", [node("Conv", ["x", "w", "b"], pads=[2, 1], strides=[2])], [1, 3, 11],
         [("w", f32(rng, 5, 3, 4)), ("b", f32(rng, 5))], 13, False),
        ("maxpool_pads", [node("MaxPool", ["x"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])],
         [1, 3, 7, 6], [], 12, False),
        ("avgpool_exclude_pad", [node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
         [1, 2, 7, 7], [], 11, False),
        ("global_avg", [node("GlobalAveragePool", ["x"])], [1, 3, 5, 4], [], 13, False),
        ("global_max", [node("GlobalMaxPool", ["x"])], [1, 3, 5, 4], [], 13, False),
        ("batchnorm", [node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], [1, 3, 4, 5],
         [("s", f32(rng, 3)), ("b", f32(rng, 3)), ("m", f32(rng, 3)), ("v", np.abs(f32(rng, 3)) + 0.5)], 15, False),
        ("gemm_transb_alpha", [node("Gemm", ["x", "w", "c"], transB=1, alpha=0.5, beta=2.0)], [1, 7],
         [("w", f32(rng, 5, 7)), ("c", f32(rng, 5))], 13, False),
        ("matmul_3d", [node("MatMul", ["x", "w"])], [1, 3, 6], [("w", f32(rng, 6, 4))], 13, False),
        ("add_broadcast", [node("Add", ["x", "c"])], [1, 3, 4, 5], [("c", f32(rng, 3, 1, 5))], 14, False),
        ("sub_const_first", [node("Sub", ["c", "x"])], [1, 3, 4], [("c", f32(rng, 4))], 13, False),
        ("div_scalar", [node("Div", ["x", "c"])], [1, 2, 3], [("c", np.array(1.7, np.float32))], 13, False),
        ("max3", [node("Max", ["x", "c", "d"])], [1, 2, 3], [("c", f32(rng, 3)), ("d", f32(rng, 2, 1))], 13, False),
        ("mean2", [node("Mean", ["x", "c"])], [1, 2, 3], [("c", f32(rng, 1, 2, 3))], 13, False),
        ("transpose", [node("Transpose", ["x"], perm=[0, 3, 1, 2])], [1, 3, 4, 5], [], 13, False),
        ("pad_reflect_o18", [node("Pad", ["x", "p"], mode="reflect")], [1, 3, 4, 5],
         [("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], 18, False),
        ("pad_edge_o11", [node("Pad", ["x", "p"], mode="edge")], [1, 3, 4],
         [("p", np.array([0, 2, 1, 0, 1, 3], np.int64))], 11, False),
        ("pad_wrap_o19", [node("Pad", ["x", "p"], mode="wrap")], [1, 3, 4],
         [("p", np.array([0, 1, 2, 0, 2, 1], np.int64))], 19, False),
        ("pad_constant_o7", [node("Pad", ["x"], pads=[0, 1, 1, 0, 0, 2], value=1.5)], [1, 3, 4], [], 7, False),
        ("gather_vector", [node("Gather", ["x", "i"], axis=2)], [1, 3, 5], [("i", np.array([4, 0, -1, 2], np.int64))],
         13, False),
        ("gather_matrix", [node("Gather", ["x", "i"], axis=1)], [1, 4, 3], [("i", np.array([[0, 3], [2, 2]], np.int64))],
         13, False),
        ("gather_elements", [node("GatherElements", ["x", "i"], axis=2)], [1, 3, 4],
         [("i", rng.integers(-4, 4, size=(1, 3, 2)).astype(np.int64))], 13, False),
        ("tile", [node("Tile", ["x", "r"])], [1, 2, 3], [("r", np.array([1, 2, 3], np.int64))], 13, False),
        ("slice_negative_step", [node("Slice", ["x", "s", "e", "a", "t"])], [1, 4, 7],
         [("s", np.array([-1, 1], np.int64)), ("e", np.array([-100, 7], np.int64)), ("a", np.array([2, 1], np.int64)),
          ("t", np.array([-2, 2], np.int64))], 13, False),
        ("reduce_mean_o13", [node("ReduceMean", ["x"], axes=[1, 3], keepdims=0)], [1, 3, 4, 5], [], 13, False),
        ("reduce_sum_o13", [node("ReduceSum", ["x", "a"], keepdims=1)], [1, 3, 4], [("a", np.array([-1], np.int64))],
         13, False),
        ("reduce_max_o18", [node("ReduceMax", ["x", "a"], keepdims=0)], [1, 3, 4], [("a", np.array([1], np.int64))],
         18, False),
        ("reduce_prod", [node("ReduceProd", ["x"], axes=[2])], [1, 3, 4], [], 13, False),
        ("reduce_min", [node("ReduceMin", ["x"], axes=[1])], [1, 3, 4], [], 13, False),
        ("softmax_o13_middle", [node("Softmax", ["x"], axis=1)], [1, 3, 4], [], 13, False),
        ("softmax_o11_coerce", [node("Softmax", ["x"], axis=1)], [1, 3, 4], [], 11, False),
        ("resize_linear_scales", [node("Resize", ["x", "", "s"], mode="linear")], [1, 2, 4, 5],
         [("s", np.array([1, 1, 1.5, 0.8], np.float32))], 13, False),
        ("resize_cubic_sizes", [node("Resize", ["x", "", "", "z"], mode="cubic",
                                     coordinate_transformation_mode="align_corners")], [1, 2, 4, 5],
         [("z", np.array([1, 2, 7, 3], np.int64))], 13, False),
        ("resize_nearest_ceil", [node("Resize", ["x", "", "s"], mode="nearest", nearest_mode="ceil",
                                      coordinate_transformation_mode="asymmetric")], [1, 2, 3, 4],
         [("s", np.array([1, 1, 2.5, 1.5], np.float32))], 13, False),
        ("lrn", [node("LRN", ["x"], size=3, alpha=0.02, beta=0.7, bias=1.5)], [1, 5, 3, 2], [], 13, False),
        ("clip_o13", [node("Clip", ["x", "lo", "hi"])], [1, 8], [("lo", np.array(-0.5, np.float32)),
                                                                ("hi", np.array(0.7, np.float32))], 13, False),
        ("clip_o6", [node("Clip", ["x"], min=-0.2)], [1, 8], [], 6, False),
    ]
    for op, attrs in (("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
                      ("Elu", {"alpha": 0.5}), ("Selu", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                      ("Softplus", {}), ("Softsign", {}), ("Exp", {}), ("Abs", {}), ("Neg", {})):
        c.append((op.lower(), [node(op, ["x"], **attrs)], [1, 2, 5], [], 13, False))
    for op in ("Log", "Sqrt", "Reciprocal"):
        c.append((op.lower(), [node(op, ["x"])], [1, 2, 5], [], 13, True))
    c.append(("flatten_squeeze_unsqueeze", [
        helper.make_node("Flatten", ["x"], ["f"], axis=2, name="flat"),
        helper.make_node("Unsqueeze", ["f", "ax"], ["u"], name="unsq"),
        helper.make_node("Squeeze", ["u", "ax"], ["s"], name="sq"),
        helper.make_node("Tanh", ["s"], ["y"], name="tanh")], [1, 1, 4, 2], [("ax", np.array([2], np.int64))],
        13, False))
    c.append(("shape_chain_reshape", [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="batch"),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["t"], axis=0, name="target"),
        helper.make_node("Reshape", ["x", "t"], ["r"], name="view"),
        helper.make_node("Relu", ["r"], ["y"], name="relu")], [1, 3, 2, 2],
        [("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)), ("minus1", np.array([-1], np.int64))],
        13, False))
    c.append(("concat_dag", [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["x"], ["b"], name="neg"),
        helper.make_node("Concat", ["a", "b"], ["y"], axis=-1, name="cat")], [1, 2, 3], [], 13, False))
    return c


CASES = cases(np.random.default_rng(2026))
C_CASES = ("conv_pads_stride_o13", "conv_groups_dilation", "conv1d", "avgpool_exclude_pad", "batchnorm",
           "gemm_transb_alpha", "add_broadcast", "pad_reflect_o18", "gather_matrix", "slice_negative_step",
           "reduce_mean_o13", "softmax_o11_coerce", "resize_cubic_sizes", "lrn", "shape_chain_reshape", "concat_dag")


def inputs_for(shape, positive, seed):
    x = np.random.default_rng(seed).normal(size=(3,) + tuple(shape[1:])).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def output_shape(nodes, in_shape, inits, opset, tmp_path):
    path = make(tmp_path, "probe", nodes, in_shape, None, inits, opset)
    x = np.zeros(in_shape, np.float32) + 0.5
    return list(onnxruntime_run(path, x).shape)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.e2e)])
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_reference_matches_onnxruntime(tmp_path, case, seed):
    name, nodes, in_shape, inits, opset, positive = next(c for c in CASES if c[0] == case)
    path = make(tmp_path, name, nodes, in_shape, output_shape(nodes, in_shape, inits, opset, tmp_path), inits, opset)
    model = frontends.load(path)
    x = inputs_for(in_shape, positive, seed)
    want = onnxruntime_run(path, x).reshape(len(x), -1)
    for dtype in (np.float32, np.float64):
        got = reference.run(model, x.reshape((len(x),) + tuple(model.input_shape)).astype(dtype)).reshape(len(x), -1)
        assert np.max(np.abs(got - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), (case, dtype)


def build_and_run(tmp_path, model, x):
    out = tmp_path / "gen"
    codegen.generate(model, out, shape="v2", storage="const", passes_log=[])
    exe = out / "check"
    subprocess.run(["gcc", "-O2", *WARNINGS, f"-I{out}",
                    *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size),
                    str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN), "-o",
                    str(exe), "-lm"], check=True, capture_output=True, text=True)
    return native.run_cases(exe, x.reshape(len(x), -1), model.output_size)


@pytest.mark.e2e
@pytest.mark.parametrize("case", C_CASES)
def test_generated_c_matches_onnxruntime(tmp_path, case):
    name, nodes, in_shape, inits, opset, positive = next(c for c in CASES if c[0] == case)
    path = make(tmp_path, name, nodes, in_shape, output_shape(nodes, in_shape, inits, opset, tmp_path), inits, opset)
    model = frontends.load(path)
    x = inputs_for(in_shape, positive, 7)
    want = onnxruntime_run(path, x).reshape(len(x), -1)
    y = build_and_run(tmp_path, model, x)
    assert np.max(np.abs(y - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), case


def test_lenet5_onnx_matches_onnxruntime_and_folds_its_layout(tmp_path):
    path = shared_file("data", "nnef", "lenet5.onnx")
    model = frontends.load(path)
    kinds = [layer.kind for layer in model.layers]
    assert kinds.count("transpose") == 1, kinds     # only the input's NCHW -> channels-last remains
    x = np.random.default_rng(3).normal(size=(4, 1, 32, 32)).astype(np.float32)
    want = onnxruntime_run(path, x).reshape(4, -1)
    got = reference.run(model, x.reshape((4,) + model.input_shape)).reshape(4, -1)
    assert np.max(np.abs(got - want)) <= 1e-6
    y = build_and_run(tmp_path, model, x)
    assert np.max(np.abs(y - want)) <= 1e-6


@pytest.mark.parametrize("nodes, inits, what", [
    ([node("ConvTranspose", ["x", "w"])], [("w", np.zeros((3, 2, 2, 2), np.float32))], "(ConvTranspose): operator"),
    ([node("MatMul", ["x", "x"])], [], "(MatMul): a product of two computed tensors"),
    ([node("Softmax", ["x"], axis=0)], [], "(Softmax): softmax over the batch axis"),
])
def test_refusals_name_the_node_and_op_in_one_line(tmp_path, nodes, inits, what):
    path = make(tmp_path, "bad", nodes, [1, 3, 4, 4], None, inits, 13)
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and what in message and "bad.onnx" in message and "_node'" in message


def test_garbage_and_two_inputs_are_refused(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(NNBuildError, match="junk.onnx"):
        frontends.load(junk)
    graph = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "two",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3]) for n in "xz"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    path = tmp_path / "two.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    with pytest.raises(NNBuildError, match="2 inputs"):
        frontends.load(path)
