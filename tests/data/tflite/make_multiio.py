"""Writes multiio_float32.tflite and multiio_int8.tflite: a TFLite model of two inputs and two
outputs, built with the flatbuffers builder of the `tflite` package (the TFLite converter cannot be
run in CI), so the front-end's several-inputs/outputs path reads a real flatbuffer:

    a, b: float32 [1, 4]
    s = ADD(a, b)
    f = FULLY_CONNECTED(s, W [3, 4], bias [3]) with a fused RELU   -> output 'dense' [1, 3]
    p = MUL(a, b)                                                  -> output 'product' [1, 4]

The int8 model is the same graph in full-integer int8 (INT8_QUANT: every tensor's scale and zero
point, chosen by hand so that W and the bias are exact integers; the int32 bias at the input scale
times the weight scale, as the converter writes it): each input and output has its own scale and
zero point.

Run `python3 tests/data/tflite/make_multiio.py` from the repository root; the weights are fixed
literals so the files are byte-reproducible."""

from pathlib import Path

import importlib

import flatbuffers
import numpy as np
from tflite import BuiltinOperator, BuiltinOptions, TensorType

# the builder functions live in the schema's modules (the package exports the reader classes)
(AddOptions, Buffer, FullyConnectedOptions, Model, MulOptions, Operator, OperatorCode, QuantizationParameters,
 SubGraph, Tensor) = (importlib.import_module(f"tflite.{n}") for n in (
     "AddOptions", "Buffer", "FullyConnectedOptions", "Model", "MulOptions", "Operator", "OperatorCode",
     "QuantizationParameters", "SubGraph", "Tensor"))

W = np.array([[0.5, -0.25, 0.125, 1.0], [-1.0, 0.75, 0.5, -0.5], [0.25, 0.25, -0.75, 0.5]], np.float32)
BIAS = np.array([0.1, -0.2, 0.05], np.float32)
OUT = Path(__file__).with_name("multiio_float32.tflite")
OUT_INT8 = Path(__file__).with_name("multiio_int8.tflite")
#: the int8 model's (scale, zero point) per tensor name; W at 1/64 and the bias at 0.1/64 are exact
INT8_QUANT = {"a": (0.0625, 0), "b": (0.05, 3), "sum": (0.1, -5), "W": (1 / 64, 0), "bias": (0.1 / 64, 0),
              "dense": (0.05, -128), "product": (0.125, 2)}


def _vector(builder, start, values, prepend):
    start(builder, len(values))
    for v in reversed(values):
        prepend(v)
    return builder.EndVector()


def _ints(builder, start, values):
    return _vector(builder, start, values, builder.PrependInt32)


def _offsets(builder, start, values):
    return _vector(builder, start, values, builder.PrependUOffsetTRelative)


def _quantization(b, scale, zero_point):
    QuantizationParameters.StartScaleVector(b, 1)
    b.PrependFloat32(scale)
    scales = b.EndVector()
    QuantizationParameters.StartZeroPointVector(b, 1)
    b.PrependInt64(zero_point)
    zeros = b.EndVector()
    QuantizationParameters.Start(b)
    QuantizationParameters.AddScale(b, scales)
    QuantizationParameters.AddZeroPoint(b, zeros)
    return QuantizationParameters.End(b)


