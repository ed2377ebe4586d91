"""IR -> NNEF: any model nnbuild reads (Keras, ONNX, NNEF, ...), once loaded into the IR, written
back as one NNEF graph plus its weights, so that it can be split into multi-item NNEF
(`nnbuild.frontends.item_split`). Reading the text back with the NNEF front-end gives the same
function: same layers, same weights, same order of floating-point operations.

Layout: the IR holds tensors without the batch axis, images channels-last (H, W, C); NNEF holds
them with a batch axis of 1, images channels-first: an IR (H, W, C) tensor is NNEF [1, C, H, W],
any other IR tensor of shape s is NNEF [1] + s. The model's input and output keep the IR's element
order (an image in or out is transposed once), so the NNEF model takes and gives the same bytes. A channels-last Flatten or Reshape of an image is a
transpose to [1, H, W, C] then a reshape (the front-end folds the transpose into the next Dense).

Weights and constants are stored as float32 (the NNEF .dat encoding nnbuild reads): a model holding
float64 constants (NNet's input normalisation) reads back rounded to float32, as its C is anyway.

Each IR layer becomes one or more statements; the last one's result is named after the layer (the
names consumers read), the others `<layer>_<op>`. `units` maps every statement result to its
layer, so a split keeps a layer's statements on one item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import numpy as np

from nnbuild import files, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_text as nnef
from nnbuild.frontends.nnef_text import Ref, Statement

#: IR activations written as one NNEF operation
ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid"}
#: IR unary ops NNEF has under another name (no parameters)
UNARY = {"exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg", "reciprocal": "rcp",
         "softplus": "softplus", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}
#: IR element-wise ops of two tensors NNEF has (no constants)
BINARY = ("add", "sub", "mul", "div", "max", "min")
#: IR pad modes -> NNEF borders
PAD_BORDERS = {"constant": "constant", "edge": "replicate", "reflect": "reflect"}


@dataclass
class Written:
    """A model as NNEF: the graph, its weights (label -> float32 array) and each statement's layer."""
    graph: nnef.Graph
    weights: Dict[str, np.ndarray] = field(default_factory=dict)
    units: Dict[str, str] = field(default_factory=dict)


def nnef_shape(shape) -> List[int]:
    """The NNEF shape of an IR tensor (see the module doc)."""
    shape = [int(d) for d in shape]
    if len(shape) == 3:
        return [1, shape[2], shape[0], shape[1]]
    return [1] + shape


def nnef_array(array):
    """An IR tensor's values in NNEF's order (an image channels-first), without the batch axis."""
    return np.transpose(array, (2, 0, 1)) if np.ndim(array) == 3 else np.asarray(array)


def nnef_axis(axis, rank) -> int:
    """The NNEF axis of IR axis `axis` of a rank-`rank` tensor."""
    axis = axis % rank
    return {0: 2, 1: 3, 2: 1}[axis] if rank == 3 else axis + 1


