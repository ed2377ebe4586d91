"""TFLite front-end: a .tflite flatbuffer (what the TFLite converter writes) into the IR.

Two stages, so the int8 work can reuse the first:
* `read(path) -> Graph`: the flatbuffer read with the `tflite` package (the schema's generated
  flatbuffers code; no parser of ours), every count, offset and length checked against the file
  and every declared tensor size against the limits before anything is allocated; each tensor
  keeps its type, shape, constant data and quantization (scales, zero points, quantized axis);
* `load(path) -> Model`: the float32 graph mapped onto the IR layers. TFLite is channels-last
  (NHWC) like the IR, so tensors map one to one once the batch axis (size 1) is dropped. The
  shape arithmetic the converter emits around a Keras Reshape with a free batch axis
  (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) is folded at load, and so is DEQUANTIZE of a
  constant (float16 or weight-only int8 weights). Full-integer (int8) models are read by
  nnbuild.frontends.tflite_int8 (precision int8) from `read`'s graph.
Anything else is refused in one line naming the file, the operator index and its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from nnbuild import limits, names
from nnbuild.errors import NNBuildError
from nnbuild.ir import graph as g
from nnbuild.numerics.tflm_int8 import slice_plan

#: TFLite TensorType -> numpy dtype (the types a model nnbuild reads can hold)
DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16,
          9: np.int8, 10: np.float64}
TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool",
              7: "int16", 8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64",
              13: "resource", 14: "variant", 15: "uint32", 16: "uint16", 17: "int4"}
QUANTIZED = ("int8", "uint8", "int16", "int4")

#: operator -> (its options table in the schema, the fields read from it)
OPTIONS = {
    "CONV_2D": ("Conv2DOptions", ("Padding", "StrideW", "StrideH", "FusedActivationFunction",
                                  "DilationWFactor", "DilationHFactor")),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", ("Padding", "StrideW", "StrideH", "DepthMultiplier",
                                                     "FusedActivationFunction", "DilationWFactor",
                                                     "DilationHFactor")),
    "AVERAGE_POOL_2D": ("Pool2DOptions", ("Padding", "StrideW", "StrideH", "FilterWidth", "FilterHeight",
                                          "FusedActivationFunction")),
    "MAX_POOL_2D": ("Pool2DOptions", ("Padding", "StrideW", "StrideH", "FilterWidth", "FilterHeight",
                                      "FusedActivationFunction")),
    "FULLY_CONNECTED": ("FullyConnectedOptions", ("FusedActivationFunction", "WeightsFormat", "KeepNumDims")),
    "SOFTMAX": ("SoftmaxOptions", ("Beta",)),
    "ADD": ("AddOptions", ("FusedActivationFunction",)),
    "MUL": ("MulOptions", ("FusedActivationFunction",)),
    "CONCATENATION": ("ConcatenationOptions", ("Axis", "FusedActivationFunction")),
    "MEAN": ("ReducerOptions", ("KeepDims",)),
    "REDUCE_MAX": ("ReducerOptions", ("KeepDims",)),
    "SUB": ("SubOptions", ("FusedActivationFunction",)),
    "LEAKY_RELU": ("LeakyReluOptions", ("Alpha",)),
    "RESHAPE": ("ReshapeOptions", ()),
    "STRIDED_SLICE": ("StridedSliceOptions", ("BeginMask", "EndMask", "EllipsisMask", "NewAxisMask",
                                              "ShrinkAxisMask", "Offset")),
    "PACK": ("PackOptions", ("ValuesCount", "Axis")),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("UnidirectionalSequenceLSTMOptions", (
        "FusedActivationFunction", "CellClip", "ProjClip", "TimeMajor", "AsymmetricQuantizeInputs",
        "DiagonalRecurrentTensors")),
}
#: fused activation codes (ActivationFunctionType)
FUSED = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
SUPPORTED = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D", "RESHAPE",
             "SOFTMAX", "LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "ADD", "MUL", "CONCATENATION",
             "PAD", "PADV2", "MEAN", "EXPAND_DIMS", "QUANTIZE", "DEQUANTIZE", "SHAPE", "STRIDED_SLICE", "PACK",
             "REDUCE_MAX", "SUB", "MAXIMUM", "MINIMUM", "LEAKY_RELU", "HARD_SWISH", "TRANSPOSE",
             "UNIDIRECTIONAL_SEQUENCE_LSTM")
#: UNIDIRECTIONAL_SEQUENCE_LSTM's inputs by role (the schema's order); the layer-norm ones are 20..23
LSTM_INPUTS = {"input_to": (1, 2, 3, 4), "recurrent_to": (5, 6, 7, 8), "cell_to": (9, 10, 11),
               "bias": (12, 13, 14, 15), "projection": (16, 17), "state": (18, 19), "layer_norm": (20, 21, 22, 23)}
#: the fused activation of the LSTM's cell input and output -> the IR's recurrent activation
LSTM_ACTIVATIONS = {"TANH": "tanh", "RELU": "relu"}


class Problem(Exception):
    """What is wrong with the file (one line; the caller adds the file name)."""


# --------------------------------------------------------------------------- the reader


@dataclass(frozen=True)
class Quantization:
    """A tensor's affine quantization: real = scale * (q - zero_point), one (scale, zero point)
    per tensor or one per index of axis `axis` (per-channel)."""

    scales: np.ndarray
    zero_points: np.ndarray
    axis: int

    @property
    def per_channel(self) -> bool:
        return self.scales.size > 1


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    type_name: str
    shape: Tuple[int, ...]
    #: the shape with -1 for free dimensions (the batch axis of a Keras model), or None
    signature: Optional[Tuple[int, ...]]
    #: the constant's values (read-only, shape `shape`), None for a computed tensor
    data: Optional[np.ndarray]
    quantization: Optional[Quantization]


@dataclass(frozen=True)
class Operator:
    index: int
    op: str
    version: int
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    #: the options this front-end reads (OPTIONS), by schema field name; new_shape for RESHAPE
    options: Dict[str, object]


@dataclass(frozen=True)
class Graph:
    """The first subgraph of a .tflite file, as read (nothing mapped yet)."""

    tensors: Tuple[Tensor, ...]
    operators: Tuple[Operator, ...]
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    version: int
    description: str


def read(path) -> Graph:
    """The graph of the .tflite file `path`; NNBuildError (one line) when it is not a well-formed
    TFLite model within the limits."""
    path = Path(path)
    size = path.stat().st_size
    if size > limits.MAX_MODEL_FILE_BYTES:
        raise NNBuildError(f"model file is {size} bytes (limit MAX_MODEL_FILE_BYTES = {limits.MAX_MODEL_FILE_BYTES})",
                           path=path)
    data = path.read_bytes()
    try:
        return _Reader(data).graph()
    except Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None
    except Exception as exc:  # noqa: BLE001 - the generated code raises struct.error etc. on a damaged file
        raise NNBuildError(f"not a well-formed TFLite flatbuffer ({type(exc).__name__}: "
                           f"{names.one_line(exc)[:160]})", path=path) from None


class _Reader:
    """The flatbuffer walked with the schema's generated classes; counts checked before loops."""

    def __init__(self, data: bytes):
        import tflite
        self.tflite, self.data = tflite, data
        self.constant_elements = 0

    def count(self, n, item_bytes, what):
        """A vector length the file declares, refused when the file cannot hold that many items."""
        n = int(n)
        if n < 0 or n * item_bytes > len(self.data):
            raise Problem(f"{what}: the file declares {n} entries, more than it can hold")
        if n > limits.MAX_TFLITE_ENTRIES:
            raise Problem(f"{what}: {n} entries (limit MAX_TFLITE_ENTRIES = {limits.MAX_TFLITE_ENTRIES})")
        return n

    def ints(self, array, n, what):
        """A vector read as numpy (already bounded by `count`): a tuple of ints."""
        if n == 0:
            return ()
        values = np.asarray(array)
        if values.shape != (n,):
            raise Problem(f"{what}: vector out of the file")
        return tuple(int(v) for v in values)

    def graph(self) -> Graph:
        tfl, data = self.tflite, self.data
        if len(data) < 8 or data[4:8] != b"TFL3":
            raise Problem("not a TFLite model (no 'TFL3' file identifier)")
        root = int.from_bytes(data[:4], "little")
        if root + 4 > len(data):
            raise Problem(f"root table offset {root} is beyond the end of the file ({len(data)} bytes)")
        model = tfl.Model.GetRootAsModel(bytearray(data), 0)
        version = int(model.Version())
        n_sub = self.count(model.SubgraphsLength(), 4, "subgraphs")
        if n_sub < 1:
            raise Problem("the model has no subgraph")
        codes = [self.opcode(model.OperatorCodes(k))
                 for k in range(self.count(model.OperatorCodesLength(), 4, "operator codes"))]
        n_buffers = self.count(model.BuffersLength(), 4, "buffers")
        sub = model.Subgraphs(0)
        n_tensors = self.count(sub.TensorsLength(), 4, "tensors")
        tensors = tuple(self.tensor(k, sub.Tensors(k), model, n_buffers) for k in range(n_tensors))
        inputs = self.indices(sub.InputsAsNumpy(), self.count(sub.InputsLength(), 4, "inputs"), n_tensors, "inputs")
        outputs = self.indices(sub.OutputsAsNumpy(), self.count(sub.OutputsLength(), 4, "outputs"), n_tensors,
                               "outputs")
        n_operators = self.count(sub.OperatorsLength(), 4, "operators")
        if n_operators > limits.MAX_NODES:
            raise Problem(f"{n_operators} operators (limit MAX_NODES = {limits.MAX_NODES})")
        operators = tuple(self.operator(k, sub.Operators(k), codes, n_tensors) for k in range(n_operators))
        description = (model.Description() or b"").decode("utf-8", "replace")
        return Graph(tensors, operators, inputs, outputs, version, names.one_line(description)[:200])

    def indices(self, array, n, n_tensors, what, optional=False):
        values = self.ints(array, n, what)
        for v in values:
            if not (0 <= v < n_tensors or (optional and v == -1)):
                raise Problem(f"{what}: tensor index {v} is not one of the {n_tensors} tensors")
        return values

    def opcode(self, code):
        from tflite.utils import BUILTIN_OPCODE2NAME
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        if builtin == 32:  # CUSTOM
            custom = (code.CustomCode() or b"").decode("utf-8", "replace")
            return f"CUSTOM '{names.one_line(custom)[:60]}'", int(code.Version())
        return BUILTIN_OPCODE2NAME.get(builtin, f"operator code {builtin}"), int(code.Version())

    def tensor(self, index, t, model, n_buffers) -> Tensor:
        name = names.one_line((t.Name() or b"").decode("utf-8", "replace"))[:200]
        what = f"tensor {index} '{name}'"
        rank = self.count(t.ShapeLength(), 4, f"{what} shape")
        if rank > limits.MAX_TENSOR_RANK:
            raise Problem(f"{what} has rank {rank} (limit MAX_TENSOR_RANK = {limits.MAX_TENSOR_RANK})")
        shape = self.ints(t.ShapeAsNumpy(), rank, f"{what} shape")
        n_sig = self.count(t.ShapeSignatureLength(), 4, f"{what} shape signature")
        signature = self.ints(t.ShapeSignatureAsNumpy(), n_sig, f"{what} shape signature") if n_sig else None
        if any(d < 0 for d in shape):
            raise Problem(f"{what} has a negative dimension in its shape {shape}")
        elements = int(np.prod(shape, dtype=object)) if shape else 1
        if elements > limits.MAX_TENSOR_ELEMENTS:
            raise Problem(f"{what} declares shape {shape}: {elements} elements (limit MAX_TENSOR_ELEMENTS = "
                          f"{limits.MAX_TENSOR_ELEMENTS})")
        type_code = int(t.Type())
        type_name = TYPE_NAMES.get(type_code, f"type {type_code}")
        buffer = int(t.Buffer())
        if not 0 <= buffer < max(n_buffers, 1):
            raise Problem(f"{what} refers to buffer {buffer}, the file has {n_buffers}")
        values = self.buffer(model, buffer, what) if n_buffers else None
        if values is not None and values.size:
            self.constant_elements += elements
            if self.constant_elements > limits.MAX_TOTAL_CONSTANT_ELEMENTS:
                raise Problem(f"{what}: the constants hold more than {limits.MAX_TOTAL_CONSTANT_ELEMENTS} elements "
                              "together (limit MAX_TOTAL_CONSTANT_ELEMENTS)")
            if type_code not in DTYPES:
                raise Problem(f"{what} is a constant of type {type_name} (not read)")
            dtype = np.dtype(DTYPES[type_code]).newbyteorder("<")
            if values.size != elements * dtype.itemsize:
                raise Problem(f"{what}: buffer {buffer} holds {values.size} bytes, its shape {shape} of "
                              f"{type_name} needs {elements * dtype.itemsize}")
            values = np.frombuffer(values.tobytes(), dtype).reshape(shape).astype(dtype.newbyteorder("="))
            values.flags.writeable = False
        else:
            values = None
        return Tensor(index, name, type_name, shape, signature, values, self.quantization(t.Quantization(), what))

    def buffer(self, model, index, what):
        """The bytes of buffer `index` (inside the flatbuffer, or at an offset of the file)."""
        b = model.Buffers(index)
        offset, size = int(b.Offset()), int(b.Size())
        if offset > 1:
            if offset + size > len(self.data):
                raise Problem(f"{what}: buffer {index} spans bytes {offset}..{offset + size}, beyond the end "
                              f"of the file ({len(self.data)} bytes)")
            return np.frombuffer(self.data, np.uint8, size, offset)
        n = int(b.DataLength())
        if n == 0:
            return None
        if n > len(self.data):
            raise Problem(f"{what}: buffer {index} declares {n} bytes, beyond the file ({len(self.data)} bytes)")
        values = b.DataAsNumpy()
        if not isinstance(values, np.ndarray) or values.size != n:
            raise Problem(f"{what}: buffer {index} lies outside the file")
        return values

    def quantization(self, q, what) -> Optional[Quantization]:
        if q is None:
            return None
        n_scale = self.count(q.ScaleLength(), 4, f"{what} scales")
        n_zero = self.count(q.ZeroPointLength(), 8, f"{what} zero points")
        if n_scale == 0 and n_zero == 0:
            return None
        scales = np.array(q.ScaleAsNumpy(), np.float32).reshape(-1) if n_scale else np.zeros(0, np.float32)
        zeros = np.array(q.ZeroPointAsNumpy(), np.int64).reshape(-1) if n_zero else np.zeros(0, np.int64)
        if scales.size != n_scale or zeros.size != n_zero:
            raise Problem(f"{what}: quantization parameters out of the file")
        if n_zero not in (0, n_scale):
            raise Problem(f"{what}: {n_scale} scales but {n_zero} zero points")
        if n_zero == 0:
            zeros = np.zeros(n_scale, np.int64)
        return Quantization(scales, zeros, int(q.QuantizedDimension()))

    def operator(self, index, op, codes, n_tensors) -> Operator:
        code = int(op.OpcodeIndex())
        if not 0 <= code < len(codes):
            raise Problem(f"operator {index}: operator code {code} is not one of the {len(codes)} in the file")
        name, version = codes[code]
        what = f"operator {index} ({name})"
        inputs = self.indices(op.InputsAsNumpy(), self.count(op.InputsLength(), 4, f"{what} inputs"), n_tensors,
                              f"{what} inputs", optional=True)
        outputs = self.indices(op.OutputsAsNumpy(), self.count(op.OutputsLength(), 4, f"{what} outputs"),
                               n_tensors, f"{what} outputs")
        return Operator(index, name, version, inputs, outputs, self.options(op, name, what))

    def options(self, op, name, what):
        if name not in OPTIONS:
            return {}
        cls_name, fields = OPTIONS[name]
        table = op.BuiltinOptions()
        if table is None:
            return {}
        expected = getattr(self.tflite.BuiltinOptions, cls_name)
        if int(op.BuiltinOptionsType()) != expected:
            raise Problem(f"{what}: its options are of union type {int(op.BuiltinOptionsType())}, not {cls_name}")
        options = getattr(self.tflite, cls_name)()
        options.Init(table.Bytes, table.Pos)
        out = {field: getattr(options, field)() for field in fields}
        if name == "RESHAPE":
            n = self.count(options.NewShapeLength(), 4, f"{what} new_shape")
            out["NewShape"] = self.ints(options.NewShapeAsNumpy(), n, f"{what} new_shape")
        return out


