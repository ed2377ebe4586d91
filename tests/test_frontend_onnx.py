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
    c += more_cases(rng)
    c += [after_conv(case, rng) for case in c if len(case[2]) in (3, 4) and not case[5] and case[0] in AFTER_CONV]
    return c


def more_cases(rng):
    """Opset forms and awkward settings beyond the first list (same tuple layout)."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    fl = lambda *v: np.array(v, np.float32)  # noqa: E731
    return [
        ("conv_same_lower_o7", [node("Conv", ["x", "w"], auto_pad="SAME_LOWER", strides=[2, 2])], [1, 2, 6, 5],
         [("w", f32(rng, 3, 2, 2, 3))], 7, False),
        ("conv1d_depthwise_dilated_o11", [node("Conv", ["x", "w", "b"], group=4, dilations=[2], pads=[1, 1])],
         [1, 4, 9], [("w", f32(rng, 4, 1, 3)), ("b", f32(rng, 4))], 11, False),
        ("conv_valid_o21", [node("Conv", ["x", "w"], auto_pad="VALID", strides=[1, 3], dilations=[1, 2])],
         [1, 3, 5, 9], [("w", f32(rng, 2, 3, 2, 2))], 21, False),
        ("maxpool_ceil_o10", [node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
         [1, 2, 8, 7], [], 10, False),
        ("maxpool_ceil_pads_o12", [node("MaxPool", ["x"], kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1],
                                        ceil_mode=1)], [1, 2, 6, 8], [], 12, False),
        ("avgpool_ceil_o11", [node("AveragePool", ["x"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                                   ceil_mode=1)], [1, 2, 6, 7], [], 11, False),
        ("avgpool_include_pad_o7", [node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1], count_include_pad=1)], [1, 2, 7, 6], [], 7, False),
        ("avgpool_include_pad_ceil_o19", [node("AveragePool", ["x"], kernel_shape=[2, 3], strides=[2, 2],
                                               pads=[0, 1, 1, 0], count_include_pad=1, ceil_mode=1)],
         [1, 2, 7, 6], [], 19, False),
        ("maxpool1d_o12", [node("MaxPool", ["x"], kernel_shape=[3], strides=[2], pads=[1, 1])], [1, 3, 10], [], 12,
         False),
        ("maxpool_same_upper_o8", [node("MaxPool", ["x"], kernel_shape=[2, 3], strides=[2, 2],
                                        auto_pad="SAME_UPPER")], [1, 2, 5, 7], [], 8, False),
        ("global_avg_1d", [node("GlobalAveragePool", ["x"])], [1, 3, 7], [], 13, False),
        ("batchnorm_o7_rank2", [node("BatchNormalization", ["x", "s", "b", "m", "v"])], [1, 5],
         [("s", f32(rng, 5)), ("b", f32(rng, 5)), ("m", f32(rng, 5)), ("v", np.abs(f32(rng, 5)) + 0.1)], 7, False),
        ("batchnorm_o9_rank3", [node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=0.01)], [1, 3, 6],
         [("s", f32(rng, 3)), ("b", f32(rng, 3)), ("m", f32(rng, 3)), ("v", np.abs(f32(rng, 3)) + 0.1)], 9, False),
        ("gemm_o7_scalar_c", [node("Gemm", ["x", "w", "c"], beta=0.5)], [1, 6],
         [("w", f32(rng, 6, 4)), ("c", fl(0.3))], 7, False),
        ("gemm_o11_no_c", [node("Gemm", ["x", "w"], transB=1)], [1, 6], [("w", f32(rng, 3, 6))], 11, False),
        ("matmul_constant_first_o13", [node("MatMul", ["m", "x"])], [1, 2, 5, 3], [("m", f32(rng, 4, 5))], 13, False),
        ("matmul_2d_o9", [node("MatMul", ["x", "w"])], [1, 6], [("w", f32(rng, 6, 3))], 9, False),
        ("add_o7", [node("Add", ["x", "c"])], [1, 2, 3], [("c", f32(rng, 2, 1))], 7, False),
        ("mul_broadcast_o14", [node("Mul", ["x", "c"])], [1, 3, 4], [("c", f32(rng, 1, 1, 4))], 14, False),
        ("sum3_o13", [node("Sum", ["x", "c", "d"])], [1, 2, 3], [("c", f32(rng, 3)), ("d", f32(rng, 2, 3))], 13, False),
        ("min_o12", [node("Min", ["c", "x"])], [1, 2, 3], [("c", f32(rng, 1))], 12, False),
        ("div_tensor_o7", [node("Div", ["c", "x"])], [1, 4], [("c", f32(rng, 4))], 7, True),
        ("constant_node_o13", [helper.make_node("Constant", [], ["k"], name="k",
                                                value=numpy_helper.from_array(f32(rng, 3, 1))),
                               helper.make_node("Mul", ["x", "k"], ["y"], name="mul")], [1, 3, 4], [], 13, False),
        ("dropout_identity_o7", [helper.make_node("Dropout", ["x"], ["d"], ratio=0.3, name="drop"),
                                 helper.make_node("Identity", ["d"], ["i"], name="id"),
                                 helper.make_node("Relu", ["i"], ["y"], name="relu")], [1, 5], [], 7, False),
        ("dropout_o13", [helper.make_node("Dropout", ["x"], ["d"], name="drop"),
                         helper.make_node("Tanh", ["d"], ["y"], name="tanh")], [1, 2, 5], [], 13, False),
        ("reshape_zero_minus1_o13", [helper.make_node("Reshape", ["x", "t"], ["r"], name="reshape"),
                                     helper.make_node("Relu", ["r"], ["y"], name="relu")], [1, 3, 4, 2],
         [("t", i64(0, -1, 2))], 13, False),
        ("squeeze_unsqueeze_o11", [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[1, -1], name="unsq"),
                                   helper.make_node("Relu", ["u"], ["r"], name="relu"),
                                   helper.make_node("Squeeze", ["r"], ["y"], axes=[-1], name="sq")],
         [1, 3, 4], [], 11, False),
        ("squeeze_all_o13", [helper.make_node("Squeeze", ["x"], ["s"], name="sq"),
                             helper.make_node("Sigmoid", ["s"], ["y"], name="sig")], [1, 1, 4, 1], [], 13, False),
        ("transpose_output_o13", [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                  helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1], name="t")],
         [1, 3, 4, 5], [], 13, False),
        ("resize_o10_nearest", [node("Resize", ["x", "s"], mode="nearest")], [1, 2, 3, 4],
         [("s", fl(1, 1, 2, 1.5))], 10, False),
        ("resize_o11_linear_align", [node("Resize", ["x", "r", "s"], mode="linear",
                                          coordinate_transformation_mode="align_corners")], [1, 2, 3, 4],
         [("r", fl()), ("s", fl(1, 1, 2.5, 0.75))], 11, False),
        ("resize_o18_cubic_exclude", [node("Resize", ["x", "", "", "z"], mode="cubic", exclude_outside=1)],
         [1, 2, 4, 5], [("z", i64(1, 2, 9, 3))], 18, False),
        ("resize_o19_half_pixel_symmetric", [node("Resize", ["x", "", "s"], mode="linear",
                                                  coordinate_transformation_mode="half_pixel_symmetric")],
         [1, 2, 4, 5], [("s", fl(1, 1, 1.7, 2.2))], 19, False),
        ("resize_o13_pytorch_half_pixel", [node("Resize", ["x", "", "s"], mode="linear",
                                                coordinate_transformation_mode="pytorch_half_pixel")],
         [1, 2, 1, 5], [("s", fl(1, 1, 3, 0.6))], 13, False),
        ("upsample_o7_attr", [node("Upsample", ["x"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])], [1, 2, 3, 2],
         [], 7, False),
        ("upsample_o9_linear", [node("Upsample", ["x", "s"], mode="linear")], [1, 2, 3, 2],
         [("s", fl(1, 1, 2, 2))], 9, False),
        ("reduce_sum_o11_attr", [node("ReduceSum", ["x"], axes=[-1, 1])], [1, 3, 4, 2], [], 11, False),
        ("reduce_mean_all_o13", [node("ReduceMean", ["x"])], [1, 3, 4], [], 13, False),
        ("reduce_min_noop_o18", [helper.make_node("ReduceMin", ["x"], ["r"], noop_with_empty_axes=1, name="rmin"),
                                 helper.make_node("Relu", ["r"], ["y"], name="relu")], [1, 3, 4], [], 18, False),
        ("reduce_prod_o18_axes", [node("ReduceProd", ["x", "a"], keepdims=0)], [1, 2, 3, 2],
         [("a", i64(3, 1))], 18, False),
        ("reduce_mean_o18_keep", [node("ReduceMean", ["x", "a"])], [1, 3, 4, 5], [("a", i64(-2, -1))], 18, False),
        ("softmax_o11_axis2_rank4", [node("Softmax", ["x"], axis=2)], [1, 2, 3, 4], [], 11, False),
        ("softmax_o9_default", [node("Softmax", ["x"])], [1, 3, 4], [], 9, False),
        ("softmax_o13_negative", [node("Softmax", ["x"], axis=-2)], [1, 2, 3, 4], [], 13, False),
        ("clip_o11_min_only", [node("Clip", ["x", "lo"])], [1, 8], [("lo", fl(-0.1))], 11, False),
        ("clip_o13_max_only", [node("Clip", ["x", "", "hi"])], [1, 2, 4], [("hi", fl(0.2))], 13, False),
        ("lrn_size5", [node("LRN", ["x"], size=5, alpha=0.1)], [1, 6, 2, 3], [], 13, False),
        ("gather_scalar_negative_axis", [node("Gather", ["x", "i"], axis=-1)], [1, 3, 4, 5], [("i", i64(-2)[0])],
         13, False),
        ("gather_o11_channels", [node("Gather", ["x", "i"], axis=1)], [1, 4, 3, 2], [("i", i64(3, 1))], 11, False),
        ("gather_elements_o11", [node("GatherElements", ["x", "i"], axis=-1)], [1, 2, 3, 4],
         [("i", rng.integers(-4, 4, size=(1, 2, 3, 3)).astype(np.int64))], 11, False),
        ("tile_o6", [node("Tile", ["x", "r"])], [1, 2, 3], [("r", i64(1, 3, 1))], 6, False),
        ("pad_o13_edge_4d", [node("Pad", ["x", "p"], mode="edge")], [1, 2, 3, 4],
         [("p", i64(0, 1, 2, 0, 0, 0, 1, 3))], 13, False),
        ("pad_o18_axes", [node("Pad", ["x", "p", "", "a"], mode="reflect")], [1, 2, 4, 5],
         [("p", i64(1, 3, 2, 1)), ("a", i64(-1, 2))], 18, False),
        ("pad_o21_constant_value", [node("Pad", ["x", "p", "v"])], [1, 2, 3], [("p", i64(0, 1, 0, 0, 2, 3)),
                                                                                  ("v", fl(-2.5))], 21, False),
        ("slice_o9_attr", [node("Slice", ["x"], starts=[1, -3], ends=[3, 100], axes=[1, 3])], [1, 4, 3, 5], [], 9,
         False),
        ("concat_three_o11", [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                              helper.make_node("Sigmoid", ["x"], ["b"], name="sig"),
                              helper.make_node("Concat", ["a", "x", "b"], ["y"], axis=1, name="cat")],
         [1, 2, 3, 2], [], 11, False),
    ]


#: cases also run after a 1x1 convolution, so that the op sees a tensor the IR holds channels-last
AFTER_CONV = ("add_broadcast", "sub_const_first", "max3", "mean2", "transpose", "pad_reflect_o18", "pad_edge_o11",
              "pad_constant_o7", "gather_vector", "gather_matrix", "gather_elements", "tile", "slice_negative_step",
              "reduce_mean_o13", "reduce_sum_o13", "reduce_max_o18", "reduce_prod", "softmax_o13_middle",
              "softmax_o11_coerce", "resize_linear_scales", "resize_cubic_sizes", "lrn", "relu", "global_avg",
              "batchnorm", "flatten_squeeze_unsqueeze", "shape_chain_reshape", "concat_dag", "matmul_3d",
              "mul_broadcast_o14", "squeeze_unsqueeze_o11", "transpose_output_o13", "resize_o10_nearest",
              "reduce_sum_o11_attr", "reduce_prod_o18_axes", "reduce_mean_all_o13", "softmax_o11_axis2_rank4",
              "softmax_o13_negative", "gather_scalar_negative_axis", "gather_o11_channels", "gather_elements_o11",
              "pad_o13_edge_4d", "pad_o18_axes", "slice_o9_attr", "concat_three_o11", "maxpool_ceil_pads_o12",
              "conv1d", "reshape_zero_minus1_o13", "tile_o6", "pad_o21_constant_value", "matmul_constant_first_o13")


def after_conv(case, rng):
    """`case` with a channel-preserving convolution (1x1, or width-1 for 1-D) in front of its ops."""
    name, nodes, in_shape, inits, opset, positive = case
    channels, spatial = in_shape[1], len(in_shape) - 2
    conv = helper.make_node("Conv", ["x", "pre_w"], ["pre_y"], name="pre_conv")
    renamed = []
    for n in nodes:
        copy = type(n)()
        copy.CopyFrom(n)
        copy.input[:] = ["pre_y" if i == "x" else i for i in n.input]
        renamed.append(copy)
    weights = f32(rng, channels, channels, *([1] * spatial))
    return (name + "_after_conv", [conv] + renamed, in_shape, list(inits) + [("pre_w", weights)], max(opset, 7),
            positive)


CASES = cases(np.random.default_rng(2026))
_SEEDED = {0: {c[0]: c for c in CASES}}


def case_for(name, seed):
    """Case `name` with its weights drawn from seed `seed` (seed 0: CASES)."""
    if seed not in _SEEDED:
        _SEEDED[seed] = {c[0]: c for c in cases(np.random.default_rng(2026 + seed))}
    return _SEEDED[seed][name]
C_CASES = ("conv_pads_stride_o13", "conv_groups_dilation", "conv1d", "avgpool_exclude_pad", "batchnorm",
           "gemm_transb_alpha", "add_broadcast", "pad_reflect_o18", "gather_matrix", "slice_negative_step",
           "reduce_mean_o13", "softmax_o11_coerce", "resize_cubic_sizes", "lrn", "shape_chain_reshape", "concat_dag",
           "maxpool_ceil_pads_o12", "avgpool_include_pad_ceil_o19", "conv1d_depthwise_dilated_o11",
           "resize_o19_half_pixel_symmetric", "upsample_o7_attr", "transpose_output_o13", "add_broadcast_after_conv",
           "pad_o18_axes_after_conv", "gather_elements_o11_after_conv", "reduce_prod_o18_axes_after_conv",
           "softmax_o13_negative_after_conv", "concat_three_o11_after_conv", "slice_o9_attr_after_conv",
           "tile_after_conv", "squeeze_unsqueeze_o11_after_conv", "matmul_constant_first_o13",
           "matmul_constant_first_o13_after_conv")


def inputs_for(shape, positive, seed):
    x = np.random.default_rng(seed).normal(size=(3,) + tuple(shape[1:])).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def output_shape(nodes, in_shape, inits, opset, tmp_path):
    path = make(tmp_path, "probe", nodes, in_shape, None, inits, opset)
    x = np.zeros(in_shape, np.float32) + 0.5
    return list(onnxruntime_run(path, x).shape)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.e2e), pytest.param(2, marks=pytest.mark.e2e)])
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_reference_matches_onnxruntime(tmp_path, case, seed):
    name, nodes, in_shape, inits, opset, positive = case_for(case, seed)
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
    assert_c_matches_onnxruntime(tmp_path, name, nodes, in_shape, inits, opset, inputs_for(in_shape, positive, 7))


def assert_c_matches_onnxruntime(folder, name, nodes, in_shape, inits, opset, x):
    """The model of `nodes` saved in `folder`, loaded, generated as v2 C and run on the host on `x`:
    within 1e-5 (relative above 1) of onnxruntime on the same file."""
    path = make(folder, name, nodes, in_shape, output_shape(nodes, in_shape, inits, opset, folder), inits, opset)
    model = frontends.load(path)
    want = onnxruntime_run(path, x).reshape(len(x), -1)
    y = build_and_run(folder, model, x)
    assert np.max(np.abs(y - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), name


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
    ([node("ConvTranspose", ["x", "w"], output_shape=[5, 5])], [("w", np.zeros((3, 2, 2, 2), np.float32))],
     "(ConvTranspose): output_shape (only pads and output_padding)"),
    ([node("MatMul", ["x", "x"])], [], "(MatMul): a product of two computed tensors"),
    ([node("Softmax", ["x"], axis=0)], [], "(Softmax): softmax over the batch axis"),
    ([node("Transpose", ["x"], perm=[1, 0, 2, 3])], [], "(Transpose): perm [1, 0, 2, 3] moves the batch axis"),
    ([node("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2], ceil_mode=1)], [],
     "(MaxPool): pooling with dilations and ceil_mode"),
    ([node("Resize", ["x", "r", "s"], coordinate_transformation_mode="tf_crop_and_resize")],
     [("r", np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)), ("s", np.array([1, 1, 2, 2], np.float32))],
     "(Resize): coordinate_transformation_mode tf_crop_and_resize"),
    ([node("Flatten", ["x"], axis=2)], [], "(Flatten): axis 2 folds sample axes into the batch axis"),
    ([node("Pad", ["x", "p"])], [("p", np.array([1, 0, 0, 0, 0, 0, 0, 0], np.int64))], "(Pad): padding the batch axis"),
    ([node("Reshape", ["x", "t"])], [("t", np.array([3, 16], np.int64))], "(Reshape): target shape [3, 16] changes"),
    ([node("Gemm", ["x", "w"], transA=1)], [("w", np.zeros((1, 2), np.float32))], "(Gemm): transA=1"),
    ([node("Tile", ["x", "r"])], [("r", np.array([2, 1, 1, 1], np.int64))], "(Tile): repeats along the batch axis"),
    ([node("Add", ["x", "c"])], [("c", np.zeros((2, 3, 4, 4), np.float32))], "(Add): constant operand of shape"),
    ([node("Gather", ["x", "i"], axis=1)], [("i", np.array([0, -4], np.int64))],
     "(Gather): indices out of range for axis of size 3"),
    ([node("GatherElements", ["x", "i"], axis=2)], [("i", np.zeros((2, 3, 4, 4), np.int64))],
     "(GatherElements): indices of shape (2, 3, 4, 4) (one sample expected)"),
    ([node("GatherElements", ["x", "i"], axis=3)], [("i", np.full((1, 3, 4, 4), 4, np.int64))],
     "(GatherElements): indices out of range for axis of size 4"),
])
def test_refusals_name_the_node_and_op_in_one_line(tmp_path, nodes, inits, what):
    path = make(tmp_path, "bad", nodes, [1, 3, 4, 4], None, inits, 13)
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and what in message and "bad.onnx" in message and "_node'" in message


def test_garbage_is_refused_and_two_inputs_load(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(NNBuildError, match="junk.onnx"):
        frontends.load(junk)
    graph = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "two",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3]) for n in "xz"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    path = tmp_path / "two.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    model = frontends.load(path)   # each input is an argument of the C function (tests/test_multiio.py)
    assert [name for name, _ in model.inputs] == ["x", "z"] and model.outputs == ("y",)


# --------------------------------------------------------------------------- layout


#: the layout models also built as C (test_layout_models_generated_c)
LAYOUT_C = {}


def layout_model(tmp_path, name, nodes, in_shape, inits, opset=13):
    LAYOUT_C[name] = (nodes, in_shape, inits, opset)
    path = make(tmp_path, name, nodes, in_shape, output_shape(nodes, in_shape, inits, opset, tmp_path), inits, opset)
    model = frontends.load(path)
    x = inputs_for(in_shape, False, 5)
    want = onnxruntime_run(path, x).reshape(len(x), -1)
    got = reference.run(model, x.reshape((len(x),) + tuple(model.input_shape))).reshape(len(x), -1)
    assert np.max(np.abs(got - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), name
    return model, [layer.kind for layer in model.layers]


def n(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def test_residual_block_keeps_one_layout_transpose(tmp_path):
    """Conv -> BN -> Relu -> Conv -> Add(skip) -> Relu -> MaxPool -> GlobalAveragePool -> Flatten ->
    Gemm -> Softmax: the IR holds every tensor channels-last from the first transpose on; the Flatten's
    layout change folds into the Gemm kernel rows."""
    rng = np.random.default_rng(11)
    nodes = [n("Conv", ["x", "w0"], "c0", pads=[1, 1, 1, 1]), n("BatchNormalization", ["c0", "s", "b", "m", "v"], "bn"),
             n("Relu", ["bn"], "r0"), n("Conv", ["r0", "w1", "b1"], "c1", pads=[1, 1, 1, 1]),
             n("Add", ["c1", "c0"], "add"), n("Relu", ["add"], "r1"),
             n("MaxPool", ["r1"], "pool", kernel_shape=[2, 2], strides=[2, 2]), n("GlobalAveragePool", ["pool"], "gap"),
             n("Flatten", ["gap"], "flat"), n("Gemm", ["flat", "wd", "bd"], "fc", transB=1),
             helper.make_node("Softmax", ["fc"], ["y"], axis=1, name="softmax")]
    inits = [("w0", f32(rng, 4, 3, 3, 3)), ("s", f32(rng, 4)), ("b", f32(rng, 4)), ("m", f32(rng, 4)),
             ("v", np.abs(f32(rng, 4)) + 0.5), ("w1", f32(rng, 4, 4, 3, 3)), ("b1", f32(rng, 4)),
             ("wd", f32(rng, 5, 4)), ("bd", f32(rng, 5))]
    model, kinds = layout_model(tmp_path, "resblock", nodes, [1, 3, 8, 6], inits)
    assert kinds.count("transpose") == 1 and model.layers[0].kind == "transpose", kinds


def test_concat_of_branches_and_flatten_into_dense_fold(tmp_path):
    """Two conv branches concatenated on the channel axis, pooled, flattened (C, H, W order) into a
    dense layer: no transpose but the input's; the dense kernel rows are permuted instead."""
    rng = np.random.default_rng(12)
    nodes = [n("Conv", ["x", "wa"], "a"), n("Conv", ["x", "wb"], "b", pads=[1, 1, 1, 1]), n("Concat", ["a", "b"], "cat", axis=1),
             n("AveragePool", ["cat"], "pool", kernel_shape=[2, 2], strides=[2, 2]), n("Flatten", ["pool"], "flat"),
             helper.make_node("MatMul", ["flat", "wd"], ["y"], name="fc")]
    inits = [("wa", f32(rng, 2, 3, 1, 1)), ("wb", f32(rng, 3, 3, 3, 3)), ("wd", f32(rng, 5 * 4 * 3, 4))]
    model, kinds = layout_model(tmp_path, "branches", nodes, [1, 3, 8, 6], inits)
    assert kinds.count("transpose") == 1, kinds