class _Writer:
    def __init__(self, model):
        self.model = model
        self.shapes = model.tensor_shapes()
        self.out = Written(nnef.Graph(names.c_identifier(model.name), [], [], [], "1.0", []))
        self.layer = None
        self.taken = set()

    def fail(self, message):
        where = f"layer '{self.layer.name}' ({self.layer.source_type}): " if self.layer is not None else ""
        raise NNBuildError(f"cannot write as NNEF: {where}{message}",
                           path=(self.model.source_files or ("<model>",))[0])

    def name(self, base):
        """A fresh NNEF identifier from `base` (layer names of other formats may hold '/', '.')."""
        return names.fresh_identifier(base, self.taken)

    def emit(self, output, op, args, **kwargs):
        self.out.graph.statements.append(Statement([output], op, None, list(args), kwargs, 0, 0))
        if self.layer is not None and op not in ("external", "variable", "constant"):
            self.out.units[output] = self.layer.name
        return Ref(output)

    def variable(self, suffix, array):
        array = np.ascontiguousarray(array, dtype=np.float32)
        label = self.name(f"{self.layer.name}_{suffix}")
        self.out.weights[label] = array
        return self.emit(label, "variable", [], shape=[int(d) for d in array.shape], label=label)

    def run(self) -> Written:
        model = self.model
        tensor = {}
        tensor[model.input_name] = self.entry()
        self.final = {}
        for index, layer in enumerate(model.layers):
            self.layer = layer
            sources = [tensor[s] for s in model.sources(index)]
            in_shapes = [self.shapes[s] for s in model.sources(index)]
            self.final[layer.name] = self.name(layer.name)
            tensor[layer.name] = self.write_layer(layer, sources, in_shapes)
            if layer is model.layers[-1] and len(self.shapes[layer.name]) == 3:
                tensor[layer.name] = self.emit(self.name(f"{layer.name}_nhwc"), "transpose", [tensor[layer.name]],
                                               axes=[0, 2, 3, 1])
        self.layer = None
        self.out.graph.outputs.append(tensor[model.layers[-1].name].name)
        return self.out

    def entry(self):
        """The external input in the IR's element order (an image as [1, H, W, C], then transposed
        to NNEF's [1, C, H, W]: the front-end only records the permutation), so the split system
        takes the same input bytes as the model it splits; the transpose belongs to the first
        layer reading the input."""
        model = self.model
        entry = self.name(model.input_name)
        self.out.graph.inputs.append(entry)
        shape = [int(d) for d in model.input_shape]
        if len(shape) != 3:
            return self.emit(entry, "external", [], shape=[1] + shape)
        self.emit(entry, "external", [], shape=[1] + shape)
        self.layer = next(layer for i, layer in enumerate(model.layers) if model.input_name in model.sources(i))
        image = self.emit(self.name(f"{entry}_nchw"), "transpose", [Ref(entry)], axes=[0, 3, 1, 2])
        self.layer = None
        return image

    def result(self, op, args, activation="linear", **kwargs):
        """The layer's operation then its activation; the last statement carries the layer's name."""
        final = self.final[self.layer.name]
        if activation in (None, "linear"):
            return self.emit(final, op, args, **kwargs)
        inner = self.emit(self.name(f"{self.layer.name}_{op}"), op, args, **kwargs)
        return self.activate(inner, activation, final)

    def activate(self, x, activation, output):
        if activation in ACTIVATIONS:
            return self.emit(output, ACTIVATIONS[activation], [x])
        if activation == "softmax":
            return self.emit(output, "softmax", [x], axes=[1])
        self.fail(f"activation '{activation}' has no NNEF operation")

    def write_layer(self, layer, sources, in_shapes):
        method = getattr(self, f"layer_{layer.kind}", None)
        if method is None:
            self.fail(f"layer kind '{layer.kind}' is not written as NNEF yet")
        return method(layer, sources, in_shapes)

    # --- one method per IR layer kind
    def layer_dense(self, layer, sources, in_shapes):
        if len(in_shapes[0]) != 1:
            self.fail(f"Dense over a tensor of shape {tuple(in_shapes[0])} (a vector only)")
        args = [sources[0], self.variable("filter", np.asarray(layer.kernel).T)]
        args.append(self.variable("bias", np.asarray(layer.bias).reshape(1, -1)) if layer.bias is not None else 0.0)
        return self.result("linear", args, layer.activation)

    def layer_conv2d(self, layer, sources, in_shapes):
        t, b, l, r = layer.padding
        args = [sources[0], self.variable("filter", np.asarray(layer.kernel).transpose(3, 2, 0, 1))]
        args.append(self.variable("bias", np.asarray(layer.bias).reshape(1, -1)) if layer.bias is not None else 0.0)
        return self.result("conv", args, layer.activation, border="constant", padding=[(t, b), (l, r)],
                           stride=list(layer.strides), dilation=list(layer.dilation), groups=int(layer.groups))

    def layer_pool2d(self, layer, sources, in_shapes):
        t, b, l, r = layer.padding
        op = "max_pool" if layer.mode == "max" else "avg_pool"
        # border 'ignore': padded cells are no values (max ignores them, average does not count them)
        return self.result(op, [sources[0]], layer.activation, size=[1, 1] + list(layer.pool), border="ignore",
                           padding=[(0, 0), (0, 0), (t, b), (l, r)], stride=[1, 1] + list(layer.strides),
                           dilation=[1, 1, 1, 1])

    def layer_batchnorm(self, layer, sources, in_shapes):
        if len(in_shapes[0]) != 3 and len(in_shapes[0]) != 1:
            self.fail(f"BatchNorm over a tensor of shape {tuple(in_shapes[0])}")
        args = [sources[0]] + [self.variable(key, np.asarray(getattr(layer, attr)).reshape(1, -1))
                               for key, attr in (("mean", "mean"), ("variance", "variance"),
                                                 ("offset", "beta"), ("scale", "gamma"))]
        return self.result("batch_normalization", args, layer.activation, epsilon=float(layer.epsilon))

    def layer_activation(self, layer, sources, in_shapes):
        if layer.activation == "linear":
            return self.emit(self.final[layer.name], "copy", [sources[0]])
        if layer.activation == "softmax":
            return self.emit(self.final[layer.name], "softmax", [sources[0]],
                             axes=[nnef_axis(-1, len(in_shapes[0]))])
        return self.activate(sources[0], layer.activation, self.final[layer.name])

    def layer_softmax(self, layer, sources, in_shapes):
        return self.emit(self.final[layer.name], "softmax", [sources[0]],
                         axes=[nnef_axis(layer.axis, len(in_shapes[0]))])

    def layer_unary(self, layer, sources, in_shapes):
        if layer.op not in UNARY or layer.params:
            self.fail(f"unary op '{layer.op}' has no NNEF operation here")
        return self.emit(self.final[layer.name], UNARY[layer.op], [sources[0]])

    def chained(self, op, layer, sources):
        """A left-to-right fold of a binary operation (the IR's order of evaluation)."""
        if len(sources) < 2:
            self.fail(f"{op} of {len(sources)} tensor(s)")
        acc = sources[0]
        for k, x in enumerate(sources[1:], start=2):
            last = k == len(sources)
            if last:
                return self.result(op, [acc, x], getattr(layer, "activation", "linear"))
            acc = self.emit(self.name(f"{layer.name}_{op}{k}"), op, [acc, x])

    def layer_add(self, layer, sources, in_shapes):
        return self.chained("add", layer, sources)

    def layer_elementwise(self, layer, sources, in_shapes):
        """Tensors of the result's shape; constants broadcast to it (numpy's rule) and stored whole,
        as NNEF broadcasts from the other end."""
        out = tuple(self.shapes[layer.name])
        if layer.op not in BINARY or any(tuple(s) != out for s in in_shapes):
            self.fail(f"element-wise '{layer.op}' over tensors of shapes {[tuple(s) for s in in_shapes]} "
                      f"is not written as NNEF yet")
        operands = layer.operands(list(sources))
        for k, value in enumerate(operands):
            if isinstance(value, np.ndarray):
                full = np.broadcast_to(value, out)
                operands[k] = self.variable(f"const{k}", np.asarray(nnef_array(full)).reshape(nnef_shape(out)))
        return self.chained(layer.op, layer, operands)

    def layer_concat(self, layer, sources, in_shapes):
        return self.emit(self.final[layer.name], "concat", [list(sources)],
                         axis=nnef_axis(layer.axis, len(in_shapes[0])))

    def layer_zeropad2d(self, layer, sources, in_shapes):
        t, b, l, r = layer.padding
        return self.emit(self.final[layer.name], "pad", [sources[0]], padding=[(0, 0), (0, 0), (t, b), (l, r)],
                         border="constant", value=0.0)

    def layer_pad(self, layer, sources, in_shapes):
        if layer.mode not in PAD_BORDERS or any(b < 0 or a < 0 for b, a in layer.pads):
            self.fail(f"pad mode '{layer.mode}' (or negative pads) has no NNEF border")
        rank = len(in_shapes[0])
        pads = [(0, 0)] * (rank + 1)
        for axis, pair in enumerate(layer.pads):
            pads[nnef_axis(axis, rank)] = tuple(pair)
        return self.emit(self.final[layer.name], "pad", [sources[0]], padding=pads,
                         border=PAD_BORDERS[layer.mode], value=float(layer.value))

    def layer_transpose(self, layer, sources, in_shapes):
        rank = len(in_shapes[0])
        axes = [0] * (rank + 1)
        for k, p in enumerate(layer.perm):
            axes[nnef_axis(k, rank)] = nnef_axis(int(p), rank)
        return self.emit(self.final[layer.name], "transpose", [sources[0]], axes=axes)

    def layer_flatten(self, layer, sources, in_shapes):
        return self.reshaped(layer, sources[0], in_shapes[0], (int(np.prod(in_shapes[0])),))

    def layer_reshape(self, layer, sources, in_shapes):
        return self.reshaped(layer, sources[0], in_shapes[0], tuple(layer.target_shape))

    def reshaped(self, layer, x, shape, target):
        """Row-major (IR order) reshape: images to channels-last first, back to channels-first after."""
        if len(shape) == 3:
            x = self.emit(self.name(f"{layer.name}_nhwc"), "transpose", [x], axes=[0, 2, 3, 1])
        if len(target) != 3:
            return self.emit(self.final[layer.name], "reshape", [x], shape=[1] + [int(d) for d in target])
        x = self.emit(self.name(f"{layer.name}_hwc"), "reshape", [x], shape=[1] + [int(d) for d in target])
        return self.emit(self.final[layer.name], "transpose", [x], axes=[0, 3, 1, 2])


def to_nnef(model) -> Written:
    """The NNEF graph, weights and statement -> layer map of an IR model (one NNBuildError line
    naming the layer when a layer has no NNEF form here)."""
    return _Writer(model).run()


def save_weights(weights: Dict[str, np.ndarray], folder):
    """One `<label>.dat` per weight in `folder` (NNEF 1.0 float32 encoding)."""
    folder = Path(folder)
    for label, array in sorted(weights.items()):
        with files.atomic(nnef._dat_path(folder, label)) as tmp:
            Path(tmp).write_bytes(nnef.dat_bytes(array))


def save(model, folder) -> Written:
    """`folder` as an NNEF model of `model` (graph.nnef + .dat files); nnef_text.load reads it."""
    from nnbuild.frontends import nnef_items
    if getattr(model, "several_io", False):
        raise NNBuildError(f"model '{model.name}' has {len(model.inputs)} inputs and {len(model.outputs)} outputs: "
                           "it is written as NNEF (and split into items) with one input and one output only")
    written = to_nnef(model)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(written.weights, folder)
    files.write_text(folder / nnef.GRAPH_FILE, nnef_items.write_graph(written.graph))
    return written
