"""TFLite front-end, full-integer (int8) models: a .tflite whose input and output are int8 (the
TFLite converter with `inference_input_type = inference_output_type = tf.int8` and
`supported_ops = [TFLITE_BUILTINS_INT8]`) into nnbuild.ir.int8, for the int8 precision (TFLite
Micro's int8 reference kernels, bit for bit).

The file is read by nnbuild.frontends.tflite.read (the schema's generated code, every count and
size checked); this module checks that each operator is one the int8 precision computes, with the
quantization that TFLite Micro requires of it (int8 tensors quantized per tensor, int8 filters per
tensor or per output channel with zero point 0, int32 biases), and names the operator otherwise,
in one line. The shape arithmetic the converter emits around a Reshape (SHAPE -> STRIDED_SLICE ->
PACK) is dropped: RESHAPE takes its declared output shape.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from nnbuild import limits, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import tflite
from nnbuild.ir.int8 import KIND, QuantizedModel  # noqa: F401 - KIND: the kind frontends.kind_of reports

#: operators the int8 precision generates (nnbuild.codegen.int8), each bit-exact with TFLite Micro
OPERATORS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "SOFTMAX",
             "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU", "RELU", "RELU6", "QUANTIZE", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM",
             "CONCATENATION", "PAD", "PADV2", "MEAN", "REDUCE_MAX", "TRANSPOSE", "RESHAPE", "EXPAND_DIMS",
             "STRIDED_SLICE", "UNIDIRECTIONAL_SEQUENCE_LSTM")
#: operators TFLite Micro has no kernel for: no reference to be bit-exact with
NO_TFLM_KERNEL = ("RELU_N1_TO_1", "BIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_RNN",
                  "UNIDIRECTIONAL_SEQUENCE_RNN", "LSTM", "RNN")
#: shape arithmetic on constants, folded away (RESHAPE keeps its declared output shape); a
#: STRIDED_SLICE of a computed tensor (an LSTM's last step) is an operator
SHAPE_ARITHMETIC = ("SHAPE", "STRIDED_SLICE", "PACK")
#: UNIDIRECTIONAL_SEQUENCE_LSTM's inputs TFLite Micro's kernel reads (lstm_shared.h): the input,
#: 8 weights, 4 biases, the hidden and cell state; the peephole (9-11), projection (16, 17) and
#: layer-norm (20-23) inputs must be absent
LSTM_WEIGHTS, LSTM_BIASES, LSTM_HIDDEN, LSTM_CELL = tuple(range(1, 9)), tuple(range(12, 16)), 18, 19
LSTM_ABSENT = (9, 10, 11, 16, 17, 20, 21, 22, 23)
#: the cell gate's activations TFLite Micro computes (CalculateLstmGate): TANH and SIGMOID
LSTM_CELL_ACTIVATIONS = {4: "TANH", 6: "SIGMOID"}
#: fused activations TFLite Micro's int8 kernels clamp to (activation_range)
FUSED = (0, 1, 2, 3)


class Problem(Exception):
    """One line about the model (the caller adds the file name)."""


#: TensorType INT8 in the schema
INT8_TYPE, FLOAT32_TYPE = 9, 0
QUANTIZE_CODE, DEQUANTIZE_CODE = 114, 6


def is_full_integer(path) -> bool:
    """True when `path` is a .tflite (within limits.MAX_MODEL_FILE_BYTES) whose first subgraph has
    one input and one output, each int8, or float32 quantized by a QUANTIZE (input) or made by a
    DEQUANTIZE (output) of an int8 tensor: the converter's full-integer models with int8 or with
    float32 ends. Only those tensors and operators are read (the schema's generated code; any
    damage makes it False, and `load` says what is wrong); never raises."""
    try:
        path = Path(path)
        if path.stat().st_size > limits.MAX_MODEL_FILE_BYTES:
            return False
        data = bytearray(path.read_bytes())
        if len(data) < 8 or data[4:8] != b"TFL3":
            return False
        import tflite as schema
        sub = schema.Model.GetRootAsModel(data, 0).Subgraphs(0)
        if sub is None or not 1 <= sub.InputsLength() <= limits.MAX_MODEL_IO or \
                not 1 <= sub.OutputsLength() <= limits.MAX_MODEL_IO:
            return False
        model = schema.Model.GetRootAsModel(data, 0)
        n = sub.TensorsLength()
        return all(_int8_end(model, sub, int(sub.Inputs(k)), n, 0) for k in range(sub.InputsLength())) and \
            all(_int8_end(model, sub, int(sub.Outputs(k)), n, 1) for k in range(sub.OutputsLength()))
    except Exception:  # noqa: BLE001 - a file that does not read is not told apart here: load says why
        return False


def _int8_end(model, sub, k, n, side):
    """Tensor k is int8, or float32 with the QUANTIZE (side 0: its consumer) or DEQUANTIZE (side 1:
    its producer) that links it to an int8 tensor."""
    if not 0 <= k < n:
        return False
    kind = int(sub.Tensors(k).Type())
    if kind == INT8_TYPE:
        return True
    if kind != FLOAT32_TYPE:
        return False
    code = QUANTIZE_CODE if side == 0 else DEQUANTIZE_CODE
    for j in range(min(sub.OperatorsLength(), limits.MAX_NODES)):
        op = sub.Operators(j)
        ends = op.InputsAsNumpy() if side == 0 else op.OutputsAsNumpy()
        if not isinstance(ends, np.ndarray) or ends.size < 1 or int(ends[0]) != k:
            continue
        entry = model.OperatorCodes(int(op.OpcodeIndex()))
        other = op.OutputsAsNumpy() if side == 0 else op.InputsAsNumpy()
        if entry is None or max(int(entry.BuiltinCode()), int(entry.DeprecatedBuiltinCode())) != code:
            return False
        return isinstance(other, np.ndarray) and other.size >= 1 and 0 <= int(other[0]) < n and \
            int(sub.Tensors(int(other[0])).Type()) == INT8_TYPE
    return False


#: a float32 end's converter: input -> (the operator that reads it, its wording), output -> (that makes it)
_FLOAT_END_OPS = {"input": ("QUANTIZE", "is read by", "one QUANTIZE to int8 expected"),
                  "output": ("DEQUANTIZE", "is made by", "one DEQUANTIZE of int8 expected")}


def _cut_float_ends(graph, role, removed, floats):
    """The graph's inputs (role "input") or outputs with each float32 one replaced by the int8 tensor
    of its one QUANTIZE (DEQUANTIZE), whose index goes to `removed` and the float tensor's name to
    floats[role]; any other float32 end is refused in one line."""
    op_name, verb, expected = _FLOAT_END_OPS[role]
    ends = list(graph.inputs if role == "input" else graph.outputs)
    for k, index in enumerate(ends):
        tensor = graph.tensors[index]
        if tensor.type_name != "float32":
            continue
        ops = [op for op in graph.operators if index in (op.inputs if role == "input" else op.outputs)]
        if len(ops) != 1 or ops[0].op != op_name:
            raise Problem(f"the float32 {role} '{tensor.name}' {verb} {', '.join(op.op for op in ops) or 'nothing'} "
                          f"({expected})")
        removed.add(ops[0].index)
        ends[k] = ops[0].outputs[0] if role == "input" else ops[0].inputs[0]
        floats[role].append(tensor.name)
    return ends


def _int8_ends(graph):
    """The graph with float32 ends cut off: a QUANTIZE of a float32 input and a DEQUANTIZE to a
    float32 output are removed, their int8 tensors become the input and the output (the C API is
    int8; the header gives the scales the QUANTIZE and DEQUANTIZE used). Every input and output of a
    model of several is cut alike (all float32 or all int8 at each end). (graph, the ends cut)."""
    removed, floats = set(), {"input": [], "output": []}
    inputs = _cut_float_ends(graph, "input", removed, floats)
    outputs = _cut_float_ends(graph, "output", removed, floats)
    for role, count in (("input", len(graph.inputs)), ("output", len(graph.outputs))):
        if 0 < len(floats[role]) < count:
            raise Problem(f"{role}s {', '.join(floats[role])} are float32 and the other {role}s int8 (nnbuild "
                          f"converts every {role} of a model alike)")
    operators = tuple(op for op in graph.operators if op.index not in removed)
    ends = [role for role in ("input", "output") if floats[role]]
    return dataclasses.replace(graph, inputs=tuple(inputs), outputs=tuple(outputs), operators=operators), ends


def load(path):
    path = Path(path)
    graph = tflite.read(path)
    try:
        graph, float_ends = _int8_ends(graph)
        ops = _checked_ops(graph)
    except Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None
    meta = {"format": "tflite", "quantization": "full-integer int8", "schema_version": graph.version,
            "description": graph.description}
    for end in float_ends:   # the check quantizes float32 data at this end as QUANTIZE does
        meta[f"float32_{end}"] = "QUANTIZE" if end == "input" else "DEQUANTIZE"
    return QuantizedModel(names.c_identifier(path.stem), graph, ops, source_files=(str(path),), meta=meta)


def _checked_ops(graph):
    if len(set(graph.inputs)) != len(graph.inputs) or len(set(graph.outputs)) != len(graph.outputs) or \
            set(graph.inputs) & set(graph.outputs):
        raise Problem("a tensor is listed twice among the inputs and outputs")
    for role, index in [("input", i) for i in graph.inputs] + [("output", o) for o in graph.outputs]:
        t = graph.tensors[index]
        _int8_tensor(t, f"the model's {role}")
        if len(t.shape) < 2 or t.shape[0] != 1 or min(t.shape[1:]) < 1:
            raise Problem(f"the model's {role} '{t.name}' has shape {t.shape}: expected a batch axis of 1 and a "
                          "sample")
    computed = set(graph.inputs)
    ops = []
    for op in graph.operators:
        if op.op in SHAPE_ARITHMETIC and not (op.op == "STRIDED_SLICE" and op.inputs and op.inputs[0] in computed):
            continue
        if op.op in NO_TFLM_KERNEL:
            raise Problem(f"operator {op.index} ({op.op}): TFLite Micro has no {op.op} kernel, so int8 has no "
                          "reference to be bit-exact with")
        if op.op not in OPERATORS:
            raise Problem(f"operator {op.index} ({op.op}): operator not supported in int8 (supported: "
                          f"{', '.join(sorted(OPERATORS))})")
        try:
            ops.append(_checked(graph, op, computed))
        except Problem as problem:
            raise Problem(f"operator {op.index} ({op.op}): {problem}") from None
        computed.add(op.outputs[0])
    if not set(graph.outputs) <= computed or not ops:
        raise Problem("an output is not computed from the inputs")
    return tuple(ops)


def _int8_tensor(t, what):
    if t.type_name != "int8":
        raise Problem(f"{what} '{t.name}' is {t.type_name}, not int8 (a full-integer model computes in int8)")
    q = t.quantization
    if q is None or q.scales.size != 1:
        raise Problem(f"{what} '{t.name}' has {0 if q is None else q.scales.size} scales (int8 activations are "
                      "quantized per tensor)")
    if not (np.isfinite(q.scales[0]) and q.scales[0] > 0) or not -128 <= int(q.zero_points[0]) <= 127:
        raise Problem(f"{what} '{t.name}' has scale {q.scales[0]} and zero point {q.zero_points[0]}")


def _checked(graph, op, computed):
    """The operator's computed inputs, constants and options, checked: a dict for the generator."""
    if len(op.outputs) != 1:
        raise Problem(f"{len(op.outputs)} outputs")
    tensors = graph.tensors
    out = tensors[op.outputs[0]]
    _int8_tensor(out, "output")
    if not out.shape or out.shape[0] != 1:
        raise Problem(f"output '{out.name}' has shape {out.shape} (batch axis of 1 expected)")
    fused = int(op.options.get("FusedActivationFunction", 0)) if op.options else 0
    if op.op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        fused = 0   # its cell gate's activation, not a clamp of the output (checked by _lstm)
    if fused not in FUSED:
        raise Problem(f"fused activation {tflite.FUSED.get(fused, fused)} (int8: none, RELU, RELU6, RELU_N1_TO_1)")
    data_inputs = {"FULLY_CONNECTED": 1, "CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "ADD": 2, "SUB": 2, "MUL": 2,
                   "MAXIMUM": 2, "MINIMUM": 2, "CONCATENATION": len(op.inputs)}.get(op.op, 1)
    sources = []
    for k, index in enumerate(op.inputs[:data_inputs]):
        if index < 0:
            raise Problem(f"input {k} is missing")
        t = tensors[index]
        if index not in computed and t.data is None:
            raise Problem(f"input {k} '{t.name}' is not computed before this operator")
        _int8_tensor(t, f"input {k}")
        sources.append(index)
    if op.op in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"):
        _weights(graph, op)
    if op.op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        _lstm(graph, op)
    if op.op == "STRIDED_SLICE":
        _strided_slice(graph, op)
    if op.op in ("RESHAPE", "EXPAND_DIMS") and int(np.prod(out.shape)) != int(np.prod(tensors[op.inputs[0]].shape)):
        raise Problem(f"output of shape {out.shape} for an input of shape {tensors[op.inputs[0]].shape}")
    return {"index": op.index, "op": op.op, "sources": tuple(sources), "output": op.outputs[0], "fused": fused}


