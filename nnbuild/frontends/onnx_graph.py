"""ONNX front-end: a model.onnx (opsets 7 to 22, and opset 6 with its legacy broadcast attributes) read with the `onnx` package into the IR.

Semantics are ONNX's, mapped exactly:
* the model is checked by onnx.checker and run through onnx's shape inference; every shape the
  loader computes is cross-checked against the inferred one where that is static;
* the batch axis (size 1, symbolic, or a static N whose samples no operator mixes) is dropped: the
  generated function is one sample, in ONNX element order (N, C, H, W -> C*H*W values, row-major),
  and so is its output;
* layout: the IR holds every ONNX tensor either in ONNX order or as a permutation of it (recorded
  per tensor). The IR's channels-last layers (Conv, pooling: (H, W, C); BatchNormalization, LRN:
  channels on the last axis) get their input channels-last through a Transpose layer only when
  it is not already, and leave their output channels-last; layout-agnostic ops (element-wise with
  broadcast constants permuted to match, reductions, softmax, concat, gather, pad, slice, tile,
  resize, squeeze/unsqueeze, MatMul on a kept last axis) map their axes through the permutation
  instead of converting; an ONNX Transpose only changes the recorded permutation. Ops that need
  ONNX order (Reshape, Flatten, Gemm, the graph output) convert once per tensor. `fold_layout` then
  folds a Transpose feeding Flatten/Reshape -> Dense into the Dense kernel's row order and removes
  transpose pairs that cancel;
* initializers, Constant nodes and integer side computations on static shapes (Shape -> Gather ->
  Concat -> Reshape chains of PyTorch exports) are folded at load with onnx's reference evaluator
  (sizes bounded before evaluating: the file is untrusted input);
* external data (`torch.onnx.export`'s `m.onnx.data`) is read only from a regular file inside the
  model's own folder, named relatively without `..`, its resolved path (links followed) still in
  that folder, the offset and length checked against the file's size and the tensor's declared
  size before a byte is read.
Cost is bounded before any work (the limits are nnbuild.limits'): the file size before parsing,
the node count before shape inference; nodes the graph output does not need are dropped unread;
every initializer's, constant's and folded constant's declared size, and every layer's output
size, is checked against the per-tensor and total element limits before anything is allocated.
Every attribute read is validated (enumerated strings against the ONNX spec, flags, positive
integers, finite floats). Anything else is refused in one line naming the node and its op.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nnbuild import limits, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import onnx_recurrent
from nnbuild.ir import graph as g

#: ops evaluated at load when every input is a constant
FOLDABLE = ("Shape", "Gather", "Concat", "Unsqueeze", "Squeeze", "Cast", "Reshape", "Slice", "Mul", "Add", "Sub",
            "Div", "Identity", "ConstantOfShape", "Range", "Transpose", "Flatten", "Expand", "Equal", "Where",
            "Floor", "Ceil", "Neg", "Sqrt", "Size")
UNARY = {"LeakyRelu": "leaky_relu", "Elu": "elu", "Selu": "selu", "HardSigmoid": "hard_sigmoid",
         "Softplus": "softplus", "Softsign": "softsign", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Abs": "abs",
         "Neg": "neg", "Reciprocal": "reciprocal", "Clip": "clip", "HardSwish": "hard_swish", "Erf": "erf",
         "Gelu": "gelu", "Sign": "sign", "Shrink": "shrink"}
ACTIVATION = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
ELEMENTWISE = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min", "Mean": "mean",
               "Sum": "add"}
REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}
PASSTHROUGH = ("Identity", "Dropout")
#: ops read on an input without a batch axis (a vector: per-element ops and a matrix product)
BATCHLESS = tuple(UNARY) + tuple(ACTIVATION) + tuple(ELEMENTWISE) + PASSTHROUGH + ("MatMul",)
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: the ONNX spec's values of every enumerated string attribute the front-end reads: name -> op -> values
STRING_VALUES = {
    "auto_pad": {"Conv": _AUTO_PAD, "MaxPool": _AUTO_PAD, "AveragePool": _AUTO_PAD, "ConvTranspose": _AUTO_PAD},
    "mode": {"Pad": ("constant", "reflect", "edge", "wrap"), "Resize": ("nearest", "linear", "cubic"),
             "Upsample": ("nearest", "linear", "bilinear")},
    "coordinate_transformation_mode": {"Resize": ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                  "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                                  "tf_crop_and_resize")},
    "nearest_mode": {"Resize": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")},
    "keep_aspect_ratio_policy": {"Resize": ("stretch", "not_larger", "not_smaller")},
    "approximate": {"Gelu": ("none", "tanh")},
    "direction": {op: ("forward", "reverse", "bidirectional") for op in ("LSTM", "GRU", "RNN")},
}
#: integer attributes that are flags (0 or 1)
FLAGS = ("keepdims", "noop_with_empty_axes", "count_include_pad", "ceil_mode", "exclude_outside", "antialias",
         "allowzero", "transA", "transB", "broadcast", "storage_order", "input_forget", "linear_before_reset",
         "layout")
#: integer attributes whose every value is >= 1
POSITIVE = ("strides", "dilations", "kernel_shape", "group", "size", "hidden_size")
#: integer attributes whose every value is >= 0, by op (Pad's own pads are checked by op_Pad)
NON_NEGATIVE = {"pads": ("Conv", "MaxPool", "AveragePool", "ConvTranspose"), "output_padding": ("ConvTranspose",)}
#: attributes with the one value nnbuild implements: (op, name) -> value (inference semantics only)
FIXED = {("BatchNormalization", "training_mode"): 0, ("BatchNormalization", "spatial"): 1}
#: float attributes that may be infinite (every other float attribute must be finite): (op, name) -> allowed
INFINITE = {("Clip", "min"): (float("-inf"),), ("Clip", "max"): (float("inf"),),
            ("Pad", "value"): (float("-inf"), float("inf"))}
#: ops whose attributes hold data (checked where it is read), not parameters
DATA_ATTRIBUTES = ("Constant", "ConstantOfShape")
SUPPORTED = sorted(set(UNARY) | set(ACTIVATION) | set(ELEMENTWISE) | set(REDUCE) | set(PASSTHROUGH) | {
    "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization", "Gemm", "MatMul",
    "Softmax", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Pad", "Gather", "GatherElements",
    "Tile", "Resize", "Upsample", "LRN", "Constant", "Shape", "Slice", "LogSoftmax", "Split", "Expand",
    "ConvTranspose", "LSTM", "GRU", "RNN"})


def channels_per_group(w, groups):
    """Output channels per group of an OIHW weight tensor (None: `groups` does not divide them)."""
    return w.shape[0] // groups if groups >= 1 and w.shape[0] % groups == 0 else None


def _identity(rank):
    return tuple(range(rank))


def _last(rank):
    """The channels-last layout of an ONNX sample (C, d1, ..., dn): (d1, ..., dn, C)."""
    return tuple(range(1, rank)) + (0,)


def _unpermute(shape, perm):
    """The ONNX shape of an IR tensor of `shape` held with `perm`."""
    out = [0] * len(perm)
    for k, p in enumerate(perm):
        out[p] = shape[k]
    return tuple(out)


def _drop(perm, axes):
    """perm without the ONNX axes `axes`, renumbered (a reduction without keepdims)."""
    kept = [p for p in perm if p not in set(axes)]
    order = sorted(kept)
    return tuple(order.index(p) for p in kept) or (0,)


def _folded_size(node, consts):
    """An upper bound of the elements a constant-folded node makes, computed without making them."""
    def count(shape):
        out = 1
        for d in shape:
            out *= max(int(d), 0)
        return out

    def values(c):
        return [int(v) for v in c.reshape(-1)] if c is not None and c.dtype.kind in "iu" else []

    present = [c for c in consts if c is not None]
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            return count(values(consts[0]))
        if op == "Expand":
            want = values(consts[1])
            rank = max(len(want), consts[0].ndim)
            a = [1] * (rank - consts[0].ndim) + list(consts[0].shape)
            b = [1] * (rank - len(want)) + want
            return count(max(x, y) for x, y in zip(a, b))
        if op == "Range":
            start, limit, delta = (float(np.asarray(c).reshape(-1)[0]) for c in consts[:3])
            return int(max(np.ceil((limit - start) / delta), 0)) if delta else 1 << 62
        if op in ("Mul", "Add", "Sub", "Div", "Equal", "Where"):
            rank = max(c.ndim for c in present)
            dims = [max([1] + [int(c.shape[k - rank + c.ndim]) for c in present if k - rank + c.ndim >= 0])
                    for k in range(rank)]
            return count(dims)
        if op == "Gather":
            return count(consts[0].shape) * max(consts[1].size, 1)
    except (ValueError, TypeError, OverflowError, IndexError):
        return 1 << 62
    return sum(int(c.size) for c in present)


class Problem(Exception):
    """A node the loader cannot map (becomes one NNBuildError line naming node and op)."""


def load(path):
    import onnx
    path = Path(path)
    size = path.stat().st_size
    if size > limits.MAX_MODEL_FILE_BYTES:
        raise NNBuildError(f"model file of {size} bytes (limit MAX_MODEL_FILE_BYTES = "
                           f"{limits.MAX_MODEL_FILE_BYTES})", path=path)
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 (protobuf raises many types on garbage)
        raise NNBuildError(f"not a readable ONNX model ({type(exc).__name__})", path=path) from None
    return convert(proto, path)


def convert(proto, path, name=None):
    """The IR model of an onnx.ModelProto (also the NNEF front-end's target)."""
    path = Path(path)
    stem = path.stem if path.name != "graph.nnef" else path.parent.stem
    try:
        return _Converter(proto, path).run(name or names.c_identifier(stem))
    except Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _declared_elements(tensor):
    """The elements a TensorProto declares (its dims), counted without reading its data."""
    n = 1
    for d in tensor.dims:
        n *= max(int(d), 0)
    return n


#: bytes per element of the ONNX element types read from external data (TensorProto.DataType)
EXTERNAL_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


def external_file(model_path, location, what):
    """The file an external-data location names, if it is a regular file inside the model's own
    folder: a relative name without '..', whose resolved path (links followed) stays there."""
    from pathlib import PurePosixPath
    folder = Path(model_path).resolve().parent
    parts = PurePosixPath(location.replace("\\", "/")).parts
    if (not location or "\0" in location or location.startswith(("/", "\\")) or ":" in location
            or any(p in ("..", ".") for p in parts) or not parts):
        raise Problem(f"{what}: external data location '{location[:80]}' is not a plain relative name inside "
                      "the model's folder")
    path = folder.joinpath(*parts)
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise Problem(f"{what}: external data file '{location[:80]}' does not exist beside the model") from None
    if folder not in real.parents:
        raise Problem(f"{what}: external data file '{location[:80]}' leads outside the model's folder")
    if not real.is_file():
        raise Problem(f"{what}: external data '{location[:80]}' is not a regular file")
    return real


def implicit_dependencies(path):
    """The external data files a model.onnx names that are inside its folder (for the SCons
    scanner: an edit of `m.onnx.data` rebuilds); nothing when the file cannot be read."""
    from pathlib import PurePosixPath

    import onnx
    path = Path(path)
    try:
        if path.stat().st_size > limits.MAX_MODEL_FILE_BYTES:
            return []
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 (the load step reports an unreadable model)
        return []
    found = set()
    tensors = list(proto.graph.initializer) + [a.t for n in proto.graph.node for a in n.attribute if a.t.dims]
    for tensor in tensors:
        if tensor.data_location == 1:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            try:
                external_file(path, location, "")
            except Problem:
                continue
            # beside the model, in the model path's own relative/absolute form
            found.add(str(path.parent.joinpath(*PurePosixPath(location.replace("\\", "/")).parts)))
    return sorted(found)


def _prune(graph):
    """Drop (in place) the nodes the graph's outputs do not need, so they are never checked,
    inferred or evaluated; returns the names the kept nodes read and how many nodes were dropped."""
    import onnx
    want = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in want for o in node.output if o):
            keep.append(node)
            want.update(i for i in node.input if i)
    dropped = len(graph.node) - len(keep)
    if dropped:
        copies = []
        for node in reversed(keep):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copies.append(copy)
        del graph.node[:]
        graph.node.extend(copies)
    return want, dropped