def test_channels_last_input_transposed_to_nchw_needs_no_transpose(tmp_path):
    """A TensorFlow-style export (NHWC input, Transpose to NCHW, Conv ...): the IR already holds the
    input channels-last, so the loader adds no layout transpose at all."""
    rng = np.random.default_rng(13)
    nodes = [n("Transpose", ["x"], "nchw", perm=[0, 3, 1, 2]), n("Conv", ["nchw", "w"], "c", strides=[2, 2]),
             n("Relu", ["c"], "r"), n("Transpose", ["r"], "nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["nhwc", "t"], ["y"], name="flat")]
    inits = [("w", f32(rng, 4, 3, 3, 3)), ("t", np.array([1, -1], np.int64))]
    model, kinds = layout_model(tmp_path, "nhwc", nodes, [1, 9, 7, 3], inits)
    assert "transpose" not in kinds, kinds


def test_shared_tensor_is_converted_once(tmp_path):
    """A conv output read by a Flatten (ONNX order) and by a Reshape: one layout transpose serves both."""
    rng = np.random.default_rng(14)
    nodes = [n("Conv", ["x", "w"], "c"), n("Flatten", ["c"], "f1"), n("Reshape", ["c", "t"], "f2"),
             helper.make_node("Sub", ["f1", "f2"], ["y"], name="sub")]
    inits = [("w", f32(rng, 2, 3, 2, 2)), ("t", np.array([1, -1], np.int64))]
    _, kinds = layout_model(tmp_path, "shared", nodes, [1, 3, 4, 5], inits)
    assert kinds.count("transpose") == 2, kinds   # the input's and the conv output's


@pytest.mark.e2e
def test_layout_models_generated_c(tmp_path):
    """The layout models above as v2 C on the host against onnxruntime."""
    for test in (test_residual_block_keeps_one_layout_transpose, test_concat_of_branches_and_flatten_into_dense_fold,
                 test_channels_last_input_transposed_to_nchw_needs_no_transpose, test_shared_tensor_is_converted_once):
        (tmp_path / test.__name__).mkdir()
        test(tmp_path / test.__name__)     # (re)records its model in LAYOUT_C
    for name, (nodes, in_shape, inits, opset) in sorted(LAYOUT_C.items()):
        folder = tmp_path / f"c_{name}"
        folder.mkdir()
        assert_c_matches_onnxruntime(folder, name, nodes, in_shape, inits, opset, inputs_for(in_shape, False, 9))


def test_convert_takes_an_in_memory_proto(tmp_path):
    """The NNEF front-end's entry: convert(proto, path, name) without a file on disk."""
    from nnbuild.frontends import onnx_graph
    graph = helper.make_graph([node("Relu", ["x"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="nnef-test")
    model = onnx_graph.convert(proto, tmp_path / "net" / "graph.nnef")
    assert model.name == "net" and model.meta["format"] == "onnx" and model.meta["producer"] == "nnef-test"
    assert onnx_graph.convert(proto, tmp_path / "some-model.onnx", name="m2").name == "m2"
    assert onnx_graph.convert(proto, tmp_path / "some-model.onnx").name == "some_model"


def refusal(tmp_path, name, graph, opset=13):
    path = tmp_path / f"{name}.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    path.write_bytes(model.SerializeToString())
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    message = str(info.value)
    assert "\n" not in message and f"{name}.onnx" in message, message
    return message


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def test_model_level_refusals_in_one_line(tmp_path):
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    assert "not float32" in refusal(tmp_path, "ints", helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="cast")], "g",
        [value("x", [1, 4], TensorProto.INT32)], [value("y", [1, 4])]))
    assert "dynamic dimension beyond the batch axis" in refusal(tmp_path, "dynamic", helper.make_graph(
        relu, "g", [value("x", ["n", "k"])], [value("y", ["n", "k"])]))
    assert "output 'x' is input 'x' itself" in refusal(tmp_path, "passthrough", helper.make_graph(
        relu, "g", [value("x", [1, 4])], [value("y", [1, 4]), value("x", [1, 4])]))
    assert "opset 23 is outside the supported 6..22" in refusal(tmp_path, "opset23", helper.make_graph(
        relu, "g", [value("x", [1, 4])], [value("y", [1, 4])]), opset=23)
    message = refusal(tmp_path, "conv4d", helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c4")], "g", [value("x", [1, 2, 3, 4, 5, 2])],
        [value("y", [1, 1, 3, 4, 5, 2])], [numpy_helper.from_array(np.ones((1, 2, 1, 1, 1, 1), np.float32), "w")]))
    assert "node 'c4' (Conv): 4-D convolution (1-D, 2-D and 3-D only)" in message
    message = refusal(tmp_path, "custom", helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="g1", domain="com.example")], "g", [value("x", [1, 4])],
        [value("y", [1, 4])]))
    assert "node 'g1' (Gelu)" in message and "domain 'com.example'" in message
    message = refusal(tmp_path, "computed_indices", helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["x", "s"], ["y"], axis=1, name="gather"),
         ], "g", [value("x", [1, 4])], [value("y", [1, 2])]))
    assert "node 'gather' (Gather)" in message
    message = refusal(tmp_path, "huge_fold", helper.make_graph(
        [helper.make_node("ConstantOfShape", ["big"], ["k"], name="cos"),
         helper.make_node("Add", ["x", "k"], ["y"], name="add")], "g", [value("x", [1, 4])],
        [value("y", [1, 4])], [numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "big")]))
    assert "node 'cos' (ConstantOfShape): constant folding would make 1099511627776 elements" in message
    message = refusal(tmp_path, "unnamed", helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["hm_out"])], "g", [value("x", [1, 4])], [value("hm_out", [1, 4])]))
    assert "node 'hm_out' (Hardmax): operator not supported (supported: " in message


def test_a_tile_to_a_billion_elements_is_one_line_before_any_allocation(tmp_path):
    """A hostile model: 16 values tiled 8192 x 8192 (8 GB of per-element index maps at codegen)."""
    nodes = [helper.make_node("Tile", ["x", "r"], ["t"], name="t"),
             helper.make_node("ReduceSum", ["t"], ["y"], name="s", keepdims=1)]
    path = make(tmp_path, "huge", nodes, [1, 4, 4], [1, 1, 1], [("r", np.array([1, 8192, 8192], np.int64))])
    with pytest.raises(NNBuildError) as exc:
        frontends.load(path)
    text = str(exc.value)
    assert "\n" not in text and str(path) in text and "node 't' (Tile)" in text
    assert "1073741824 elements (limit MAX_TENSOR_ELEMENTS = 4194304)" in text