def _weights(graph, op):
    """Filters int8 with zero point 0 for convolutions (TFLite Micro's per-channel kernels), one
    scale per tensor or per output channel; biases int32 with one value per output channel."""
    tensors = graph.tensors
    if len(op.inputs) < 2 or op.inputs[1] < 0 or tensors[op.inputs[1]].data is None:
        raise Problem("the weights are not a constant")
    w = tensors[op.inputs[1]]
    if w.type_name != "int8" or w.quantization is None or not w.quantization.scales.size:
        raise Problem(f"weights '{w.name}' are {w.type_name} without int8 quantization")
    channels = w.shape[3] if op.op == "DEPTHWISE_CONV_2D" else w.shape[0]
    axis = 3 if op.op == "DEPTHWISE_CONV_2D" else 0
    q = w.quantization
    if q.scales.size not in (1, channels) or (q.scales.size > 1 and q.axis != axis):
        raise Problem(f"weights '{w.name}' have {q.scales.size} scales along axis {q.axis} for {channels} output "
                      "channels")
    if not np.all(np.isfinite(q.scales)) or np.any(q.scales <= 0):
        raise Problem(f"weights '{w.name}' have a scale that is not a positive number")
    if op.op != "FULLY_CONNECTED" and np.any(q.zero_points != 0):
        raise Problem(f"weights '{w.name}' have a non-zero zero point (TFLite Micro's int8 convolutions need 0)")
    if op.op == "FULLY_CONNECTED" and (q.scales.size > 1 and np.any(q.zero_points != 0)):
        raise Problem(f"weights '{w.name}': per-channel weights with non-zero zero points")
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b = tensors[op.inputs[2]]
        if b.data is None or b.type_name != "int32" or b.data.size != channels:
            raise Problem(f"bias '{b.name}' is {b.type_name} of shape {b.shape} (int32, one per output channel, "
                          "expected)")