def build(int8=False):
    b = flatbuffers.Builder(1024)
    # buffers: 0 empty (TFLite's convention), 1 W, 2 bias
    if int8:
        w = np.round(W / INT8_QUANT["W"][0]).astype(np.int8)
        bias = np.round(BIAS / np.float32(INT8_QUANT["bias"][0])).astype(np.int32)
        assert np.array_equal(w * np.float32(INT8_QUANT["W"][0]), W)
        datas = [b"", w.tobytes(), bias.astype("<i4").tobytes()]
    else:
        datas = [b"", W.tobytes(), BIAS.tobytes()]
    buffers = []
    for data in datas:
        vec = b.CreateByteVector(data) if data else None
        Buffer.Start(b)
        if vec is not None:
            Buffer.AddData(b, vec)
        buffers.append(Buffer.End(b))
    # tensors: 0 a, 1 b, 2 s, 3 W, 4 bias, 5 dense, 6 product
    specs = [("a", [1, 4], 0), ("b", [1, 4], 0), ("sum", [1, 4], 0), ("W", [3, 4], 1), ("bias", [3], 2),
             ("dense", [1, 3], 0), ("product", [1, 4], 0)]
    tensors = []
    for name, shape, buffer in specs:
        n = b.CreateString(name)
        s = _ints(b, Tensor.StartShapeVector, shape)
        q = _quantization(b, *INT8_QUANT[name]) if int8 else None
        Tensor.Start(b)
        Tensor.AddShape(b, s)
        if int8:
            Tensor.AddType(b, TensorType.INT32 if name == "bias" else TensorType.INT8)
            Tensor.AddQuantization(b, q)
        else:
            Tensor.AddType(b, TensorType.FLOAT32)
        Tensor.AddBuffer(b, buffer)
        Tensor.AddName(b, n)
        tensors.append(Tensor.End(b))
    codes = []
    for code in (BuiltinOperator.ADD, BuiltinOperator.FULLY_CONNECTED, BuiltinOperator.MUL):
        OperatorCode.Start(b)
        OperatorCode.AddDeprecatedBuiltinCode(b, min(code, 127))
        OperatorCode.AddBuiltinCode(b, code)
        OperatorCode.AddVersion(b, 1)
        codes.append(OperatorCode.End(b))

    def options(kind):
        if kind == 0:
            AddOptions.Start(b)
            return BuiltinOptions.AddOptions, AddOptions.End(b)
        if kind == 1:
            FullyConnectedOptions.Start(b)
            FullyConnectedOptions.AddFusedActivationFunction(b, 1)  # RELU
            return BuiltinOptions.FullyConnectedOptions, FullyConnectedOptions.End(b)
        MulOptions.Start(b)
        return BuiltinOptions.MulOptions, MulOptions.End(b)

    operators = []
    for kind, ins, outs in ((0, [0, 1], [2]), (1, [2, 3, 4], [5]), (2, [0, 1], [6])):
        i = _ints(b, Operator.StartInputsVector, ins)
        o = _ints(b, Operator.StartOutputsVector, outs)
        option_type, option = options(kind)
        Operator.Start(b)
        Operator.AddOpcodeIndex(b, kind)
        Operator.AddInputs(b, i)
        Operator.AddOutputs(b, o)
        Operator.AddBuiltinOptionsType(b, option_type)
        Operator.AddBuiltinOptions(b, option)
        operators.append(Operator.End(b))
    t = _offsets(b, SubGraph.StartTensorsVector, tensors)
    i = _ints(b, SubGraph.StartInputsVector, [0, 1])
    o = _ints(b, SubGraph.StartOutputsVector, [5, 6])
    ops = _offsets(b, SubGraph.StartOperatorsVector, operators)
    name = b.CreateString("main")
    SubGraph.Start(b)
    SubGraph.AddTensors(b, t)
    SubGraph.AddInputs(b, i)
    SubGraph.AddOutputs(b, o)
    SubGraph.AddOperators(b, ops)
    SubGraph.AddName(b, name)
    subgraph = SubGraph.End(b)
    subgraphs = _offsets(b, Model.StartSubgraphsVector, [subgraph])
    codes_vec = _offsets(b, Model.StartOperatorCodesVector, codes)
    buffers_vec = _offsets(b, Model.StartBuffersVector, buffers)
    description = b.CreateString("nnbuild multiio fixture")
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, codes_vec)
    Model.AddSubgraphs(b, subgraphs)
    Model.AddDescription(b, description)
    Model.AddBuffers(b, buffers_vec)
    b.Finish(Model.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


if __name__ == "__main__":
    OUT.write_bytes(build())
    OUT_INT8.write_bytes(build(int8=True))
    print(OUT, OUT_INT8)