def attribute_problem(node):
    """What is wrong with a node's attributes (None if nothing): an enumerated string outside the
    ONNX spec's values, a flag not 0/1, a size or stride < 1, a negative pad, a training-mode
    setting, a non-finite float. The checker has already checked names and types."""
    from onnx import AttributeProto
    op = node.op_type
    if op in DATA_ATTRIBUTES:
        return None
    for attr in node.attribute:
        name = attr.name
        if attr.type == AttributeProto.STRING:
            text = attr.s.decode("utf-8", "replace")
            allowed = STRING_VALUES.get(name, {}).get(op)
            if allowed is None:
                return f"string attribute '{name}' is not read by nnbuild"
            if text not in allowed:
                return f"attribute {name} '{text[:40]}' is not one of {', '.join(allowed)}"
        elif attr.type in (AttributeProto.INT, AttributeProto.INTS):
            values = [attr.i] if attr.type == AttributeProto.INT else list(attr.ints)
            if name in FLAGS and any(v not in (0, 1) for v in values):
                return f"attribute {name} {values[0] if len(values) == 1 else values} is not 0 or 1"
            if name in POSITIVE and any(v < 1 for v in values):
                return f"attribute {name} {values} has a value < 1"
            if name in POSITIVE + ("pads",) and any(abs(v) > limits.MAX_TENSOR_ELEMENTS for v in values):
                return (f"attribute {name} {values} has a value beyond {limits.MAX_TENSOR_ELEMENTS} "
                        "(limit MAX_TENSOR_ELEMENTS)")
            if op in NON_NEGATIVE.get(name, ()) and any(v < 0 for v in values):
                return f"attribute {name} {values} has a negative value"
            if (op, name) in FIXED and values != [FIXED[(op, name)]]:
                return f"attribute {name}={values[0]} (nnbuild implements {name}={FIXED[(op, name)]} only)"
        elif attr.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
            values = [attr.f] if attr.type == AttributeProto.FLOAT else list(attr.floats)
            allowed = INFINITE.get((op, name), ())
            bad = [v for v in values if not np.isfinite(v) and v not in allowed]
            if bad:
                return f"attribute {name} is {bad[0]} (a finite number is required)"
    return None