def _lstm(graph, op):
    """What TFLite Micro's 8x8->16 LSTM kernel requires (unidirectional_sequence_lstm.cc's
    Prepare, LstmTensors::ValidateTensorStatus), checked: 24 inputs, the batch-major sequence
    [1, steps, features], int8 weights quantized per tensor with zero point 0, int32 biases, an
    int8 hidden state and an int16 cell state (variables: no constant values), no peephole,
    projection or layer normalisation, a TANH or SIGMOID cell gate."""
    tensors = graph.tensors
    if len(op.inputs) != 24:
        raise Problem(f"{len(op.inputs)} inputs (TFLite Micro's kernel takes 24)")
    options = op.options or {}
    if options.get("TimeMajor", False):
        raise Problem("time-major sequence (nnbuild reads the batch-major [1, steps, features])")
    if options.get("DiagonalRecurrentTensors", False):
        raise Problem("diagonal recurrent weights (TFLite Micro's kernel computes full matrices)")
    act = int(options.get("FusedActivationFunction", 4))
    if act not in LSTM_CELL_ACTIVATIONS:
        raise Problem(f"cell activation {tflite.FUSED.get(act, act)} (TFLite Micro computes TANH or SIGMOID)")
    missing = [k for k in LSTM_WEIGHTS + LSTM_BIASES + (LSTM_HIDDEN, LSTM_CELL) if op.inputs[k] < 0]
    if missing:
        raise Problem(f"inputs {missing} are absent (TFLite Micro's kernel needs all four gates' weights and "
                      "biases: no CIFG)")
    present = [k for k in LSTM_ABSENT if op.inputs[k] >= 0]
    if present:
        raise Problem(f"inputs {present} are given: peephole, projection or layer-normalisation weights (TFLite "
                      "Micro's kernel computes the plain LSTM cell)")
    x = tensors[op.inputs[0]]
    if len(x.shape) != 3 or x.shape[0] != 1:
        raise Problem(f"input '{x.name}' of shape {x.shape} (expected [1, steps, features])")
    steps, features = x.shape[1:]
    h = tensors[op.inputs[LSTM_HIDDEN]]
    units = int(np.prod(h.shape)) if h.shape else 0
    want = {**{k: (units, features) for k in LSTM_WEIGHTS[:4]}, **{k: (units, units) for k in LSTM_WEIGHTS[4:]}}
    for k in LSTM_WEIGHTS:
        w = tensors[op.inputs[k]]
        if w.data is None or w.type_name != "int8":
            raise Problem(f"weights '{w.name}' are {w.type_name}{'' if w.data is not None else ' (not a constant)'}"
                          " (the int8 kernel: int8 weights; int16x8 LSTMs are not generated)")
        q = w.quantization
        if q is None or q.scales.size != 1 or int(q.zero_points[0]) != 0 or not (np.isfinite(q.scales[0])
                                                                              and q.scales[0] > 0):
            raise Problem(f"weights '{w.name}' are not quantized per tensor with zero point 0 (TFLite Micro's "
                          "LSTM requantises each gate with one multiplier)")
        if tuple(w.shape) != want[k]:
            raise Problem(f"weights '{w.name}' of shape {w.shape}, expected {list(want[k])} ({units} units, "
                          f"{features} features)")
    for k in LSTM_BIASES:
        b = tensors[op.inputs[k]]
        if b.data is None or b.type_name != "int32" or b.data.size != units:
            raise Problem(f"bias '{b.name}' is {b.type_name} of shape {b.shape} (int32, one per unit, expected)")
    _int8_tensor(h, "hidden state")
    c = tensors[op.inputs[LSTM_CELL]]
    if c.type_name != "int16" or c.quantization is None or c.quantization.scales.size != 1 or \
            not (np.isfinite(c.quantization.scales[0]) and c.quantization.scales[0] > 0):
        raise Problem(f"cell state '{c.name}' is {c.type_name} (the int8 kernel keeps an int16 cell state, quantized "
                      "per tensor)")
    if int(np.prod(c.shape) if c.shape else 0) != units:
        raise Problem(f"cell state '{c.name}' of shape {c.shape} for {units} units")
    for state in (h, c):
        if state.data is not None:
            raise Problem(f"state '{state.name}' holds constant values (TFLite Micro resets its variable tensors: "
                          "the hidden state to its zero point, the cell state to 0)")
    out = tensors[op.outputs[0]]
    if tuple(out.shape) != (1, steps, units):
        raise Problem(f"output '{out.name}' of shape {out.shape}, the kernel computes [1, {steps}, {units}]")


def _strided_slice(graph, op):
    """A STRIDED_SLICE of a computed tensor: constant begin, end and strides, the batch axis kept,
    the slice of the declared output shape (TFLite Micro copies the int8 values unchanged)."""
    from nnbuild.numerics.tflm_int8 import slice_plan
    tensors = graph.tensors
    if len(op.inputs) != 4 or any(i < 0 or tensors[i].data is None for i in op.inputs[1:]):
        raise Problem("begin, end and strides are not constants")
    try:
        *_, kept = slice_plan(tensors[op.inputs[0]].shape, *(tensors[i].data for i in op.inputs[1:]), op.options or {})
    except ValueError as problem:
        raise Problem(str(problem)) from None
    out = tensors[op.outputs[0]]
    if int(np.prod(kept)) != int(np.prod(out.shape[1:])):
        raise Problem(f"output '{out.name}' of shape {out.shape} for a slice of shape {list(kept)}")
