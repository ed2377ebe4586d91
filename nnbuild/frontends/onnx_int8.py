"""ONNX front-end, statically quantized int8 models: a .onnx whose graph computes in int8 through
QuantizeLinear/DequantizeLinear pairs (onnxruntime's quantize_static with QuantFormat.QDQ) or through
QLinearConv/QLinearMatMul (QuantFormat.QOperator), read into the same quantized graph as
nnbuild.frontends.tflite_int8 gives (nnbuild.ir.int8), for the int8 precision: TFLite Micro's int8
arithmetic, bit for bit with nnbuild.numerics.tflm_int8.

Read where the graph states the arithmetic TFLite Micro's kernels compute: int8 activations
quantized per tensor, int8 weights per tensor or per output channel (zero point 0 for a
convolution), int32 biases of scale input scale x weight scale and zero point 0, constant scales
and zero points. Conv -> CONV_2D (or DEPTHWISE_CONV_2D when group = input channels), Gemm/MatMul
with constant weights -> FULLY_CONNECTED, MaxPool/AveragePool -> MAX/AVERAGE_POOL_2D,
GlobalAveragePool -> MEAN, Add -> ADD, Softmax -> SOFTMAX, Flatten/Reshape -> RESHAPE (views),
Relu and Clip(0, 6) between a Conv/Gemm/MatMul/Add and its QuantizeLinear -> the fused activation
range. ONNX's NCHW is kept at the C API (one sample in ONNX element order, as the float ONNX
front-end); the convolutions compute channels-last, so the graph gets a TRANSPOSE where the layout
changes (none where one of the two is a single value). A float input read only by a
QuantizeLinear and a float output made by a DequantizeLinear are cut off: the C API is int8, like
a full-integer TFLite model with float32 ends.

Anything else (uint8, asymmetric convolution weights, a scale that is not a constant, dynamic
quantization, an op outside this list) is refused in one line naming the file and the node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nnbuild import limits, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import tflite, tflite_int8
from nnbuild.ir.int8 import KIND, QuantizedModel  # noqa: F401 - KIND: the kind frontends.kind_of reports

#: ops whose presence makes a .onnx a quantized model (read here, not by the float ONNX front-end)
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd",
                 "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax", "DynamicQuantizeLinear",
                 "MatMulInteger", "ConvInteger", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                 "QLinearConcat", "QLinearReduceMean", "QAttention", "DynamicQuantizeMatMul")
#: float ops between DequantizeLinear and QuantizeLinear (QDQ) and int8 ops (QOperator) read here
COMPUTE = ("Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Softmax", "Flatten",
           "Reshape", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearGlobalAveragePool",
           "QLinearSoftmax")
#: ops that only move int8 values (their input and output quantized alike)
VIEWS = ("Flatten", "Reshape", "MaxPool")
INT8, INT32 = 3, 6       # onnx.TensorProto data types
SAME, VALID = 0, 1       # TFLite's Padding
FUSED_RELU, FUSED_RELU6 = 1, 3


class Problem(Exception):
    """One line about the model (the caller adds the file name)."""


def is_quantized(path) -> bool:
    """True when `path` is a .onnx (within limits.MAX_MODEL_FILE_BYTES) with a quantization op in
    its main graph (QUANTIZED_OPS); never raises (load says what is wrong with a damaged file)."""
    try:
        path = Path(path)
        if not path.is_file() or path.stat().st_size > limits.MAX_MODEL_FILE_BYTES:
            return False
        import onnx
        model = onnx.load_model(str(path), load_external_data=False)
        return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)
    except Exception:  # noqa: BLE001 - a file that does not read is the float front-end's to name
        return False


def load(path):
    path = Path(path)
    try:
        import onnx
        from onnx import numpy_helper
        if path.stat().st_size > limits.MAX_MODEL_FILE_BYTES:
            raise Problem(f"the file is larger than {limits.MAX_MODEL_FILE_BYTES} bytes")
        try:
            model = onnx.load_model(str(path), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - a damaged file: one line
            raise Problem(f"not a readable ONNX model ({type(exc).__name__})") from None
        built = _Builder(model.graph, numpy_helper).build()
        ops = _checked(built)
    except Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None
    meta = {"format": "onnx", "quantization": "static int8 (QuantizeLinear/DequantizeLinear or QLinear ops)",
            "schema_version": 0, "description": ""}
    meta.update(built.ends)
    return QuantizedModel(names.c_identifier(path.stem), built.graph, ops, source_files=(str(path),), meta=meta)


class _Built:
    def __init__(self, graph, ends, labels):
        self.graph, self.ends, self.labels = graph, ends, labels


def _checked(built):
    """tflite_int8's checks of every operator (the int8 precision's requirements), named by node."""
    graph = built.graph
    computed, ops = {graph.inputs[0]}, []
    for op in graph.operators:
        try:
            ops.append(tflite_int8._checked(graph, op, computed))
        except tflite_int8.Problem as problem:
            raise Problem(f"node {built.labels[op.index]}: {problem}") from None
        computed.add(op.outputs[0])
    if graph.outputs[0] not in computed or not ops:
        raise Problem("the output is not computed from the input")
    return tuple(ops)


class _Builder:
    """ONNX nodes -> a tflite.Graph (channels-last where the convolutions need it)."""

    def __init__(self, onnx_graph, numpy_helper):
        self.g = onnx_graph
        self.consts = {}
        for init in onnx_graph.initializer:
            if init.data_location == 1:
                raise Problem(f"initializer '{init.name}' uses external data (not read)")
            self.consts[init.name] = numpy_helper.to_array(init)
        self.nodes = []
        for k, node in enumerate(onnx_graph.node):
            label = f"{k} '{node.name or node.output[0]}' ({node.op_type})"
            if node.op_type == "Constant":
                attr = {a.name: a for a in node.attribute}
                if "value" not in attr:
                    raise Problem(f"node {label}: a Constant other than a tensor value")
                self.consts[node.output[0]] = numpy_helper.to_array(attr["value"].t)
            else:
                self.nodes.append((label, node))
        self.tensors, self.operators, self.op_labels = [], [], []
        self.index = {}      # int8 ONNX name -> (tensor index, layout: "onnx" or "nhwc")
        self.dq = {}         # float name made by a DequantizeLinear -> its node
        self.consumers = {}
        for label, node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append((label, node))
            if node.op_type == "DequantizeLinear":
                self.dq[node.output[0]] = (label, node)

    # ----------------------------------------------------------------------- tensors

    def attrs(self, node):
        from onnx import helper
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def const(self, name, label, what):
        if name not in self.consts:
            raise Problem(f"node {label}: the {what} '{name}' is not a constant (int8 needs constant scales, zero "
                          "points and weights)")
        return self.consts[name]

    def quant(self, label, scale_name, zp_name, what, per_channel=False):
        """(scales, zero points) of a quantization: constant, finite positive scales, int8 zero points."""
        scale = np.asarray(self.const(scale_name, label, f"{what} scale"), np.float64).reshape(-1)
        if zp_name:
            zp = self.const(zp_name, label, f"{what} zero point")
            if zp.dtype != np.int8:
                raise Problem(f"node {label}: {what} is {zp.dtype} ({_dtype_words(zp.dtype)}): int8 reads int8 "
                              "activations and weights only")
            zp = np.asarray(zp, np.int64).reshape(-1)
        else:
            raise Problem(f"node {label}: {what} has no zero point (uint8 by default): int8 reads int8 only")
        if scale.size < 1 or (scale.size > 1 and not per_channel) or zp.size != scale.size:
            raise Problem(f"node {label}: {what} has {scale.size} scales and {zp.size} zero points (one per tensor "
                          "expected)" if not per_channel else
                          f"node {label}: {what} has {scale.size} scales and {zp.size} zero points")
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise Problem(f"node {label}: {what} has a scale that is not a positive number")
        return scale.astype(np.float32), zp

    def add_tensor(self, name, type_name, shape, data=None, quantization=None):
        index = len(self.tensors)
        if data is not None:
            data = np.ascontiguousarray(data)
            data.setflags(write=False)
        self.tensors.append(tflite.Tensor(index, name, type_name, tuple(int(s) for s in shape), None, data,
                                          quantization))
        return index

    def activation(self, name, shape, scale, zp, layout):
        q = tflite.Quantization(np.asarray(scale, np.float32).reshape(1), np.asarray(zp, np.int64).reshape(1), 0)
        index = self.add_tensor(name, "int8", shape, quantization=q)
        self.index[name] = (index, layout)
        return index

    def add_op(self, label, op, inputs, output, **options):
        self.operators.append(tflite.Operator(len(self.operators), op, 1, tuple(inputs), (output,), options))
        self.op_labels.append(label)

    def int32_const(self, name, values):
        values = np.asarray(values, np.int32)
        return self.add_tensor(name, "int32", values.shape, data=values)

    def in_layout(self, label, name, layout):
        """Tensor `name` in `layout` ("onnx" or "nhwc"), a TRANSPOSE (or a RESHAPE, when the move is
        a view) added once per tensor and layout."""
        if name not in self.index:
            raise Problem(f"node {label}: input '{name}' is not computed before this node (or not int8)")
        index, have = self.index[name]
        if have == layout:
            return index
        key = f"{name}@{layout}"
        if key in self.index:
            return self.index[key][0]
        t = self.tensors[index]
        if len(t.shape) != 4:
            raise Problem(f"node {label}: input '{name}' of shape {t.shape} (2-D images, NCHW, expected)")
        perm = (0, 2, 3, 1) if layout == "nhwc" else (0, 3, 1, 2)
        shape = tuple(t.shape[p] for p in perm)
        out = self.activation(key, shape, t.quantization.scales[0], t.quantization.zero_points[0], layout)
        self.index.pop(key)
        self.index[key] = (out, layout)
        area, channels = (t.shape[2] * t.shape[3], t.shape[1]) if have == "onnx" else (t.shape[1] * t.shape[2], t.shape[3])
        if area == 1 or channels == 1:
            self.add_op(label, "RESHAPE", (index,), out)       # one of the two moving axes is 1: a view
        else:
            self.add_op(label, "TRANSPOSE", (index, self.int32_const(f"{key}_perm", perm)), out)
        return out

    # ----------------------------------------------------------------------- the graph

    def build(self):
        g = self.g
        if len(g.input) - len([i for i in g.input if i.name in self.consts]) != 1 or len(g.output) != 1:
            raise Problem(f"{len(g.input)} inputs and {len(g.output)} outputs: nnbuild generates one input to one "
                          "output")
        ends = {}
        for label, node in self.nodes:     # what no int8 graph holds, named before anything else
            if node.op_type in ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul"):
                raise Problem(f"node {label}: dynamic quantization (scales computed at run time) is not int8's "
                              "arithmetic: quantize the model statically (quantize_static)")
            if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                if len(node.input) < 2 or len(node.output) != 1 or not node.input[0] or not node.input[1]:
                    raise Problem(f"node {label}: {len(node.input)} inputs and {len(node.output)} outputs (x, scale "
                                  "and zero point to one output expected)")
                for k, what in ((1, "scale"), (2, "zero point")):
                    if len(node.input) > k and node.input[k]:
                        self.const(node.input[k], label, what)
        x = next(i for i in g.input if i.name not in self.consts)
        shape = _static_shape(x)
        elem = x.type.tensor_type.elem_type
        if elem == INT8:
            raise Problem(f"the int8 input '{x.name}' has no quantization the graph states (a QuantizeLinear of a "
                          "float input expected)")
        users = self.consumers.get(x.name, [])
        if len(users) != 1 or users[0][1].op_type != "QuantizeLinear":
            raise Problem(f"the float input '{x.name}' is read by "
                          f"{', '.join(n.op_type for _, n in users) or 'nothing'} (one QuantizeLinear to int8 "
                          "expected)")
        label, q = users[0]
        scale, zp = self.quant(label, q.input[1], q.input[2] if len(q.input) > 2 else "", "the input")
        if not shape or shape[0] != 1:
            raise Problem(f"the input '{x.name}' has shape {shape}: expected a batch axis of 1 and a sample")
        self.input = self.activation(q.output[0], shape, scale[0], zp[0], "onnx")
        ends["float32_input"] = "QUANTIZE"
        for label, node in self.nodes:
            if node is q or node.op_type == "DequantizeLinear":
                continue
            if node.op_type == "QuantizeLinear":
                continue       # read with the node that makes its input
            if node.op_type in ("Relu", "Clip"):
                continue       # fused into the node that makes its input (checked there)
            self.node(label, node)
        y = g.output[0]
        makers = [(label, n) for label, n in self.nodes if y.name in n.output]
        if len(makers) != 1 or makers[0][1].op_type != "DequantizeLinear":
            raise Problem(f"the float output '{y.name}' is made by {', '.join(n.op_type for _, n in makers) or 'nothing'}"
                          " (one DequantizeLinear of int8 expected)")
        label, dq = makers[0]
        out = self.in_layout(label, dq.input[0], "onnx")
        ends["float32_output"] = "DEQUANTIZE"
        graph = tflite.Graph(tuple(self.tensors), tuple(self.operators), (self.input,), (out,), 0, "")
        return _Built(graph, ends, tuple(self.op_labels))

    # ----------------------------------------------------------------------- nodes

    def node(self, label, node):
        op = node.op_type
        if node.domain not in ("", "ai.onnx", "com.microsoft"):
            raise Problem(f"node {label}: domain '{node.domain}' is not read")
        if op in ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul"):
            raise Problem(f"node {label}: dynamic quantization (scales computed at run time) is not int8's "
                          "arithmetic: quantize the model statically (quantize_static)")
        if op not in COMPUTE:
            raise Problem(f"node {label}: operator not supported in int8 (supported: "
                          f"{', '.join(sorted(set(COMPUTE) | {'QuantizeLinear', 'DequantizeLinear', 'Relu', 'Clip'}))})")
        if op.startswith("Q") or (op in VIEWS and node.input[0] in self.index):
            self.qoperator(label, node)
        else:
            self.qdq(label, node)

    def float_input(self, label, name):
        """The int8 tensor a DequantizeLinear reads for float tensor `name` (an activation), checked."""
        if name not in self.dq:
            raise Problem(f"node {label}: input '{name}' is not made by a DequantizeLinear (a float computation "
                          "between quantized tensors is not int8)")
        dq_label, dq = self.dq[name]
        if dq.input[0] in self.consts:
            raise Problem(f"node {label}: input '{name}' is a constant where an activation is expected")
        index = self.index.get(dq.input[0])
        if index is None:
            raise Problem(f"node {label}: input '{dq.input[0]}' is not computed before this node")
        t = self.tensors[index[0]]
        scale, zp = self.quant(dq_label, dq.input[1], dq.input[2] if len(dq.input) > 2 else "", f"'{dq.input[0]}'")
        if float(scale[0]) != float(t.quantization.scales[0]) or int(zp[0]) != int(t.quantization.zero_points[0]):
            raise Problem(f"node {dq_label}: dequantizes '{dq.input[0]}' with another scale or zero point than "
                          "it was quantized with")
        return dq.input[0]

    def float_operand(self, label, name):
        """An Add's operand: an int8 tensor's name, or (int8 values, scale, zero point) of a constant."""
        if name in self.dq and self.dq[name][1].input[0] in self.consts:
            values, scale, zp, _ = self.float_const(label, name, "operand", np.int8)
            if scale.size != 1:
                raise Problem(f"node {label}: a constant operand quantized per channel")
            return values, scale[0], zp[0]
        return self.float_input(label, name)

    def float_const(self, label, name, what, dtype):
        """(values, scales, zero points, axis) of a constant a DequantizeLinear reads."""
        if name not in self.dq:
            raise Problem(f"node {label}: the {what} '{name}' is float (not quantized): int8 needs int8 weights "
                          "and int32 biases")
        dq_label, dq = self.dq[name]
        values = self.const(dq.input[0], dq_label, what)
        if values.dtype != dtype:
            raise Problem(f"node {dq_label}: the {what} '{dq.input[0]}' is {values.dtype} "
                          f"({_dtype_words(values.dtype)}; {np.dtype(dtype).name} expected)")
        scale = np.asarray(self.const(dq.input[1], dq_label, f"{what} scale"), np.float64).reshape(-1)
        zp = np.asarray(self.const(dq.input[2], dq_label, f"{what} zero point"), np.int64).reshape(-1) \
            if len(dq.input) > 2 and dq.input[2] else np.zeros(scale.size, np.int64)
        axis = int(self.attrs(dq).get("axis", 1))
        return values, scale, zp, axis % max(values.ndim, 1)

    def output_of(self, label, node, fusable):
        """(int8 name, scale, zp, fused activation) of the QuantizeLinear that reads `node`'s output,
        through a Relu or Clip(0, 6) when `fusable`."""
        name, fused = node.output[0], 0
        users = self.consumers.get(name, [])
        if fusable and len(users) == 1 and users[0][1].op_type in ("Relu", "Clip"):
            act_label, act = users[0]
            fused = self.fused(act_label, act)
            name, users = act.output[0], self.consumers.get(act.output[0], [])
        elif any(n.op_type in ("Relu", "Clip") for _, n in users):
            raise Problem(f"node {label}: its output is read by a Relu/Clip beside other nodes (int8 fuses a "
                          "Relu/Clip only into the one node it follows)")
        if len(users) != 1 or users[0][1].op_type != "QuantizeLinear":
            raise Problem(f"node {label}: its output '{name}' is read by "
                          f"{', '.join(n.op_type for _, n in users) or 'nothing'} (one QuantizeLinear expected)")
        q_label, q = users[0]
        scale, zp = self.quant(q_label, q.input[1], q.input[2] if len(q.input) > 2 else "", "the output")
        return q.output[0], scale[0], zp[0], fused

    def fused(self, label, act):
        if act.op_type == "Relu":
            return FUSED_RELU
        bounds = []
        attrs = self.attrs(act)
        for k, key in ((1, "min"), (2, "max")):
            if len(act.input) > k and act.input[k]:
                bounds.append(float(np.asarray(self.const(act.input[k], label, key)).reshape(-1)[0]))
            else:
                bounds.append(attrs.get(key))
        if bounds == [0.0, 6.0]:
            return FUSED_RELU6
        if bounds[0] == 0.0 and bounds[1] is None:
            return FUSED_RELU
        raise Problem(f"node {label}: Clip({bounds[0]}, {bounds[1]}): int8 fuses Relu, Clip(0, 6) and Clip(0, inf)")

    def qdq(self, label, node):
        op, attrs = node.op_type, self.attrs(node)
        if op in ("Conv", "Gemm", "MatMul"):
            x = self.float_input(label, node.input[0])
            w, ws, wz, axis = self.float_const(label, node.input[1], "weights", np.int8)
            bias = None
            if len(node.input) > 2 and node.input[2]:
                b, bs, bz, _ = self.float_const(label, node.input[2], "bias", np.int32)
                bias = (b, bs, bz)
            out, scale, zp, fused = self.output_of(label, node, True)
            self.weighted(label, op, attrs, x, (w, ws, wz, axis), bias, (out, scale, zp, fused))
        elif op == "Add":
            a, b = (self.float_operand(label, name) for name in node.input[:2])
            out, scale, zp, fused = self.output_of(label, node, True)
            self.add(label, a, b, (out, scale, zp, fused))
        else:
            x = self.float_input(label, node.input[0])
            out, scale, zp, _ = self.output_of(label, node, False)
            self.unary(label, op, attrs, node, x, (out, scale, zp, 0))

    def qoperator(self, label, node):
        op, attrs, i = node.op_type, self.attrs(node), list(node.input)
        least = {"QLinearConv": 8, "QLinearMatMul": 8, "QGemm": 6, "QLinearAdd": 7, "QLinearGlobalAveragePool": 5,
                 "QLinearSoftmax": 5}.get(op, 1)
        if len(i) < least or not all(i[:least]):
            raise Problem(f"node {label}: {len(i)} inputs ({least} expected)")
        if op in ("QLinearConv", "QLinearMatMul", "QGemm"):
            if op == "QGemm" and (len(i) < 9 or not i[7]):
                raise Problem(f"node {label}: QGemm with a float output is not int8")
            x = i[0]
            self.check_activation(label, x, i[1], i[2])
            w = self.const(i[3], label, "weights")
            if w.dtype != np.int8:
                raise Problem(f"node {label}: the weights '{i[3]}' are {w.dtype} ({_dtype_words(w.dtype)}; int8 "
                              "expected)")
            ws = np.asarray(self.const(i[4], label, "weights scale"), np.float64).reshape(-1)
            wz = np.asarray(self.const(i[5], label, "weights zero point"), np.int64).reshape(-1)
            axis = {"QLinearConv": 0, "QLinearMatMul": 1, "QGemm": 0 if attrs.get("transB", 0) else 1}[op]
            out_scale_name, out_zp_name, bias_name = (i[7], i[8], i[6]) if op == "QGemm" else \
                (i[6], i[7], i[8] if op == "QLinearConv" and len(i) > 8 else "")
            bias = None
            if bias_name:
                b = self.const(bias_name, label, "bias")
                if b.dtype != np.int32:
                    raise Problem(f"node {label}: the bias '{bias_name}' is {b.dtype} (int32 expected)")
                xs = float(self.tensors[self.index[x][0]].quantization.scales[0]) if x in self.index else 1.0
                bias = (b, (xs * ws).astype(np.float64), np.zeros(ws.size, np.int64))
            scale, zp = self.quant(label, out_scale_name, out_zp_name, "the output")
            onnx_op = {"QLinearConv": "Conv", "QLinearMatMul": "MatMul", "QGemm": "Gemm"}[op]
            if op == "QGemm" and (attrs.get("alpha", 1.0) != 1.0):
                raise Problem(f"node {label}: alpha {attrs['alpha']} (1 expected)")
            self.weighted(label, onnx_op, attrs, x, (w, ws, wz, axis % max(w.ndim, 1)), bias,
                          (node.output[0], scale[0], zp[0], 0))
        elif op == "QLinearAdd":
            a, b = (self.int8_operand(label, i[k], i[k + 1], i[k + 2]) for k in (0, 3))
            scale, zp = self.quant(label, i[6], i[7] if len(i) > 7 else "", "the output")
            self.add(label, a, b, (node.output[0], scale[0], zp[0], 0))
        elif op == "QLinearSoftmax":
            if int(attrs.get("opset", 13)) < 13:
                raise Problem(f"node {label}: QLinearSoftmax of opset {attrs.get('opset')} (13: the last axis)")
            self.check_activation(label, i[0], i[1], i[2])
            scale, zp = self.quant(label, i[3], i[4], "the output")
            self.unary(label, "Softmax", attrs, node, i[0], (node.output[0], scale[0], zp[0], 0))
        elif op == "QLinearGlobalAveragePool":
            if attrs.get("channels_last", 0):
                raise Problem(f"node {label}: channels_last=1 (NCHW expected)")
            self.check_activation(label, i[0], i[1], i[2])
            scale, zp = self.quant(label, i[3], i[4], "the output")
            self.unary(label, "GlobalAveragePool", attrs, node, i[0], (node.output[0], scale[0], zp[0], 0))
        else:   # MaxPool, Flatten, Reshape on int8 tensors: the output quantized as the input
            x = node.input[0]
            if x not in self.index:
                raise Problem(f"node {label}: input '{x}' is not an int8 tensor computed before this node")
            q = self.tensors[self.index[x][0]].quantization
            self.unary(label, op, attrs, node, x, (node.output[0], q.scales[0], q.zero_points[0], 0))

    def int8_operand(self, label, name, scale_name, zp_name):
        if name in self.consts:
            values = self.consts[name]
            if values.dtype != np.int8:
                raise Problem(f"node {label}: the operand '{name}' is {values.dtype} (int8 expected)")
            scale, zp = self.quant(label, scale_name, zp_name, f"'{name}'")
            return values, scale[0], zp[0]
        self.check_activation(label, name, scale_name, zp_name)
        return name

    def check_activation(self, label, name, scale_name, zp_name):
        if name not in self.index:
            raise Problem(f"node {label}: input '{name}' is not an int8 tensor computed before this node")
        t = self.tensors[self.index[name][0]]
        scale, zp = self.quant(label, scale_name, zp_name, f"'{name}'")
        if float(scale[0]) != float(t.quantization.scales[0]) or int(zp[0]) != int(t.quantization.zero_points[0]):
            raise Problem(f"node {label}: reads '{name}' with another scale or zero point than it was quantized with")

    # ----------------------------------------------------------------------- operators

    def weighted(self, label, op, attrs, x, weights, bias, output):
        w, ws, wz, axis = weights
        out, scale, zp, fused = output
        if op == "Conv":
            self.conv(label, attrs, x, weights, bias, output)
            return
        if op == "Gemm":
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                raise Problem(f"node {label}: Gemm with transA, alpha or beta other than 0, 1, 1")
            if w.ndim != 2:
                raise Problem(f"node {label}: weights of shape {w.shape} (a matrix expected)")
            if not attrs.get("transB", 0):
                w, axis = w.T, 1 - axis
        else:                      # MatMul: x (1, K) times constant (K, N)
            if w.ndim != 2:
                raise Problem(f"node {label}: MatMul by weights of shape {w.shape} (a constant matrix expected)")
            w, axis = w.T, 1 - axis
        index = self.in_layout(label, x, "onnx")
        xt = self.tensors[index]
        if len(xt.shape) != 2 or xt.shape[1] != w.shape[1]:
            raise Problem(f"node {label}: input of shape {xt.shape} for weights of {w.shape[1]} inputs (a (1, K) row "
                          "expected)")
        wq = self.weights_quant(label, ws, wz, axis if ws.size > 1 else 0, w.shape[0], per_channel_axis=0)
        w_index = self.add_tensor(f"{out}_weights", "int8", w.shape, data=np.asarray(w, np.int8), quantization=wq)
        inputs = [index, w_index]
        if bias is not None:
            inputs.append(self.bias(label, bias, xt, ws, w.shape[0], out))
        y = self.activation(out, (1, w.shape[0]), scale, zp, "onnx")
        self.add_op(label, "FULLY_CONNECTED", inputs, y, FusedActivationFunction=fused)

    def weights_quant(self, label, ws, wz, axis, channels, per_channel_axis):
        if ws.size not in (1, channels) or wz.size != ws.size:
            raise Problem(f"node {label}: weights with {ws.size} scales and {wz.size} zero points for {channels} "
                          "output channels")
        if ws.size > 1 and axis != per_channel_axis:
            raise Problem(f"node {label}: weights quantized per channel along an input axis (per output channel "
                          "expected)")
        if np.any(wz != 0):
            raise Problem(f"node {label}: the weights are asymmetric (zero point {int(wz[np.nonzero(wz)[0][0]])}): "
                          "TFLite Micro's int8 kernels need symmetric weights (zero point 0; quantize_static's "
                          "default WeightSymmetric=True)")
        if not np.all(np.isfinite(ws)) or np.any(ws <= 0):
            raise Problem(f"node {label}: a weights scale that is not a positive number")
        return tflite.Quantization(ws.astype(np.float32), wz.astype(np.int64), 0)

    def bias(self, label, bias, xt, ws, channels, out):
        """The int32 bias, checked to be at scale input scale x weights scale, zero point 0 (as TFLite
        Micro adds it to the accumulator unscaled)."""
        b, bs, bz = bias
        b = np.asarray(b).reshape(-1)
        if b.size != channels:
            raise Problem(f"node {label}: bias of {b.size} values for {channels} output channels")
        if np.any(bz != 0):
            raise Problem(f"node {label}: the bias has a non-zero zero point")
        want = float(xt.quantization.scales[0]) * ws.astype(np.float64)
        if bs.size not in (1, channels) or not np.allclose(bs, want, rtol=1e-5, atol=0):
            raise Problem(f"node {label}: the bias scale is not input scale x weights scale (the accumulator's "
                          "scale, as TFLite Micro adds the bias)")
        q = tflite.Quantization(np.asarray(np.broadcast_to(want, (channels,)), np.float32),
                                np.zeros(channels, np.int64), 0)
        return self.add_tensor(f"{out}_bias", "int32", (channels,), data=b.astype(np.int32), quantization=q)

    def conv(self, label, attrs, x, weights, bias, output):
        w, ws, wz, axis = weights
        out, scale, zp, fused = output
        if w.ndim != 4:
            raise Problem(f"node {label}: a {w.ndim - 2}-D convolution (int8 reads 2-D)")
        index = self.in_layout(label, x, "nhwc")
        xt = self.tensors[index]
        _, height, width, channels = xt.shape
        group = int(attrs.get("group", 1))
        kh, kw = w.shape[2:]
        dil = _positive_pair(label, attrs, "dilations")
        strides = _positive_pair(label, attrs, "strides")
        if group == 1 and w.shape[1] == channels:
            op, filters, q_axis = "CONV_2D", np.transpose(w, (0, 2, 3, 1)), 3
        elif group == channels and w.shape[1] == 1 and w.shape[0] % group == 0:
            op, filters, q_axis = "DEPTHWISE_CONV_2D", np.transpose(w, (1, 2, 3, 0)), 3
        else:
            raise Problem(f"node {label}: group {group} with weights {w.shape} for {channels} input channels (int8 "
                          "reads group 1 or depthwise)")
        out_channels = w.shape[0]
        wq = self.weights_quant(label, ws, wz, axis if ws.size > 1 else 0, out_channels, per_channel_axis=0)
        if op == "DEPTHWISE_CONV_2D":
            wq = tflite.Quantization(wq.scales, wq.zero_points, 3)
        padding, index = self.padding(label, attrs, index, (kh, kw), strides, dil)
        xt = self.tensors[index]
        w_index = self.add_tensor(f"{out}_weights", "int8", filters.shape, data=np.asarray(filters, np.int8),
                                  quantization=wq)
        inputs = [index, w_index]
        if bias is not None:
            inputs.append(self.bias(label, bias, xt, ws, out_channels, out))
        oh, ow = (_out_size(s, k, st, d, padding) for s, k, st, d in zip(xt.shape[1:3], (kh, kw), strides, dil))
        y = self.activation(out, (1, oh, ow, out_channels), scale, zp, "nhwc")
        options = dict(Padding=padding, StrideH=strides[0], StrideW=strides[1], DilationHFactor=dil[0],
                       DilationWFactor=dil[1], FusedActivationFunction=fused)
        if op == "DEPTHWISE_CONV_2D":
            options["DepthMultiplier"] = out_channels // channels
        del q_axis
        self.add_op(label, op, inputs, y, **options)

    def padding(self, label, attrs, index, kernel, strides, dilation, pad_allowed=True):
        """(TFLite padding, input index): VALID without pads, SAME when the pads are TFLite's SAME
        ones, else (convolutions) a PAD with the input's zero point (real 0) and VALID."""
        t = self.tensors[index]
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        size = t.shape[1:3]
        same = []
        for s, k, st, d in zip(size, kernel, strides, dilation):
            total = max((-(-s // st) - 1) * st + d * (k - 1) + 1 - s, 0)
            same.append((total // 2, total - total // 2))
        if auto == "SAME_UPPER":
            return SAME, index
        if auto == "VALID":
            return VALID, index
        if auto != "NOTSET":
            raise Problem(f"node {label}: auto_pad {auto} (int8: NOTSET, SAME_UPPER, VALID)")
        pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        reach = tuple(int(d) * (int(k) - 1) + 1 for k, d in zip(kernel, dilation))
        if len(pads) != 4 or any(not 0 <= p < k for p, k in zip(pads, reach + reach)):
            raise Problem(f"node {label}: pads {list(pads)} for a kernel reaching {reach[0]}x{reach[1]} cells (each pad "
                          "in [0, reach - 1] expected)")
        if not any(pads):
            return VALID, index
        if pads == (same[0][0], same[1][0], same[0][1], same[1][1]):
            return SAME, index
        if not pad_allowed:
            raise Problem(f"node {label}: pads {list(pads)} are not TFLite's SAME padding (int8 pools with VALID or "
                          "SAME padding)")
        spec = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        shape = (1, size[0] + pads[0] + pads[2], size[1] + pads[1] + pads[3], t.shape[3])
        name = f"{t.name}@padded{len(self.tensors)}"
        padded = self.activation(name, shape, t.quantization.scales[0], t.quantization.zero_points[0], "nhwc")
        self.add_op(label, "PAD", (index, self.int32_const(f"{name}_pads", spec)), padded)
        return VALID, padded

    def add(self, label, a, b, output):
        out, scale, zp, fused = output
        if not isinstance(a, str):
            a, b = b, a                      # the computed operand first
        if not isinstance(a, str):
            raise Problem(f"node {label}: both operands are constants")
        layout = self.index.get(a, (0, "onnx"))[1]
        ia = self.in_layout(label, a, layout)
        if isinstance(b, str):
            ib = self.in_layout(label, b, layout)
        else:
            values, b_scale, b_zp = b
            shape = self.tensors[ia].shape
            if layout != "onnx" or values.size not in (1, int(np.prod(shape))) or \
                    values.ndim > len(shape) or np.broadcast_shapes(values.shape, shape) != tuple(shape):
                raise Problem(f"node {label}: a constant of shape {values.shape} added to {shape} (int8 adds equal "
                              "shapes or one value)")
            q = tflite.Quantization(np.float32([b_scale]), np.int64([b_zp]), 0)
            ib = self.add_tensor(f"{out}_operand", "int8", shape if values.size > 1 else (1,),
                                 data=np.asarray(values, np.int8).reshape(shape if values.size > 1 else (1,)),
                                 quantization=q)
        if self.tensors[ia].shape != self.tensors[ib].shape:
            raise Problem(f"node {label}: operands of shapes {self.tensors[ia].shape} and {self.tensors[ib].shape} "
                          "(int8 adds equal shapes)")
        y = self.activation(out, self.tensors[ia].shape, scale, zp, layout)
        self.add_op(label, "ADD", (ia, ib), y, FusedActivationFunction=fused)

    def unary(self, label, op, attrs, node, x, output):
        out, scale, zp, _ = output
        if x not in self.index:
            raise Problem(f"node {label}: input '{x}' is not computed before this node")
        xq = self.tensors[self.index[x][0]].quantization
        same = float(xq.scales[0]) == float(scale) and int(xq.zero_points[0]) == int(zp)
        if op in ("MaxPool", "AveragePool"):
            if not same:
                raise Problem(f"node {label}: output quantized unlike its input (TFLite Micro pools without "
                              "rescaling)")
            if attrs.get("ceil_mode", 0) or any(d != 1 for d in attrs.get("dilations", (1, 1))) or \
                    attrs.get("storage_order", 0):
                raise Problem(f"node {label}: ceil_mode, dilations or storage_order (int8: the defaults)")
            kernel = tuple(attrs.get("kernel_shape", ()))
            if len(kernel) != 2:
                raise Problem(f"node {label}: a {len(kernel)}-D pooling (int8 pools 2-D)")
            strides = _positive_pair(label, attrs, "strides")
            if min(kernel) < 1:
                raise Problem(f"node {label}: kernel_shape {list(kernel)}")
            index = self.in_layout(label, x, "nhwc")
            padding, index = self.padding(label, attrs, index, kernel, strides, (1, 1), pad_allowed=False)
            if op == "AveragePool" and padding == SAME and attrs.get("count_include_pad", 0):
                raise Problem(f"node {label}: count_include_pad=1 (TFLite Micro averages the cells inside the image)")
            t = self.tensors[index]
            oh, ow = (_out_size(s, k, st, 1, padding) for s, k, st in zip(t.shape[1:3], kernel, strides))
            y = self.activation(out, (1, oh, ow, t.shape[3]), scale, zp, "nhwc")
            self.add_op(label, "MAX_POOL_2D" if op == "MaxPool" else "AVERAGE_POOL_2D", (index,), y, Padding=padding,
                        StrideH=strides[0], StrideW=strides[1], FilterHeight=kernel[0], FilterWidth=kernel[1],
                        FusedActivationFunction=0)
        elif op == "GlobalAveragePool":
            index = self.in_layout(label, x, "nhwc")
            t = self.tensors[index]
            y = self.activation(out, (1, 1, 1, t.shape[3]), scale, zp, "nhwc")
            self.add_op(label, "MEAN", (index, self.int32_const(f"{out}_axes", (1, 2))), y, KeepDims=True)
        elif op in ("Flatten", "Reshape"):
            if not same:
                raise Problem(f"node {label}: output quantized unlike its input (a {op} is a view)")
            index = self.in_layout(label, x, "onnx")
            t = self.tensors[index]
            if op == "Flatten":
                axis = int(attrs.get("axis", 1)) % max(len(t.shape), 1)
                if axis != 1:
                    raise Problem(f"node {label}: Flatten axis {axis} (1 expected: the batch axis kept)")
                shape = (1, int(np.prod(t.shape[1:])))
            else:
                spec = [int(v) for v in np.asarray(self.const(node.input[1], label, "shape")).reshape(-1)]
                shape = _reshaped(label, t.shape, spec, int(attrs.get("allowzero", 0)))
            y = self.activation(out, shape, scale, zp, "onnx")
            self.add_op(label, "RESHAPE", (index,), y)
        elif op == "Softmax":
            index = self.in_layout(label, x, "onnx")
            t = self.tensors[index]
            if int(attrs.get("axis", -1)) % len(t.shape) != len(t.shape) - 1:
                raise Problem(f"node {label}: Softmax over axis {attrs.get('axis')} (int8: the last axis)")
            if abs(float(scale) - 1 / 256) > 1e-9 or int(zp) != -128:
                raise Problem(f"node {label}: Softmax output quantized with scale {float(scale)} and zero point "
                              f"{int(zp)} (TFLite Micro's int8 Softmax writes scale 1/256, zero point -128)")
            y = self.activation(out, t.shape, scale, zp, "onnx")
            self.add_op(label, "SOFTMAX", (index,), y, Beta=1.0)
        else:
            raise Problem(f"node {label}: operator not supported in int8")


def _positive_pair(label, attrs, key):
    values = tuple(int(v) for v in attrs.get(key, (1, 1)))
    if len(values) != 2 or min(values) < 1:
        raise Problem(f"node {label}: {key} {list(values)} (two positive integers expected)")
    return values


def _out_size(size, kernel, stride, dilation, padding):
    if padding == SAME:
        return -(-size // stride)
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _reshaped(label, shape, spec, allowzero):
    spec = [shape[k] if v == 0 and not allowzero and k < len(shape) else v for k, v in enumerate(spec)]
    total = int(np.prod(shape))
    if spec.count(-1) == 1:
        rest = int(np.prod([v for v in spec if v != -1]))
        spec[spec.index(-1)] = total // rest if rest else 0
    if not spec or spec[0] != 1 or int(np.prod(spec)) != total or min(spec) < 1:
        raise Problem(f"node {label}: Reshape of {list(shape)} to {spec} (a batch axis of 1 kept, same size)")
    return tuple(spec)


def _static_shape(value_info):
    dims = value_info.type.tensor_type.shape.dim
    if any(not d.HasField("dim_value") and not d.dim_param for d in dims):
        raise Problem(f"the input '{value_info.name}' has an unknown shape")
    # a symbolic batch axis is one sample
    return tuple(int(d.dim_value) if d.HasField("dim_value") else 1 for d in dims)


def _dtype_words(dtype):
    return {"uint8": "uint8 activations are not int8's arithmetic",
            "int16": "16-bit quantization is not read"}.get(np.dtype(dtype).name, "not int8")