class _Converter:
    problem_type = Problem

    def __init__(self, proto, path):
        self.proto, self.path = proto, path
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.layers, self.edges = [], {}
        # onnx name -> ("ir", ir name, IR shape, perm) | ("const", array): the IR tensor is the ONNX
        # sample transposed by perm (IR axis k is ONNX sample axis perm[k]; identity = ONNX order)
        self.tensors = {}
        self.converted = {}    # (ir name, perm) -> (transposed ir name, shape): one layout change per tensor
        self.used = set()
        self.batch = 1
        self.batchless = False   # a rank-1 input: the whole tensor is the sample (no batch axis)
        self.external_files = set()  # external data files read (model sources: a build depends on them)
        self.constant_elements = 0   # running totals, bounded by nnbuild.limits
        self.tensor_elements = 0

    # ----------------------------------------------------------------------- graph

    def run(self, name):
        graph = self.proto.graph
        if self.opset < 6 or self.opset > 22:
            raise Problem(f"opset {self.opset} is outside the supported 6..22")
        if len(graph.node) > limits.MAX_NODES:
            raise Problem(f"{len(graph.node)} nodes (limit MAX_NODES = {limits.MAX_NODES})")
        if len(graph.sparse_initializer):
            raise Problem("sparse initializers (not read)")
        if len(graph.output) < 1:
            raise Problem("the graph has no output")
        needed, dropped = _prune(graph)
        self.needed = needed or set()
        initializers = {init.name for init in graph.initializer}
        if needed is not None:
            # unread and unused (external data included): dropped like the nodes nothing needs
            kept = [init for init in graph.initializer if init.name in needed]
            if len(kept) != len(graph.initializer):
                import onnx
                copies = [onnx.TensorProto() for _ in kept]
                for copy, init in zip(copies, kept):
                    copy.CopyFrom(init)
                del graph.initializer[:]
                graph.initializer.extend(copies)
        for init in graph.initializer:
            self.tensors[init.name] = ("const", self.tensor_array(init, f"initializer '{init.name}'"))
        inputs = [i for i in graph.input if i.name not in initializers]
        if not inputs:
            raise Problem("the graph has no input (every value is a constant)")
        if len(inputs) + len(graph.output) > limits.MAX_MODEL_IO:
            raise Problem(f"{len(inputs)} inputs and {len(graph.output)} outputs (limit MAX_MODEL_IO = "
                          f"{limits.MAX_MODEL_IO} arguments of the C function)")
        shape, entry = self._input_entry(graph, inputs[0], first=True)
        self.input_name = entry[1]
        self.used.add(self.input_name)
        self.ir_shapes = {self.input_name: shape}
        self.tensors[inputs[0].name] = entry
        self.labels = {self.input_name: inputs[0].name}
        self.more_inputs = []
        layout = (self.batch, self.batchless)
        for value in inputs[1:]:
            more, entry = self._input_entry(graph, value, first=False)
            if (self.batch, self.batchless) != layout:
                raise Problem(f"input '{value.name}' has another batch axis than input '{inputs[0].name}'")
            ir_name = entry[1]
            self.ir_shapes[ir_name] = more
            self.tensors[value.name] = entry
            self.labels[ir_name] = value.name
            self.more_inputs.append((ir_name, more))
        for node in graph.node:
            # refused before onnx's shape inference sees (and fails on) an operator it does not know
            if node.domain not in ("", "ai.onnx"):
                raise Problem(f"node '{self.label(node)}' ({node.op_type}): operator of domain '{node.domain}' "
                              "not supported")
            if node.op_type not in SUPPORTED and node.op_type not in FOLDABLE:
                raise Problem(f"node '{self.label(node)}' ({node.op_type}): operator not supported "
                              f"(supported: {', '.join(SUPPORTED)})")
        self.inferred = self._infer_shapes()
        for node in graph.node:
            try:
                self.node(node)
                self._cross_check(node)
            except Problem as problem:
                raise Problem(f"node '{self.label(node)}' ({node.op_type}): {problem}") from None
            except (ValueError, IndexError, KeyError, TypeError, ArithmeticError) as exc:
                raise Problem(f"node '{self.label(node)}' ({node.op_type}): {exc}") from None
        outputs = []
        for value in graph.output:
            out = self.tensors.get(value.name)
            if out is not None and out[0] == "tm" and self.batch == 1:
                # a batch of one anywhere leaves the sample's element order: the output as it is
                self.tensors[value.name] = out = ("ir", out[1], out[2], _identity(len(out[2])))
            if out is None or out[0] != "ir":
                raise Problem(f"output '{value.name}' is not computed from the input")
            out, _ = self.held(value.name, _identity(len(out[2])), value.name)
            outputs.append(out)
        inputs_ir = {self.input_name} | {n for n, _ in self.more_inputs}
        several = len(inputs) > 1 or len(outputs) > 1
        if not self.layers or (not several and outputs[0] == self.input_name):
            raise Problem("the model computes nothing")
        for value, out in zip(graph.output, outputs):
            if out in inputs_ir:
                raise Problem(f"output '{value.name}' is input '{self.labels[out]}' itself: there is nothing to "
                              "compute for it")
        if several:
            self.labels.update({out: value.name for value, out in zip(graph.output, outputs)})
        else:
            self._finish(outputs[0])
        meta = {"format": "onnx", "opset": self.opset, "producer": self.proto.producer_name, "batch": self.batch}
        if self.batchless:
            meta["batch_axis"] = False
        if dropped:
            meta["unused_nodes_dropped"] = dropped
        model = g.Model(name, shape, self.layers, source_files=(str(self.path),) + tuple(sorted(self.external_files)),
                        meta=meta, edges=self.edges,
                        input_name=self.input_name)
        if several:
            model.more_inputs = tuple(self.more_inputs)
            model.output_names = tuple(outputs)
            model.io_labels = dict(self.labels)
        fold_layout(model)
        try:
            return g.validate(model)
        except g.LayerProblem as problem:
            raise Problem(f"layer '{problem.layer}': {problem}" if problem.layer else str(problem)) from None

    def _input_entry(self, graph, value, first):
        """(sample shape, tensors entry) of a graph input: time-major ("tm", batch second) when it
        is the X of a layout-0 LSTM/GRU. The `first` input is named after itself (or "input"); the
        others get a fresh name."""
        time_major = onnx_recurrent.feeds_time_major(graph, value.name)
        shape = onnx_recurrent.time_major_input(self, value) if time_major else self._input_shape(value)
        if first:
            name = names.c_identifier(value.name) or "input"
        else:
            name = self.unique(value.name or "input")
        return shape, (("tm", name, shape, 1) if time_major else ("ir", name, shape, _identity(len(shape))))

    def _infer_shapes(self):
        """The ONNX checker's verdict, then onnx's shape inference: tensor name -> its static dims
        (None where symbolic), used to cross-check every shape the loader computes."""
        import onnx
        try:
            inferred = onnx.shape_inference.infer_shapes(self.proto, check_type=False, strict_mode=False,
                                                         data_prop=True)
        except Exception as exc:  # noqa: BLE001
            raise Problem(f"ONNX shape inference fails: {str(exc).strip().splitlines()[0][:300]}") from None
        for value in inferred.graph.output:
            # a graph output declared with its element type only runs (onnxruntime) and its shape is
            # the loader's to compute: the checker is shown an unknown-rank placeholder for it
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
                value.type.tensor_type.shape.SetInParent()
        try:
            onnx.checker.check_model(inferred)
        except Exception as exc:  # noqa: BLE001 (ValidationError, and protobuf errors on odd protos)
            raise Problem(f"the ONNX checker refuses the model: {str(exc).strip().splitlines()[0][:300]}") from None
        out = {}
        for value in list(inferred.graph.value_info) + list(inferred.graph.output):
            t = value.type.tensor_type
            if value.type.HasField("tensor_type") and t.HasField("shape"):
                out[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        return out

    def _cross_check(self, node):
        for name in node.output:
            entry = self.tensors.get(name)
            theirs = self.inferred.get(name)
            skip = 0 if self.batchless else 1
            if not name or entry is None or entry[0] != "ir" or theirs is None or len(theirs) < skip + 1:
                continue
            ours = _unpermute(entry[2], entry[3])
            if None not in theirs[skip:] and tuple(theirs[skip:]) != ours:
                raise Problem(f"output '{name}' has the sample shape {ours} here but {tuple(theirs[skip:])} by "
                              "ONNX shape inference")

    def _input_shape(self, value):
        t = value.type.tensor_type
        if t.elem_type != 1:
            raise Problem(f"input '{value.name}' is not float32 (ONNX type {t.elem_type})")
        dims = list(t.shape.dim)
        if len(dims) == 1 and dims[0].HasField("dim_value") and dims[0].dim_value >= 1:
            # a vector input without a batch axis (nnet2onnx's ACAS Xu exports): it is one sample
            self.batchless = True
            dims = [None] + dims
        elif len(dims) < 2:
            raise Problem(f"input '{value.name}' has rank {len(dims)}: expected a batch axis and a sample")
        elif dims[0].HasField("dim_value") and dims[0].dim_value > 1:
            self.batch = int(dims[0].dim_value)
        rest = []
        for d in dims[1:]:
            if not d.HasField("dim_value") or d.dim_value < 1:
                raise Problem(f"input '{value.name}' has a dynamic dimension beyond the batch axis")
            rest.append(int(d.dim_value))
        if int(np.prod(rest, dtype=object)) > limits.MAX_TENSOR_ELEMENTS:
            raise Problem(f"input '{value.name}' of sample shape {tuple(rest)} has more than "
                          f"{limits.MAX_TENSOR_ELEMENTS} elements (limit MAX_TENSOR_ELEMENTS)")
        return tuple(rest)

    def _finish(self, out):
        """The output tensor must be the last layer: add a copy-free reshape if it is not."""
        if self.layers[-1].name != out:
            shape = self.ir_shapes[out]
            self.add(g.Reshape(self.unique(out + "_output"), tuple(shape), source_type="Output"), [out])

    def label(self, node):
        return node.name or (node.output[0] if node.output else node.op_type)

    def unique(self, base):
        return names.fresh_identifier(base, self.used)

    def add(self, layer, sources):
        shape = tuple(int(d) for d in layer.output_shape(*[self.ir_shapes[s] for s in sources]))
        self._count(int(np.prod(shape, dtype=object)), "tensor", f"output shape {shape} has",
                    "the computed tensors reach")
        if len(self.layers) >= limits.MAX_LAYERS:
            raise Problem(f"more than {limits.MAX_LAYERS} layers (limit MAX_LAYERS)")
        self.layers.append(layer)
        self.edges[layer.name] = tuple(sources)
        self.ir_shapes[layer.name] = shape
        return layer.name

    def count_constant(self, elements, what):
        """Account for a constant of `elements` before it is made: per tensor and in total."""
        self._count(elements, "constant", f"{what} would make", f"{what} brings the constants to")

    def _count(self, elements, kind, one, total):
        """A tensor of `elements` checked against MAX_TENSOR_ELEMENTS, then added to the running total
        of its kind ("tensor" or "constant") checked against MAX_TOTAL_<KIND>_ELEMENTS; `one` and
        `total` open the refusals ("output shape (2, 3) has", "the computed tensors reach")."""
        if elements > limits.MAX_TENSOR_ELEMENTS:
            raise Problem(f"{one} {elements} elements (limit MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS})")
        counted = getattr(self, f"{kind}_elements") + elements
        setattr(self, f"{kind}_elements", counted)
        limit = f"MAX_TOTAL_{kind.upper()}_ELEMENTS"
        if counted > getattr(limits, limit):
            raise Problem(f"{total} {counted} elements (limit {limit} = {getattr(limits, limit)})")

    def tensor_array(self, tensor, what):
        """The array of a TensorProto held in the file (or beside it: external data), its declared
        size bounded before it is read."""
        from onnx import numpy_helper
        self.count_constant(_declared_elements(tensor), what)
        if tensor.data_location == 1:
            # inlined in the proto itself: the checker then sees the bytes read, not a file name
            tensor.CopyFrom(self.external_tensor(tensor, what))
        try:
            return numpy_helper.to_array(tensor)
        except Exception as exc:  # noqa: BLE001 (data and dims disagree, unknown types)
            raise Problem(f"{what} cannot be read ({type(exc).__name__})") from None

    def external_tensor(self, tensor, what):
        """A copy of `tensor` with its external bytes inline, read under the rules of external_file."""
        from onnx import TensorProto, helper
        info = {entry.key: entry.value for entry in tensor.external_data}
        unknown = sorted(set(info) - {"location", "offset", "length", "checksum", "basepath"})
        if unknown:
            raise Problem(f"{what}: external data key '{unknown[0][:40]}' is not read by nnbuild")
        itemsize = EXTERNAL_ITEMSIZE.get(tensor.data_type)
        if itemsize is None:
            name = helper.tensor_dtype_to_np_dtype(tensor.data_type) if tensor.data_type else "undefined"
            raise Problem(f"{what}: external data of element type {name} (fixed-size numbers only)")
        want = _declared_elements(tensor) * itemsize
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else want
        except ValueError:
            raise Problem(f"{what}: external data offset/length are not integers") from None
        if offset < 0 or length != want:
            raise Problem(f"{what}: external data of {length} bytes at offset {offset}, the tensor declares "
                          f"{want} bytes")
        path = external_file(self.path, info.get("location", ""), what)
        size = path.stat().st_size
        if offset + length > size:
            raise Problem(f"{what}: external data at offset {offset} + {length} bytes runs past the end of "
                          f"'{path.name}' ({size} bytes)")
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise Problem(f"{what}: '{path.name}' changed while it was read")
        inline = TensorProto()
        inline.CopyFrom(tensor)
        del inline.external_data[:]
        inline.data_location = TensorProto.DEFAULT
        inline.raw_data = data
        self.external_files.add(str(path))
        return inline

    def const(self, name):
        if not name:
            return None
        entry = self.tensors.get(name)
        if entry is None:
            raise Problem(f"input '{name}' is not produced by any node")
        return entry[1] if entry[0] == "const" else None

    def tensor_any(self, name):
        """(IR name, IR shape, perm) of a computed tensor in whatever layout the IR holds it."""
        entry = self.tensors.get(name)
        if entry is None:
            raise Problem(f"input '{name}' is not produced by any node")
        if entry[0] == "tm":
            raise Problem(f"input '{name}' is a sequence tensor with its batch axis at {entry[3]} (there nnbuild "
                          "reads LSTM/GRU/RNN, Transpose, Squeeze, Reshape, Shape and Gather only)")
        if entry[0] != "ir":
            raise Problem(f"input '{name}' is a constant where a tensor computed from the input is expected")
        return entry[1], entry[2], entry[3]

    def tensor(self, name, node=None):
        """(IR name, shape) of a computed tensor in ONNX order (a layout Transpose added if needed)."""
        src, shape, perm = self.tensor_any(name)
        return self.held(name, _identity(len(shape)), node)

    def onnx_shape(self, name):
        _, shape, perm = self.tensor_any(name)
        return _unpermute(shape, perm)

    def held(self, name, perm, node=None):
        """(IR name, IR shape) of ONNX tensor `name` transposed by `perm` (a Transpose layer added
        once per tensor and layout when the IR holds it in another one)."""
        src, shape, have = self.tensor_any(name)
        perm = tuple(int(k) for k in perm)
        if have == perm:
            return src, shape
        if (src, perm) in self.converted:
            return self.converted[(src, perm)]
        inverse = _inverse(have)
        t = tuple(inverse[q] for q in perm)
        tag = "chw" if perm == _identity(len(perm)) else "hwc" if perm == _last(len(perm)) else "perm"
        label = node if isinstance(node, str) else self.label(node) if node is not None else src
        layer = g.Transpose(self.unique(f"{label}_{tag}"), t, source_type="Transpose (layout)")
        self.add(layer, [src])
        out = (layer.name, tuple(shape[k] for k in t))
        self.converted[(src, perm)] = out
        return out

    def emit(self, node, layer, sources, out_shape=None, output=0, perm=None):
        self.add(layer, sources)
        shape = self.ir_shapes[layer.name]
        self.tensors[node.output[output]] = ("ir", layer.name, shape,
                                             _identity(len(shape)) if perm is None else tuple(perm))
        return layer.name

    def axis(self, a, rank, what="axis"):
        """A full-rank ONNX axis (batch included) -> the per-sample IR axis; the batch axis refused."""
        a = int(a)
        if not -rank - 1 <= a <= rank:
            raise Problem(f"{what} {a} out of range")
        a = a % (rank + 1)
        if a == 0:
            raise Problem(f"{what} 0 is the batch axis: nnbuild generates per-sample code")
        return a - 1

    # ----------------------------------------------------------------------- nodes

    def node(self, node):
        if node.domain not in ("", "ai.onnx"):
            raise Problem(f"operator of domain '{node.domain}' not supported")
        problem = attribute_problem(node)
        if problem:
            raise Problem(problem)
        op, a = node.op_type, _attrs(node)
        inputs = list(node.input)
        consts = [self.const(i) if i else None for i in inputs]
        is_const = all(c is not None for c, i in zip(consts, inputs) if i)
        if op == "Constant":
            self.tensors[node.output[0]] = ("const", self._constant(a))
            return
        if op in FOLDABLE and is_const and inputs:
            self._fold(node, consts)
            return
        if self.batchless and op not in BATCHLESS:
            raise Problem("on an input without a batch axis (there nnbuild reads element-wise operators, "
                          "activations and MatMul only)")
        if op == "Shape":
            full = np.array(onnx_recurrent.full_shape(self, inputs[0]) if onnx_recurrent.is_time_major(self, inputs[0])
                            else (self.batch,) + tuple(self.onnx_shape(inputs[0])), dtype=np.int64)
            start, end = a.get("start", 0), a.get("end", None)
            self.tensors[node.output[0]] = ("const", full[start:end])
            self.count_constant(full.size, "Shape")
            return
        if op not in SUPPORTED:
            raise Problem(f"operator not supported (supported: {', '.join(SUPPORTED)})")
        handler = {**{k: self.op_activation for k in ACTIVATION}, **{k: self.op_unary for k in UNARY},
                   **{k: self.op_elementwise for k in ELEMENTWISE}, **{k: self.op_reduce for k in REDUCE},
                   **{k: self.op_identity for k in PASSTHROUGH}}.get(op) or getattr(self, "op_" + op)
        handler(node, a, inputs, consts)

    def _constant(self, a):
        if "value" in a:
            return self.tensor_array(a["value"], "the value")
        for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
            if key in a:
                self.count_constant(1, key)
                return np.array(a[key], dtype=dtype)
        for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
            if key in a:
                self.count_constant(len(a[key]), key)
                return np.array(a[key], dtype=dtype)
        raise Problem("Constant without a supported value attribute")

    def _fold(self, node, consts):
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        feeds = {i: np.asarray(c) for i, c in zip(node.input, consts) if i}
        size = _folded_size(node, [np.asarray(c) if c is not None else None for c in consts])
        self.count_constant(size, "constant folding")
        try:
            graph = helper.make_graph(
                [node], "fold", [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(c.dtype), c.shape)
                                 for i, c in feeds.items()],
                [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
            outs = ReferenceEvaluator(model).run(None, feeds)
        except Exception as exc:  # noqa: BLE001
            raise Problem(f"constant folding failed ({type(exc).__name__})") from None
        for name, value in zip(node.output, outs):
            self.tensors[name] = ("const", np.asarray(value))

    def op_identity(self, node, a, inputs, consts):
        if node.op_type == "Dropout" and len(inputs) > 2 and inputs[2]:
            mode = consts[2]
            if mode is None or np.asarray(mode).reshape(-1).any():
                raise Problem("training_mode (dropout at inference is the identity only without it)")
        self.tensors[node.output[0]] = self.tensors[inputs[0]]

    def op_activation(self, node, a, inputs, consts):
        src, shape, perm = self.tensor_any(inputs[0])
        self.emit(node, g.Activation(self.unique(self.label(node)), ACTIVATION[node.op_type],
                                     source_type=node.op_type), [src], perm=perm)

    def op_unary(self, node, a, inputs, consts):
        src, shape, perm = self.tensor_any(inputs[0])
        op = node.op_type
        params = {"LeakyRelu": (a.get("alpha", 0.01),), "Elu": (a.get("alpha", 1.0),),
                  "Selu": (a.get("alpha", 1.6732632423543772), a.get("gamma", 1.0507009873554805)),
                  "HardSigmoid": (a.get("alpha", 0.2), a.get("beta", 0.5)),
                  "Shrink": (a.get("lambd", 0.5), a.get("bias", 0.0)),
                  "Gelu": (1.0 if _text(a.get("approximate", "none")) == "tanh" else 0.0,)}.get(op, ())
        if op == "Clip":
            if self.opset < 11:
                lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
            else:
                lo = consts[1] if len(inputs) > 1 and inputs[1] else np.float32(-np.inf)
                hi = consts[2] if len(inputs) > 2 and inputs[2] else np.float32(np.inf)
                if lo is None or hi is None:
                    raise Problem("min/max computed from the input (only constants)")
            bounds = [np.asarray(v, np.float32).reshape(-1) for v in (lo, hi)]
            if any(v.size != 1 for v in bounds):
                raise Problem("min/max are not single values")
            params = (float(bounds[0][0]), float(bounds[1][0]))
        self.emit(node, g.Unary(self.unique(self.label(node)), UNARY[op], params, source_type=op), [src], perm=perm)

    def op_elementwise(self, node, a, inputs, consts):
        if len(inputs) == 1:
            self.op_identity(node, a, inputs, consts)
            return
        computed = [i for i in inputs if self.tensors.get(i, ("?",))[0] == "ir"]
        if not computed:
            raise Problem("every operand is a constant")
        rank = len(self.tensors[computed[0]][2])
        if any(len(self.tensors[i][2]) != rank for i in computed):
            raise Problem("tensor operands of different ranks")
        perm = self.common_layout(computed)
        tensors, constants = [], []
        for position, (i, c) in enumerate(zip(inputs, consts)):
            if c is not None:
                c = np.asarray(c)
                if c.dtype.kind != "f":
                    c = c.astype(np.float32)
                if a.get("broadcast", 0) and "axis" in a and position == 1:
                    # opset < 7 legacy broadcast: B aligned at `axis` of A, not at the last axis
                    if not -rank - 1 <= int(a["axis"]) <= rank:
                        raise Problem(f"axis {a['axis']} out of range")
                    start = int(a["axis"]) % (rank + 1)
                    c = c.reshape(c.shape + (1,) * (rank + 1 - start - c.ndim))
                if self.batchless and c.ndim > rank:
                    raise Problem(f"constant operand of rank {c.ndim} exceeds the rank-{rank} input (no batch axis)")
                if c.ndim == rank + 1:
                    if c.shape[0] != 1:
                        raise Problem(f"constant operand of shape {c.shape} varies along the batch axis")
                    c = c[0]
                elif c.ndim > rank + 1:
                    raise Problem(f"constant operand of rank {c.ndim} exceeds the tensor's")
                if perm != _identity(rank) and c.ndim:
                    c = np.transpose(c.reshape((1,) * (rank - c.ndim) + c.shape), perm)
                constants.append((position, c.astype(np.float32)))
            else:
                src, _ = self.held(i, perm, node)
                tensors.append(src)
        layer = g.Elementwise(self.unique(self.label(node)), ELEMENTWISE[node.op_type], tuple(constants),
                              source_type=node.op_type)
        self.emit(node, layer, tensors, perm=perm)

    def common_layout(self, names_):
        """The layout most of the operands already have (the first operand's on a tie)."""
        perms = [self.tensors[i][3] for i in names_]
        return max(perms, key=lambda p: (perms.count(p), -perms.index(p)))

    # ----------------------------------------------------------------------- layout helpers

    def spatial(self, node, inputs, build):
        """Run a channels-last 2-D layer on a (C, H, W) or (C, W) ONNX tensor: the IR holds its
        input channels-last ((H, W, C) or (W, C), a layout Transpose added only if it is not) and
        its output stays channels-last for the next layer."""
        _, _, perm = self.tensor_any(inputs[0])
        rank = len(perm)
        if rank not in (2, 3):
            raise Problem(f"{rank - 1}-D spatial input (1-D and 2-D only)")
        src, hwc = self.held(inputs[0], _last(rank), node)
        one_d = rank == 2
        if one_d:
            hwc = (1,) + tuple(hwc)
            src = self.add(g.Reshape(self.unique(f"{self.label(node)}_2d"), hwc,
                                     source_type="Reshape (1-D as 2-D)"), [src])
        built = build(hwc)
        for layer in built if isinstance(built, list) else [built]:
            src = self.add(layer, [src])
        if one_d:
            out = self.ir_shapes[src]
            src = self.add(g.Reshape(self.unique(f"{self.label(node)}_1d"), out[1:],
                                     source_type="Reshape (2-D as 1-D)"), [src])
        self.tensors[node.output[0]] = ("ir", src, self.ir_shapes[src], _last(rank))

    @staticmethod
    def pads2d(a, in_hw, kernel, strides, dilations, rank):
        """(top, bottom, left, right) from pads / auto_pad (1-D: the width only)."""
        auto = _text(a.get("auto_pad", "NOTSET"))
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out = []
            for n, k, s, d in zip(in_hw, kernel, strides, dilations):
                o = -(-n // s)
                total = max((o - 1) * s + d * (k - 1) + 1 - n, 0)
                small, big = total // 2, total - total // 2
                out.append((small, big) if auto == "SAME_UPPER" else (big, small))
            return (0, 0) + out[0] if rank == 1 else out[0] + out[1]
        if auto == "VALID" or "pads" not in a:
            return (0, 0, 0, 0)
        p = list(a["pads"])
        if len(p) != 2 * rank:
            raise Problem(f"{len(p)} pads for {rank} spatial axes")
        if rank == 1:
            return (0, 0, p[0], p[1])
        return (p[0], p[2], p[1], p[3])

    @staticmethod
    def pair(values, rank, default):
        values = list(values) if values is not None else [default] * rank
        if len(values) != rank:
            raise Problem(f"{len(values)} values for {rank} spatial axes")
        return tuple(values) if rank == 2 else (1,) + tuple(values) if default == 1 else (0,) + tuple(values)

    # ----------------------------------------------------------------------- spatial ops

    @staticmethod
    def weights_and_bias(inputs, consts):
        """A convolution's weights and its optional bias: initializers, never computed from the input."""
        w = consts[1]
        if w is None:
            raise Problem("weights computed from the input (only an initializer)")
        b = consts[2] if len(inputs) > 2 and inputs[2] else None
        if len(inputs) > 2 and inputs[2] and b is None:
            raise Problem("bias computed from the input")
        return w, b

    def op_Conv(self, node, a, inputs, consts):
        w, b = self.weights_and_bias(inputs, consts)
        rank = w.ndim - 2
        if rank not in (1, 2, 3):
            raise Problem(f"{rank}-D convolution (1-D, 2-D and 3-D only)")
        w = np.asarray(w, np.float32)
        if "kernel_shape" in a and tuple(a["kernel_shape"]) != tuple(w.shape[2:]):
            raise Problem(f"kernel_shape {list(a['kernel_shape'])} but weights of shape {tuple(w.shape)}")
        if channels_per_group(w, int(a.get("group", 1))) is None:
            raise Problem(f"group {a.get('group', 1)} does not divide the {w.shape[0]} output channels")
        if rank == 3:
            self._volume(node, a, inputs, w.shape[2:], "conv", w=w, b=None if b is None else np.asarray(b, np.float32))
            return
        if rank == 1:
            w = w[:, :, None, :]
        kernel = np.transpose(w, (2, 3, 1, 0))  # OIHW -> HWIO
        strides = self.pair(a.get("strides"), rank, 1)
        dil = self.pair(a.get("dilations"), rank, 1)
        groups = int(a.get("group", 1))

        def build(hwc):
            pads = self.pads2d(a, hwc[:2] if rank == 2 else hwc[1:2], kernel.shape[:2] if rank == 2
                               else kernel.shape[1:2], strides[-rank:], dil[-rank:], rank)
            return g.Conv2D(self.unique(self.label(node)), kernel, None if b is None else np.asarray(b, np.float32),
                            strides, dil, pads, "linear", source_type="Conv", groups=groups)
        self.spatial(node, inputs, build)

    def op_ConvTranspose(self, node, a, inputs, consts):
        """The transposed convolution as the convolution it is the adjoint of: the input with
        stride - 1 zeros between cells (per axis: Reshape, Pad, Reshape), padded by dilation * (kernel - 1)
        minus pads (plus output_padding at the end; a negative pad removes cells), then a stride-1
        Conv2D of the flipped kernel with in/out channels swapped. The non-zero products are the
        same ones ONNX sums; the added terms are exact zeros."""
        w, b = self.weights_and_bias(inputs, consts)
        rank = w.ndim - 2
        if rank not in (1, 2):
            raise Problem(f"{rank}-D transposed convolution (1-D and 2-D only)")
        if "output_shape" in a:
            raise Problem("output_shape (only pads and output_padding)")
        if _text(a.get("auto_pad", "NOTSET")) in ("SAME_UPPER", "SAME_LOWER"):
            raise Problem(f"auto_pad {_text(a['auto_pad'])} (only NOTSET and VALID)")
        w = np.asarray(w, np.float32)
        groups = int(a.get("group", 1))
        if "kernel_shape" in a and tuple(a["kernel_shape"]) != tuple(w.shape[2:]):
            raise Problem(f"kernel_shape {list(a['kernel_shape'])} but weights of shape {tuple(w.shape)}")
        if w.shape[0] % groups:
            raise Problem(f"group {groups} does not divide the {w.shape[0]} input channels")
        if rank == 1:
            w = w[:, :, None, :]
        cin_g, cout_g = w.shape[0] // groups, w.shape[1]
        # conv weights OIHW: out channel g*cout_g + o reads input channels g*cin_g + i, kernel flipped
        conv = w.reshape(groups, cin_g, cout_g, *w.shape[2:]).transpose(0, 2, 1, 3, 4)
        conv = conv.reshape(groups * cout_g, cin_g, *w.shape[2:])[:, :, ::-1, ::-1]
        kernel = np.ascontiguousarray(np.transpose(conv, (2, 3, 1, 0)))  # OIHW -> HWIO
        strides = self.pair(a.get("strides"), rank, 1)
        dil = self.pair(a.get("dilations"), rank, 1)
        extra = self.pair(a.get("output_padding"), rank, 0)
        if any(e >= max(s, d) for e, s, d in zip(extra, strides, dil)):
            raise Problem(f"output_padding {list(extra[-rank:])} not below the stride or dilation")
        pads = [0] * (2 * rank) if _text(a.get("auto_pad", "NOTSET")) == "VALID" or "pads" not in a else list(a["pads"])
        if len(pads) != 2 * rank:
            raise Problem(f"{len(pads)} pads for {rank} spatial axes")
        begin, end = ((0,) + tuple(pads[:1]), (0,) + tuple(pads[1:])) if rank == 1 else (pads[:2], pads[2:])
        label = self.label(node)

        def build(hwc):
            h, w_, c = hwc
            if c != w.shape[0]:
                raise Problem(f"weights for {w.shape[0]} input channels, input has {c}")
            layers = []
            # one axis at a time: rank-4 data movement (v1 runs up to rank 4 after merging axes)
            if strides[1] != 1:
                layers += [g.Reshape(self.unique(f"{label}_cols"), (h, w_, 1, c), source_type="ConvTranspose (stride)"),
                           g.Pad(self.unique(f"{label}_stride_w"), ((0, 0), (0, 0), (0, strides[1] - 1), (0, 0)),
                                 "constant", 0.0, source_type="ConvTranspose (stride)"),
                           g.Reshape(self.unique(f"{label}_stuffed_w"), (h, w_ * strides[1], c),
                                     source_type="ConvTranspose (stride)")]
            if strides[0] != 1:
                layers += [g.Reshape(self.unique(f"{label}_rows"), (h, 1, w_ * strides[1] * c),
                                     source_type="ConvTranspose (stride)"),
                           g.Pad(self.unique(f"{label}_stride_h"), ((0, 0), (0, strides[0] - 1), (0, 0)),
                                 "constant", 0.0, source_type="ConvTranspose (stride)"),
                           g.Reshape(self.unique(f"{label}_stuffed_h"), (h * strides[0], w_ * strides[1], c),
                                     source_type="ConvTranspose (stride)")]
            around = [(dil[k] * (kernel.shape[k] - 1) - begin[k],
                       dil[k] * (kernel.shape[k] - 1) - end[k] + extra[k] - (strides[k] - 1)) for k in range(2)]
            if any(v for pair in around for v in pair):
                layers.append(g.Pad(self.unique(f"{label}_pad"), tuple(around) + ((0, 0),), "constant", 0.0,
                                    source_type="ConvTranspose (pads)"))
            layers.append(g.Conv2D(self.unique(label), kernel, None if b is None else np.asarray(b, np.float32),
                                   (1, 1), dil, (0, 0, 0, 0), "linear", source_type="ConvTranspose", groups=groups))
            return layers
        self.spatial(node, inputs, build)

    @staticmethod
    def pads_nd(a, sizes, kernel, strides, dilations):
        """[(begin, end)] per spatial axis from pads / auto_pad (any number of axes)."""
        auto = _text(a.get("auto_pad", "NOTSET"))
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out = []
            for n, k, s, d in zip(sizes, kernel, strides, dilations):
                total = max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
                small, big = total // 2, total - total // 2
                out.append((small, big) if auto == "SAME_UPPER" else (big, small))
            return out
        if auto == "VALID" or "pads" not in a:
            return [(0, 0)] * len(sizes)
        p = [int(v) for v in a["pads"]]
        if len(p) != 2 * len(sizes):
            raise Problem(f"{len(p)} pads for {len(sizes)} spatial axes")
        return list(zip(p[:len(sizes)], p[len(sizes):]))

    def _volume(self, node, a, inputs, kernel, mode, w=None, b=None):
        """3-D convolution or max pooling on (C, D, H, W) as 2-D layers, exactly: the input held
        channels-last (D, H, W, C) and padded (the H axis up to a multiple of its stride); per depth
        tap j the depth slices j*dd + od*sd (Slice) are stacked into one tall (OD*H, W, C) image and
        run through a Conv2D of the tap's 2-D kernel (max: the taps' element-wise max, then one 2-D
        max pooling), rows that would straddle two slices dropped (Reshape, Slice); the taps' convolutions
        are summed (Elementwise add, the bias in the first)."""
        label = self.label(node)
        _, _, perm = self.tensor_any(inputs[0])
        if len(perm) != 4:
            raise Problem(f"a 3-D kernel on a rank-{len(perm) + 1} input")
        src, (d_, h, w_, c) = self.held(inputs[0], _last(4), node)
        strides = tuple(int(v) for v in a.get("strides", [1, 1, 1]))
        dil = tuple(int(v) for v in a.get("dilations", [1, 1, 1]))
        if len(strides) != 3 or len(dil) != 3:
            raise Problem("strides/dilations for 3 spatial axes expected")
        pads = self.pads_nd(a, (d_, h, w_), kernel, strides, dil)
        ext = [dd * (k - 1) + 1 for k, dd in zip(kernel, dil)]
        dp, hp, wp = (n + p0 + p1 for n, (p0, p1) in zip((d_, h, w_), pads))
        if any(n < e for n, e in zip((dp, hp, wp), ext)):
            raise Problem(f"kernel {tuple(kernel)} larger than the padded input {(dp, hp, wp)}")
        od, oh = (dp - ext[0]) // strides[0] + 1, (hp - ext[1]) // strides[1] + 1
        hs = -(-hp // strides[1]) * strides[1]
        fill = 0.0 if mode == "conv" else float("-inf")
        around = (pads[0], (pads[1][0], pads[1][1] + hs - hp), pads[2], (0, 0))
        if any(v for pair in around for v in pair):
            src = self.add(g.Pad(self.unique(f"{label}_pad"), around, "constant", fill,
                                 source_type=f"{node.op_type} (3-D pads)"), [src])
        taps = []
        for j in range(kernel[0]):
            taps.append(self.add(g.Slice(self.unique(f"{label}_depth{j}"), (j * dil[0], 0, 0, 0), (strides[0], 1, 1, 1),
                                         (od, hs, wp, c), source_type=f"{node.op_type} (3-D depth tap)"), [src]))
        tall_pad = (0, max(0, ext[1] - strides[1]), 0, 0)

        def tall(name):
            return self.add(g.Reshape(self.unique(f"{label}_tall"), (od * hs, wp, c),
                                      source_type=f"{node.op_type} (3-D as 2-D)"), [name])
        if mode == "max":
            peak = taps[0] if len(taps) == 1 else self.add(
                g.Elementwise(self.unique(f"{label}_depthmax"), "max", source_type="MaxPool (3-D depth)"), taps)
            outs = [self.add(g.Pool2D(self.unique(f"{label}_plane"), "max", tuple(kernel[1:]), tuple(strides[1:]),
                                      tall_pad, source_type="MaxPool (3-D plane)"), [tall(peak)])]
        else:
            groups = int(a.get("group", 1))
            outs = []
            for j, tap in enumerate(taps):
                k2 = np.ascontiguousarray(np.transpose(w[:, :, j], (2, 3, 1, 0)))  # OIHW -> HWIO
                outs.append(self.add(g.Conv2D(self.unique(f"{label}_tap{j}"), k2, b if j == 0 else None,
                                              tuple(strides[1:]), tuple(dil[1:]), tall_pad, "linear",
                                              source_type="Conv (3-D depth tap)", groups=groups), [tall(tap)]))
        rows, ow, f = self.ir_shapes[outs[0]]
        if rows != od * hs // strides[1]:
            raise Problem(f"internal: {rows} rows for {od} slices of {hs // strides[1]}")
        total = outs[0] if len(outs) == 1 else self.add(
            g.Elementwise(self.unique(f"{label}_sum"), "add", source_type="Conv (3-D taps summed)"), outs)
        out = self.add(g.Reshape(self.unique(f"{label}_volume"), (od, hs // strides[1], ow, f),
                                 source_type=f"{node.op_type} (2-D as 3-D)"), [total])
        if hs // strides[1] != oh:
            out = self.add(g.Slice(self.unique(label), (0, 0, 0, 0), (1, 1, 1, 1), (od, oh, ow, f),
                                   source_type=f"{node.op_type} (rows inside a slice)"), [out])
        self.tensors[node.output[0]] = ("ir", out, self.ir_shapes[out], _last(4))

    def _dilated_max(self, node, a, inputs, rank, kernel):
        """Dilated max pooling, exactly: the input padded with -inf, one strided Slice per kernel
        tap (start tap * dilation, step stride), their element-wise max."""
        label = self.label(node)
        src, hwc = self.held(inputs[0], _last(rank + 1), node)
        if rank == 1:
            hwc = (1,) + tuple(hwc)
            src = self.add(g.Reshape(self.unique(f"{label}_2d"), hwc, source_type="Reshape (1-D as 2-D)"), [src])
        pool = self.pair(kernel, rank, 1)
        strides = self.pair(a.get("strides"), rank, 1)
        dil = self.pair(a.get("dilations"), rank, 1)
        t, b, l, r = self.pads2d(a, hwc[:2] if rank == 2 else hwc[1:2], pool[-rank:], strides[-rank:], dil[-rank:],
                                 rank)
        if t or b or l or r:
            src = self.add(g.Pad(self.unique(f"{label}_pad"), ((t, b), (l, r), (0, 0)), "constant", float("-inf"),
                                 source_type="MaxPool (pads)"), [src])
        h, w, c = self.ir_shapes[src]
        ext = [d * (k - 1) + 1 for k, d in zip(pool, dil)]
        if h < ext[0] or w < ext[1]:
            raise Problem(f"dilated pool {tuple(ext)} larger than the padded input {(h, w)}")
        oh, ow = (h - ext[0]) // strides[0] + 1, (w - ext[1]) // strides[1] + 1
        taps = [self.add(g.Slice(self.unique(f"{label}_tap{i}_{j}"), (i * dil[0], j * dil[1], 0),
                                 (strides[0], strides[1], 1), (oh, ow, c), source_type="MaxPool (dilated tap)"), [src])
                for i in range(pool[0]) for j in range(pool[1])]
        out = taps[0] if len(taps) == 1 else self.add(
            g.Elementwise(self.unique(label), "max", source_type="MaxPool (dilated)"), taps)
        if rank == 1:
            out = self.add(g.Reshape(self.unique(f"{label}_1d"), (ow, c), source_type="Reshape (2-D as 1-D)"), [out])
        self.tensors[node.output[0]] = ("ir", out, self.ir_shapes[out], _last(rank + 1))

    def _pool(self, node, a, inputs, mode):
        kernel = list(a["kernel_shape"])
        rank = len(kernel)
        if rank not in (1, 2, 3):
            raise Problem(f"{rank}-D pooling (1-D, 2-D and 3-D only)")
        if any(d != 1 for d in a.get("dilations", [1] * rank)):
            if mode != "max" or rank == 3:
                raise Problem("pooling with dilations (1-D and 2-D max pooling only)")
            if a.get("ceil_mode", 0):
                raise Problem("pooling with dilations and ceil_mode")
            if _text(a.get("auto_pad", "NOTSET")) in ("SAME_UPPER", "SAME_LOWER"):
                # onnxruntime pads for the undilated kernel, the ONNX spec for the dilated one
                raise Problem("pooling with dilations and auto_pad SAME (explicit pads only)")
            self._dilated_max(node, a, inputs, rank, kernel)
            return
        if rank == 3:
            if mode != "max":
                raise Problem("3-D average pooling (3-D max pooling only)")
            if a.get("ceil_mode", 0):
                raise Problem("3-D pooling with ceil_mode")
            self._volume(node, a, inputs, tuple(kernel), "max")
            return
        strides = self.pair(a.get("strides"), rank, 1)
        pool = self.pair(kernel, rank, 1)
        include = mode == "avg" and bool(a.get("count_include_pad", 0))

        def build(hwc):
            pads = list(self.pads2d(a, hwc[:2] if rank == 2 else hwc[1:2], pool[-rank:], strides[-rank:],
                                    (1,) * rank, rank))
            layers = []
            if include and any(pads):
                # the declared pads count in the average: they are real zeros
                layers.append(g.Pad(self.unique(f"{self.label(node)}_pad"),
                                    ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)), "constant", 0.0,
                                    source_type="Pad (count_include_pad)"))
                hwc = (hwc[0] + pads[0] + pads[1], hwc[1] + pads[2] + pads[3], hwc[2])
                pads = [0, 0, 0, 0]
            if a.get("ceil_mode", 0):
                # windows that start inside the input or its leading pad but run past the end:
                # cells past the end are not values (max ignores them, average does not count them)
                for k, axis in ((0, 0), (2, 1)):
                    n = hwc[axis] + pads[k] + pads[k + 1]
                    if n < pool[axis]:
                        raise Problem(f"pool {pool[axis]} larger than the padded input {n}")
                    out = -(-(n - pool[axis]) // strides[axis]) + 1
                    if (out - 1) * strides[axis] >= hwc[axis] + pads[k]:
                        # onnxruntime drops a last window that starts in the trailing pad (onnx's
                        # shape inference keeps it): shapes from here on are onnxruntime's alone
                        out -= 1
                        self.inferred = {}
                    extra = max(0, (out - 1) * strides[axis] + pool[axis] - n)
                    if pads[k + 1] + extra >= pool[axis]:
                        raise Problem("ceil_mode: the last window would hold no input cell")
                    pads[k + 1] += extra
            layers.append(g.Pool2D(self.unique(self.label(node)), mode, pool, strides, tuple(pads),
                                   source_type=node.op_type))
            return layers
        self.spatial(node, inputs, build)

    def op_MaxPool(self, node, a, inputs, consts):
        if len(node.output) > 1 and node.output[1]:
            raise Problem("the Indices output")
        self._pool(node, a, inputs, "max")

    def op_AveragePool(self, node, a, inputs, consts):
        self._pool(node, a, inputs, "avg")

    def _global(self, node, inputs, op):
        src, shape, perm = self.tensor_any(inputs[0])
        inverse = _inverse(perm)
        axes = tuple(sorted(inverse[k] for k in range(1, len(shape))))
        layer = g.Reduce(self.unique(self.label(node)), op, axes, True, source_type=node.op_type)
        self.emit(node, layer, [src], perm=perm)

    def op_GlobalAveragePool(self, node, a, inputs, consts):
        self._global(node, inputs, "mean")

    def op_GlobalMaxPool(self, node, a, inputs, consts):
        self._global(node, inputs, "max")

    def channels_last(self, name, node):
        """(IR name, IR shape, perm) of a tensor whose channel axis (ONNX sample axis 0) the IR
        holds last, as the IR's BatchNorm and LRN need (a layout Transpose only if it is not)."""
        src, shape, perm = self.tensor_any(name)
        if perm[-1] == 0:
            return src, shape, perm
        src, shape = self.held(name, _last(len(perm)), node)
        return src, shape, _last(len(perm))

    def op_BatchNormalization(self, node, a, inputs, consts):
        if any(c is None for c in consts[1:5]):
            raise Problem("scale/bias/mean/variance computed from the input")
        if len([o for o in node.output if o]) > 1:
            raise Problem("training-mode outputs")
        src, shape, perm = self.channels_last(inputs[0], node)
        gamma, beta, mean, var = (np.asarray(c, np.float32) for c in consts[1:5])
        eps = float(a.get("epsilon", 1e-5))
        layer = g.BatchNorm(self.unique(self.label(node)), gamma, beta, mean, var, eps,
                            source_type="BatchNormalization")
        self.emit(node, layer, [src], perm=perm)

    def op_LRN(self, node, a, inputs, consts):
        src, shape, perm = self.channels_last(inputs[0], node)
        layer = g.LRN(self.unique(self.label(node)), int(a["size"]), float(a.get("alpha", 1e-4)),
                      float(a.get("beta", 0.75)), float(a.get("bias", 1.0)), source_type="LRN")
        self.emit(node, layer, [src], perm=perm)

    # ----------------------------------------------------------------------- dense

    def _dense(self, node, src, shape, kernel, bias, perm=None):
        if shape[-1] != kernel.shape[0]:
            raise Problem(f"weights {kernel.shape} for a tensor of shape {shape}")
        layer = g.Dense(self.unique(self.label(node)), np.asarray(kernel, np.float32),
                        None if bias is None else np.asarray(bias, np.float32), source_type=node.op_type)
        self.emit(node, layer, [src], perm=perm)

    def op_Gemm(self, node, a, inputs, consts):
        src, shape = self.tensor(inputs[0], node)
        if a.get("transA", 0):
            raise Problem("transA=1 (the batch axis would become a feature axis)")
        b = consts[1]
        if b is None:
            raise Problem("B computed from the input (only an initializer)")
        b = np.asarray(b, np.float32)
        kernel = b.T if a.get("transB", 0) else b
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        kernel = kernel * np.float32(alpha) if alpha != 1.0 else kernel
        bias = None
        if len(inputs) > 2 and inputs[2]:
            c = consts[2]
            if c is None:
                raise Problem("C computed from the input")
            c = np.asarray(c, np.float32) * np.float32(beta)
            if c.size == kernel.shape[1]:
                bias = c.reshape(-1)
            elif c.size == 1:
                bias = np.full(kernel.shape[1], c.reshape(-1)[0], np.float32)
            else:
                raise Problem(f"C of shape {c.shape} varies along the batch axis")
        self._dense(node, src, shape, kernel, bias)

    def op_MatMul(self, node, a, inputs, consts):
        if consts[0] is not None and consts[1] is None:
            self._matmul_left(node, inputs, np.asarray(consts[0], np.float32))
            return
        if consts[1] is None or consts[0] is not None:
            raise Problem("a product of two computed tensors (only one operand computed, the other a constant "
                          "matrix)")
        b = np.asarray(consts[1], np.float32)
        if b.ndim != 2:
            raise Problem(f"constant of rank {b.ndim} (a matrix only)")
        src, shape, perm = self.tensor_any(inputs[0])
        if perm[-1] != len(perm) - 1:
            src, shape = self.tensor(inputs[0], node)
            perm = _identity(len(perm))
        self._dense(node, src, shape, b, None, perm)

    def _matmul_left(self, node, inputs, m):
        """A @ x with A a constant matrix: a Dense of kernel A^T over x's axis -2, which the IR
        holds last (x^T A^T = (A x)^T; the layout records the swap, no data moves twice)."""
        if m.ndim != 2:
            raise Problem(f"constant of rank {m.ndim} (a matrix only)")
        src, shape, perm = self.tensor_any(inputs[1])
        r = len(perm)
        if self.batchless and r == 1:
            # A @ x with x the whole (vector) input: one Dense of kernel A^T
            self._dense(node, src, shape, m.T, None, perm)
            return
        if r < 2:
            raise Problem("a constant times a vector per sample would contract the batch axis")
        if perm[-1] != r - 2:
            perm = tuple(range(r - 2)) + (r - 1, r - 2)
            src, shape = self.held(inputs[1], perm, node)
        self._dense(node, src, shape, m.T, None, perm)

    # ----------------------------------------------------------------------- shape ops

    def reshape(self, node, src, shape, target, perm=None):
        layer = g.Reshape(self.unique(self.label(node)), tuple(int(d) for d in target), source_type=node.op_type)
        self.emit(node, layer, [src], perm=perm)

    def op_Reshape(self, node, a, inputs, consts):
        target = list(a["shape"]) if self.opset < 5 else consts[1]
        if target is None:
            raise Problem("target shape computed from the input")
        if onnx_recurrent.is_time_major(self, inputs[0]):
            onnx_recurrent.reshape(self, node, [int(d) for d in np.asarray(target).reshape(-1)],
                                   not a.get("allowzero", 0))
            return
        src, shape = self.tensor(inputs[0], node)
        target = [int(d) for d in np.asarray(target).reshape(-1)]
        full = (self.batch,) + tuple(shape)
        allow_zero = not a.get("allowzero", 0)
        target = [full[k] if d == 0 and allow_zero and k < len(full) else d for k, d in enumerate(target)]
        if not target or target[0] not in (self.batch, -1):
            raise Problem(f"target shape {target} changes the batch axis")
        rest = target[1:]
        if target[0] == -1 and -1 in rest:
            raise Problem("two unknown dimensions")
        if target[0] == -1 and self.batch != 1:
            raise Problem("target shape infers the batch axis")
        size = int(np.prod(shape))
        if -1 in rest:
            known = int(np.prod([d for d in rest if d != -1]))
            rest[rest.index(-1)] = size // known if known else 0
        if int(np.prod(rest)) != size or not rest:
            raise Problem(f"cannot reshape {tuple(shape)} to {tuple(rest)}")
        self.reshape(node, src, shape, rest)

    def op_Flatten(self, node, a, inputs, consts):
        src, shape = self.tensor(inputs[0], node)
        rank = len(shape) + 1
        axis = int(a.get("axis", 1))
        if not -rank <= axis <= rank:
            raise Problem(f"axis {axis} out of range")
        axis %= rank + 1 if axis == rank else rank
        full = (self.batch,) + tuple(shape)
        if int(np.prod(full[:axis])) != self.batch:
            raise Problem(f"axis {axis} folds sample axes into the batch axis (shape {full})")
        self.reshape(node, src, shape, (int(np.prod(shape)),))

    def _axes_input(self, a, inputs, consts, index=1):
        if self.opset >= 13 and len(inputs) > index and inputs[index]:
            if consts[index] is None:
                raise Problem("axes computed from the input")
            return [int(v) for v in np.asarray(consts[index]).reshape(-1)]
        return list(a["axes"]) if "axes" in a else None

    def op_LSTM(self, node, a, inputs, consts):
        onnx_recurrent.convert(self, node, a, inputs, consts)

    def op_GRU(self, node, a, inputs, consts):
        onnx_recurrent.convert(self, node, a, inputs, consts)

    def op_RNN(self, node, a, inputs, consts):
        onnx_recurrent.convert(self, node, a, inputs, consts)

    def op_Squeeze(self, node, a, inputs, consts):
        if onnx_recurrent.is_time_major(self, inputs[0]):
            onnx_recurrent.squeeze(self, node, self._axes_input(a, inputs, consts))
            return
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        axes = self._axes_input(a, inputs, consts)
        if axes is None:
            axes = [k + 1 for k, d in enumerate(shape) if d == 1]
        drop = {self.axis(x, len(shape)) for x in axes}
        if any(shape[k] != 1 for k in drop):
            raise Problem(f"squeezing an axis of size > 1 (shape {shape})")
        if perm == _identity(len(perm)) or len(drop) == len(shape):
            src, ir = self.tensor(inputs[0], node)
            self.reshape(node, src, ir, [d for k, d in enumerate(shape) if k not in drop] or [1])
            return
        # size-1 axes leave the element order alone: drop them where the IR holds them
        target = [d for k, d in enumerate(ir) if perm[k] not in drop]
        self.reshape(node, src, ir, target, _drop(perm, drop))

    def op_Unsqueeze(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        axes = self._axes_input(a, inputs, consts)
        if axes is None:
            raise Problem("no axes")
        rank = len(ir) + len(axes)
        if any(not -rank - 1 <= int(x) <= rank for x in axes):
            raise Problem(f"axes {list(axes)} out of range for a rank-{rank + 1} output")
        axes = sorted(int(x) % (rank + 1) for x in axes)
        if 0 in axes:
            raise Problem("a new axis before the batch axis")
        new = [x - 1 for x in axes]
        if perm == _identity(len(perm)):
            target = list(_unpermute(ir, perm))
            for x in new:
                target.insert(x, 1)
            self.reshape(node, src, ir, target)
            return
        # the new size-1 axes go last in the IR; the old ones keep their layout
        old = [k for k in range(rank) if k not in new]
        self.reshape(node, src, ir, list(ir) + [1] * len(new), tuple(old[p] for p in perm) + tuple(new))

    def op_Transpose(self, node, a, inputs, consts):
        if onnx_recurrent.is_time_major(self, inputs[0]):
            onnx_recurrent.transpose(self, node, a, inputs)
            return
        src, ir, perm = self.tensor_any(inputs[0])
        q = list(a.get("perm", range(len(ir), -1, -1)))
        if sorted(q) != list(range(len(ir) + 1)):
            raise Problem(f"perm {q} is not a permutation of the {len(ir) + 1} axes")
        if q[0] != 0 and self.batch == 1 and not self.batchless and \
                onnx_recurrent.feeds_time_major(self.proto.graph, node.output[0]):
            # the batch axis moves (PyTorch's batch_first sequence for a layout-0 LSTM/GRU)
            onnx_recurrent.transpose(self, node, a, inputs)
            return
        if q[0] != 0:
            raise Problem(f"perm {q} moves the batch axis")
        # no data moves: the output is the same IR tensor seen with another layout
        q_inverse = _inverse(tuple(p - 1 for p in q[1:]))
        self.tensors[node.output[0]] = ("ir", src, ir, tuple(q_inverse[p] for p in perm))

    def op_Concat(self, node, a, inputs, consts):
        if any(c is not None for c in consts):
            raise Problem("a constant operand (tensors only)")
        if len(inputs) == 1:
            self.tensors[node.output[0]] = self.tensors[inputs[0]]
            return
        ranks = {len(self.tensor_any(i)[2]) for i in inputs}
        if len(ranks) != 1:
            raise Problem("operands of different ranks")
        perm = self.common_layout(inputs)
        srcs = [self.held(i, perm, node)[0] for i in inputs]
        axis = _inverse(perm)[self.axis(a["axis"], len(perm))]
        layer = g.Concatenate(self.unique(self.label(node)), axis, source_type="Concat")
        self.emit(node, layer, srcs, perm=perm)

    def op_Pad(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        mode = _text(a.get("mode", "constant"))
        if self.opset < 11:
            pads, value = list(a.get("pads", a.get("paddings", []))), float(a.get("value", 0.0))
            axes = None
        else:
            if consts[1] is None:
                raise Problem("pads computed from the input")
            pads = [int(v) for v in np.asarray(consts[1]).reshape(-1)]
            value = float(np.asarray(consts[2]).reshape(-1)[0]) if len(inputs) > 2 and inputs[2] else 0.0
            axes = consts[3] if len(inputs) > 3 and inputs[3] else None
        rank = len(shape) + 1
        axes = list(range(rank)) if axes is None else [int(x) % rank for x in np.asarray(axes).reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise Problem(f"{len(pads)} pads for {len(axes)} axes")
        per = {x: (pads[k], pads[k + len(axes)]) for k, x in enumerate(axes)}
        if per.get(0, (0, 0)) != (0, 0):
            raise Problem("padding the batch axis")
        if min(pads, default=0) < 0:
            raise Problem(f"negative pads {pads} (cropping by Pad is not supported)")
        if mode == "constant" and value != value:
            raise Problem("a NaN pad value (max, min and comparisons on NaN differ between the reference "
                          "and C)")
        layer = g.Pad(self.unique(self.label(node)), tuple(per.get(p + 1, (0, 0)) for p in perm),
                      mode, value, source_type="Pad")
        self.emit(node, layer, [src], perm=perm)

    def op_Slice(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        if self.opset < 10:
            starts, ends = a["starts"], a["ends"]
            axes, steps = a.get("axes"), None
        else:
            if consts[1] is None or consts[2] is None:
                raise Problem("starts/ends computed from the input")
            starts, ends = np.asarray(consts[1]).reshape(-1), np.asarray(consts[2]).reshape(-1)
            axes = consts[3] if len(inputs) > 3 and inputs[3] else None
            steps = consts[4] if len(inputs) > 4 and inputs[4] else None
        rank = len(shape) + 1
        axes = list(range(len(starts))) if axes is None else [int(x) for x in np.asarray(axes).reshape(-1)]
        steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
        st, sp, ct = [0] * len(shape), [1] * len(shape), list(shape)
        for s, e, x, d in zip(starts, ends, axes, steps):
            k = self.axis(x, len(shape))
            idx = range(shape[k])[slice(int(max(min(s, 2 ** 62), -2 ** 62)), int(max(min(e, 2 ** 62), -2 ** 62)), d)]
            if len(idx) == 0:
                raise Problem("an empty slice")
            st[k], sp[k], ct[k] = idx.start, idx.step, len(idx)
        del rank
        layer = g.Slice(self.unique(self.label(node)), tuple(st[p] for p in perm), tuple(sp[p] for p in perm),
                        tuple(ct[p] for p in perm), source_type="Slice")
        self.emit(node, layer, [src], perm=perm)

    def op_Split(self, node, a, inputs, consts):
        """Each output that is read becomes a Slice of its part along the axis (constant sizes)."""
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        k = self.axis(a.get("axis", 0), len(shape))
        outputs = list(node.output)
        if self.opset >= 13 and len(inputs) > 1 and inputs[1]:
            if consts[1] is None:
                raise Problem("split sizes computed from the input")
            sizes = [int(v) for v in np.asarray(consts[1]).reshape(-1)]
        elif self.opset < 13 and "split" in a:
            sizes = [int(v) for v in a["split"]]
        else:
            parts = int(a.get("num_outputs", len(outputs)))
            if parts != len(outputs) or parts < 1:
                raise Problem(f"num_outputs {parts} for {len(outputs)} outputs")
            chunk = -(-shape[k] // parts)
            sizes = [max(0, min(chunk, shape[k] - chunk * j)) for j in range(parts)]
        if len(sizes) != len(outputs) or any(v < 0 for v in sizes) or sum(sizes) != shape[k]:
            raise Problem(f"split sizes {sizes} for {len(outputs)} outputs of an axis of size {shape[k]}")
        start = 0
        for j, (name, size) in enumerate(zip(outputs, sizes)):
            if name and name in self.needed:
                if size == 0:
                    raise Problem(f"output '{name}' is empty")
                st, ct = [0] * len(shape), list(shape)
                st[k], ct[k] = start, size
                layer = g.Slice(self.unique(f"{self.label(node)}_{j}"), tuple(st[p] for p in perm),
                                (1,) * len(shape), tuple(ct[p] for p in perm), source_type="Split")
                self.emit(node, layer, [src], output=j, perm=perm)
            start += size

    def op_Expand(self, node, a, inputs, consts):
        """A broadcast to a constant shape: a Tile of the size-1 axes (after leading size-1 axes)."""
        src, ir, perm = self.tensor_any(inputs[0])
        if consts[1] is None:
            raise Problem("shape computed from the input")
        target = [int(v) for v in np.asarray(consts[1]).reshape(-1)]
        shape = _unpermute(ir, perm)
        full = (self.batch,) + tuple(shape)
        if len(target) > len(full):
            if self.batch != 1:
                raise Problem(f"shape {target} adds axes before the batch axis of size {self.batch}")
            # batch 1: the new leading axes are size 1 in the input (the batch axis moves into the sample)
            src, ir = self.tensor(inputs[0], node)
            shape = (1,) * (len(target) - len(full)) + tuple(shape)
            src = self.add(g.Reshape(self.unique(f"{self.label(node)}_rank"), shape,
                                     source_type="Expand (leading axes)"), [src])
            ir, perm, full = shape, _identity(len(shape)), (1,) + shape
        target = [1] * (len(full) - len(target)) + target
        try:
            out = g.broadcast_shape(full, tuple(target))
        except ValueError:
            raise Problem(f"shape {target} does not broadcast with {full}") from None
        if out[0] != self.batch:
            raise Problem("expanding the batch axis")
        reps = [o // n for o, n in zip(out[1:], shape)]
        if all(r == 1 for r in reps):
            self.tensors[node.output[0]] = self.tensors[inputs[0]]
            return
        layer = g.Tile(self.unique(self.label(node)), tuple(reps[p] for p in perm), source_type="Expand")
        self.emit(node, layer, [src], perm=perm)

    def gathered(self, a, inputs, consts):
        """A Gather-like node's data (tensor, IR shape, layout perm), its model shape, the axis and
        the indices (constants only), as int64."""
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        if consts[1] is None:
            raise Problem("indices computed from the input (only constants)")
        return src, ir, perm, shape, self.axis(a.get("axis", 0), len(shape)), np.asarray(consts[1]).astype(np.int64)

    @staticmethod
    def wrapped(idx, size):
        """Indices into an axis of `size`, negative ones counted from its end; out of range is refused."""
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise Problem(f"indices out of range for axis of size {size}")
        return np.where(idx < 0, idx + size, idx)

    def op_Gather(self, node, a, inputs, consts):
        if onnx_recurrent.is_time_major(self, inputs[0]):
            if consts[1] is None:
                raise Problem("indices computed from the input (only constants)")
            onnx_recurrent.gather(self, node, a, consts[1])
            return
        src, ir, perm, shape, axis, idx = self.gathered(a, inputs, consts)
        idx = self.wrapped(idx, shape[axis])
        if idx.ndim <= 1 and (idx.ndim == 1 or len(shape) > 1):
            # the IR keeps its layout: the gathered axis is where the IR holds it
            at = _inverse(perm)[axis]
            out = perm if idx.ndim == 1 else _drop(perm, {axis})
            layer = g.Gather(self.unique(self.label(node)), at, idx, source_type="Gather")
            self.emit(node, layer, [src], perm=out)
            return
        src, shape = self.tensor(inputs[0], node)
        if idx.ndim > 1:
            layer = g.Gather(self.unique(self.label(node) + "_flat"), axis, idx.reshape(-1), source_type="Gather")
            flat = layer.output_shape(shape)
            self.add(layer, [src])
            target = tuple(shape[:axis]) + idx.shape + tuple(shape[axis + 1:])
            self.reshape(node, layer.name, flat, target)
            return
        layer = g.Gather(self.unique(self.label(node)), axis, idx, source_type="Gather")
        self.emit(node, layer, [src], layer.output_shape(shape))

    def op_GatherElements(self, node, a, inputs, consts):
        src, ir, perm, shape, axis, idx = self.gathered(a, inputs, consts)
        if idx.ndim != len(shape) + 1 or idx.shape[0] != 1:
            raise Problem(f"indices of shape {idx.shape} (one sample expected)")
        idx = np.transpose(self.wrapped(idx[0], shape[axis]), perm)
        layer = g.GatherElements(self.unique(self.label(node)), _inverse(perm)[axis], idx,
                                 source_type="GatherElements")
        self.emit(node, layer, [src], perm=perm)

    def op_Tile(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        reps = consts[1]
        if reps is None:
            raise Problem("repeats computed from the input")
        reps = [int(r) for r in np.asarray(reps).reshape(-1)]
        if len(reps) != len(ir) + 1:
            raise Problem(f"{len(reps)} repeats for a rank-{len(ir) + 1} tensor")
        if reps[0] != 1:
            raise Problem("repeats along the batch axis")
        layer = g.Tile(self.unique(self.label(node)), tuple(reps[1 + p] for p in perm), source_type="Tile")
        self.emit(node, layer, [src], perm=perm)

    def op_Softmax(self, node, a, inputs, consts):
        self._softmax(node, a, inputs, self._softmax_layer)

    def op_LogSoftmax(self, node, a, inputs, consts):
        self._softmax(node, a, inputs, self._log_softmax_layers)

    def _softmax_layer(self, node, src, axis):
        return self.add(g.Softmax(self.unique(self.label(node)), axis, source_type="Softmax"), [src])

    def _log_softmax_layers(self, node, src, axis):
        """LogSoftmax as ONNX's reference and onnxruntime compute it: d = x - max(x); d - log(sum(exp(d)))."""
        label = self.label(node)
        peak = self.add(g.Reduce(self.unique(f"{label}_max"), "max", (axis,), True, source_type="LogSoftmax"), [src])
        d = self.add(g.Elementwise(self.unique(f"{label}_shift"), "sub", source_type="LogSoftmax"), [src, peak])
        e = self.add(g.Unary(self.unique(f"{label}_exp"), "exp", source_type="LogSoftmax"), [d])
        total = self.add(g.Reduce(self.unique(f"{label}_sum"), "sum", (axis,), True, source_type="LogSoftmax"), [e])
        log = self.add(g.Unary(self.unique(f"{label}_log"), "log", source_type="LogSoftmax"), [total])
        return self.add(g.Elementwise(self.unique(label), "sub", source_type="LogSoftmax"), [d, log])

    def _softmax(self, node, a, inputs, build):
        """Softmax/LogSoftmax over one axis (opset >= 13) or over the flattened axis..end (< 13)."""
        src, ir, perm = self.tensor_any(inputs[0])
        rank = len(ir)
        axis = int(a.get("axis", -1 if self.opset >= 13 else 1))
        if not -rank - 1 <= axis <= rank:
            raise Problem(f"axis {axis} out of range")
        axis = axis % (rank + 1)
        if axis == 0:
            raise Problem(f"{node.op_type.lower()} over the batch axis")
        if self.opset >= 13 or axis == rank:
            out = build(node, src, _inverse(perm)[axis - 1])
            self.tensors[node.output[0]] = ("ir", out, self.ir_shapes[out], perm)
            return
        src, shape = self.tensor(inputs[0], node)
        # opset < 13: softmax over the flattened axes axis..end
        flat = (int(np.prod(shape[:axis - 1])), int(np.prod(shape[axis - 1:])))
        name = self.add(g.Reshape(self.unique(self.label(node) + "_2d"), flat,
                                  source_type=f"{node.op_type} (coerce 2-D)"), [src])
        self.reshape(node, build(node, name, 1), flat, shape)

    def op_reduce(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        op = REDUCE[node.op_type]
        if self.opset >= 18 or (node.op_type == "ReduceSum" and self.opset >= 13):
            axes = self._axes_input_any(inputs, consts)
        else:
            axes = list(a["axes"]) if "axes" in a else None
        keep = bool(a.get("keepdims", 1))
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                self.tensors[node.output[0]] = self.tensors[inputs[0]]
                return
            if not keep:
                raise Problem("a reduction over every axis including the batch without keepdims")
            axes = list(range(1, len(shape) + 1))
        onnx_axes = {self.axis(x, len(shape)) for x in axes}
        inverse = _inverse(perm)
        layer = g.Reduce(self.unique(self.label(node)), op, tuple(sorted(inverse[x] for x in onnx_axes)), keep,
                         source_type=node.op_type)
        self.emit(node, layer, [src], perm=perm if keep else _drop(perm, onnx_axes))

    def _axes_input_any(self, inputs, consts):
        if len(inputs) > 1 and inputs[1]:
            if consts[1] is None:
                raise Problem("axes computed from the input")
            return [int(v) for v in np.asarray(consts[1]).reshape(-1)]
        return None

    def op_Resize(self, node, a, inputs, consts):
        src, ir, perm = self.tensor_any(inputs[0])
        shape = _unpermute(ir, perm)
        full = (self.batch,) + tuple(shape)
        if a.get("antialias", 0):
            raise Problem("antialias")
        if a.get("axes"):
            raise Problem("the axes attribute")
        mode = _text(a.get("mode", "nearest"))
        mode = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        coord = _text(a.get("coordinate_transformation_mode", "half_pixel" if self.opset >= 11 else "asymmetric"))
        nearest = _text(a.get("nearest_mode", "round_prefer_floor"))
        if node.op_type == "Upsample" or self.opset < 11:
            scales = consts[1] if node.op_type == "Upsample" and self.opset >= 9 else \
                (a.get("scales") if node.op_type == "Upsample" else consts[1])
            sizes = None
            coord, nearest = "asymmetric", "floor"
        else:
            scales = consts[2] if len(inputs) > 2 and inputs[2] else None
            sizes = consts[3] if len(inputs) > 3 and inputs[3] else None
            if coord == "tf_crop_and_resize":
                raise Problem("coordinate_transformation_mode tf_crop_and_resize")
        if scales is not None and np.asarray(scales).size:
            scales = [float(s) for s in np.asarray(scales).reshape(-1)]
            if not all(0 < s < float("inf") for s in scales):
                raise Problem(f"scales {scales} must be finite and > 0")
            sizes = [int(np.floor(n * s)) for n, s in zip(full, scales)]
        elif sizes is not None and np.asarray(sizes).size:
            sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
            if min(sizes) < 1:
                raise Problem(f"sizes {sizes} must be >= 1")
            keep = _text(a.get("keep_aspect_ratio_policy", "stretch"))
            if keep != "stretch":
                raise Problem(f"keep_aspect_ratio_policy {keep}")
            scales = [s / n for s, n in zip(sizes, full)]
        else:
            raise Problem("neither scales nor sizes given as constants")
        if sizes[0] != full[0] or scales[0] != 1.0:
            raise Problem("resizing the batch axis")
        if len(sizes) != len(full) or len(scales) != len(full):
            raise Problem(f"{len(sizes)} sizes/scales for a rank-{len(full)} tensor")
        layer = g.Resize(self.unique(self.label(node)), tuple(sizes[1 + p] for p in perm),
                         tuple(scales[1 + p] for p in perm), mode, coord, nearest,
                         float(a.get("cubic_coeff_a", -0.75)), bool(a.get("exclude_outside", 0)),
                         source_type=node.op_type)
        self.emit(node, layer, [src], perm=perm)

    op_Upsample = op_Resize


# --------------------------------------------------------------------------- layout folding


def _inverse(perm):
    out = [0] * len(perm)
    for k, p in enumerate(perm):
        out[p] = k
    return tuple(out)


ELEMENTWISE_KINDS = ("activation", "unary")


def fold_layout(model):
    """Remove transpose pairs that cancel (directly or across single-input element-wise layers),
    and fold a transpose feeding Flatten/Reshape -> Dense into the Dense kernel rows. In place."""
    changed = True
    while changed:
        changed = _cancel_pair(model) or _fold_into_dense(model)


def _consumers(model):
    out = {}
    for layer in model.layers:
        for s in model.edges[layer.name]:
            out.setdefault(s, []).append(layer.name)
    return out


def _by_name(model):
    return {layer.name: layer for layer in model.layers}


def _remove(model, name):
    """Drop layer `name` (one input): its consumers read its input."""
    src = model.edges[name][0]
    model.layers = [layer for layer in model.layers if layer.name != name]
    del model.edges[name]
    for key, sources in model.edges.items():
        model.edges[key] = tuple(src if s == name else s for s in sources)


def _cancel_pair(model):
    layers, users = _by_name(model), _consumers(model)
    outputs = set(model.outputs)
    for first in model.layers:
        if first.kind != "transpose":
            continue
        chain, cur = [], first.name
        while True:
            nxt = users.get(cur, [])
            if len(nxt) != 1 or cur in outputs:
                break
            layer = layers[nxt[0]]
            if layer.name in outputs:
                break
            if layer.kind in ELEMENTWISE_KINDS and getattr(layer, "activation", "") != "softmax":
                chain.append(layer.name)
                cur = layer.name
                continue
            if layer.kind == "transpose" and tuple(layer.perm) == _inverse(tuple(first.perm)):
                _remove(model, layer.name)
                _remove(model, first.name)
                return True
            break
    return False


def _fold_into_dense(model):
    layers, users = _by_name(model), _consumers(model)
    shapes = model.tensor_shapes()
    for t in model.layers:
        if t.kind != "transpose":
            continue
        nxt = users.get(t.name, [])
        if len(nxt) != 1 or layers[nxt[0]].kind not in ("flatten", "reshape") or t.name in model.outputs:
            continue
        flat = layers[nxt[0]]
        after = users.get(flat.name, [])
        if (len(after) != 1 or layers[after[0]].kind != "dense" or len(shapes[flat.name]) != 1
                or flat.name in model.outputs):
            continue
        dense = layers[after[0]]
        src_shape = shapes[model.edges[t.name][0]]
        # element j of the flattened transposed tensor is element order[j] of the source
        order = np.transpose(np.arange(int(np.prod(src_shape))).reshape(src_shape), t.perm).reshape(-1)
        kernel = np.empty_like(np.asarray(dense.kernel))
        kernel[order] = np.asarray(dense.kernel)
        index = model.layers.index(dense)
        import dataclasses
        model.layers[index] = dataclasses.replace(dense, kernel=kernel)
        _remove(model, t.name)
        return True
    return False