# --------------------------------------------------------------------------- the IR


def load(path):
    path = Path(path)
    graph = read(path)
    try:
        return _Converter(graph, path).run(names.c_identifier(path.stem))
    except Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None


class _Converter:
    """One pass over the operators in file order (the converter writes them topologically)."""

    def __init__(self, graph: Graph, path):
        self.graph, self.path = graph, path
        self.layers, self.edges, self.used = [], {}, set()
        self.tensor_elements = 0
        self.ir = {}      # tensor index -> (IR tensor name, sample shape)
        self.consts = {}  # tensor index -> numpy constant (file buffers and folded results)
        for t in graph.tensors:
            if t.data is not None:
                self.consts[t.index] = t.data

    def run(self, name):
        graph = self.graph
        if not graph.inputs or not graph.outputs:
            raise Problem(f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs: a model needs at least one of each")
        if len(graph.inputs) + len(graph.outputs) > limits.MAX_MODEL_IO:
            raise Problem(f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs (limit MAX_MODEL_IO = "
                          f"{limits.MAX_MODEL_IO} arguments of the C function)")
        t_ins, t_outs = [graph.tensors[i] for i in graph.inputs], [graph.tensors[i] for i in graph.outputs]
        t_in = t_ins[0]
        for t, role in [(t, "input") for t in t_ins] + [(t, "output") for t in t_outs]:
            if t.type_name in QUANTIZED:
                raise Problem(f"the model's {role} '{t.name}' is {t.type_name}: quantized models are read as "
                              "full-integer int8 models (int8 input and output, precision int8) or not at all")
            if t.type_name != "float32":
                raise Problem(f"the model's {role} '{t.name}' is {t.type_name}, not float32")
        shape = self.sample(t_in, "the model input")
        self.input_name = self.unique(t_in.name or "input")
        self.ir[t_in.index] = (self.input_name, shape)
        shapes = {self.input_name: shape}
        self.shapes = shapes
        more_inputs, labels = [], {self.input_name: t_in.name}
        for t in t_ins[1:]:
            if t.index in self.ir:
                raise Problem(f"the input '{t.name}' is listed twice")
            more = self.sample(t, "the model input")
            ir_name = self.unique(t.name or "input")
            self.ir[t.index] = (ir_name, more)
            shapes[ir_name] = more
            labels[ir_name] = t.name
            more_inputs.append((ir_name, more))
        for op in graph.operators:
            if op.op not in SUPPORTED:
                raise Problem(f"operator {op.index} ({op.op}): operator not supported "
                              f"(supported: {', '.join(sorted(SUPPORTED))})")
            try:
                getattr(self, "op_" + op.op)(op)
            except Problem as problem:
                raise Problem(f"operator {op.index} ({op.op}): {problem}") from None
            except (ValueError, IndexError, KeyError, TypeError, ArithmeticError) as exc:
                raise Problem(f"operator {op.index} ({op.op}): {names.one_line(exc)[:200]}") from None
        several = len(t_ins) > 1 or len(t_outs) > 1
        outputs = []
        for t in t_outs:
            if t.index not in self.ir:
                raise Problem(f"the output '{t.name}' is not computed from the input")
            outputs.append(self.ir[t.index][0])
            if several and outputs[-1] in labels:
                raise Problem(f"the output '{t.name}' is the input '{labels[outputs[-1]]}' itself: there is "
                              "nothing to compute for it")
        out = outputs[0]
        if out == self.input_name or not self.layers:
            raise Problem("the model computes nothing")
        if not several and self.layers[-1].name != out:
            self.add(g.Reshape(self.unique(out + "_output"), self.shapes[out], source_type="Output"), [out])
        model = g.Model(name, shape, self.layers, source_files=(str(self.path),),
                        meta={"format": "tflite", "schema_version": graph.version,
                              "description": graph.description},
                        edges=self.edges, input_name=self.input_name)
        if several:   # each input and output is an argument of the C function, in the file's order
            labels.update({o: t.name for o, t in zip(outputs, t_outs)})
            model.more_inputs, model.output_names, model.io_labels = tuple(more_inputs), tuple(outputs), labels
        elif self.is_chain():
            model.edges = None
        try:
            return g.validate(model)
        except g.LayerProblem as problem:
            raise Problem(f"layer '{problem.layer}': {problem}" if problem.layer else str(problem)) from None

    def is_chain(self):
        previous = self.input_name
        for layer in self.layers:
            if self.edges[layer.name] != (previous,):
                return False
            previous = layer.name
        return True

    # ----------------------------------------------------------------------- helpers

    def sample(self, t, what):
        """The shape of a tensor without its batch axis (which must be 1, or free)."""
        if len(t.shape) < 2:
            raise Problem(f"{what} '{t.name}' has shape {t.shape}: expected a batch axis and a sample")
        if t.shape[0] != 1:
            raise Problem(f"{what} '{t.name}' has batch size {t.shape[0]} (one sample per call: 1)")
        if min(t.shape[1:]) < 1:
            raise Problem(f"{what} '{t.name}' has an empty dimension in {t.shape}")
        return tuple(t.shape[1:])

    def unique(self, base):
        return names.fresh_identifier(str(base)[:48], self.used)

    def add(self, layer, sources):
        out = tuple(int(d) for d in layer.output_shape(*[self.shapes[s] for s in sources]))
        self.tensor_elements += int(np.prod(out, dtype=object))
        if self.tensor_elements > limits.MAX_TOTAL_TENSOR_ELEMENTS:
            raise Problem(f"the computed tensors hold more than {limits.MAX_TOTAL_TENSOR_ELEMENTS} elements together "
                          "(limit MAX_TOTAL_TENSOR_ELEMENTS)")
        if len(self.layers) >= limits.MAX_LAYERS:
            raise Problem(f"more than {limits.MAX_LAYERS} layers (limit MAX_LAYERS)")
        self.layers.append(layer)
        self.edges[layer.name] = tuple(sources)
        self.shapes[layer.name] = out
        return layer.name

    def label(self, op):
        return self.unique(f"{op.op.lower()}_{op.index}")

    def tensor(self, index, what="input"):
        """(IR name, sample shape) of a computed tensor."""
        if index < 0 or index not in self.ir:
            if index in self.consts:
                raise Problem(f"{what} is a constant where a computed tensor is expected")
            raise Problem(f"{what} tensor {index} is not computed before this operator")
        return self.ir[index]

    def const(self, index, what):
        if index < 0 or index not in self.consts:
            raise Problem(f"{what} is not a constant")
        return self.consts[index]

    def weight(self, index, what):
        """A float constant as float32 (DEQUANTIZE of constants is folded before)."""
        value = self.const(index, what)
        if value.dtype.kind != "f":
            tensor = self.graph.tensors[index]
            if tensor.type_name in QUANTIZED:
                raise Problem(f"{what} is {tensor.type_name}: quantized weights without DEQUANTIZE (dynamic-range "
                              "quantization) are not supported (float32 models, or full-integer int8 models with int8 input and output)")
            raise Problem(f"{what} is {value.dtype}, not floating point")
        return np.asarray(value, np.float32)

    def check_output(self, op, k=0):
        """The output tensor of a computing operator must be float32 (an int8 one is a quantized model)."""
        t = self.graph.tensors[op.outputs[k]]
        if t.type_name in QUANTIZED:
            raise Problem(f"output '{t.name}' is {t.type_name}: a model quantized inside with float32 input and output "
                          "is not generated (convert it with int8 input and output for precision int8)")
        if t.type_name != "float32":
            raise Problem(f"output '{t.name}' is {t.type_name}, not float32")
        return t

    def emit(self, op, layer, sources, fused=0):
        """Add `layer` (which carries the linear part), then the fused activation, and bind the
        operator's output tensor to the result."""
        t = self.check_output(op)
        name = self.add(layer, sources)
        name = self.activation(op, name, fused)
        shape = self.shapes[name]
        declared = tuple(t.shape[1:])
        dynamic = t.signature is not None and any(d < 0 for d in t.signature[1:])  # shape holds placeholders
        if t.shape and not dynamic and (t.shape[0] != 1 or declared != shape):
            raise Problem(f"output '{t.name}' is declared {t.shape}, the operator computes (1,) + {shape}")
        self.ir[t.index] = (name, shape)

    def activation(self, op, name, fused):
        kind = FUSED.get(int(fused), f"code {fused}")
        if kind == "NONE":
            return name
        if kind in ("RELU", "TANH") and hasattr(self.layers[-1], "activation") and self.layers[-1].name == name:
            import dataclasses
            self.layers[-1] = dataclasses.replace(self.layers[-1], activation=kind.lower())
            return name
        if kind in ("RELU", "TANH"):
            return self.add(g.Activation(self.unique(name + "_" + kind.lower()), kind.lower(),
                                         source_type=f"{op.op} fused {kind}"), [name])
        if kind in ("RELU6", "RELU_N1_TO_1"):
            low, high = (0.0, 6.0) if kind == "RELU6" else (-1.0, 1.0)
            return self.add(g.Unary(self.unique(name + "_" + kind.lower()), "clip", (low, high),
                                    source_type=f"{op.op} fused {kind}"), [name])
        raise Problem(f"fused activation {kind} not supported")

    def fused(self, op):
        return int(op.options.get("FusedActivationFunction", 0))

    def needs(self, op, n_in, options=False):
        if len(op.inputs) < n_in or len(op.outputs) != 1:
            raise Problem(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        if options and not op.options:
            raise Problem("the operator has no options")

    def axis(self, value, rank):
        """A TFLite axis (batch axis included) as a sample axis."""
        value = int(value)
        if not -rank - 1 <= value <= rank:
            raise Problem(f"axis {value} out of range for rank {rank + 1}")
        value %= rank + 1
        if value == 0:
            raise Problem("an operation along the batch axis")
        return value - 1

    # ----------------------------------------------------------------------- operators

    def op_FULLY_CONNECTED(self, op):
        self.needs(op, 2)
        if int(op.options.get("WeightsFormat", 0)) != 0:
            raise Problem("shuffled weights format")
        src, shape = self.tensor(op.inputs[0])
        w = self.weight(op.inputs[1], "weights")
        if w.ndim != 2:
            raise Problem(f"weights of shape {w.shape} (expected [units, inputs])")
        units, n_in = w.shape
        bias = self.weight(op.inputs[2], "bias") if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if shape[-1] != n_in or (len(shape) > 1 and not op.options.get("KeepNumDims", False)):
            if int(np.prod(shape)) != n_in:
                raise Problem(f"input of shape {shape} for weights expecting {n_in} inputs")
            if len(shape) > 1:
                src = self.add(g.Reshape(self.unique(f"fully_connected_{op.index}_flat"), (n_in,),
                                         source_type="FULLY_CONNECTED (flatten)"), [src])
        layer = g.Dense(self.label(op), np.ascontiguousarray(w.T), bias, source_type="FULLY_CONNECTED")
        self.emit(op, layer, [src], self.fused(op))

    def window(self, op, size, kernel, dilation=(1, 1)):
        """(strides, pads (top, bottom, left, right)) of a sliding-window operator."""
        strides = (int(op.options.get("StrideH", 1)), int(op.options.get("StrideW", 1)))
        padding = int(op.options.get("Padding", 0))
        if min(strides) < 1 or min(dilation) < 1:
            raise Problem(f"strides {strides} and dilation {dilation} must be >= 1")
        if padding == 1:
            return strides, (0, 0, 0, 0)
        if padding != 0:
            raise Problem(f"padding type {padding} (SAME or VALID)")
        top, bottom = g.same_padding(size[0], kernel[0], strides[0], dilation[0])
        left, right = g.same_padding(size[1], kernel[1], strides[1], dilation[1])
        return strides, (top, bottom, left, right)

    def conv_inputs(self, op):
        self.needs(op, 2, options=True)
        src, shape = self.tensor(op.inputs[0])
        if len(shape) != 3:
            raise Problem(f"input of shape {shape} (expected height, width, channels)")
        w = self.weight(op.inputs[1], "filter")
        if w.ndim != 4:
            raise Problem(f"filter of shape {w.shape} (expected 4-D)")
        bias = self.weight(op.inputs[2], "bias") if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        dilation = (int(op.options.get("DilationHFactor", 1)), int(op.options.get("DilationWFactor", 1)))
        return src, shape, w, bias, dilation

    def op_CONV_2D(self, op):
        src, shape, w, bias, dilation = self.conv_inputs(op)
        out_c, kh, kw, in_c = w.shape  # OHWI
        if in_c < 1 or shape[2] % in_c:
            raise Problem(f"filter of {in_c} input channels for an input of {shape[2]} channels")
        strides, pads = self.window(op, shape, (kh, kw), dilation)
        layer = g.Conv2D(self.label(op), np.ascontiguousarray(w.transpose(1, 2, 3, 0)), bias, strides, dilation,
                         pads, groups=shape[2] // in_c, source_type="CONV_2D")
        self.emit(op, layer, [src], self.fused(op))

    def op_DEPTHWISE_CONV_2D(self, op):
        src, shape, w, bias, dilation = self.conv_inputs(op)
        one, kh, kw, out_c = w.shape  # 1, H, W, C * multiplier
        channels = shape[2]
        if one != 1 or out_c % channels:
            raise Problem(f"depthwise filter of shape {w.shape} for an input of {channels} channels")
        multiplier = int(op.options.get("DepthMultiplier", 0)) or out_c // channels
        if multiplier * channels != out_c:
            raise Problem(f"depth multiplier {multiplier} for {channels} channels and {out_c} filters")
        strides, pads = self.window(op, shape, (kh, kw), dilation)
        kernel = np.ascontiguousarray(w.reshape(kh, kw, 1, out_c))
        layer = g.Conv2D(self.label(op), kernel, bias, strides, dilation, pads, groups=channels,
                         source_type="DEPTHWISE_CONV_2D")
        self.emit(op, layer, [src], self.fused(op))

    def pool(self, op, mode):
        self.needs(op, 1, options=True)
        src, shape = self.tensor(op.inputs[0])
        if len(shape) != 3:
            raise Problem(f"input of shape {shape} (expected height, width, channels)")
        size = (int(op.options["FilterHeight"]), int(op.options["FilterWidth"]))
        if min(size) < 1:
            raise Problem(f"filter size {size}")
        strides, pads = self.window(op, shape, size)
        layer = g.Pool2D(self.label(op), mode, size, strides, pads, source_type=op.op)
        self.emit(op, layer, [src], self.fused(op))

    def op_MAX_POOL_2D(self, op):
        self.pool(op, "max")

    def op_AVERAGE_POOL_2D(self, op):
        self.pool(op, "avg")

    def op_RESHAPE(self, op):
        self.needs(op, 1)
        if op.inputs[0] in self.consts:
            return self.fold(op, lambda x: x.reshape(self.graph.tensors[op.outputs[0]].shape))
        src, shape = self.tensor(op.inputs[0])
        if len(op.inputs) > 1 and op.inputs[1] >= 0:
            target = [int(v) for v in np.asarray(self.const(op.inputs[1], "the new shape")).reshape(-1)]
        else:
            target = list(op.options.get("NewShape", ()))
        if not target:
            target = list(self.graph.tensors[op.outputs[0]].shape)
        total = int(np.prod(shape))
        if target.count(-1) > 1 or any(d < -1 or d == 0 for d in target):
            raise Problem(f"new shape {tuple(target)}")
        known = int(np.prod([d for d in target if d != -1])) if target else 1
        if -1 in target:
            if known == 0 or total % known:
                raise Problem(f"new shape {tuple(target)} for {total} values")
            target[target.index(-1)] = total // known
        if int(np.prod(target)) != total or len(target) < 2 or target[0] != 1:
            raise Problem(f"new shape {tuple(target)} for a sample of shape {shape} (the batch axis must stay first)")
        self.emit(op, g.Reshape(self.label(op), tuple(target[1:]), source_type="RESHAPE"), [src])

    def op_EXPAND_DIMS(self, op):
        self.needs(op, 2)
        axis = int(np.asarray(self.const(op.inputs[1], "axis")).reshape(-1)[0])
        if op.inputs[0] in self.consts:
            return self.fold(op, lambda x: np.expand_dims(x, axis))
        src, shape = self.tensor(op.inputs[0])
        full = np.expand_dims(np.zeros((1,) + shape, np.int8), axis).shape
        self.emit(op, g.Reshape(self.label(op), tuple(full[1:]), source_type="EXPAND_DIMS"), [src])

    def op_SOFTMAX(self, op):
        self.needs(op, 1)
        src, shape = self.tensor(op.inputs[0])
        beta = float(op.options.get("Beta", 1.0)) if op.options else 1.0
        if not (beta == beta and abs(beta) < float("inf")) or beta == 0.0:
            raise Problem(f"beta {beta}")
        if beta != 1.0:
            src = self.add(g.Elementwise(self.unique(f"softmax_{op.index}_beta"), "mul",
                                         ((1, np.array([beta], np.float32)),), source_type="SOFTMAX (beta)"), [src])
        self.emit(op, g.Activation(self.label(op), "softmax", source_type="SOFTMAX"), [src])

    def unary(self, op, activation):
        self.needs(op, 1)
        src, _ = self.tensor(op.inputs[0])
        self.emit(op, g.Activation(self.label(op), activation, source_type=op.op), [src])

    def op_LOGISTIC(self, op):
        self.unary(op, "sigmoid")

    def op_TANH(self, op):
        self.unary(op, "tanh")

    def op_RELU(self, op):
        self.unary(op, "relu")

    def clip(self, op, low, high):
        self.needs(op, 1)
        src, _ = self.tensor(op.inputs[0])
        self.emit(op, g.Unary(self.label(op), "clip", (low, high), source_type=op.op), [src])

    def op_RELU6(self, op):
        self.clip(op, 0.0, 6.0)

    def op_RELU_N1_TO_1(self, op):
        self.clip(op, -1.0, 1.0)

    def binary(self, op, kind):
        self.needs(op, 2)
        if all(i in self.consts for i in op.inputs[:2]):
            if self.fused(op):
                raise Problem("a fused activation on constants")
            fn = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "max": np.maximum, "min": np.minimum}[kind]
            shape = np.broadcast_shapes(*(self.consts[i].shape for i in op.inputs[:2]))
            if int(np.prod(shape, dtype=object)) > limits.MAX_TENSOR_ELEMENTS:
                raise Problem(f"constants broadcast to {shape} (limit MAX_TENSOR_ELEMENTS = "
                              f"{limits.MAX_TENSOR_ELEMENTS})")
            return self.fold(op, lambda a, b: fn(a, b).astype(a.dtype))
        sources, constants = [], []
        for position, index in enumerate(op.inputs[:2]):
            if index in self.consts:
                value = self.weight(index, f"operand {position}")
                rank = len(self.graph.tensors[op.outputs[0]].shape)
                if value.ndim == rank:
                    if value.shape[0] != 1:
                        raise Problem(f"constant operand of shape {value.shape} varies along the batch axis")
                    value = value[0]
                constants.append((position, value.reshape(value.shape or (1,))))
            else:
                sources.append(self.tensor(index, f"operand {position}")[0])
        layer = g.Elementwise(self.label(op), kind, tuple(constants), source_type=op.op)
        self.emit(op, layer, sources, self.fused(op))

    def op_ADD(self, op):
        self.binary(op, "add")

    def op_MUL(self, op):
        self.binary(op, "mul")

    def op_SUB(self, op):
        self.binary(op, "sub")

    def op_MAXIMUM(self, op):
        self.binary(op, "max")

    def op_MINIMUM(self, op):
        self.binary(op, "min")

    def op_LEAKY_RELU(self, op):
        self.needs(op, 1)
        src, _ = self.tensor(op.inputs[0])
        alpha = float(op.options.get("Alpha", 0.0)) if op.options else 0.0
        if not abs(alpha) < float("inf"):
            raise Problem(f"alpha {alpha}")
        self.emit(op, g.Unary(self.label(op), "leaky_relu", (alpha,), source_type="LEAKY_RELU"), [src])

    def op_HARD_SWISH(self, op):
        """x * relu6(x + 3) / 6, as x times hard_sigmoid(x / 6 + 1/2) (ONNX HardSwish's definition)."""
        self.needs(op, 1)
        src, _ = self.tensor(op.inputs[0])
        gate = self.add(g.Unary(self.unique(f"hard_swish_{op.index}_gate"), "hard_sigmoid", (1.0 / 6.0, 0.5),
                                source_type="HARD_SWISH (gate)"), [src])
        self.emit(op, g.Elementwise(self.label(op), "mul", source_type="HARD_SWISH"), [src, gate])

    def op_TRANSPOSE(self, op):
        self.needs(op, 2)
        src, shape = self.tensor(op.inputs[0])
        perm = [int(p) for p in np.asarray(self.const(op.inputs[1], "perm")).reshape(-1)]
        if sorted(perm) != list(range(len(shape) + 1)) or perm[0] != 0:
            raise Problem(f"perm {tuple(perm)} (a permutation keeping the batch axis first)")
        self.emit(op, g.Transpose(self.label(op), tuple(p - 1 for p in perm[1:]), source_type="TRANSPOSE"), [src])

    def op_CONCATENATION(self, op):
        if len(op.inputs) < 1 or len(op.outputs) != 1 or not op.options:
            raise Problem(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        axis_value = int(op.options["Axis"])
        if all(i in self.consts for i in op.inputs):
            return self.fold(op, lambda *xs: np.concatenate(xs, axis_value))
        sources = [self.tensor(i, f"input {k}") for k, i in enumerate(op.inputs)]
        axis = self.axis(axis_value, len(sources[0][1]))
        if len(sources) == 1:
            self.ir[op.outputs[0]] = sources[0]
            return
        layer = g.Concatenate(self.label(op), axis, source_type="CONCATENATION")
        self.emit(op, layer, [s for s, _ in sources], self.fused(op))

    def op_PAD(self, op):
        self.needs(op, 2)
        src, shape = self.tensor(op.inputs[0])
        pads = np.asarray(self.const(op.inputs[1], "paddings")).astype(np.int64)
        value = 0.0
        if op.op == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = float(np.asarray(self.weight(op.inputs[2], "constant value")).reshape(-1)[0])
        if pads.shape != (len(shape) + 1, 2) or pads.min() < 0:
            raise Problem(f"paddings of shape {pads.shape} with values {pads.reshape(-1).tolist()[:8]} for a "
                          f"rank-{len(shape) + 1} tensor (expected [rank, 2], >= 0)")
        if tuple(pads[0]) != (0, 0):
            raise Problem("padding the batch axis")
        pairs = tuple((int(a), int(b)) for a, b in pads[1:])
        if len(shape) == 3 and pairs[2] == (0, 0) and value == 0.0:
            layer = g.ZeroPadding2D(self.label(op), pairs[0] + pairs[1], source_type=op.op)
        else:
            layer = g.Pad(self.label(op), pairs, "constant", value, source_type=op.op)
        self.emit(op, layer, [src])

    op_PADV2 = op_PAD

    def op_REDUCE_MAX(self, op):
        self.op_MEAN(op, "max")

    def op_MEAN(self, op, reduction="mean"):
        self.needs(op, 2)
        src, shape = self.tensor(op.inputs[0])
        axes = [self.axis(a, len(shape)) for a in np.asarray(self.const(op.inputs[1], "axes")).reshape(-1)]
        keep = bool(op.options.get("KeepDims", False)) if op.options else False
        if not axes:
            raise Problem("a reduction over no axis")
        layer = g.Reduce(self.label(op), reduction, tuple(sorted(set(axes))), keep, source_type=op.op)
        self.emit(op, layer, [src])

    def op_QUANTIZE(self, op):
        self.needs(op, 1)
        t_in, t_out = self.graph.tensors[op.inputs[0]], self.graph.tensors[op.outputs[0]]
        if t_in.type_name == t_out.type_name == "float32" and op.inputs[0] in self.ir:
            self.ir[op.outputs[0]] = self.ir[op.inputs[0]]
            return
        raise Problem(f"{t_in.type_name} to {t_out.type_name}: a model quantized inside with float32 input and output "
                      "is not generated (convert it with inference_input_type = inference_output_type = tf.int8 for "
                      "precision int8)")

    def op_DEQUANTIZE(self, op):
        self.needs(op, 1)
        t_in, t_out = self.graph.tensors[op.inputs[0]], self.graph.tensors[op.outputs[0]]
        if t_out.type_name != "float32":
            raise Problem(f"output of type {t_out.type_name}")
        if op.inputs[0] in self.consts:
            return self.fold(op, lambda x: dequantized(x, t_in.quantization, t_in.name))
        return self.op_QUANTIZE(op)

    # ----------------------------------------------------------------------- folding

    def fold(self, op, function):
        """Evaluate an operator whose inputs are all constants (sizes bounded by the declared shapes)."""
        values = []
        for k, index in enumerate(op.inputs):
            if index < 0:
                continue
            values.append(self.const(index, f"input {k}"))
        out = np.asarray(function(*values))
        declared = self.graph.tensors[op.outputs[0]]
        if out.size > limits.MAX_TENSOR_ELEMENTS:
            raise Problem(f"folds to {out.size} elements (limit MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS})")
        if declared.shape and tuple(out.shape) != tuple(declared.shape) and out.size == int(np.prod(declared.shape)):
            out = out.reshape(declared.shape)
        self.consts[op.outputs[0]] = out

    def op_SHAPE(self, op):
        self.needs(op, 1)
        index = op.inputs[0]
        if index in self.ir:
            shape = (1,) + tuple(self.ir[index][1])
        elif index in self.consts:
            shape = self.consts[index].shape
        else:
            raise Problem(f"input tensor {index} is not computed before this operator")
        t_out = self.graph.tensors[op.outputs[0]]
        dtype = np.int64 if t_out.type_name == "int64" else np.int32
        self.consts[op.outputs[0]] = np.array(shape, dtype)

    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        """The LSTM over the sequence [1, T, F] (TFLite's gates i, f, c, o reordered to the IR's
        i, o, f, c); no input gate weights is CIFG (i = 1 - f); the state starts at zero (or the
        state tensors' constant values) on every call."""
        if len(op.inputs) not in (20, 24) or len(op.outputs) != 1:
            raise Problem(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs (expected 20 or 24, and 1)")
        o = op.options
        if o.get("TimeMajor", False):
            raise Problem("time_major (nnbuild reads the batch-major sequence [1, steps, features])")
        if o.get("DiagonalRecurrentTensors", False):
            raise Problem("diagonal recurrent weights")
        present = lambda k: k < len(op.inputs) and op.inputs[k] >= 0  # noqa: E731
        if any(present(k) for k in LSTM_INPUTS["projection"] + LSTM_INPUTS["layer_norm"]):
            raise Problem("projection or layer-normalisation weights (plain LSTM cells only)")
        act = FUSED.get(int(o.get("FusedActivationFunction", 4)), "?")
        if act not in LSTM_ACTIVATIONS:
            raise Problem(f"cell activation {act} (supported: TANH, RELU)")
        src, shape = self.tensor(op.inputs[0])
        if len(shape) != 2:
            raise Problem(f"input of sample shape {shape}: expected [steps, features]")
        w = {k: self.weight(op.inputs[k], f"input {k}") if present(k) else None
             for k in LSTM_INPUTS["input_to"] + LSTM_INPUTS["recurrent_to"] + LSTM_INPUTS["cell_to"]
             + LSTM_INPUTS["bias"]}
        cifg = w[1] is None
        if cifg != (w[5] is None) or (cifg and w[12] is not None):
            raise Problem("input gate weights given in part (CIFG drops all of them)")
        if w[2] is None or w[6] is None:
            raise Problem("missing forget gate weights")
        if w[2].ndim != 2 or w[2].shape[1] != shape[1]:
            raise Problem(f"input-to-forget weights of shape {w[2].shape} for {shape[1]} features")
        hidden, features = w[2].shape
        want = {**{k: (hidden, features) for k in LSTM_INPUTS["input_to"]},
                **{k: (hidden, hidden) for k in LSTM_INPUTS["recurrent_to"]},
                **{k: (hidden,) for k in LSTM_INPUTS["cell_to"] + LSTM_INPUTS["bias"]}}
        for k, value in w.items():
            if value is not None and value.shape != want[k]:
                raise Problem(f"input {k} has shape {value.shape}, expected {want[k]} ({hidden} units)")
        if any(w[k] is None for k in (3, 4, 7, 8, 13, 14, 15)):
            raise Problem("missing forget, cell or output gate weights or biases")
        zeros_in, zeros_rec, zeros_h = (np.zeros((hidden, features), np.float32), np.zeros((hidden, hidden), np.float32),
                                        np.zeros(hidden, np.float32))

        def gates(i, f, c, out, zero):
            # TFLite order i, f, c, o -> the IR's (ONNX's) i, o, f, c
            return [zero if m is None else m for m in (i, out, f, c)]
        kernel = np.concatenate(gates(w[1], w[2], w[3], w[4], zeros_in))
        recurrent = np.concatenate(gates(w[5], w[6], w[7], w[8], zeros_rec))
        bias = np.concatenate(gates(w[12], w[13], w[14], w[15], zeros_h))
        peephole = None
        if any(w[k] is not None for k in LSTM_INPUTS["cell_to"]):
            if w[10] is None or w[11] is None or (w[9] is None) != cifg:
                raise Problem("peephole weights given in part")
            peephole = np.stack([zeros_h if w[9] is None else w[9], w[11], w[10]])[None]
        states = []
        for k, what in zip(LSTM_INPUTS["state"], ("output state", "cell state")):
            value = self.consts.get(op.inputs[k]) if present(k) else None
            value = None if value is None else np.asarray(value, np.float32).reshape(-1)
            if value is not None and value.size != hidden:
                raise Problem(f"{what} of {value.size} values for {hidden} units")
            states.append(None if value is None or not value.any() else value[None])
        clip = float(o.get("CellClip", 0.0) or 0.0)
        layer = g.Recurrent(self.label(op), "lstm", ("forward",), kernel[None], recurrent[None], bias[None],
                            peephole=peephole, initial_h=states[0], initial_c=states[1],
                            activations=("sigmoid", LSTM_ACTIVATIONS[act], LSTM_ACTIVATIONS[act]),
                            cell_clip=clip if clip > 0 else None,
                            coupling="input_from_forget" if cifg else None, source_type=op.op)
        name = self.add(layer, [src])
        steps = shape[0]
        # [T, 1, H] -> the operator's [1, T, H]: the same elements
        name = self.add(g.Reshape(self.unique(name + "_sequence"), (steps, hidden), source_type=op.op), [name])
        t = self.check_output(op)
        if tuple(t.shape) != (1, steps, hidden):
            raise Problem(f"output '{t.name}' is declared {t.shape}, the operator computes (1, {steps}, {hidden})")
        self.ir[t.index] = (name, (steps, hidden))

    def strided_slice_tensor(self, op):
        """STRIDED_SLICE of a computed tensor (the last step of a sequence): a Slice, then the
        shrunk axes dropped; the batch axis is kept whole."""
        src, shape = self.tensor(op.inputs[0])
        begin, end, strides = (np.asarray(self.const(i, w)).astype(np.int64).reshape(-1)
                               for i, w in zip(op.inputs[1:4], ("begin", "end", "strides")))
        if op.options.get("ShrinkAxisMask", 0) & 1:
            raise Problem("slicing the batch axis")
        try:   # TFLite's index arithmetic, one home: the int8 model's
            starts, steps, counts, kept = slice_plan((1,) + tuple(shape), begin, end, strides, op.options)
        except ValueError as e:
            raise Problem(str(e)) from None
        name = self.add(g.Slice(self.label(op), starts, steps, counts, source_type=op.op), [src])
        if len(kept) != len(counts):
            name = self.add(g.Reshape(self.unique(name + "_shrink"), tuple(kept) or (1,), source_type=op.op), [name])
        self.check_output(op)
        self.ir[op.outputs[0]] = (name, self.shapes[name])

    def op_STRIDED_SLICE(self, op):
        self.needs(op, 4)
        if op.inputs[0] not in self.consts:
            self.strided_slice_tensor(op)
            return
        x = self.consts[op.inputs[0]]
        begin, end, strides = (np.asarray(self.const(i, w)).astype(np.int64).reshape(-1)
                               for i, w in zip(op.inputs[1:4], ("begin", "end", "strides")))
        options = op.options
        if options.get("EllipsisMask", 0) or options.get("NewAxisMask", 0) or options.get("Offset", False):
            raise Problem("ellipsis, new-axis or offset slicing")
        if not len(begin) == len(end) == len(strides) <= x.ndim:
            raise Problem(f"begin/end/strides of lengths {len(begin)}, {len(end)}, {len(strides)} for rank {x.ndim}")
        index, shrink = [], []
        for k in range(len(begin)):
            if strides[k] == 0:
                raise Problem("a stride of 0")
            if options.get("ShrinkAxisMask", 0) >> k & 1:
                i = int(begin[k])
                if not -x.shape[k] <= i < x.shape[k]:
                    raise Problem(f"index {i} out of range for an axis of size {x.shape[k]}")
                index.append(i)
                shrink.append(k)
                continue
            b = None if options.get("BeginMask", 0) >> k & 1 else int(begin[k])
            e = None if options.get("EndMask", 0) >> k & 1 else int(end[k])
            index.append(slice(b, e, int(strides[k])))
        self.consts[op.outputs[0]] = np.asarray(x[tuple(index)])

    def op_PACK(self, op):
        if not op.inputs or len(op.outputs) != 1:
            raise Problem(f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
        values = [self.const(i, f"input {k} (only constants are packed)") for k, i in enumerate(op.inputs)]
        axis = int(op.options.get("Axis", 0)) if op.options else 0
        if not -values[0].ndim - 1 <= axis <= values[0].ndim:
            raise Problem(f"axis {axis} out of range")
        self.consts[op.outputs[0]] = np.stack(values, axis)


def dequantized(values, quantization, name):
    """real = scale * (q - zero_point) of a constant, per tensor or per channel (float16: a cast)."""
    if values.dtype == np.float16 or values.dtype.kind == "f":
        return values.astype(np.float32)
    if quantization is None or quantization.scales.size == 0:
        raise Problem(f"constant '{name}' of type {values.dtype} has no quantization parameters")
    scales, zeros = quantization.scales.astype(np.float64), quantization.zero_points.astype(np.float64)
    if scales.size > 1:
        axis = quantization.axis
        if not 0 <= axis < values.ndim or values.shape[axis] != scales.size:
            raise Problem(f"constant '{name}': {scales.size} scales along axis {axis} of shape {values.shape}")
        shape = [1] * values.ndim
        shape[axis] = scales.size
        scales, zeros = scales.reshape(shape), zeros.reshape(shape)
    return ((values.astype(np.float64) - zeros) * scales).astype(np.float32)
